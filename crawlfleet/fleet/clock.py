"""The wall clock a job's schedule is read against, and the test double that stands in for it.

A schedule says "08:15 every day"; nothing in a test can wait for that. Both callers of the
schedule (the operator's tick and ``crawlfleet run``) ask a :class:`Clock` for the time instead
of :func:`datetime.now`, so a test can move time forward in one step and watch a run start.
The double reads the time from a file (``CRAWLFLEET_SCHEDULE_CLOCK_FILE``): the operator and
``crawlfleet run`` under test are separate processes, and a file is the one thing the test and
they can both see. Nothing else is faked: the runs it starts are real.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

__all__ = ["Clock", "FileClock", "SystemClock", "schedule_clock"]


class Clock(Protocol):
    """Where the time of day comes from."""

    def now(self) -> datetime:
        """The time now, aware, in UTC."""
        ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FileClock:
    """A test double of the wall clock: the time is the ISO 8601 text in ``path``.

    A file not written yet, or caught half-written, reads as the last time it gave (the
    epoch before the first): time never runs backwards for the caller.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last = datetime.fromtimestamp(0, UTC)

    def now(self) -> datetime:
        try:
            moment = datetime.fromisoformat(self.path.read_text().strip())
        except (OSError, ValueError):
            return self._last
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        self._last = max(self._last, moment.astimezone(UTC))
        return self._last

    @staticmethod
    def set(path: Path, moment: datetime) -> None:
        """Move the clock of ``path`` to ``moment`` (written whole: a reader never sees half)."""
        partial = path.with_suffix(path.suffix + ".partial")
        partial.write_text(moment.astimezone(UTC).isoformat())
        partial.replace(path)


def schedule_clock(clock_file: Path | None) -> Clock:
    """The clock a process reads its schedules against: the double when a file is named."""
    return SystemClock() if clock_file is None else FileClock(clock_file)
