"""``spec.schedule``: run the job again and again, at the times a cron schedule names.

The schedule is read by cronsim, the parser Healthchecks (a cron monitoring service) is built
on: pure Python, no dependencies, and written to match Debian's cron, its quirks at daylight
saving changes included (a job at 02:30 on the night that skips 02:00-03:00 runs at 03:00; on
the night 01:00-02:00 happens twice, once). croniter, the other candidate, was declared
abandoned by its maintainers in 2025 before being taken over, and pulls in python-dateutil.
Five fields only (cronsim also takes a sixth, seconds, which Kubernetes' CronJob and Debian's
cron do not), with Kubernetes' macros (``@hourly`` ... ``@yearly``) expanded here: cronsim has
none.

The time zone is an IANA name read by ``zoneinfo``, from the ``tzdata`` package when the system
has no zone files (slim images do not). The API server can only check the shape of either
field; whether a cron string parses and whether a zone exists is said by ``crawlfleet validate``
and by the operator (``InvalidSpec``), with the field named.

Runs of one CrawlJob share the job's one frontier (its queues, leases, Bloom filter and revisit
state), so two cannot run at once: ``concurrencyPolicy: Allow`` is refused at admission, and the
name stays in the vocabulary only so that a user coming from CronJob is told why.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Annotated, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import AfterValidator

from crawlfleet.crawljob.base import Cel, Range, Section
from crawlfleet.crawljob.fields import CRON_SCHEDULE, TIME_ZONE
from crawlfleet.crawljob.validation import problem, show

__all__ = [
    "DEFAULT_HISTORY_LIMIT",
    "ConcurrencyPolicy",
    "ScheduleSpec",
]

#: What a run that comes due while the last one still runs does: Forbid skips it (an Event
#: says so), Replace stops the running one (it commits nothing) and starts; Allow is refused.
ConcurrencyPolicy = Literal["Forbid", "Replace", "Allow"]
DEFAULT_HISTORY_LIMIT: Final = 10
_MAX_HISTORY_LIMIT: Final = 100  # runs kept in status: each a few hundred bytes of the object

# Kubernetes' CronJob macros (robfig/cron's), as five fields.
_MACROS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELD_COUNT: Final = 5
# A schedule must fire from any start: cronsim gives up after 50 years without a match.
_PROBE_START: Final = datetime(2000, 1, 1, tzinfo=UTC)
_ALLOW_REFUSED: Final = (
    "must be Forbid or Replace: the runs of one CrawlJob share its frontier, so two cannot run"
    " at once (make a second CrawlJob for a second crawl)"
)


def _five_fields(cron: str) -> str:
    """``cron`` as the five fields cronsim reads, a macro expanded; refused when it has not five."""
    if cron.startswith("@"):
        if cron not in _MACROS:
            known = ", ".join(_MACROS)
            raise problem(f"must be a known macro ({known}) (got {show(cron)})")
        return _MACROS[cron]
    if len(cron.split()) != _FIELD_COUNT:
        raise problem(
            "must have five fields (minute hour day-of-month month day-of-week); seconds are"
            f" not supported (got {show(cron)})"
        )
    return cron


@lru_cache(maxsize=256)
def _expression(cron: str) -> str:
    """The five fields of a schedule already validated (remembered: read on every tick)."""
    return _MACROS.get(cron, cron)


def _cron(cron: str) -> str:
    fields = _five_fields(cron)
    try:
        schedule = CronSim(fields, _PROBE_START)
        next(schedule)
    except CronSimError as error:
        reason = str(error).lower() or "it does not parse"
        raise problem(f"is not a valid cron schedule: {reason} field (got {show(cron)})") from None
    except StopIteration:
        raise problem(f"must fire at some time: this one never does (got {show(cron)})") from None
    return cron


def _time_zone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise problem(
            f"must be an IANA time zone name such as UTC or Europe/Berlin: no zone is called"
            f" {show(name)}"
        ) from None
    return name


def _concurrency_policy(policy: ConcurrencyPolicy) -> ConcurrencyPolicy:
    if policy == "Allow":
        raise problem(f"{_ALLOW_REFUSED} (got {show(policy)})")
    return policy


class ScheduleSpec(Section):
    """When the job runs again: a cron schedule in a time zone, one run at a time."""

    cron: Annotated[str, CRON_SCHEDULE, AfterValidator(_cron)]
    """When a run starts: five fields, minute hour day-of-month month day-of-week, with ranges
    (1-5), steps (*/15), lists (1,15) and names (MON-FRI, JAN), as in a Kubernetes CronJob; or
    a macro: @hourly, @daily (@midnight), @weekly, @monthly, @yearly (@annually)."""
    time_zone: Annotated[str, TIME_ZONE, AfterValidator(_time_zone)] = "UTC"
    """The IANA time zone the schedule's times are in, such as Europe/Berlin. Across a daylight
    saving change a run goes as Debian's cron runs it: a skipped time runs when the clock
    resumes, a repeated hour runs once."""
    concurrency_policy: Annotated[
        ConcurrencyPolicy,
        AfterValidator(_concurrency_policy),
        Cel("self != 'Allow'", _ALLOW_REFUSED),
    ] = "Forbid"
    """What happens when a run comes due while the last one is still running: Forbid skips the
    new run (an Event says so); Replace cancels the running one (it commits nothing) and starts
    the new one. Allow is refused: runs share the job's frontier."""
    history_limit: Annotated[int, Range(ge=1, le=_MAX_HISTORY_LIMIT)] = DEFAULT_HISTORY_LIMIT
    """How many of the latest runs status.runs keeps (start, end, pages, changed, outcome)."""

    def next_run(self, after: datetime) -> datetime:
        """The first start time strictly after ``after`` (aware), in UTC."""
        if after.tzinfo is None:
            raise ValueError("next_run needs an aware datetime")
        local = after.astimezone(ZoneInfo(self.time_zone))
        started: datetime = next(CronSim(_expression(self.cron), local))
        return started.astimezone(UTC)
