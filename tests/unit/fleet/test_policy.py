"""The fleet brain, rule by rule: scaling, stabilisation, dead, draining and pinned workers,
delayed retries, completion, suspend, and the memory that survives a restart."""

from __future__ import annotations

import dataclasses

import pytest

from crawlfleet.config import SteeringConfig
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.fleet import (
    FleetMemory,
    FleetPolicy,
    Observation,
    Requeue,
    WorkerView,
    decide,
    demand,
    wants_tick,
)
from crawlfleet.fleet.backend import UnitWaiting
from crawlfleet.fleet.exits import UnitExit
from crawlfleet.fleet.policy import (
    STALL_LEASE_TTLS,
    RateLimitPause,
    backpressure,
    memory_pressure,
    rate_limit_pause,
    stall_after_seconds,
    suspension,
)
from crawlfleet.frontier import Backpressure, FrontierStats, PressureLevel

POLICY = FleetPolicy(
    min_replicas=1,
    max_replicas=10,
    target_backlog_per_replica=100,
    scale_down_delay_seconds=60,
    dead_after_seconds=20,
    startup_grace_seconds=60,
    completion_grace_seconds=5,
    retry_lead_seconds=10,
    pinned_replicas=None,
)


def seen(
    now: float = 1000.0,
    queued: int = 0,
    in_flight: int = 0,
    delayed: int = 0,
    seeded: bool = True,
    suspended: bool = False,
    workers: tuple[WorkerView, ...] = (),
    vanished: tuple[str, ...] = (),
    next_retry_in: float | None = None,
) -> Observation:
    return Observation(
        now, queued, delayed, in_flight, seeded, suspended, workers, vanished, next_retry_in
    )


def worker(
    name: str,
    *,
    running: bool = True,
    started_at: float = 900,
    age: float | None = 1.0,
    drain_deadline: float | None = None,
) -> WorkerView:
    return WorkerView(name, name, running, started_at, age, drain_deadline)


@pytest.mark.parametrize(
    ("queued", "in_flight", "wanted"),
    [(0, 0, 1), (1, 0, 1), (100, 0, 1), (101, 0, 2), (150, 100, 3), (5000, 0, 10), (0, 950, 10)],
)
def test_demand_formula(queued: int, in_flight: int, wanted: int) -> None:
    assert demand(POLICY, queued, in_flight) == wanted


def test_scale_up_at_once() -> None:
    decision, memory = decide(POLICY, seen(queued=450), FleetMemory(replicas=1))
    assert decision.desired_replicas == 5
    assert memory.replicas == 5
    assert "scale up 1 -> 5" in decision.reason


def test_pages_waiting_for_their_output_ask_for_no_worker_but_hold_completion() -> None:
    """900 leases of pages already fetched (their files not durable yet, DESIGN §8) and 50
    requests in progress: the backlog is 50, and the job is not complete."""
    waiting = dataclasses.replace(seen(in_flight=950), fetching=50)
    decision, _ = decide(POLICY, waiting, FleetMemory(replicas=1))
    assert decision.desired_replicas == 1
    assert not decision.complete
    stats = FrontierStats(queued=0, leased=950, fetched=900, seeded=True)
    assert stats.fetching == 50
    assert not wants_tick(POLICY, stats, FleetMemory(replicas=1), suspended=False)
    assert Observation.of(stats, now=0, suspended=False, workers=(), vanished=()).fetching == 50


def test_scale_down_only_after_the_delay() -> None:
    memory = FleetMemory(replicas=5)
    decision, memory = decide(POLICY, seen(now=1000, queued=50), memory)
    assert decision.desired_replicas == 5
    decision, memory = decide(POLICY, seen(now=1059, queued=50), memory)
    assert decision.desired_replicas == 5
    decision, memory = decide(POLICY, seen(now=1060, queued=50), memory)
    assert decision.desired_replicas == 1
    assert "scale down 5 -> 1" in decision.reason


def test_a_burst_of_demand_resets_the_stabilisation_window() -> None:
    memory = FleetMemory(replicas=5)
    _, memory = decide(POLICY, seen(now=1000, queued=50), memory)
    _, memory = decide(POLICY, seen(now=1030, queued=480), memory)
    decision, memory = decide(POLICY, seen(now=1070, queued=50), memory)
    assert decision.desired_replicas == 5  # low again only since 1070


