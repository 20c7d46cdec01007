"""``spec.robots``: whether and how the crawl obeys robots.txt (RFC 9309)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from crawlfleet.crawljob.base import Range, Rule, Section
from crawlfleet.crawljob.fields import DAY_SECONDS

__all__ = ["RobotsSpec"]


class RobotsSpec(Section):
    """robots.txt handling."""

    obey: bool = True
    """Fetch each host's robots.txt and honour it for userAgent: Disallow rules, and a
    Crawl-delay longer than concurrency.hostDelaySeconds."""
    ttl_seconds: Annotated[float, Range(ge=1, le=30 * DAY_SECONDS)] = float(DAY_SECONDS)
    """Seconds a host's robots.txt answer (its rules, or none at all after a 4xx) is used
    before it is fetched again. One fetch serves every worker of the job."""
    error_ttl_seconds: Annotated[float, Range(ge=1, le=DAY_SECONDS)] = 600.0
    """Seconds before robots.txt is asked again after it could not be read (5xx, 429, timeout,
    network error), doubling after each further failure up to an hour (or this, if longer); a
    429 or 503 with Retry-After is asked again after it instead (at least 1 s, at most this).
    Meanwhile the host waits: its URLs stay queued and keep their attempts, or the last good
    robots.txt is obeyed if there was one (RFC 9309)."""
    give_up_after_seconds: Annotated[float, Range(ge=1, le=30 * DAY_SECONDS)] = 3600.0
    """Seconds a host whose robots.txt has never been readable waits before its URLs are given
    up, dead-lettered as robots_unavailable (a real Disallow is robots_disallowed)."""
    max_crawl_delay_seconds: Annotated[float, Range(ge=0, le=3600)] = 60.0
    """Longest robots.txt Crawl-delay (or Request-rate) honoured, in seconds: a longer one is
    cut to this, so one robots.txt cannot stall a host's crawl for hours."""

    cross_field_rules: ClassVar[tuple[Rule[RobotsSpec], ...]] = (
        Rule(
            field="giveUpAfterSeconds",
            message="must be at least errorTtlSeconds: a host is given up only after robots.txt"
            " was asked again at least once",
            cel="self.giveUpAfterSeconds >= self.errorTtlSeconds",
            holds=lambda robots: robots.give_up_after_seconds >= robots.error_ttl_seconds,
            shows=("giveUpAfterSeconds", "errorTtlSeconds"),
        ),
    )
