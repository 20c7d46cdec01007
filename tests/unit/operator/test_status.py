"""Status and conditions: what `kubectl get`, `kubectl wait` and alerts read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from crawlfleet.crawljob import CrawlJobSpec, CrawlJobStatus
from crawlfleet.fleet import Freshness, WorkersFailing
from crawlfleet.fleet.waiting import WaitCause, Waiting, next_revisit
from crawlfleet.fleet.watchdog import Stall, StalledStage
from crawlfleet.frontier import FileStats, FrontierStats, MemoryState, PressureLevel
from crawlfleet.frontier.models import LAG_BUCKETS_SECONDS, LagHistogram
from crawlfleet.operator.status import (
    CONDITION_TYPES,
    Observed,
    conditions_for,
    invalid_spec_status,
    job_status,
    partition_condition,
    shards_change_problem,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def stats(**values: int) -> FrontierStats:
    return FrontierStats(seeded=True, **values)  # type: ignore[arg-type]


def observed(**overrides: object) -> Observed:
    values: dict[str, object] = {
        "phase": "Running",
        "redis_ready": True,
        "desired_replicas": 3,
        "replicas": 3,
        "ready_replicas": 3,
        "stats": stats(queued=40, delayed=2, leased=5, crawled=100, dead=4, seen=150),
        "selector": "app.kubernetes.io/component=worker,crawlfleet.io/job=books",
        "pages_per_second": 12.345,
        "message": "crawling",
    }
    values.update(overrides)
    return Observed(**values)  # type: ignore[arg-type]


def conditions(status: dict[str, object]) -> dict[str, dict[str, str]]:
    return {c["type"]: c for c in status["conditions"]}  # type: ignore[attr-defined, index]


def test_running_status_has_every_condition_and_the_counters() -> None:
    status = job_status({}, observed(), generation=3, now=T0)
    assert [c["type"] for c in status["conditions"]] == list(CONDITION_TYPES)
    by_type = conditions(status)
    assert by_type["Ready"]["status"] == "True"
    assert by_type["Progressing"]["status"] == "True"
    assert by_type["Complete"]["status"] == "False"
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])
    assert (status["queued"], status["inFlight"], status["crawled"], status["failed"]) == (
        42,
        5,
        100,
        4,
    )
    assert status["workers"] == "3/3"
    assert status["pagesPerSecond"] == 12.35
    assert status["startTime"] == "2026-11-29T12:00:00Z"
    assert "completionTime" not in status


def test_transition_time_moves_only_when_the_status_flips() -> None:
    first = job_status({}, observed(ready_replicas=1), generation=1, now=T0)
    assert conditions(first)["Ready"]["status"] == "False"
    later = T0 + timedelta(minutes=5)
    same = job_status(first, observed(ready_replicas=2), generation=1, now=later)
    assert conditions(same)["Ready"]["lastTransitionTime"] == "2026-11-29T12:00:00Z"
    assert conditions(same)["Ready"]["message"] == "2 of 3 workers ready"
    stored = {**first, **same}  # a status patch merges into what the API server holds
    flipped = job_status(stored, observed(), generation=1, now=later)
    assert conditions(flipped)["Ready"]["lastTransitionTime"] == "2026-11-29T12:05:00Z"
    assert "startTime" not in flipped  # set once, on the first reconcile


def test_completion_sets_complete_and_completion_time_once() -> None:
    done = job_status({}, observed(phase="Succeeded", desired_replicas=0), generation=2, now=T0)
    by_type = conditions(done)
    assert by_type["Complete"]["status"] == "True"
    assert by_type["Progressing"]["status"] == "False"
    assert done["completionTime"] == "2026-11-29T12:00:00Z"
    again = job_status(done, observed(phase="Succeeded"), generation=2, now=T0 + timedelta(1))
    assert "completionTime" not in again


def test_redis_down_is_not_ready_with_the_reason() -> None:
    status = job_status(
        {},
        observed(redis_ready=False, stats=None, message="waiting for Redis"),
        generation=1,
        now=T0,
    )
    assert conditions(status)["Ready"]["reason"] == "RedisUnavailable"
    assert "queued" not in status  # no counters rather than zeros that are not true


def test_invalid_spec_says_exactly_why_and_fails_the_job() -> None:
    message = "spec.dedup.errorRate: must be less than 0.5 (got 0.7)"
    status = invalid_spec_status({}, message, generation=4, now=T0)
    by_type = conditions(status)
    assert status["phase"] == "Failed"
    assert by_type["InvalidSpec"] == {
        "type": "InvalidSpec",
        "status": "True",
        "reason": "InvalidSpec",
        "message": message,
        "lastTransitionTime": "2026-11-29T12:00:00Z",
        "observedGeneration": 4,
    }
    fixed = job_status(status, observed(), generation=5, now=T0 + timedelta(minutes=1))
    assert conditions(fixed)["InvalidSpec"]["status"] == "False"
    assert conditions(fixed)["InvalidSpec"]["lastTransitionTime"] == "2026-11-29T12:01:00Z"


def test_the_frontier_conditions_say_what_is_wrong_with_it() -> None:
    fine = conditions(job_status({}, observed(), generation=1, now=T0))
    assert fine["FrontierLost"]["status"] == "False"
    assert fine["FrontierMemoryPressure"]["status"] == "False"
    assert fine["BloomNearlyFull"]["status"] == "False"

    lost = job_status(
        {},
        observed(phase="Failed", stats=None, frontier_lost="frontier lost: Redis is empty"),
        generation=1,
        now=T0,
    )
    assert conditions(lost)["FrontierLost"]["status"] == "True"
    assert conditions(lost)["FrontierLost"]["message"] == "frontier lost: Redis is empty"
    assert lost["completionTime"]  # failed: done, for ttlSecondsAfterFinished

    pressed = job_status(
        {},
        observed(
            frontier_memory=MemoryState(used_bytes=850, max_bytes=1000, policy="noeviction"),
            pressure=PressureLevel.HIGH,
            bloom_capacity=160,
            bloom_nearly_full=True,
            frontier_epoch="e1",
        ),
        generation=1,
        now=T0,
    )
    by_type = conditions(pressed)
    assert by_type["FrontierMemoryPressure"]["status"] == "True"
    assert by_type["FrontierMemoryPressure"]["reason"] == "High"
    assert "850 of 1000 bytes" in by_type["FrontierMemoryPressure"]["message"]
    assert by_type["BloomNearlyFull"]["status"] == "True"
    assert (
        "150 distinct URLs seen, 94% of dedup.capacity 160" in by_type["BloomNearlyFull"]["message"]
    )
    assert pressed["frontierEpoch"] == "e1"
    assert (pressed["frontierMemoryUsedBytes"], pressed["frontierMemoryMaxBytes"]) == (850, 1000)
    assert pressed["frontierPressure"] == "High"
    assert pressed["bloomFillRatio"] == round(150 / 160, 4)


def test_workers_that_die_at_start_are_a_condition_with_their_own_reason_and_sentence() -> None:
    failing = WorkersFailing(
        "books-workers-abc", 4, "OutputUnavailable", "output destination s3://gone/: no bucket", 2
    )
    status = job_status(
        {}, observed(ready_replicas=0, workers_failing=failing), generation=1, now=T0
    )
    by_type = conditions(status)
    condition = by_type["WorkersFailing"]
    assert (condition["status"], condition["reason"]) == ("True", "OutputUnavailable")
    assert condition["message"] == (
        "4 workers in a row died at start (books-workers-abc last, exit code 2):"
        " output destination s3://gone/: no bucket"
    )
    assert (by_type["Ready"]["status"], by_type["Ready"]["reason"]) == ("False", "WorkersFailing")
    fine = conditions(job_status(status, observed(), generation=1, now=T0 + timedelta(1)))
    assert (fine["WorkersFailing"]["status"], fine["WorkersFailing"]["reason"]) == (
        "False",
        "NotFailing",
    )


def test_what_the_crawl_waits_for_is_a_condition_and_a_word_for_kubectl_get() -> None:
    robots = WaitCause(
        "RobotsTxt", "1 host for robots.txt (503)", 1, T0.timestamp() + 552, "next try"
    )
    status = job_status({}, observed(waiting=Waiting((robots,))), generation=1, now=T0)
    waiting = conditions(status)["Waiting"]
    assert (waiting["status"], waiting["reason"]) == ("True", "RobotsTxt")
    assert waiting["message"] == "1 host for robots.txt (503), next try at 2026-11-29T12:09:12Z"
    assert status["waiting"] == "RobotsTxt"
    moving = job_status(status, observed(), generation=1, now=T0 + timedelta(minutes=10))
    assert (conditions(moving)["Waiting"]["status"], moving["waiting"]) == ("False", "")
    assert conditions(moving)["Waiting"]["reason"] == "Moving"


def test_stalled_leases_are_a_condition_with_the_stage_and_the_workers_reason() -> None:
    stuck = StalledStage("output", 12, ("w-2",), 301.0, "ENOSPC writing /out/p.jsonl")
    status = job_status({}, observed(stall=Stall((stuck,), 270.0)), generation=1, now=T0)
    stalled = conditions(status)["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", "StuckOutput")
    assert "12 in output on w-2, the oldest for 5m01s" in stalled["message"]
    assert "(ENOSPC writing /out/p.jsonl)" in stalled["message"]
    assert status["waiting"] == "StuckOutput"  # what kubectl get shows when nothing waits
    assert conditions(job_status({}, observed(), generation=1, now=T0))["Stalled"]["status"] == (
        "False"
    )


def test_a_job_with_files_shows_what_it_stored() -> None:
    files = FileStats(stored=3, bytes=512 * 2**20, duplicates=2, reserved=7, settled=9)
    status = job_status({}, observed(files=files), generation=1, now=T0)
    assert status["files"] == {"stored": 3, "bytes": 512 * 2**20, "duplicates": 2}
    # The shape the CRD's schema gives status.files (its model) reads it back.
    read = CrawlJobStatus.model_validate(status).files
    assert read is not None
    assert (read.stored, read.bytes, read.duplicates) == (3, 512 * 2**20, 2)
    # A job without file rules says nothing of files.
    assert "files" not in job_status({}, observed(), generation=1, now=T0)


def test_a_job_that_revisits_shows_its_freshness_and_what_it_waits_for() -> None:
    revisits = FrontierStats(
        seeded=True,
        crawled=40,
        tracked=12,
        revisits_due=3,
        next_revisit_in_seconds=299.6,
        changed=5,
        unchanged=7,
        not_modified=20,
        gone=1,
        revisit_lag=LagHistogram((4, 5, 1) + (0,) * (len(LAG_BUCKETS_SECONDS) - 2)),
    )
    now = T0.timestamp()
    waiting = Waiting((next_revisit(revisits, now),))
    status = job_status(
        {},
        observed(stats=revisits, waiting=waiting, freshness=Freshness.of(revisits, now=now)),
        generation=1,
        now=T0,
    )
    assert status["freshness"] == {
        "tracked": 12,
        "due": 3,
        "nextRevisitAt": "2026-11-29T12:05:00Z",
        "lagP50Seconds": 5.0,  # the upper bound of the bucket that holds the median
        "lagP95Seconds": 15.0,
        "changed": 5,
        "unchanged": 7,
        "notModified": 20,
        "gone": 1,
    }
    assert status["waiting"] == "NextRevisit"
    by_type = conditions(status)
    assert by_type["Waiting"]["reason"] == "NextRevisit"
    assert by_type["Waiting"]["message"] == "next revisit due at 2026-11-29T12:05:00Z (12 tracked)"
    assert by_type["Stalled"]["status"] == "False"
    # The shape the CRD's schema gives status.freshness (its model) reads it back.
    assert CrawlJobStatus.model_validate(status).freshness is not None
    # A job without revisit rules says nothing of freshness.
    assert "freshness" not in job_status({}, observed(), generation=1, now=T0)


def test_the_workers_local_dedup_hit_rate_is_in_status() -> None:
    status = job_status({}, observed(local_dedup_hit_rate=0.912345), generation=1, now=T0)
    assert status["localDedupHitRate"] == 0.9123
    assert CrawlJobStatus.model_validate(status).local_dedup_hit_rate == 0.9123
    # Before any worker checked a link there is no rate to show.
    assert "localDedupHitRate" not in job_status({}, observed(), generation=1, now=T0)


def test_the_frontiers_partitions_are_written_once_and_held_against_the_spec() -> None:
    first = job_status({}, observed(frontier_epoch="e1", frontier_shards=4), generation=1, now=T0)
    assert first["frontierShards"] == 4
    # Written once: a tick on a frontier opened with another count does not rewrite it.
    later = job_status(
        first, observed(frontier_epoch="e1", frontier_shards=8), generation=2, now=T0
    )
    assert "frontierShards" not in later

    def spec(shards: int) -> CrawlJobSpec:
        return CrawlJobSpec.from_mapping(
            {"seeds": ["https://books.example/"], "frontier": {"shards": shards}}
        )

    assert shards_change_problem({}, spec(8)) is None  # no frontier yet: anything goes
    assert shards_change_problem(first, spec(4)) is None
    problem = shards_change_problem(first, spec(8))
    assert problem is not None
    assert problem.startswith("spec.frontier.shards: shards cannot change on a running job: ")
    assert problem.endswith("created with 4 and the spec asks for 8: set it back to 4")
    # A frontier made before partitions (an epoch, no count) has the one partition.
    older = {"frontierEpoch": "e0"}
    assert shards_change_problem(older, spec(1)) is None
    assert "created with 1 and the spec asks for 2" in (shards_change_problem(older, spec(2)) or "")
    # And the sentence is what the InvalidSpec condition carries.
    marked = invalid_spec_status(first, problem, generation=3, now=T0)
    assert conditions(marked)["InvalidSpec"]["message"] == problem
    assert marked["phase"] == "Failed"


def test_a_partition_that_is_down_is_a_condition_until_a_tick_reads_every_partition() -> None:
    running = job_status({}, observed(), generation=3, now=T0)
    said = "frontier partition 5 (crawl.news#5) of 8 unavailable (...): the workers go on"
    later = T0 + timedelta(seconds=30)
    down = partition_condition(running["conditions"], said, 3, now=later)  # type: ignore[arg-type]
    found = {c["type"]: c for c in down}
    assert found["PartitionUnavailable"]["status"] == "True"
    assert found["PartitionUnavailable"]["message"] == said
    assert found["PartitionUnavailable"]["lastTransitionTime"] == "2026-11-29T12:00:30Z"
    # the others as they were, their transition times kept
    assert [c for c in down if c["type"] != "PartitionUnavailable"] == running["conditions"]
    again = partition_condition(down, said + " still", 3, now=later + timedelta(seconds=5))
    assert {c["type"]: c for c in again}["PartitionUnavailable"][
        "lastTransitionTime"
    ] == "2026-11-29T12:00:30Z"
    # a tick that reads every partition writes the conditions anew, without it
    back = job_status({**running, "conditions": again}, observed(), generation=3, now=later)
    assert "PartitionUnavailable" not in conditions(back)


def test_a_job_that_paused_itself_says_so_in_its_suspended_condition() -> None:
    def suspended(seen: Observed) -> tuple[str, str, str]:
        (found,) = [c for c in conditions_for(seen) if c.type == "Suspended"]
        return found.status, found.reason, found.message

    by_hand = suspended(observed(phase="Suspended", desired_replicas=0))
    assert by_hand[:2] == ("True", "Suspended")
    status, reason, message = suspended(
        observed(phase="Suspended", desired_replicas=0, rate_limited=True)
    )
    assert (status, reason) == ("True", "RateLimited")
    assert "spec.autoPause.rateLimitedFor" in message
    assert suspended(observed(rate_limited=True))[:2] == ("False", "NotSuspended")