def test_dead_workers_are_requeued_and_stale_ones_replaced() -> None:
    workers = (
        worker("alive", age=2),
        worker("stale", age=25),
        worker("exited", running=False, age=1),
        worker("starting", started_at=995, age=None),
        worker("slow-start", started_at=970, age=None),
        worker("never-beat", started_at=930, age=None),
    )
    decision, _ = decide(
        POLICY, seen(queued=100, workers=workers, vanished=("gone-pod",)), FleetMemory(1)
    )
    assert decision.requeues == (
        Requeue("exited", "exited"),
        Requeue("gone-pod", "gone"),
        Requeue("never-beat", "no_heartbeat"),
        Requeue("stale", "stale_heartbeat"),
    )
    assert decision.replace == ("stale", "never-beat")
    assert decision.forget == ("exited",)


def test_a_pod_that_never_started_is_not_dead_and_not_replaced_however_long_it_waits() -> None:
    """Pending and unschedulable (or its image not there) for far past the startup grace: it
    never ran, so it holds no lease, and a new pod would wait alike. It is what the crawl waits
    for (fleet/waiting.py), not "running but dead" replaced in a loop."""
    unschedulable = UnitWaiting("Unschedulable", "0/1 nodes are available: 1 Insufficient cpu.")
    pods = (
        dataclasses.replace(worker("pending", started_at=0, age=None), waiting=unschedulable),
        dataclasses.replace(
            worker("no-image", started_at=0, age=None), waiting=UnitWaiting("ErrImagePull")
        ),
        worker("hung-at-start", started_at=0, age=None),  # it ran, and never heartbeated
    )
    decision, _ = decide(POLICY, seen(queued=100, workers=pods), FleetMemory(3))
    assert decision.requeues == (Requeue("hung-at-start", "no_heartbeat"),)
    assert decision.replace == ("hung-at-start",)


def test_the_stall_threshold_is_named_once_from_the_spec() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": ["https://a.example/"],
            "lease": {"ttlSeconds": 10, "heartbeatSeconds": 1, "deadAfterSeconds": 5},
            "fetch": {"totalTimeoutSeconds": 20},
            "output": {"maxFileAgeSeconds": 7},
        }
    )
    assert stall_after_seconds(spec) == STALL_LEASE_TTLS * 10 + 20 + 7
    policy = FleetPolicy.from_spec(spec, SteeringConfig(), completion_grace_seconds=0)
    assert policy.stall_after_seconds == stall_after_seconds(spec)
    defaults = CrawlJobSpec.from_mapping({"seeds": ["https://a.example/"]})
    assert stall_after_seconds(defaults) == 3 * 60 + 60 + 30  # docs/steering.md says 270 s


def test_a_draining_worker_is_neither_requeued_nor_replaced_while_it_drains() -> None:
    # Told to stop at 995 with 40 s to go; its heartbeat is fresh, or stale as it finishes.
    draining = (
        worker("busy", drain_deadline=1035, age=1),
        worker("quiet", drain_deadline=1035, age=30),
        worker("unborn", drain_deadline=1035, started_at=0, age=None),
    )
    decision, _ = decide(POLICY, seen(queued=100, workers=draining), FleetMemory(1))
    assert decision.requeues == ()
    assert decision.replace == ()
    assert decision.forget == ()


def test_a_drained_worker_is_forgotten_once_it_has_exited_and_its_leftovers_requeued() -> None:
    drained = worker("done", running=False, drain_deadline=1035)
    decision, _ = decide(POLICY, seen(queued=100, workers=(drained,)), FleetMemory(1))
    assert decision.requeues == (Requeue("done", "drained"),)
    assert decision.forget == ("done",)
    assert decision.replace == ()


def test_a_worker_past_its_drain_deadline_is_killed_and_requeued() -> None:
    late = worker("late", drain_deadline=999.5)
    decision, _ = decide(POLICY, seen(now=1000, workers=(late,), queued=5), FleetMemory(1))
    assert decision.requeues == (Requeue("late", "drain_overrun"),)
    assert decision.replace == ("late",)


def test_completion_after_the_grace() -> None:
    memory = FleetMemory(replicas=3)
    decision, memory = decide(POLICY, seen(now=1000), memory)
    assert not decision.complete
    assert decision.desired_replicas == 3
    decision, memory = decide(POLICY, seen(now=1004.9), memory)
    assert not decision.complete
    decision, memory = decide(POLICY, seen(now=1005), memory)
    assert decision.complete
    assert decision.phase == "Succeeded"
    assert decision.desired_replicas == 0


def test_work_coming_back_cancels_completion() -> None:
    memory = FleetMemory(replicas=1)
    _, memory = decide(POLICY, seen(now=1000), memory)
    _, memory = decide(POLICY, seen(now=1003, delayed=1), memory)  # a retry became due later
    decision, _ = decide(POLICY, seen(now=1006), memory)
    assert not decision.complete


def test_not_complete_before_seeding() -> None:
    decision, _ = decide(POLICY, seen(now=2000, seeded=False), FleetMemory(idle_since=0))
    assert not decision.complete
    assert decision.phase == "Pending"


