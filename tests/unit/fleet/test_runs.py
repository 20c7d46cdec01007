"""Recurring runs (fleet/runs.py): run ids, what a due time does, the bounded history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from crawlfleet.fleet.clock import FileClock, SystemClock, schedule_clock
from crawlfleet.fleet.runs import (
    RunRecord,
    ended,
    history_mapping,
    history_of,
    on_due,
    remember,
    run_id,
)

T0 = datetime(2026, 12, 2, 8, 15, tzinfo=UTC)


def test_a_run_id_is_its_due_time_in_utc_and_sorts_as_time_does() -> None:
    paris = T0.astimezone(ZoneInfo("Europe/Paris"))
    assert run_id(paris) == "20261202T081500Z"
    later = [run_id(T0 + timedelta(minutes=m)) for m in (1, 59, 61, 60 * 24 * 40)]
    assert later == sorted(later)


@pytest.mark.parametrize(
    ("policy", "running", "action"),
    [
        ("Forbid", False, "start"),
        ("Replace", False, "start"),
        ("Forbid", True, "skip"),
        ("Replace", True, "replace"),
        ("Allow", True, "skip"),  # refused at admission; never two runs on one frontier
    ],
)
def test_a_due_time_starts_skips_or_replaces(policy: str, running: bool, action: str) -> None:
    assert on_due(policy, running=running) == action  # type: ignore[arg-type]


def test_the_history_is_newest_first_bounded_and_the_running_entry_is_replaced() -> None:
    history: tuple[RunRecord, ...] = ()
    for minutes in (0, 15, 30):
        started = T0 + timedelta(minutes=minutes)
        running = RunRecord(run_id(started), started)
        history = remember(history, running, limit=2)
        assert history[0] == running
        done = ended(running, "Succeeded", started + timedelta(minutes=5), pages=7, changed=2)
        history = remember(history, done, limit=2)
    assert [entry.id for entry in history] == ["20261202T084500Z", "20261202T083000Z"]
    assert [entry.outcome for entry in history] == ["Succeeded", "Succeeded"]
    assert (history[0].pages, history[0].changed, history[0].unchanged) == (7, 2, 0)


def test_the_history_round_trips_through_the_status_and_skips_what_does_not_parse() -> None:
    running = RunRecord("20261202T081500Z", T0)
    cancelled = ended(
        RunRecord("20261202T080000Z", T0 - timedelta(minutes=15)), "Cancelled", T0, pages=3
    )
    stored = history_mapping([running, cancelled])
    assert stored[0] == {
        "id": "20261202T081500Z",
        "startedAt": "2026-12-02T08:15:00Z",
        "pages": 0,
        "changed": 0,
        "unchanged": 0,
        "outcome": "Running",
    }
    assert stored[1]["endedAt"] == "2026-12-02T08:15:00Z"
    assert history_of([*stored, {"id": "x"}, {"id": "y", "startedAt": "z"}, "junk"]) == (
        running,
        cancelled,
    )
    assert history_of(None) == ()


def test_the_file_clock_reads_the_time_a_test_sets_and_never_runs_backwards(
    tmp_path: Path,
) -> None:
    path = tmp_path / "clock"
    clock = schedule_clock(path)
    assert isinstance(clock, FileClock)
    assert clock.now() == datetime.fromtimestamp(0, UTC)  # not written yet
    FileClock.set(path, T0)
    assert clock.now() == T0
    FileClock.set(path, T0 - timedelta(hours=1))
    assert clock.now() == T0
    path.write_text("not a time")
    assert clock.now() == T0
    assert isinstance(schedule_clock(None), SystemClock)
    assert abs(SystemClock().now() - datetime.now(UTC)) < timedelta(minutes=1)
