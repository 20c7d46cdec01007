"""Recurring runs (fleet/runs.py): run ids, due times, what a due time does, the bounded
history; against the real schedule model (cronsim underneath)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from crawlfleet.crawljob.schedule import ScheduleSpec
from crawlfleet.fleet.clock import FileClock, SystemClock, schedule_clock
from crawlfleet.fleet.runs import (
    MAX_MISSED_COUNTED,
    Due,
    Plan,
    RunBook,
    RunRecord,
    due,
    ended,
    history_mapping,
    history_of,
    on_due,
    plan,
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


def every(cron: str, **fields: object) -> ScheduleSpec:
    return ScheduleSpec.model_validate({"cron": cron, **fields})


def test_a_due_time_that_has_not_come_is_nothing() -> None:
    assert due(every("*/15 * * * *"), T0, T0 - timedelta(seconds=1)) is None


def test_due_times_missed_while_nobody_looked_start_one_run_for_the_latest() -> None:
    came = due(every("*/15 * * * *"), T0, T0 + timedelta(minutes=50))
    assert came == Due(T0 + timedelta(minutes=45), 3, T0 + timedelta(minutes=60))
    on_time = due(every("*/15 * * * *"), T0, T0 + timedelta(seconds=3))
    assert on_time == Due(T0, 0, T0 + timedelta(minutes=15))


def test_past_the_missed_count_the_run_is_due_now() -> None:
    now = T0 + timedelta(days=1, seconds=30)
    came = due(every("* * * * *"), T0, now)
    assert came is not None
    assert (came.at, came.missed) == (now, MAX_MISSED_COUNTED)
    assert came.next_at == T0 + timedelta(days=1, minutes=1)


def test_the_first_look_only_reckons_the_next_due_time() -> None:
    decided = plan(every("0 * * * *"), RunBook(), now=T0, suspended=False, workers_gone=True)
    assert decided == Plan(RunBook(next_run_at=T0 + timedelta(minutes=45)))


def test_a_due_time_starts_a_run_once_the_last_runs_workers_are_gone() -> None:
    book = RunBook(next_run_at=T0)
    schedule = every("15 8 * * *")
    waiting = plan(schedule, book, now=T0, suspended=False, workers_gone=False)
    assert waiting == Plan(book)
    started = plan(schedule, book, now=T0, suspended=False, workers_gone=True)
    assert started.start == Due(T0, 0, T0 + timedelta(days=1))
    assert started.book == RunBook(next_run_at=T0 + timedelta(days=1))


def test_forbid_skips_a_due_time_while_a_run_goes_and_counts_it() -> None:
    book = RunBook(T0, "20261202T080000Z", (RunRecord("20261202T080000Z", T0),), skipped=2)
    decided = plan(every("*/15 * * * *"), book, now=T0, suspended=False, workers_gone=False)
    assert decided.skip == Due(T0, 0, T0 + timedelta(minutes=15))
    assert decided.start is None
    assert decided.book.skipped == 3
    assert decided.book.next_run_at == T0 + timedelta(minutes=15)
    assert decided.book.current == "20261202T080000Z"


def test_replace_cancels_the_running_run_and_keeps_its_due_time_for_the_start() -> None:
    book = RunBook(T0, "20261202T080000Z", (RunRecord("20261202T080000Z", T0),))
    schedule = every("*/15 * * * *", concurrencyPolicy="Replace")
    decided = plan(schedule, book, now=T0, suspended=False, workers_gone=False)
    assert decided == Plan(book, cancel="replaced")


def test_suspended_cancels_a_run_and_keeps_no_due_time() -> None:
    book = RunBook(T0, "20261202T080000Z", (RunRecord("20261202T080000Z", T0),))
    decided = plan(every("*/15 * * * *"), book, now=T0, suspended=True, workers_gone=False)
    assert decided.cancel == "suspended"
    assert decided.book.next_run_at is None
    idle = plan(every("*/15 * * * *"), RunBook(T0), now=T0, suspended=True, workers_gone=True)
    assert idle == Plan(RunBook())


def test_the_book_round_trips_through_the_status() -> None:
    running = RunRecord("20261202T081500Z", T0)
    book = RunBook(T0 + timedelta(minutes=15), running.id, (running,), skipped=1)
    stored = book.to_status()
    assert stored["nextRunAt"] == "2026-12-02T08:30:00Z"
    assert RunBook.from_status(stored) == book
    assert book.running == running
    done = ended(running, "Succeeded", T0 + timedelta(minutes=1))
    assert book.ended(done, 10) == RunBook(book.next_run_at, None, (done,), 1)
    assert RunBook.from_status({}) == RunBook()
    assert RunBook.from_status({"nextRunAt": "soon", "runsSkipped": "x"}) == RunBook()
