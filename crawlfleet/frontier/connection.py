"""The Redis client the frontier makes, and the one place redis-py's errors are translated.

Everything in ``frontier/`` that awaits Redis awaits it through :func:`call`, so a caller of
the frontier (worker, operator, local runner) sees :class:`FrontierUnavailable` and never a
redis-py exception, whichever command failed. Two refusals get their own class: a script's
``FRONTIER_LOST`` error (the job's meta is gone or belongs to another epoch) is
:class:`FrontierLost`, and Redis's ``OOM`` refusal of a write is :class:`FrontierFull`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Final, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import OutOfMemoryError, RedisError, ResponseError

from crawlfleet.errors import FrontierFull, FrontierLost, FrontierUnavailable

__all__ = [
    "CALL_RETRIES",
    "LOST_CODE",
    "MAX_CONNECTIONS",
    "call",
    "check_epoch",
    "close_quietly",
    "connect",
    "retry_window_seconds",
    "translate",
]

#: The error code lib.lua's scripts answer with when the job's meta is missing or another's.
LOST_CODE = "FRONTIER_LOST"

log = logging.getLogger(__name__)

_T = TypeVar("_T")


#: How often redis-py sends a command again after a connection error or a timeout. Reads and
#: idempotent scripts may be re-sent blindly; the state changes that may not are sent with a
#: call id (scripts.ONCE_SCRIPTS), so a re-sent one returns the first one's reply.
CALL_RETRIES: Final = 3
_BACKOFF_CAP_SECONDS: Final = 1.0
#: Connections one client opens at most; more concurrent calls wait for one. Every connection
#: costs Redis some 20-40 KB of buffers, counted against ``maxmemory``: a worker that opened
#: one per concurrent fetch (robots, pacing, the flush, claims) had 22 open, and two such
#: workers held 1.6 MB of a 4 MiB Redis, which refused the frontier's writes before the
#: fleet's memory backpressure could see it coming. Every call is one short round trip (no
#: blocking commands), so a few connections carry a worker.
MAX_CONNECTIONS: Final = 8


def connect(
    url: str, *, timeout_seconds: float = 10.0, max_connections: int = MAX_CONNECTIONS
) -> aioredis.Redis:
    """The client the frontier expects: decoded replies, bounded waits, health checks, a
    bounded retry (its window is :func:`retry_window_seconds`) and a bounded pool (a call
    waits up to ``timeout_seconds`` for a free connection)."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_seconds,
        decode_responses=True,
        socket_timeout=timeout_seconds,
        socket_connect_timeout=timeout_seconds,
        health_check_interval=30,
        retry=Retry(
            ExponentialWithJitterBackoff(base=0.01, cap=_BACKOFF_CAP_SECONDS), CALL_RETRIES
        ),
    )
    return aioredis.Redis.from_pool(pool)


def retry_window_seconds(client: aioredis.Redis) -> float:
    """The longest a client may go on re-sending one command: each try may wait its socket
    timeout and a backoff. A call's reply is kept this long (and a little more) for a retry."""
    timeout = client.connection_pool.connection_kwargs.get("socket_timeout") or 10.0
    retry = client.get_retry()
    retries = retry.get_retries() if retry is not None else 0
    return (retries + 1) * (float(timeout) + _BACKOFF_CAP_SECONDS) + 10.0


async def call(awaitable: Awaitable[_T]) -> _T:
    """Await one Redis operation, translating redis-py's errors at this one boundary.

    ``OSError`` too: a socket error redis-py has not wrapped is as much "Redis unavailable".
    """
    try:
        return await awaitable
    except (RedisError, OSError) as exc:
        raise translate(exc) from exc


def translate(exc: BaseException) -> FrontierUnavailable | FrontierLost:
    """The frontier's error for one redis-py (or socket) error; the caller raises it ``from``."""
    if not isinstance(exc, ResponseError):
        return FrontierUnavailable(f"Redis unavailable: {exc}")
    message = str(exc)
    if message.startswith(LOST_CODE):
        # Redis 7 appends " script: <sha>, on @user_script:<line>." to a script's error.
        reason = message.removeprefix(LOST_CODE).split(" script: ", 1)[0].strip()
        return FrontierLost(reason)
    if isinstance(exc, OutOfMemoryError):
        return FrontierFull(f"Redis is out of memory (maxmemory reached): {message}")
    return FrontierUnavailable(f"Redis refused a frontier operation: {message}")


async def close_quietly(client: aioredis.Redis) -> None:
    """Close a client whose connections may already be broken; closing never raises."""
    try:
        await client.aclose()
    except (RedisError, OSError) as exc:
        log.debug("closing the Redis client failed: %s", exc)


async def check_epoch(
    client: aioredis.Redis, job_id: str, expected: str, found: str | None
) -> None:
    """Raise FrontierLost unless ``found`` (the job meta's epoch, read in the caller's own
    round trip) is ``expected``; the reasons are lib.lua's, so both sides say the same."""
    if found == expected:
        return
    if found is not None:
        why = f"the frontier was re-created (epoch {found}, this handle opened {expected})"
    elif int(await call(client.dbsize())) == 0:
        why = "Redis is empty (restarted without its data, or flushed)"
    else:
        why = "the job's meta key is missing (deleted or evicted) while Redis holds other keys"
    raise FrontierLost(f"job {job_id}: {why}")
