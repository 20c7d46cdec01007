"""A fresh frontier per test on the real redis-server of the backend under test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from crawlfleet.frontier import Frontier
from crawlfleet.frontier.connection import connect
from crawlfleet.local.redis_server import RedisServer
from tests.support.redis import redisbloom_module
from tests.support.specs import frontier_settings, merged

OpenFrontier = Callable[..., Awaitable[Frontier]]

#: The tests' job: politeness off, few attempts, a small filter.
TEST_JOB: dict[str, Any] = {
    "concurrency": {"perHost": 4, "hostDelaySeconds": 0.0},
    "lease": {"ttlSeconds": 30.0},
    "retry": {"taskAttempts": 3},
    "dedup": {"capacity": 100_000},
}
#: A lease that expires within a test (its heartbeat kept below it, as the model asks).
SHORT_LEASE: dict[str, float] = {"ttlSeconds": 1.0, "heartbeatSeconds": 0.5}


@pytest.fixture
def open_frontier(redis_client: aioredis.Redis, job_id: str, backend: str) -> OpenFrontier:
    """Open the test's job with spec sections changed per call (``concurrency={...}``)."""

    async def _open(**changes: Any) -> Frontier:
        settings = frontier_settings(job_id, merged(TEST_JOB, changes))
        frontier = await Frontier.open(redis_client, settings)
        assert frontier.backend == backend
        return frontier

    return _open


@pytest.fixture
def private_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A redis-server of this test's own, to flush, fill or reconfigure, and whose used
    memory moves with this test only; with the Bloom module when the test's backend is
    native."""
    native = "backend" in request.fixturenames and request.getfixturevalue("backend") == "native"
    modules = (redisbloom_module(),) if native else ()
    with RedisServer(tmp_path / "redis", modules=modules) as server:
        yield server


@pytest.fixture
async def private_client(private_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = connect(private_server.url)
    yield client
    await client.aclose()
