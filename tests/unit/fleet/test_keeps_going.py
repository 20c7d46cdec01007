"""A job that keeps going (revisit rules, no schedule): it never completes by itself, waits for
its next due revisit with the fleet at ``minReplicas`` (0 allowed), wakes when one comes due,
and says so; a scheduled run completes as any crawl does."""

from __future__ import annotations

import dataclasses

import pytest

from crawlfleet.config import SteeringConfig
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.fleet import FleetMemory, FleetPolicy, Observation, decide, wants_tick
from crawlfleet.fleet.waiting import assess
from crawlfleet.frontier import FrontierStats
from tests.unit.fleet import test_policy

#: The scaling rules of the policy tests, keeping going, with a fleet that may go to zero.
POLICY = dataclasses.replace(
    test_policy.POLICY, min_replicas=0, writes_output=True, keeps_going=True, revisits=True
)
#: The same job with a schedule: each run completes when its queue drains.
SCHEDULED = dataclasses.replace(POLICY, keeps_going=False)
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def drained(now: float, *, next_revisit_in: float | None = 300.0, queued: int = 0) -> Observation:
    """Everything crawled: nothing queued, delayed or leased; a revisit scheduled."""
    return Observation(
        now=now,
        queued=queued,
        delayed=0,
        in_flight=0,
        seeded=True,
        next_revisit_in_seconds=next_revisit_in,
    )


def test_the_policy_keeps_going_only_with_revisit_rules_and_no_schedule() -> None:
    seeds = {"seeds": ["https://a.example/"]}
    rules = {"recrawl": [{"match": "^https://a\\.example/$", "interval": "5m"}]}
    schedule = {"schedule": {"cron": "*/15 * * * *"}}

    def policy(**spec: object) -> FleetPolicy:
        return FleetPolicy.from_spec(
            CrawlJobSpec.from_mapping({**seeds, **spec}),
            SteeringConfig(),
            completion_grace_seconds=0,
        )

    assert (policy().keeps_going, policy().revisits) == (False, False)
    assert (policy(**rules).keeps_going, policy(**rules).revisits) == (True, True)
    scheduled = policy(**rules, **schedule)
    assert (scheduled.keeps_going, scheduled.revisits) == (False, True)


def test_a_job_that_keeps_going_never_completes_however_long_it_has_nothing_to_do() -> None:
    memory = FleetMemory(replicas=2)
    for now in (NOW, NOW + 5, NOW + 3600, NOW + 86_400):
        decision, memory = decide(POLICY, drained(now), memory)
        assert not decision.complete
        assert decision.phase == "Running"
    # Not even the output's closing files hold a worker: they are written on drains.
    assert decision.desired_replicas == 0
    assert memory.idle_since is None


def test_a_scheduled_run_completes_as_any_crawl_does() -> None:
    memory = FleetMemory(replicas=1)
    _, memory = decide(SCHEDULED, drained(NOW), memory)
    decision, _ = decide(
        SCHEDULED, dataclasses.replace(drained(NOW + 5), output_finished=True), memory
    )
    assert decision.complete
    assert decision.phase == "Succeeded"


def test_while_waiting_the_fleet_goes_to_min_replicas_after_the_scale_down_delay() -> None:
    memory = FleetMemory(replicas=3)
    decision, memory = decide(POLICY, drained(NOW), memory)
    assert decision.desired_replicas == 3  # lower demand, not for long enough yet
    decision, memory = decide(POLICY, drained(NOW + 59), memory)
    assert decision.desired_replicas == 3
    decision, memory = decide(POLICY, drained(NOW + 60), memory)
    assert decision.desired_replicas == 0
    assert "scale down 3 -> 0" in decision.reason
    held = dataclasses.replace(POLICY, min_replicas=2)
    decision, _ = decide(held, drained(NOW + 60), FleetMemory(replicas=3, low_demand_since=NOW))
    assert decision.desired_replicas == 2


