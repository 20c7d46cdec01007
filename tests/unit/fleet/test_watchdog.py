"""The watchdog: leases stuck in a stage of a live worker, in the workers' own account."""

from __future__ import annotations

from crawlfleet.fleet.watchdog import StalledStage, stalled
from crawlfleet.frontier import HeartbeatValue, WorkerHeartbeat

STALL_AFTER = 270.0


def beat(worker: str, age: float = 1.0, **fields: HeartbeatValue) -> WorkerHeartbeat:
    account: dict[str, HeartbeatValue] = {
        "leases_fetching": 0,
        "oldest_fetching_seconds": 0.0,
        "leases_processing": 0,
        "oldest_processing_seconds": 0.0,
        "leases_output": 0,
        "oldest_output_seconds": 0.0,
    }
    return WorkerHeartbeat(worker, 0.0, age, {**account, **fields})


def test_leases_within_the_threshold_are_moving() -> None:
    beats = [
        beat("w-1", leases_fetching=16, oldest_fetching_seconds=59.0),
        beat("w-2", leases_output=400, oldest_output_seconds=STALL_AFTER),  # not past it
    ]
    assert stalled(beats, stall_after_seconds=STALL_AFTER, fresh_seconds=20) is None


def test_a_stuck_output_is_said_with_the_workers_own_reason() -> None:
    beats = [
        beat(
            "w-2",
            leases_output=12,
            oldest_output_seconds=301.0,
            output_blocked=1,
            output_blocked_reason="ENOSPC writing /out/.partial/w-2-00004.jsonl",
        ),
        beat("w-1", leases_fetching=3, oldest_fetching_seconds=4.0),
    ]
    stall = stalled(beats, stall_after_seconds=STALL_AFTER, fresh_seconds=20)
    assert stall is not None
    assert stall.reason == "StuckOutput"
    assert stall.stages == (
        StalledStage("output", 12, ("w-2",), 301.0, "ENOSPC writing /out/.partial/w-2-00004.jsonl"),
    )
    assert stall.sentence() == (
        "leases stopped moving while their workers heartbeat: 12 in output on w-2, the oldest"
        " for 5m01s: their records wait for the output to become durable (ENOSPC writing"
        " /out/.partial/w-2-00004.jsonl) (stalled past 4m30s: 3 × lease.ttlSeconds +"
        " fetch.totalTimeoutSeconds + output.maxFileAgeSeconds)"
    )


def test_stages_of_several_workers_add_up_the_longest_stuck_first() -> None:
    beats = [
        beat("w-1", leases_fetching=2, oldest_fetching_seconds=500.0),
        beat("w-2", leases_fetching=5, oldest_fetching_seconds=280.0),
        beat("w-3", leases_processing=1, oldest_processing_seconds=900.0),
    ]
    stall = stalled(beats, stall_after_seconds=STALL_AFTER, fresh_seconds=20)
    assert stall is not None
    assert stall.reason == "StuckProcessing"
    assert stall.leases == 8
    assert stall.stages[1] == StalledStage("fetching", 7, ("w-1", "w-2"), 500.0)


def test_a_dead_workers_leases_are_the_requeues_not_the_watchdogs() -> None:
    beats = [beat("w-1", age=25.0, leases_fetching=2, oldest_fetching_seconds=999.0)]
    assert stalled(beats, stall_after_seconds=STALL_AFTER, fresh_seconds=20) is None


def test_a_heartbeat_without_an_account_is_read_as_none() -> None:
    old = WorkerHeartbeat("w-1", 0.0, 1.0, {"in_flight": 3, "leases_fetching": "?"})
    assert stalled([old], stall_after_seconds=STALL_AFTER, fresh_seconds=20) is None