def test_suspend_scales_to_zero_and_keeps_requeueing() -> None:
    workers = (worker("exited", running=False),)
    decision, memory = decide(
        POLICY, seen(queued=1000, suspended=True, workers=workers), FleetMemory(replicas=4)
    )
    assert (decision.desired_replicas, decision.phase) == (0, "Suspended")
    assert decision.requeue_owners == ("exited",)
    assert memory.replicas == 0


# -- delayed retries are demand ---------------------------------------------------------------

SCALE_TO_ZERO = dataclasses.replace(POLICY, min_replicas=0)


@pytest.mark.parametrize(
    ("next_retry_in", "wanted"),
    [(None, 0), (-3.0, 1), (0.0, 1), (9.9, 1), (10.0, 1), (10.1, 0), (3600.0, 0)],
)
def test_a_delayed_retry_asks_for_one_worker_once_it_is_near(
    next_retry_in: float | None, wanted: int
) -> None:
    assert demand(SCALE_TO_ZERO, 0, 0, next_retry_in) == wanted


def test_delayed_retries_never_ask_for_more_than_one_worker_on_their_own() -> None:
    assert demand(SCALE_TO_ZERO, 0, 0, -100.0) == 1
    assert demand(SCALE_TO_ZERO, 250, 0, -100.0) == 3  # the backlog decides past one


def test_a_fleet_at_zero_wakes_for_a_retry_that_comes_due() -> None:
    """minReplicas 0, only a retry left, due in 30 s: no worker yet, one 10 s before it."""
    memory = FleetMemory(replicas=0)
    decision, memory = decide(SCALE_TO_ZERO, seen(delayed=1, next_retry_in=30), memory)
    assert decision.desired_replicas == 0
    assert not decision.complete  # a retry waits: the job is not done
    later = seen(now=1020, delayed=1, next_retry_in=10)
    decision, memory = decide(SCALE_TO_ZERO, later, memory)
    assert decision.desired_replicas == 1
    assert "1 delayed" in decision.reason
    stats = FrontierStats(delayed=1, seeded=True, next_retry_in_seconds=10)
    assert wants_tick(SCALE_TO_ZERO, stats, FleetMemory(replicas=0), suspended=False)


# -- pinned replicas are a policy input --------------------------------------------------------

PINNED = dataclasses.replace(POLICY, pinned_replicas=3)


def test_pinned_replicas_hold_whatever_the_backlog() -> None:
    decision, memory = decide(PINNED, seen(queued=5000), FleetMemory(replicas=3))
    assert decision.desired_replicas == 3
    decision, memory = decide(PINNED, seen(queued=0, in_flight=1), memory)
    assert decision.desired_replicas == 3
    assert memory.low_demand_since is None  # no stabilisation clock for a pinned count


def test_a_new_pin_applies_at_once_both_ways() -> None:
    decision, _ = decide(PINNED, seen(queued=5), FleetMemory(replicas=7))
    assert decision.desired_replicas == 3  # no scale-down delay: someone chose 3
    assert "pinned at 3" in decision.reason


def test_pinned_fleets_still_stop_when_suspended_or_done() -> None:
    decision, _ = decide(PINNED, seen(queued=5, suspended=True), FleetMemory(replicas=3))
    assert decision.desired_replicas == 0
    done = dataclasses.replace(PINNED, completion_grace_seconds=0)
    decision, _ = decide(done, seen(), FleetMemory(replicas=3))
    assert (decision.complete, decision.desired_replicas) == (True, 0)


def test_wants_tick_follows_the_pin() -> None:
    stats = FrontierStats(queued=5000, seeded=True)
    assert not wants_tick(PINNED, stats, FleetMemory(replicas=3), suspended=False)
    assert wants_tick(PINNED, stats, FleetMemory(replicas=2), suspended=False)
    assert wants_tick(POLICY, stats, FleetMemory(replicas=3), suspended=False)  # wants 10


@pytest.mark.parametrize(
    ("workers", "flag", "pinned"),
    [
        ({}, None, None),
        ({}, 4, 4),
        ({"autoscale": "external"}, None, 1),  # replicas unset: minReplicas
        ({"autoscale": "external", "replicas": 6}, None, 6),
        ({"autoscale": "external", "replicas": 6}, 2, 2),  # the flag wins
        ({"replicas": 6}, None, None),  # replicas is ignored when autoscale is internal
    ],
)
def test_pins_come_from_the_command_line_or_external_autoscale(
    workers: dict[str, object], flag: int | None, pinned: int | None
) -> None:
    spec = CrawlJobSpec.from_mapping({"seeds": ["https://a.example/"], "workers": workers})
    policy = FleetPolicy.from_spec(
        spec, SteeringConfig(), completion_grace_seconds=0, pinned_replicas=flag
    )
    assert policy.pinned_replicas == pinned


