"""A fresh frontier per test on the real redis-server of the backend under test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from crawlfleet.frontier import Frontier, FrontierSettings

OpenFrontier = Callable[..., Awaitable[Frontier]]


@pytest.fixture
def open_frontier(redis_client: aioredis.Redis, job_id: str, backend: str) -> OpenFrontier:
    """Open the test's job with settings overridden per call (politeness off by default)."""

    async def _open(**overrides: Any) -> Frontier:
        settings: dict[str, Any] = {
            "job_id": job_id,
            "per_host": 4,
            "host_delay_seconds": 0.0,
            "lease_ttl_seconds": 30.0,
            "task_attempts": 3,
            "capacity": 100_000,
        }
        settings.update(overrides)
        frontier = await Frontier.open(redis_client, FrontierSettings(**settings))
        assert frontier.backend == backend
        return frontier

    return _open