@pytest.mark.parametrize(
    ("next_revisit_in", "wanted"),
    [(None, 0), (3600.0, 0), (10.1, 0), (10.0, 1), (0.0, 1), (-30.0, 1)],
)
def test_a_revisit_due_soon_wakes_one_worker_ahead_of_its_time(
    next_revisit_in: float | None, wanted: int
) -> None:
    """Within ``retry_lead_seconds`` (about what a worker takes to start), as for a retry."""
    decision, _ = decide(POLICY, drained(NOW, next_revisit_in=next_revisit_in), FleetMemory())
    assert decision.desired_replicas == wanted


def test_a_worker_that_would_be_woken_again_within_the_scale_down_delay_stays() -> None:
    """Revisits 65 s apart, a 60 s delay and a 10 s lead: stopping the worker between them
    would only start it again."""
    memory = FleetMemory(replicas=1, low_demand_since=NOW - 120)
    decision, _ = decide(POLICY, drained(NOW, next_revisit_in=65.0), memory)
    assert decision.desired_replicas == 1
    decision, _ = decide(POLICY, drained(NOW, next_revisit_in=75.0), memory)
    assert decision.desired_replicas == 0  # further than the delay and the lead: it goes
    # A fleet at zero is woken only by the lead: the delay is no reason to start one.
    decision, _ = decide(POLICY, drained(NOW, next_revisit_in=65.0), FleetMemory())
    assert decision.desired_replicas == 0


def test_due_revisits_promoted_into_their_queues_are_backlog_like_any_url() -> None:
    decision, _ = decide(POLICY, drained(NOW, queued=250, next_revisit_in=120), FleetMemory())
    assert decision.desired_replicas == 3
    assert "scale up 0 -> 3" in decision.reason


def frontier(
    *, leased: int = 0, queued: int = 0, tracked: int = 12, next_revisit_in: float | None = 300.0
) -> FrontierStats:
    return FrontierStats(
        queued=queued,
        leased=leased,
        seeded=True,
        tracked=tracked,
        next_revisit_in_seconds=next_revisit_in,
    )


def test_the_cheap_check_calls_a_tick_when_a_revisit_comes_due_not_while_waiting() -> None:
    idle = FleetMemory(replicas=0)
    assert not wants_tick(POLICY, frontier(), idle, suspended=False)
    assert wants_tick(POLICY, frontier(next_revisit_in=0.0), idle, suspended=False)
    assert wants_tick(POLICY, frontier(next_revisit_in=5.0), idle, suspended=False)  # the lead
    # A fleet still up while waiting shrinks at a tick, after its delay: nothing to hurry.
    assert not wants_tick(POLICY, frontier(), FleetMemory(replicas=2), suspended=False)
    # A scheduled run drained (its manifest written) is complete: the check hurries the
    # tick that says so.
    finished = dataclasses.replace(frontier(), output_finished=True)
    assert wants_tick(SCHEDULED, finished, FleetMemory(replicas=2), suspended=False)


def waits(stats: FrontierStats, *, suspended: bool = False, wanted: int = 0) -> str | None:
    waiting = assess(
        stats, now=NOW, suspended=suspended, workers=(), beats=(), policy=POLICY, wanted=wanted
    )
    return None if waiting is None else f"{waiting.reason}: {waiting.sentence()}"


def test_waiting_for_the_next_revisit_names_its_due_time_and_the_urls_tracked() -> None:
    assert waits(frontier()) == "NextRevisit: next revisit due at 2027-01-15T08:05:00Z (12 tracked)"
    waiting = assess(
        frontier(next_revisit_in=42.0),
        now=NOW,
        suspended=False,
        workers=(),
        beats=(),
        policy=POLICY,
        wanted=0,
    )
    assert waiting is not None
    assert waiting.sentence(NOW) == "next revisit due in 42s (12 tracked)"
    assert waiting.sentence(NOW + 50) == "next revisit due now (12 tracked)"
    assert waits(frontier(tracked=0, next_revisit_in=None)) == (
        "NextRevisit: no revisit scheduled (0 tracked)"
    )


def test_a_job_with_work_in_hand_or_suspended_is_not_waiting_for_a_revisit() -> None:
    assert waits(frontier(leased=3)) is None  # fetching: it moves
    assert waits(frontier(), suspended=True) is None  # the Suspended condition says it
    # URLs queued and no worker yet (being woken): a crawl starting, as any other.
    assert waits(frontier(queued=5), wanted=1) is None
