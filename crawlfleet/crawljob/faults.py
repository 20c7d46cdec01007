"""``spec.retry`` and ``spec.lease``: how a crawl recovers from failed fetches and dead workers.

The three layers of DESIGN §4: a request is retried within its fetch, a URL is fetched again in
a later task (``retry``), and a URL claimed by a worker that hangs or dies comes back to the
queue when its lease expires or its worker stops heartbeating (``lease``).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

from crawlfleet.crawljob.base import Range, Rule, Section
from crawlfleet.crawljob.fields import DAY_SECONDS, DelaySeconds

__all__ = ["LeaseSpec", "RetrySpec"]

_MAX_ATTEMPTS: Final = 100
_Attempts = Annotated[int, Range(ge=1, le=_MAX_ATTEMPTS)]
_Seconds = Annotated[float, Range(gt=0, le=DAY_SECONDS)]


class RetrySpec(Section):
    """Retries at two layers: within one fetch (requests) and across fetches (tasks)."""

    request_attempts: _Attempts = 3
    """HTTP requests per fetch, the first included. Connect errors, timeouts, 5xx and a 429 or
    503 with a short Retry-After are retried within the same fetch, after a backoff."""
    task_attempts: _Attempts = 5
    """Fetches of one URL before it is given up and moved to the dead-letter set. A fetch that
    failed in a retryable way sends its URL back to the frontier for a later attempt."""
    backoff_base_seconds: Annotated[float, Range(ge=0, le=3600)] = 1.0
    """Delay before the first retry, in seconds. Retry n waits backoffBaseSeconds ×
    backoffFactor^(n-1), jittered by ±30% and capped at backoffMaxSeconds."""
    backoff_factor: Annotated[float, Range(ge=1, le=10)] = 1.8
    """How much the retry delay grows from one retry to the next (exponential backoff)."""
    backoff_max_seconds: DelaySeconds = 30.0
    """Longest delay before one retry, in seconds. Also the longest Retry-After a fetch waits
    for itself; a longer one sends the URL back to the frontier to wait there."""

    cross_field_rules: ClassVar[tuple[Rule[RetrySpec], ...]] = (
        Rule(
            field="backoffMaxSeconds",
            message="must be at least backoffBaseSeconds",
            cel="self.backoffMaxSeconds >= self.backoffBaseSeconds",
            holds=lambda retry: retry.backoff_max_seconds >= retry.backoff_base_seconds,
            shows=("backoffMaxSeconds", "backoffBaseSeconds"),
        ),
    )


class LeaseSpec(Section):
    """A worker must heartbeat several times before it can be declared dead or lose a lease."""

    ttl_seconds: Annotated[float, Range(ge=1, le=DAY_SECONDS)] = 60.0
    """Seconds a worker holds a URL it claimed. A lease not completed in time goes back to the
    queue for another worker: this bounds how long a hung worker delays a page."""
    heartbeat_seconds: Annotated[float, Range(ge=0.1, le=3600)] = 5.0
    """How often, in seconds, each worker tells Redis it is alive (with its counters)."""
    dead_after_seconds: _Seconds = 20.0
    """Seconds without a heartbeat after which a worker counts as dead: its leases go back to
    the queue at once, without waiting for ttlSeconds, and its pod is replaced."""

    cross_field_rules: ClassVar[tuple[Rule[LeaseSpec], ...]] = (
        Rule(
            field="heartbeatSeconds",
            message="must be less than deadAfterSeconds",
            cel="self.heartbeatSeconds < self.deadAfterSeconds",
            holds=lambda lease: lease.heartbeat_seconds < lease.dead_after_seconds,
            shows=("heartbeatSeconds", "deadAfterSeconds"),
        ),
        Rule(
            field="heartbeatSeconds",
            message="must be less than ttlSeconds",
            cel="self.heartbeatSeconds < self.ttlSeconds",
            holds=lambda lease: lease.heartbeat_seconds < lease.ttl_seconds,
            shows=("heartbeatSeconds", "ttlSeconds"),
        ),
    )
