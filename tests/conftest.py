"""Fixtures shared by every test layer: real redis-server processes on loopback."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from crawlfleet.frontier import connect
from crawlfleet.local.redis_server import RedisServer
from tests.support.redis import redisbloom_module

# Processes the tests start (workers, `crawlfleet run`) import this checkout, whatever the
# environment has installed: a shared virtualenv may point at another clone.
_REPO = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(_REPO), os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A plain redis-server (no modules): the bitmap Bloom backend."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def redis_bloom_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server with the RedisBloom module loaded: the native Bloom backend."""
    with RedisServer(
        tmp_path_factory.mktemp("redis-bloom"), modules=(redisbloom_module(),)
    ) as server:
        yield server


_job_numbers = itertools.count()


@pytest.fixture
def job_id() -> str:
    """A fresh job per test, so tests share a server but never a frontier."""
    return f"test.job-{next(_job_numbers)}"


@pytest.fixture(params=["bitmap", "native"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = connect(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def redis_url(backend: str, redis_server: RedisServer, redis_bloom_server: RedisServer) -> str:
    """URL of the server that matches the Bloom backend under test (for child processes)."""
    return (redis_bloom_server if backend == "native" else redis_server).url