def test_policy_from_spec_uses_the_crawljob_defaults() -> None:
    spec = CrawlJobSpec.from_mapping({"seeds": ["https://a.example/"]})
    policy = FleetPolicy.from_spec(spec, SteeringConfig(), completion_grace_seconds=5)
    assert (policy.min_replicas, policy.max_replicas, policy.target_backlog_per_replica) == (
        1,
        10,
        500,
    )
    assert (policy.scale_down_delay_seconds, policy.dead_after_seconds) == (60, 20)
    assert policy.completion_grace_seconds == 5
    assert policy.startup_grace_seconds == SteeringConfig().startup_grace_seconds


# -- the memory is durable ---------------------------------------------------------------------


def test_memory_round_trips_through_its_mapping() -> None:
    memory = FleetMemory(replicas=4, low_demand_since=1_790_000_123.456789, idle_since=None)
    raw = memory.to_mapping()
    assert raw == {"replicas": 4, "lowDemandSince": "2026-09-21T14:15:23.456789Z"}
    back = FleetMemory.from_mapping(raw)
    assert back is not None
    assert back.replicas == 4
    assert back.low_demand_since == pytest.approx(memory.low_demand_since, abs=1e-6)
    assert back.idle_since is None


def test_what_was_announced_about_waits_and_stalls_survives_a_restart() -> None:
    memory = FleetMemory(
        replicas=1, waiting="RobotsTxt", moving_since=1_790_000_000.5, stalled="StuckOutput"
    )
    raw = memory.to_mapping()
    assert raw["waiting"] == "RobotsTxt"
    assert raw["stalled"] == "StuckOutput"
    assert FleetMemory.from_mapping(raw) == memory


@pytest.mark.parametrize(
    "raw",
    [None, {}, {"replicas": -1}, {"replicas": "3"}, {"replicas": 1, "idleSince": "yesterday"}],
)
def test_unreadable_memory_is_none_not_an_error(raw: dict[str, object] | None) -> None:
    assert FleetMemory.from_mapping(raw) is None


def test_a_restart_resumes_the_scale_down_window_from_the_stored_memory() -> None:
    """50 s of the 60 s delay passed before the restart: 10 more, not 60, after it."""
    _, before = decide(POLICY, seen(now=1000, queued=50), FleetMemory(replicas=5))
    restored = FleetMemory.from_mapping(before.to_mapping())
    assert restored is not None
    decision, _ = decide(POLICY, seen(now=1050, queued=50), restored)
    assert decision.desired_replicas == 5
    decision, _ = decide(POLICY, seen(now=1060, queued=50), restored)
    assert decision.desired_replicas == 1


# -- the frontier's health: loss, memory pressure, the Bloom filter ------------------------------


def test_a_lost_frontier_fails_the_job_unless_it_asks_to_be_reseeded() -> None:
    memory = FleetMemory(replicas=3, frontier_epoch="e1")
    lost = Observation.of_loss("Redis holds no frontier of this job", now=1000.0)

    decision, after = decide(POLICY, lost, memory)
    assert (decision.phase, decision.desired_replicas, decision.reopen) == ("Failed", 0, False)
    assert decision.lost == "Redis holds no frontier of this job"
    assert after.replicas == 0
    assert after.frontier_epoch == "e1"  # what the job was: kept, for people and the next try

    reseed = dataclasses.replace(POLICY, on_loss="Reseed")
    decision, after = decide(reseed, lost, memory)
    assert (decision.phase, decision.reopen) == ("Pending", True)
    assert decision.desired_replicas == 3  # the fleet stays while the frontier is re-created
    assert after == memory


@pytest.mark.parametrize(
    ("current", "share", "expected"),
    [
        (PressureLevel.NONE, 0.79, PressureLevel.NONE),
        (PressureLevel.NONE, 0.80, PressureLevel.HIGH),
        (PressureLevel.NONE, 0.96, PressureLevel.CRITICAL),
        (PressureLevel.HIGH, 0.75, PressureLevel.HIGH),  # hysteresis: not yet below 70 %
        (PressureLevel.HIGH, 0.69, PressureLevel.NONE),
        (PressureLevel.HIGH, 0.95, PressureLevel.CRITICAL),
        (PressureLevel.CRITICAL, 0.92, PressureLevel.CRITICAL),
        (PressureLevel.CRITICAL, 0.89, PressureLevel.HIGH),
        (PressureLevel.CRITICAL, 0.50, PressureLevel.NONE),
    ],
)
def test_memory_pressure_rises_at_its_marks_and_falls_well_below(
    current: PressureLevel, share: float, expected: PressureLevel
) -> None:
    assert memory_pressure(current, int(share * 1000), 1000) == expected


