"""Recurring runs of a scheduled CrawlJob (DESIGN §10), for the operator and ``crawlfleet run``.

A job with ``spec.schedule`` runs again and again. Between runs it waits (phase ``Scheduled``,
no workers) for its next due time; at a due time a run starts from the job's seeds and the
state its last *successful* run committed (``Frontier.begin_run``), is steered as any job is,
and on completion commits its state (``Frontier.commit_run``) and is recorded in a bounded
history. A run that fails or is cancelled (suspended, or replaced) commits nothing.

What is decided here, from the schedule, the time and whether a run is going:

* **Due times.** :func:`due` walks the schedule from the remembered next due time to now.
  Several due times may have passed unseen (the operator was down, the machine asleep): as
  Kubernetes' CronJob controller does, one run starts, for the latest of them, and the others
  are counted as missed (an Event says how many), never run one after another. CronJob stops
  counting at 100 and then refuses to start anything unless ``startingDeadlineSeconds`` is
  set; here the count stops at :data:`MAX_MISSED_COUNTED` and the run starts anyway (its id
  then is the time it started), because a crawl that is late is still wanted. There is no
  starting deadline: a missed due time is always made up, once.
* **A due time while a run is going** (:func:`on_due`): ``Forbid`` (the default) skips it (a
  RunSkipped Event, counted in ``status.runsSkipped``), as Browsertrix skips a scheduled crawl
  while the last one still runs; ``Replace`` cancels the running run (it commits nothing) and
  starts the new one once the old workers are gone; ``Allow`` is refused at admission by the
  spec (two runs would share one frontier), so it is never seen here.
* **Run ids** sort by time: the due time as ``20261202T081500Z``, which is also the run's
  output prefix (``<destination>/runs/<run-id>/``).
* **History**: :class:`RunRecord`, newest first, at most ``historyLimit`` entries, the running
  run's entry first with outcome ``Running``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol

__all__ = [
    "MAX_MISSED_COUNTED",
    "RUN_ID_FORMAT",
    "Due",
    "Outcome",
    "Plan",
    "RunBook",
    "RunRecord",
    "Schedule",
    "due",
    "ended",
    "history_mapping",
    "history_of",
    "on_due",
    "plan",
    "remember",
    "run_id",
]

#: A run's id: its due time in UTC, to the second, in a form that sorts as time does.
RUN_ID_FORMAT: Final = "%Y%m%dT%H%M%SZ"
#: Missed due times counted before the count stops (Kubernetes' CronJob counts 100).
MAX_MISSED_COUNTED: Final = 100

Outcome = Literal["Running", "Succeeded", "Failed", "Cancelled"]
ConcurrencyPolicy = Literal["Forbid", "Replace", "Allow"]
DueAction = Literal["start", "skip", "replace"]


class Schedule(Protocol):
    """What of ``spec.schedule`` (crawlfleet.crawljob.schedule.ScheduleSpec) is read here."""

    @property
    def concurrency_policy(self) -> ConcurrencyPolicy: ...

    def next_run(self, after: datetime) -> datetime:
        """The first due time strictly after ``after`` (aware, UTC)."""
        ...


def run_id(moment: datetime) -> str:
    """The id of the run due at ``moment``: sortable, and a plain folder name."""
    return moment.astimezone(UTC).strftime(RUN_ID_FORMAT)


@dataclass(frozen=True, slots=True)
class Due:
    """Due times that have come: a run starts for ``at``."""

    #: The latest due time not after now: the run this is for.
    at: datetime
    #: Earlier due times passed over unseen (the operator down, the machine asleep).
    missed: int
    #: The first due time after now: the next one to wait for.
    next_at: datetime


def due(schedule: Schedule, next_at: datetime, now: datetime) -> Due | None:
    """The due times that have come by ``now``, ``next_at`` being the first not acted on.

    None: ``next_at`` is still ahead. Past :data:`MAX_MISSED_COUNTED` missed due times the
    walk stops, and the run is due at ``now`` (its id is then the time it starts).
    """
    if now < next_at:
        return None
    at, missed = next_at, 0
    while True:
        following = schedule.next_run(at)
        if following > now:
            return Due(at, missed, following)
        if missed >= MAX_MISSED_COUNTED:
            return Due(now, missed, schedule.next_run(now))
        at, missed = following, missed + 1


def on_due(policy: ConcurrencyPolicy, *, running: bool) -> DueAction:
    """What a due time does: start a run, or, one running, skip it (Forbid) or replace it."""
    if not running:
        return "start"
    return "replace" if policy == "Replace" else "skip"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run of a scheduled job, as ``status.runs`` (and ``crawlfleet run``) keeps it."""

    id: str
    started_at: datetime
    ended_at: datetime | None = None
    #: Pages fetched and done in the run (new, changed and unchanged alike).
    pages: int = 0
    #: Tracked pages whose content changed since the last run, and those that did not (a
    #: 304 Not Modified included).
    changed: int = 0
    unchanged: int = 0
    outcome: Outcome = "Running"

    def to_mapping(self) -> dict[str, Any]:
        """The camelCase entry of ``status.runs``."""
        entry: dict[str, Any] = {
            "id": self.id,
            "startedAt": _rfc3339(self.started_at),
            "pages": self.pages,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "outcome": self.outcome,
        }
        if self.ended_at is not None:
            entry["endedAt"] = _rfc3339(self.ended_at)
        return entry

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> RunRecord | None:
        """An entry as stored; None for one that does not parse (another version's)."""
        try:
            outcome = raw.get("outcome", "Running")
            if outcome not in ("Running", "Succeeded", "Failed", "Cancelled"):
                return None
            ended = raw.get("endedAt")
            return cls(
                id=str(raw["id"]),
                started_at=_parse_time(str(raw["startedAt"])),
                ended_at=None if ended is None else _parse_time(str(ended)),
                pages=int(raw.get("pages", 0)),
                changed=int(raw.get("changed", 0)),
                unchanged=int(raw.get("unchanged", 0)),
                outcome=outcome,
            )
        except (KeyError, TypeError, ValueError):
            return None


