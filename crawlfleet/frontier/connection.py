"""The Redis client the frontier makes, and the one place redis-py's errors are translated.

Everything in ``frontier/`` that awaits Redis awaits it through :func:`call`, so a caller of
the frontier (worker, operator, local runner) sees :class:`FrontierUnavailable` and never a
redis-py exception, whichever command failed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from crawlfleet.errors import FrontierUnavailable

__all__ = ["call", "close_quietly", "connect"]

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
    except ResponseError as exc:
        raise FrontierUnavailable(f"Redis refused a frontier operation: {exc}") from exc
    except (RedisError, OSError) as exc:
        raise FrontierUnavailable(f"Redis unavailable: {exc}") from exc


async def close_quietly(client: aioredis.Redis) -> None:
    """Close a client whose connections may already be broken; closing never raises."""
    try:
        await client.aclose()
    except (RedisError, OSError) as exc:
        log.debug("closing the Redis client failed: %s", exc)
