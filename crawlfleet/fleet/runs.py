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
    "RunRecord",
    "Schedule",
    "due",
    "ended",
    "history_mapping",
    "history_of",
    "on_due",
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


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
