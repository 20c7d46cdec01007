"""Fixtures shared by every test layer: real redis-server and S3 server processes on loopback."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from crawlfleet.frontier.connection import connect
from crawlfleet.local.redis_server import RedisServer
from tests.support.redis import redisbloom_module
from tests.support.redis_cluster import RedisCluster
from tests.support.s3 import S3Server

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


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One real S3-compatible server (versitygw) for the session; tests take their own bucket.

    A test that stops or restarts the server uses ``private_s3_server`` instead.
    """
    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture
def private_s3_server(tmp_path: Path) -> Iterator[S3Server]:
    """A server of this test's own, to stop and start again (an S3 outage mid-crawl)."""
    with S3Server(tmp_path / "s3") as server:
        yield server


_bucket_numbers = itertools.count()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A fresh bucket on the session's server, owned by its root account."""
    return s3_server.create_bucket(f"test-bucket-{next(_bucket_numbers)}")


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A real Redis Cluster (3 masters, 3 replicas) shared by the tests that only use it."""
    with RedisCluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture
def private_redis_cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    """A cluster of this test's own, whose masters it may kill."""
    with RedisCluster(tmp_path / "redis-cluster") as cluster:
        yield cluster