def ended(
    record: RunRecord,
    outcome: Outcome,
    at: datetime,
    *,
    pages: int | None = None,
    changed: int | None = None,
    unchanged: int | None = None,
) -> RunRecord:
    """``record`` ended with ``outcome`` at ``at``; counts given replace the ones it has."""
    return replace(
        record,
        outcome=outcome,
        ended_at=at,
        pages=record.pages if pages is None else pages,
        changed=record.changed if changed is None else changed,
        unchanged=record.unchanged if unchanged is None else unchanged,
    )


def remember(history: Sequence[RunRecord], record: RunRecord, limit: int) -> tuple[RunRecord, ...]:
    """The history with ``record`` in it, newest first, at most ``limit`` entries: an entry
    of the same id (the running run's) is replaced, not repeated."""
    others = [entry for entry in history if entry.id != record.id]
    return tuple(sorted([record, *others], key=lambda entry: entry.id, reverse=True)[:limit])


def history_of(raw: object) -> tuple[RunRecord, ...]:
    """``status.runs`` as records (entries that do not parse are left out)."""
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        return ()
    found = (RunRecord.from_mapping(entry) for entry in raw if isinstance(entry, Mapping))
    return tuple(entry for entry in found if entry is not None)


def history_mapping(history: Sequence[RunRecord]) -> list[dict[str, Any]]:
    return [entry.to_mapping() for entry in history]


@dataclass(frozen=True, slots=True)
class RunBook:
    """A scheduled job's runs, as its status (or ``crawlfleet run``'s state.json) keeps them:
    durable, so an operator restart goes on with the run it was steering."""

    #: The next due time to act on (None: not computed yet, or suspended).
    next_run_at: datetime | None = None
    #: The id of the run going now (None: between runs).
    current: str | None = None
    #: The last runs, newest first (the running one's entry included).
    history: tuple[RunRecord, ...] = ()
    #: Due times skipped because a run was still going (Forbid).
    skipped: int = 0

    @property
    def running(self) -> RunRecord | None:
        """The entry of the run going now."""
        return next((entry for entry in self.history if entry.id == self.current), None)

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> RunBook:
        """The book as ``status`` (camelCase) holds it; what does not parse is left out."""
        next_at = status.get("nextRunAt")
        try:
            next_run_at = None if not next_at else _parse_time(str(next_at))
        except ValueError:
            next_run_at = None
        current = status.get("currentRun")
        skipped = status.get("runsSkipped")
        return cls(
            next_run_at,
            current if isinstance(current, str) and current else None,
            history_of(status.get("runs")),
            skipped if isinstance(skipped, int) else 0,
        )

    def to_status(self) -> dict[str, Any]:
        """The status fields (explicit nulls: a merge patch keeps what it is not told to drop)."""
        return {
            "nextRunAt": None if self.next_run_at is None else _rfc3339(self.next_run_at),
            "currentRun": self.current,
            "runs": history_mapping(self.history),
            "runsSkipped": self.skipped,
        }

    def started(self, record: RunRecord, limit: int) -> RunBook:
        return replace(self, current=record.id, history=remember(self.history, record, limit))

    def ended(self, record: RunRecord, limit: int) -> RunBook:
        """``record`` (the running run's entry, ended) is history; no run is going."""
        current = None if record.id == self.current else self.current
        return replace(self, current=current, history=remember(self.history, record, limit))


@dataclass(frozen=True, slots=True)
class Plan:
    """What one look at the schedule decided; the caller applies it (crawlfleet.fleet.recurring)."""

    book: RunBook
    #: Start a run now for this due time (begin_run, the seeds queued again).
    start: Due | None = None
    #: Cancel the running run (suspended, or replaced): it commits nothing.
    cancel: Literal["suspended", "replaced"] | None = None
    #: A due time skipped because a run is going (Forbid).
    skip: Due | None = None


def plan(
    schedule: Schedule,
    book: RunBook,
    *,
    now: datetime,
    suspended: bool,
    workers_gone: bool,
) -> Plan:
    """What to do now about the schedule, given the book and whether any worker is left.

    Suspended: a running run is cancelled, and no due time is kept (the next one is
    reckoned from the moment the job resumes: a suspension's due times are not made up).
    A run starts only once no worker of the last one is left (they drain, with the last
    run's output prefix); until then its due time waits, as a replaced run's does.
    """
    if suspended:
        cancel: Literal["suspended"] | None = "suspended" if book.current is not None else None
        return Plan(replace(book, next_run_at=None), cancel=cancel)
    if book.next_run_at is None:
        return Plan(replace(book, next_run_at=schedule.next_run(now)))
    came = due(schedule, book.next_run_at, now)
    if came is None:
        return Plan(book)
    action = on_due(schedule.concurrency_policy, running=book.current is not None)
    if action == "skip":
        return Plan(replace(book, next_run_at=came.next_at, skipped=book.skipped + 1), skip=came)
    if action == "replace":
        return Plan(book, cancel="replaced")
    if not workers_gone:
        return Plan(book)
    return Plan(replace(book, next_run_at=came.next_at), start=came)


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
