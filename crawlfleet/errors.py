"""The one exception tree of crawlfleet.

::

    CrawlfleetError
    ├── ConfigError            a CrawlJob or setting is invalid (names the field)
    ├── FrontierError          the Redis protocol refused or failed
    │   ├── InvalidURL         not an absolute http(s) URL; nothing was written
    │   │   └── UnsupportedScheme  an absolute URL, but not http or https
    │   ├── FrontierUnavailable  Redis could not be reached or answered with an error
    │   │   ├── FrontierFull     Redis refused a write: used memory is past maxmemory
    │   │   ├── NotReplicated    fewer replicas than asked confirmed writes within the wait
    │   │   └── PartitionsUnavailable  some frontier partitions did not answer; others did
    │   ├── FrontierLost       the job's frontier is gone from Redis, or was re-created
    │   ├── FrontierLayoutMismatch  the frontier was written by another layout version
    │   └── UnsafeRedis        Redis is configured so it could drop frontier keys
    │       └── RedisTooSmall  the job's Bloom filter would not fit its free memory
    ├── FetchError             a URL could not be fetched (carries a failure class)
    ├── KubeError              the Kubernetes API answered with an error status
    ├── OutputError            the output destination cannot be used (found at start)
    │   └── OutputUnavailable  the destination failed for now (the sink retries, never drops)
    │       └── OutputWriteError  a batch could not be spooled (a full disk): kept, retried
    └── ZygoteError            the local runner's worker zygote is gone or did not answer

Foreign errors (redis, httpx, aiohttp) are translated once, at the module that talks to them,
with ``raise ... from`` so the cause stays visible. The operator's kopf handlers then turn
them into kopf's decisions on purpose: a Kubernetes 429 or 5xx, or a frontier that cannot be
reached, is ``kopf.TemporaryError(delay=...)``, retried soon; never an unhandled traceback.
A lease the caller no longer owns is not an error: ``ack``, ``fail`` and ``release`` answer
per lease (fencing is an outcome). This module imports nothing, so the zygote (which starts
before anything heavy) can use it.

Each class names its ``reason``: one CamelCase word for what went wrong, the reason of the
condition or Event that reports it. A worker that refuses to start writes it before its
sentence in its termination message (:mod:`crawlfleet.fleet.exits`), so the operator's
``WorkersFailing`` condition says ``OutputUnavailable`` and not just "exit code 2".
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CrawlfleetError",
    "FetchError",
    "FrontierError",
    "FrontierFull",
    "FrontierLayoutMismatch",
    "FrontierLost",
    "FrontierUnavailable",
    "InvalidURL",
    "KubeError",
    "NotReplicated",
    "OutputError",
    "OutputUnavailable",
    "OutputWriteError",
    "PartitionsUnavailable",
    "RedisTooSmall",
    "UnsafeRedis",
    "UnsupportedScheme",
    "ZygoteError",
]


class CrawlfleetError(Exception):
    """Base of every error crawlfleet raises on purpose."""

    #: What went wrong, as a condition's or an event's reason (CamelCase, no spaces).
    reason: str = "Failed"


class ConfigError(CrawlfleetError, ValueError):
    """A CrawlJob spec or setting is invalid; the message names the field."""

    reason = "InvalidConfig"


class FrontierError(CrawlfleetError):
    """The frontier refused an operation or could not perform it."""

    reason = "FrontierError"


class InvalidURL(FrontierError, ValueError):
    """A URL is not an absolute http(s) URL and was refused before anything was written."""


class UnsupportedScheme(InvalidURL):
    """An absolute URL whose scheme is not http or https: nothing else is crawled."""


class FrontierUnavailable(FrontierError):
    """Redis could not be reached, or answered with an error the frontier cannot handle."""

    reason = "RedisUnavailable"


class FrontierFull(FrontierUnavailable):
    """Redis refused a write because its used memory is past ``maxmemory`` (noeviction).

    A FrontierUnavailable, so a caller that waits out an outage waits this out too; the
    frontier's own scripts that free memory (ack, fail, release, requeue) are never refused.
    """


class PartitionsUnavailable(FrontierUnavailable):
    """Some partitions of a job's frontier did not answer; the others did (``frontier.shards``
    past 1, DESIGN §7).

    ``partitions`` are the indexes that failed (0 is the home). ``answered`` carries what the
    other partitions replied, in the call's order, None where a reply is missing: a caller
    that can use half an answer (a worker admitting a batch's links spools the missing ones
    and goes on) takes it; any other treats this as FrontierUnavailable and retries the call,
    which each partition that applied it answers with its first reply.
    """

    reason = "PartitionUnavailable"

    def __init__(
        self,
        message: str,
        *,
        partitions: tuple[int, ...],
        answered: tuple[object | None, ...] = (),
    ) -> None:
        super().__init__(message)
        self.partitions = partitions
        self.answered = answered


class NotReplicated(FrontierUnavailable):
    """Fewer replicas than asked confirmed the node's writes within the wait (``WAIT``).

    The writes are on the master but could still be lost with it in a failover, so whatever
    depended on them (a parent page's ack, after its links were enqueued) must not happen
    yet: the caller keeps its lease and waits again later, as for any unavailable Redis. A
    later wait covers these writes too (it waits for everything the node wrote before it).
    """

    reason = "NotReplicated"

    def __init__(self, message: str, *, wanted: int, acknowledged: int) -> None:
        super().__init__(message)
        self.wanted = wanted
        self.acknowledged = acknowledged


class FrontierLost(FrontierError):
    """The job's frontier is no longer in Redis as this process knew it.

    Redis came back empty, the job's meta key is gone, or the frontier was re-created under
    another epoch. Never retried by waiting: the queues, leases and Bloom filter it held are
    gone, and only an explicit decision (fail the job, or re-seed it) may follow.
    """

    reason = "FrontierLost"


class FrontierLayoutMismatch(FrontierError):
    """The job's keys were written by a crawlfleet with another key layout; nothing is read."""


class UnsafeRedis(FrontierError):
    """Redis is configured in a way that could drop frontier keys silently (an evicting
    ``maxmemory-policy``); the message names the setting and the fix."""

    reason = "UnsafeRedis"


class RedisTooSmall(UnsafeRedis):
    """The job's Bloom filter would not fit the Redis's free memory (its ``maxmemory``): the
    frontier is not created there, rather than its first writes pushing Redis past its
    memory; the message gives both figures."""

    reason = "RedisTooSmall"


class FetchError(CrawlfleetError):
    """A fetch failed; ``failure_class`` says why and decides whether it is retried."""

    def __init__(self, failure_class: str, message: str) -> None:
        super().__init__(f"{failure_class}: {message}")
        self.failure_class = failure_class
        self.message = message


class KubeError(CrawlfleetError):
    """A Kubernetes API call answered with an error status.

    ``status`` is the HTTP code (0: no answer came at all); ``retry_after_seconds`` the
    server's Retry-After, if any. ``transient`` says whether waiting and asking again can
    help (throttling, a server error, no answer).
    """

    def __init__(
        self,
        status: int,
        method: str,
        path: str,
        message: str,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status
        self.retry_after_seconds = retry_after_seconds

    @property
    def transient(self) -> bool:
        return self.status in (0, 429) or self.status >= 500


class OutputError(CrawlfleetError):
    """The output destination refused or could not be reached; the message is one sentence
    that names the destination (never its credentials) and what to fix."""

    reason = "OutputUnavailable"


class OutputUnavailable(OutputError):
    """A write to the destination failed in a way that may pass (a 5xx, a refused connection,
    a full disk); the sink keeps the file and retries, and acks nothing meanwhile."""


class OutputWriteError(OutputUnavailable):
    """A batch of records could not be written into the worker's spool file (ENOSPC, EDQUOT,
    EIO, ...). Nothing of the batch stays in any file (the sink cuts each file back to its last
    whole batch); the caller keeps the batch and writes it again after the sink's backoff.

    ``errno_name`` (``ENOSPC``) is the metric's label; ``path`` the file that failed.
    """

    reason = "OutputWriteFailed"

    def __init__(self, errno_name: str, path: str, strerror: str) -> None:
        super().__init__(f"{errno_name} writing {path} ({strerror})")
        self.errno_name = errno_name
        self.path = path
        self.strerror = strerror


class ZygoteError(CrawlfleetError):
    """The local runner's worker zygote is gone or did not answer; workers start as
    interpreters instead."""
