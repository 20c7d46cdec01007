"""The fleet brain, rule by rule: scaling, stabilisation, dead workers, completion, suspend."""

from __future__ import annotations

import pytest

from crawlfleet.fleet import FleetMemory, FleetPolicy, Observation, WorkerView, decide, demand

POLICY = FleetPolicy(
    min_replicas=1,
    max_replicas=10,
    target_backlog_per_replica=100,
    scale_down_delay_seconds=60,
    dead_after_seconds=20,
    completion_grace_seconds=5,
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
) -> Observation:
    return Observation(now, queued, delayed, in_flight, seeded, suspended, workers, vanished)


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
        WorkerView("alive", running=True, started_at=900, heartbeat_age_seconds=2),
        WorkerView("stale", running=True, started_at=900, heartbeat_age_seconds=25),
        WorkerView("exited", running=False, started_at=900, heartbeat_age_seconds=1),
        WorkerView("starting", running=True, started_at=995, heartbeat_age_seconds=None),
        WorkerView("slow-start", running=True, started_at=970, heartbeat_age_seconds=None),
        WorkerView("never-beat", running=True, started_at=930, heartbeat_age_seconds=None),
    )
    decision, _ = decide(
        POLICY, seen(queued=100, workers=workers, vanished=("gone-pod",)), FleetMemory(1)
    )
    assert decision.requeue_owners == ("exited", "gone-pod", "never-beat", "stale")
    assert decision.replace == ("stale", "never-beat")


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
    workers = (WorkerView("exited", running=False, started_at=900),)
    decision, memory = decide(
        POLICY, seen(queued=1000, suspended=True, workers=workers), FleetMemory(replicas=4)
    )
    assert (decision.desired_replicas, decision.phase) == (0, "Suspended")
    assert decision.requeue_owners == ("exited",)
    assert memory.replicas == 0


def test_policy_from_spec_uses_the_crawljob_defaults() -> None:
    from crawlfleet.crawljob import CrawlJobSpec

    policy = FleetPolicy.from_spec(CrawlJobSpec.from_mapping({"seeds": ["https://a.example/"]}))
    assert (policy.min_replicas, policy.max_replicas, policy.target_backlog_per_replica) == (
        1,
        10,
        500,
    )
    assert (policy.scale_down_delay_seconds, policy.dead_after_seconds) == (60, 20)