def test_no_maxmemory_or_no_reading_leaves_the_pressure_as_it_is() -> None:
    assert memory_pressure(PressureLevel.HIGH, 10**12, 0) == PressureLevel.HIGH
    assert memory_pressure(PressureLevel.NONE, None, 1000) == PressureLevel.NONE


def test_a_pressure_change_is_a_backpressure_to_set_and_only_a_change() -> None:
    def observed(used: int, level: PressureLevel) -> Observation:
        return dataclasses.replace(
            seen(queued=50),
            memory_used_bytes=used,
            memory_max_bytes=1000,
            pressure=level,
            pages_per_second=40.0,
        )

    decision, _ = decide(POLICY, observed(850, PressureLevel.NONE), FleetMemory(replicas=1))
    assert decision.pressure == PressureLevel.HIGH
    assert decision.set_pressure == Backpressure.at(PressureLevel.HIGH, claims_per_second=30.0)
    decision, _ = decide(POLICY, observed(850, PressureLevel.HIGH), FleetMemory(replicas=1))
    assert decision.set_pressure is None  # already in force
    decision, _ = decide(POLICY, observed(600, PressureLevel.HIGH), FleetMemory(replicas=1))
    assert decision.set_pressure == Backpressure()  # released


def test_a_complete_crawl_releases_the_pressure_whatever_redis_holds() -> None:
    """The queues are empty: nothing is left to hold back, and the condition ends with the
    job, though the Bloom filter and the counters keep Redis as full as it was."""

    def idle(now: float) -> Observation:
        return dataclasses.replace(
            seen(now=now),
            memory_used_bytes=990,
            memory_max_bytes=1000,
            pressure=PressureLevel.CRITICAL,
        )

    decision, memory = decide(POLICY, idle(1000), FleetMemory(replicas=1))
    assert (decision.complete, decision.pressure) == (False, PressureLevel.CRITICAL)
    decision, _ = decide(POLICY, idle(1005), memory)
    assert decision.complete
    assert (decision.pressure, decision.set_pressure) == (PressureLevel.NONE, Backpressure())


def test_backpressure_slows_claims_to_a_share_of_the_rate_and_never_to_zero() -> None:
    assert backpressure(PressureLevel.HIGH, 40.0).claims_per_second == 30.0
    assert backpressure(PressureLevel.CRITICAL, 40.0).claims_per_second == 20.0
    assert backpressure(PressureLevel.CRITICAL, 0.5).claims_per_second == 1.0
    assert backpressure(PressureLevel.HIGH, None).claims_per_second is None
    assert backpressure(PressureLevel.CRITICAL, 40.0).links_per_page == 0
    assert backpressure(PressureLevel.NONE, 40.0) == Backpressure()


def test_the_bloom_filter_is_nearly_full_at_80_percent_of_its_capacity() -> None:
    policy = dataclasses.replace(POLICY, bloom_capacity=1000)
    below = dataclasses.replace(seen(queued=5), seen=799)
    at = dataclasses.replace(seen(queued=5), seen=800)
    assert not decide(policy, below, FleetMemory(replicas=1))[0].bloom_nearly_full
    decision, memory = decide(policy, at, FleetMemory(replicas=1))
    assert decision.bloom_nearly_full
    assert memory.bloom_nearly_full  # so the warning is given once
    assert FleetMemory.from_mapping(memory.to_mapping()) == memory


def test_policy_takes_on_loss_and_capacity_from_the_spec() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": ["https://books.example/"],
            "redis": {"onLoss": "Reseed"},
            "dedup": {"capacity": 5000},
        }
    )
    policy = FleetPolicy.from_spec(spec, SteeringConfig(), completion_grace_seconds=0)
    assert (policy.on_loss, policy.bloom_capacity) == ("Reseed", 5000)


def test_claims_are_slowed_to_shares_of_the_rate_before_pressure_not_of_a_slowed_one() -> None:
    def observed(used: int, level: PressureLevel, rate: float) -> Observation:
        return dataclasses.replace(
            seen(queued=50),
            memory_used_bytes=used,
            memory_max_bytes=1000,
            pressure=level,
            pages_per_second=rate,
        )

    decision, memory = decide(POLICY, observed(850, PressureLevel.NONE, 40.0), FleetMemory())
    assert memory.pressure_base_rate == 40.0
    # Slowed to 30 a second, the crawl then runs at about that: CRITICAL halves the 40.
    decision, memory = decide(POLICY, observed(960, PressureLevel.HIGH, 30.0), memory)
    assert decision.set_pressure == Backpressure.at(PressureLevel.CRITICAL, claims_per_second=20.0)
    decision, memory = decide(POLICY, observed(880, PressureLevel.CRITICAL, 20.0), memory)
    assert decision.set_pressure == Backpressure.at(PressureLevel.HIGH, claims_per_second=30.0)
    assert FleetMemory.from_mapping(memory.to_mapping()) == memory  # an operator restart
    decision, memory = decide(POLICY, observed(500, PressureLevel.HIGH, 30.0), memory)
    assert decision.set_pressure == Backpressure()
    assert memory.pressure_base_rate is None


