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
from typing import TypeVar

import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError, RedisError, ResponseError

from crawlfleet.errors import FrontierFull, FrontierLost, FrontierUnavailable

__all__ = ["LOST_CODE", "call", "check_epoch", "close_quietly", "connect", "translate"]

#: The error code lib.lua's scripts answer with when the job's meta is missing or another's.
LOST_CODE = "FRONTIER_LOST"

log = logging.getLogger(__name__)

_T = TypeVar("_T")


def connect(url: str, *, timeout_seconds: float = 10.0) -> aioredis.Redis:
    """The client the frontier expects: decoded replies, bounded waits, health checks."""
    return aioredis.Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=timeout_seconds,
        socket_connect_timeout=timeout_seconds,
        health_check_interval=30,
        retry_on_timeout=True,
    )


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
