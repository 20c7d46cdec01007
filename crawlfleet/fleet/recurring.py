"""A scheduled job's runs applied: begun, seeded, skipped, cancelled, committed, each said.

:func:`crawlfleet.fleet.runs.plan` decides from the schedule, the time and the book of runs;
this applies the decision to the job's frontier and fleet, the same way for the operator and
``crawlfleet run`` (as :mod:`crawlfleet.fleet.steer` does for a tick):

* a run **starts** with ``Frontier.begin_run`` (the transient state of the last run dropped,
  the dedup filter and revisit schedule of the last *successful* one restored), then its seeds
  queued again with ``Frontier.seed(..., every_run=True)`` (whatever the restored filter says;
  a tracked seed is made due instead), and a ``RunStarted`` Event; the caller then steers it
  as any job, with its fleet memory started afresh;
* a run that **completes** calls ``Frontier.commit_run`` (its state is what the next run
  starts from) and is recorded ``Succeeded``; one that **fails**, or is **cancelled**
  (suspended, or replaced under ``concurrencyPolicy: Replace``), commits nothing: the next run
  starts from the last committed state, and pages it crawled are crawled again;
* a due time **skipped** (Forbid: the last run still going) is a ``RunSkipped`` Event and a
  count in the book.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal, Protocol

from crawlfleet.fleet.backend import FleetBackend, FleetEvent
from crawlfleet.fleet.policy import FleetMemory
from crawlfleet.fleet.runs import Due, RunBook, RunRecord, Schedule, ended, plan, run_id
from crawlfleet.fleet.steer import Seeds
from crawlfleet.frontier import Frontier, FrontierStats

__all__ = ["RecurringSchedule", "Step", "fresh_memory", "run_ended", "start_now", "step"]


class RecurringSchedule(Schedule, Protocol):
    """``spec.schedule`` as read here: the plan's view of it, and its history limit."""

    @property
    def history_limit(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Step:
    """What one look at the schedule did."""

    book: RunBook
    #: The run that started now (its frontier is begun and seeded): the caller starts its
    #: fleet memory afresh (:func:`fresh_memory`) and steers it.
    started: RunRecord | None = None
    #: The Events of this look, recorded already; callers echo them (the local run prints
    #: them).
    news: tuple[FleetEvent, ...] = ()


async def step(
    frontier: Frontier,
    backend: FleetBackend,
    schedule: RecurringSchedule,
    book: RunBook,
    *,
    now: datetime,
    suspended: bool,
    workers_gone: bool,
    seeds: Seeds,
) -> Step:
    """Look at the schedule once and apply what it says (no Redis call when nothing is due)."""
    decided = plan(schedule, book, now=now, suspended=suspended, workers_gone=workers_gone)
    book = decided.book
    limit = schedule.history_limit
    news: list[FleetEvent] = []
    if decided.cancel is not None and book.current is not None:
        book, cancelled = await _cancel(frontier, backend, book, decided.cancel, now, limit)
        news.append(cancelled)
    if decided.skip is not None:
        news.append(
            FleetEvent(
                "RunSkipped",
                f"the run due at {_shown(decided.skip.at)} is skipped: run {book.current} is"
                " still going (concurrencyPolicy Forbid); next due at"
                f" {_shown(decided.skip.next_at)}",
                fields={
                    "due": run_id(decided.skip.at),
                    "running": book.current or "",
                    "skipped": book.skipped,
                },
            )
        )
        await backend.record(news[-1])
    if decided.start is None:
        return Step(book, news=tuple(news))
    record, started = await _begin(frontier, backend, decided.start, seeds, now=now)
    return Step(book.started(record, limit), record, (*news, started))


async def start_now(
    frontier: Frontier,
    backend: FleetBackend,
    schedule: RecurringSchedule,
    book: RunBook,
    *,
    now: datetime,
    seeds: Seeds,
) -> Step:
    """Start a run now, whatever the schedule says (``crawlfleet run --once``)."""
    came = Due(now, 0, schedule.next_run(now))
    record, started = await _begin(frontier, backend, came, seeds, now=now)
    return Step(book.started(record, schedule.history_limit), record, (started,))


async def run_ended(
    frontier: Frontier,
    backend: FleetBackend,
    schedule: RecurringSchedule,
    book: RunBook,
    stats: FrontierStats | None,
    *,
    outcome: Literal["Succeeded", "Failed"],
    now: datetime,
) -> RunBook:
    """The running run ended: committed (Succeeded) or not (Failed), and recorded."""
    if book.current is None:
        return book
    if outcome == "Succeeded":
        await frontier.commit_run(book.current)
    record = _with_counts(book.running or RunRecord(book.current, now), outcome, stats, now)
    book = book.ended(record, schedule.history_limit)
    if outcome == "Succeeded":
        message = (
            f"run {record.id} complete: {record.pages} pages, {record.changed} changed,"
            f" {record.unchanged} unchanged; its state is what the next run starts from"
        )
    else:
        message = (
            f"run {record.id} failed after {record.pages} pages: it commits nothing, the next"
            " run starts from the last successful run's state"
        )
    fields: dict[str, str | int | float] = {
        "run": record.id,
        "pages": record.pages,
        "changed": record.changed,
        "unchanged": record.unchanged,
    }
    reason: Literal["RunSucceeded", "RunFailed"] = (
        "RunSucceeded" if outcome == "Succeeded" else "RunFailed"
    )
    await backend.record(FleetEvent(reason, message, warning=outcome == "Failed", fields=fields))
    return book


def fresh_memory(memory: FleetMemory, seeds_hash: str | None) -> FleetMemory:
    """The fleet memory a new run starts with: the frontier's identity and the worker count
    kept, every clock of the last run (its idle time above all: it would complete the new
    run at once) forgotten, and its seed list marked queued."""
    return replace(
        FleetMemory(replicas=memory.replicas),
        frontier_epoch=memory.frontier_epoch,
        seeds_hash=seeds_hash,
    )


async def _begin(
    frontier: Frontier, backend: FleetBackend, came: Due, seeds: Seeds, *, now: datetime
) -> tuple[RunRecord, FleetEvent]:
    run = run_id(came.at)
    start = await frontier.begin_run(run)
    urls = list(await seeds() if callable(seeds) else seeds)
    queued = await frontier.seed(urls, every_run=True)
    origin = (
        f"the state of run {start.restored_from} ({start.tracked} tracked URLs)"
        if start.restored_from is not None
        else "nothing kept (no run has succeeded yet)"
    )
    message = f"run {run} started from {origin}; {queued} seed URL(s) queued"
    if came.missed:
        message += (
            f"; {came.missed} earlier due time(s) passed unseen (the operator or the machine"
            " was down): this one run makes up for them"
        )
    event = FleetEvent(
        "RunStarted",
        message,
        warning=came.missed > 0,
        fields={"run": run, "seeds": queued, "missed": came.missed},
    )
    await backend.record(event)
    return RunRecord(run, now), event


async def _cancel(
    frontier: Frontier,
    backend: FleetBackend,
    book: RunBook,
    why: Literal["suspended", "replaced"],
    now: datetime,
    limit: int,
) -> tuple[RunBook, FleetEvent]:
    """Stop the running run's workers and record it Cancelled; nothing of it is committed."""
    assert book.current is not None
    stats = await frontier.stats()
    record = _with_counts(book.running or RunRecord(book.current, now), "Cancelled", stats, now)
    await backend.scale(0)
    because = (
        "the job was suspended"
        if why == "suspended"
        else "the next run was due (concurrencyPolicy Replace)"
    )
    event = FleetEvent(
        "RunCancelled",
        f"run {record.id} cancelled after {record.pages} pages: {because}; it commits"
        " nothing, the next run starts from the last successful run's state",
        warning=True,
        fields={"run": record.id, "pages": record.pages, "why": why},
    )
    await backend.record(event)
    return book.ended(record, limit), event


def _with_counts(
    record: RunRecord,
    outcome: Literal["Succeeded", "Failed", "Cancelled"],
    stats: FrontierStats | None,
    now: datetime,
) -> RunRecord:
    if stats is None:
        return ended(record, outcome, now)
    return ended(
        record,
        outcome,
        now,
        pages=stats.crawled,
        changed=stats.changed,
        unchanged=stats.unchanged + stats.not_modified,
    )


def _shown(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