# -- workers that die at start -----------------------------------------------------------------

REFUSED = UnitExit(2, "OutputUnavailable", "output destination s3://gone/: no such bucket", 0.8)


def dying(name: str, deaths: int, *, running: bool = False, why: UnitExit = REFUSED) -> WorkerView:
    """A worker that never heartbeated and died ``deaths`` times in a row at start."""
    return dataclasses.replace(
        worker(name, running=running, age=None), last_exit=why, quick_deaths=deaths
    )


def test_quick_deaths_below_the_cap_are_bad_luck_not_failing() -> None:
    decision, memory = decide(POLICY, seen(queued=10, workers=(dying("w-1", 2),)), FleetMemory(1))
    assert decision.workers_failing is None
    assert memory.workers_failing is None
    assert decision.phase == "Running"


def test_in_a_cluster_failing_workers_are_reported_with_their_own_sentence_and_retried() -> None:
    pods = (dying("w-1", 3, running=True), dying("w-2", 5, running=True), worker("w-3"))
    decision, memory = decide(POLICY, seen(now=5000, queued=10, workers=pods), FleetMemory(3))
    failing = decision.workers_failing
    assert failing is not None
    assert (failing.unit, failing.deaths, failing.reason, failing.code) == (
        "w-2",
        5,
        "OutputUnavailable",
        2,
    )
    assert failing.message == "output destination s3://gone/: no such bucket"
    assert failing.summary.endswith(": output destination s3://gone/: no such bucket")
    assert (
        memory.workers_failing == "OutputUnavailable: output destination s3://gone/: no such bucket"
    )
    # The job goes on: the kubelet restarts them with back-off, and the fix needs no restart.
    assert (decision.phase, decision.desired_replicas) == ("Running", 3)
    # A pod backing off never heartbeats; replacing it would only reset its count.
    assert decision.replace == ()
    assert decision.requeues == ()


def test_locally_failing_workers_stop_the_run() -> None:
    policy = dataclasses.replace(POLICY, stop_on_crash_loop=True)
    decision, memory = decide(policy, seen(queued=10, workers=(dying("w-4", 3),)), FleetMemory(1))
    assert decision.workers_failing is not None
    assert (decision.phase, decision.desired_replicas, memory.replicas) == ("Failed", 0, 0)
    assert decision.forget == ("w-4",)  # its leases go back first: nothing is lost
    assert decision.requeue_owners == ("w-4",)
    assert "workers failing: 3 workers in a row died at start" in decision.reason


def test_the_cap_is_the_policys_and_comes_from_the_steering_config() -> None:
    spec = CrawlJobSpec.from_mapping({"seeds": ["https://a.example/"]})
    steering = dataclasses.replace(SteeringConfig(), crash_loop_deaths=5)
    policy = FleetPolicy.from_spec(
        spec, steering, completion_grace_seconds=0, stop_on_crash_loop=True
    )
    assert (policy.crash_loop_deaths, policy.stop_on_crash_loop, policy.writes_output) == (
        5,
        True,
        True,
    )
    decision, _ = decide(policy, seen(queued=1, workers=(dying("w-1", 4),)), FleetMemory(1))
    assert decision.workers_failing is None
    decision, _ = decide(policy, seen(queued=1, workers=(dying("w-1", 5),)), FleetMemory(1))
    assert decision.workers_failing is not None


def test_the_failing_error_is_remembered_so_its_event_is_given_once() -> None:
    memory = FleetMemory.from_mapping(
        FleetMemory(replicas=2, workers_failing="InvalidConfig: spec.seeds: required").to_mapping()
    )
    assert memory is not None
    assert memory.workers_failing == "InvalidConfig: spec.seeds: required"
    _, after = decide(POLICY, seen(queued=10, workers=(worker("w-1"),)), memory)
    assert after.workers_failing is None  # fixed: the next failure is news again


# -- the manifest before Succeeded -------------------------------------------------------------


