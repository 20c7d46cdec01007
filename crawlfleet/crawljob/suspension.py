"""``spec.suspendExpiry``: how long a suspended job may stay suspended, and what then.

A pause is for a while (a site asked for a break, the team looks at the output before going
on); a paused crawl nobody comes back to holds its Redis and its volume forever. Browsertrix
pauses with a seven-day expiry; here the expiry is the user's, and so is its outcome: the job
resumes by itself, or it fails (its frontier kept until the job is deleted, as any failed
job's). The clock starts when the steering tick first sees the job suspended
(``status.fleet.suspendedSince``; ``state.json`` locally), and stops when it is resumed.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field

from crawlfleet.crawljob.base import Section
from crawlfleet.crawljob.durations import DurationRange, format_duration

__all__ = [
    "DEFAULT_RATE_LIMITED_SECONDS",
    "DEFAULT_SUSPEND_EXPIRY_SECONDS",
    "AutoPauseSpec",
    "SuspendExpirySpec",
    "SuspendOutcome",
]

#: Browsertrix's: a week.
DEFAULT_SUSPEND_EXPIRY_SECONDS: Final = 7 * 24 * 3600.0
_MAX_SECONDS: Final = 365 * 24 * 3600.0
#: Browsertrix's: twelve hours of rate limiting.
DEFAULT_RATE_LIMITED_SECONDS: Final = 12 * 3600.0

SuspendOutcome = Literal["Resume", "Fail"]


class SuspendExpirySpec(Section):
    """When a suspended job stops waiting (``spec.suspend`` stays as written: the job's
    status says the suspension expired)."""

    after: Annotated[float, DurationRange(ge=1.0, le=_MAX_SECONDS)] = Field(
        # written as the YAML would write it (the CRD's default), validated into seconds
        default=format_duration(DEFAULT_SUSPEND_EXPIRY_SECONDS),
        validate_default=True,
    )
    """How long the job may stay suspended, as a Go duration (`168h`), counted from when the
    operator (or `crawlfleet run`) first saw it suspended."""
    then: SuspendOutcome = "Resume"
    """What happens then: `Resume` crawls on as if `suspend` were false; `Fail` ends the job
    with phase Failed (reason SuspendExpired)."""


class AutoPauseSpec(Section):
    """When a job pauses itself instead of spinning: every fetch pushed back by its sites (429
    Too Many Requests, 403, an empty page) for a while, with no page coming through. The job
    then waits with 0 workers (phase Suspended, reason RateLimited), its frontier kept."""

    rate_limited_for: Annotated[float, DurationRange(ge=1.0, le=_MAX_SECONDS)] = Field(
        default=format_duration(DEFAULT_RATE_LIMITED_SECONDS), validate_default=True
    )
    """How long every fetch must have been pushed back, as a Go duration (`12h`, Browsertrix's
    figure), before the job pauses."""
    resume_after: Annotated[float, DurationRange(ge=1.0, le=_MAX_SECONDS)] | None = None
    """Try again by itself this long after pausing (the clock of rateLimitedFor starts again).
    Unset: the job stays paused until someone resumes it (spec.suspend true, then false)."""