def test_a_job_that_writes_output_succeeds_only_once_its_manifest_is_written() -> None:
    policy = dataclasses.replace(POLICY, writes_output=True, min_replicas=0)
    crawled_out = seen(now=2000)
    decision, memory = decide(policy, crawled_out, FleetMemory(replicas=0, idle_since=1000))
    assert not decision.complete
    assert decision.phase == "Running"
    assert decision.desired_replicas == 1  # a worker to write it, even with minReplicas 0
    assert "waiting for the output's manifest.json" in decision.reason
    stats = FrontierStats(seeded=True)
    assert wants_tick(policy, stats, FleetMemory(replicas=0), suspended=False)
    assert not wants_tick(policy, stats, FleetMemory(replicas=1), suspended=False)
    written = dataclasses.replace(stats, output_finished=True)
    assert wants_tick(policy, written, FleetMemory(replicas=1), suspended=False)
    done = Observation.of(written, now=2001, suspended=False, workers=(), vanished=())
    decision, _ = decide(policy, done, memory)
    assert decision.complete
    assert decision.phase == "Succeeded"


def test_a_restarted_worker_that_heartbeats_again_has_started_and_is_not_failing() -> None:
    fixed = dataclasses.replace(dying("w-1", 4, running=True), heartbeat_age_seconds=0.5)
    decision, memory = decide(POLICY, seen(queued=10, workers=(fixed,)), FleetMemory(1))
    assert decision.workers_failing is None
    assert memory.workers_failing is None
    # A dead one's last heartbeat proves nothing: locally it still counts.
    dead = dataclasses.replace(dying("w-2", 3), heartbeat_age_seconds=0.5)
    decision, _ = decide(POLICY, seen(queued=10, workers=(dead,)), FleetMemory(1))
    assert decision.workers_failing is not None


def test_a_backing_off_pod_whose_old_heartbeat_went_stale_is_requeued_not_replaced() -> None:
    stale = dataclasses.replace(dying("w-1", 2, running=True), heartbeat_age_seconds=30.0)
    decision, _ = decide(POLICY, seen(queued=10, workers=(stale,)), FleetMemory(1))
    assert decision.requeues == (Requeue("w-1", "stale_heartbeat"),)
    assert (decision.replace, decision.forget) == ((), ())


def test_a_job_with_file_rules_has_its_file_counters_read_by_the_tick() -> None:
    plain = CrawlJobSpec.from_mapping({"seeds": ["https://a.example/"]})
    files = CrawlJobSpec.from_mapping(
        {"seeds": ["https://a.example/v.mp4"], "files": {"rules": [{"match": r"\.mp4$"}]}}
    )
    read = [
        FleetPolicy.from_spec(spec, SteeringConfig(), completion_grace_seconds=0).files
        for spec in (plain, files)
    ]
    assert read == [False, True]


# -- spec.suspendExpiry (suspension) ------------------------------------------------------

WEEK = 7 * 24 * 3600.0


def test_without_an_expiry_a_suspended_job_waits_and_the_clock_is_kept() -> None:
    held = suspension(POLICY, FleetMemory(), suspended=True, now=1000.0)
    assert held.suspended
    assert held.memory.suspended_since == 1000.0
    later = suspension(POLICY, held.memory, suspended=True, now=1000.0 + 10 * WEEK)
    assert later.suspended
    assert later.expired is None
    assert later.memory.suspended_since == 1000.0  # the first tick that saw it


def test_resume_after_the_expiry_runs_the_job_and_says_so_once() -> None:
    policy = dataclasses.replace(POLICY, suspend_expiry=(WEEK, "Resume"))
    start = suspension(policy, FleetMemory(), suspended=True, now=0.0)
    almost = suspension(policy, start.memory, suspended=True, now=WEEK - 1)
    assert almost.suspended
    assert almost.expired is None
    expired = suspension(policy, almost.memory, suspended=True, now=WEEK)
    assert not expired.suspended
    assert (expired.expired, expired.newly_expired) == ("Resume", True)
    again = suspension(policy, expired.memory, suspended=True, now=WEEK + 1)
    assert not again.suspended
    assert (again.expired, again.newly_expired) == ("Resume", False)
    # resumed by hand, suspended again: a new clock, a new expiry
    resumed = suspension(policy, again.memory, suspended=False, now=WEEK + 2)
    assert resumed.memory == dataclasses.replace(
        again.memory, suspended_since=None, suspend_expired=False
    )
    anew = suspension(policy, resumed.memory, suspended=True, now=WEEK + 3)
    assert anew.suspended
    assert anew.memory.suspended_since == WEEK + 3


def test_fail_after_the_expiry_keeps_the_workers_at_zero() -> None:
    policy = dataclasses.replace(POLICY, suspend_expiry=(60.0, "Fail"))
    start = suspension(policy, FleetMemory(), suspended=True, now=0.0)
    expired = suspension(policy, start.memory, suspended=True, now=60.0)
    assert expired.suspended
    assert (expired.expired, expired.newly_expired) == ("Fail", True)


def test_the_memory_round_trips_through_the_status() -> None:
    memory = FleetMemory(suspended_since=1_800_000_000.25, suspend_expired=True)
    mapping = memory.to_mapping()
    assert mapping["suspendExpired"] is True
    assert str(mapping["suspendedSince"]).startswith("2027-01-15T")
    assert FleetMemory.from_mapping(mapping) == memory
    running = FleetMemory.from_mapping(FleetMemory(replicas=2).to_mapping())
    assert running == FleetMemory(replicas=2)


# -- spec.autoPause (rate_limit_pause) --------------------------------------------------------

HOUR = 3600.0


def pause_at(
    policy: FleetPolicy,
    memory: FleetMemory,
    now: float,
    *,
    since: float | None = 0.0,
    pending: int = 10,
    suspended: bool = False,
    resumed: bool = False,
) -> RateLimitPause:
    return rate_limit_pause(
        policy,
        memory,
        pushed_back_since=since,
        pending=pending,
        suspended=suspended,
        resumed=resumed,
        now=now,
    )


def test_a_job_pushed_back_for_the_whole_while_pauses_itself_once_and_stays_paused() -> None:
    policy = dataclasses.replace(POLICY, auto_pause=(12 * HOUR, None))
    early = pause_at(policy, FleetMemory(), 12 * HOUR - 1)
    assert (early.paused, early.newly_paused) == (False, False)
    paused = pause_at(policy, early.memory, 12 * HOUR)
    assert (paused.paused, paused.newly_paused) == (True, True)
    assert paused.memory.rate_limited_pause_since == 12 * HOUR
    # a page acked meanwhile would have ended the run (since None): paused, it stays paused
    later = pause_at(policy, paused.memory, 100 * HOUR, since=None)
    assert (later.paused, later.newly_paused, later.newly_resumed) == (True, False, False)


def test_pages_coming_through_no_work_left_or_no_rule_never_pause() -> None:
    policy = dataclasses.replace(POLICY, auto_pause=(HOUR, None))
    assert not pause_at(policy, FleetMemory(), 10 * HOUR, since=None).paused
    assert not pause_at(policy, FleetMemory(), 10 * HOUR, pending=0).paused
    assert not pause_at(POLICY, FleetMemory(), 10 * HOUR).paused  # no spec.autoPause


def test_resume_after_tries_again_and_counts_pushback_only_from_then() -> None:
    policy = dataclasses.replace(POLICY, auto_pause=(HOUR, 2 * HOUR))
    paused = pause_at(policy, FleetMemory(), HOUR)
    assert paused.paused
    waiting = pause_at(policy, paused.memory, 3 * HOUR - 1)
    assert waiting.paused
    again = pause_at(policy, waiting.memory, 3 * HOUR)
    assert (again.paused, again.newly_resumed) == (False, True)
    assert again.memory.pushback_counted_from == 3 * HOUR
    # the old run of pushback (since 0) counts only from the resumption on
    assert not pause_at(policy, again.memory, 4 * HOUR - 1).paused
    assert pause_at(policy, again.memory, 4 * HOUR).newly_paused


def test_suspending_by_hand_ends_the_pause_and_resuming_starts_the_count_again() -> None:
    policy = dataclasses.replace(POLICY, auto_pause=(HOUR, None))
    paused = pause_at(policy, FleetMemory(), HOUR)
    by_hand = pause_at(policy, paused.memory, 2 * HOUR, suspended=True)
    assert not by_hand.paused  # the suspension holds the job now
    assert by_hand.memory.rate_limited_pause_since is None
    resumed = pause_at(policy, by_hand.memory, 3 * HOUR, resumed=True)
    assert not resumed.paused
    assert resumed.memory.pushback_counted_from == 3 * HOUR
    assert pause_at(policy, resumed.memory, 4 * HOUR).paused


def test_the_pause_round_trips_through_the_status() -> None:
    memory = FleetMemory(rate_limited_pause_since=1_800_000_000.5, pushback_counted_from=1.0e9)
    assert FleetMemory.from_mapping(memory.to_mapping()) == memory


def test_auto_pause_comes_from_the_spec_in_seconds() -> None:
    spec = CrawlJobSpec.from_mapping(
        {"seeds": ["https://a.example/"], "autoPause": {"resumeAfter": "30m"}}
    )
    policy = FleetPolicy.from_spec(spec, SteeringConfig(), completion_grace_seconds=0)
    assert policy.auto_pause == (12 * HOUR, 1800.0)
