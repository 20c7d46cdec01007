"""wait_for_replicas on a real master with a real replica, and on the real Redis Cluster.

A replica that falls behind is made to for real: its process is stopped (SIGSTOP), so it
confirms nothing while the master keeps taking writes.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from crawlfleet.errors import FrontierLost, NotReplicated
from crawlfleet.frontier import Frontier, JobKeys, Link, canonicalize
from crawlfleet.frontier.connection import RedisClient, connect
from crawlfleet.frontier.keys import REPLICA_MARK
from crawlfleet.frontier.replicas import wait_for_replicas
from crawlfleet.local.redis_server import RedisServer
from tests.support.redis_cluster import ClusterNode, RedisCluster
from tests.support.replicated import ReplicatedPair
from tests.support.specs import frontier_settings

_JOB = {"dedup": {"capacity": 10_000}, "concurrency": {"hostDelaySeconds": 0.0}}
_LINKS = [Link(canonicalize(f"http://h{i % 3}.test/p{i}"), 1, "") for i in range(30)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicatedPair]:
    with ReplicatedPair(tmp_path_factory.mktemp("replicated")) as pair:
        yield pair


@pytest.fixture
async def frontier(pair: ReplicatedPair, job_id: str) -> AsyncIterator[Frontier]:
    frontier = await Frontier.connect(pair.url, frontier_settings(job_id, _JOB))
    yield frontier
    await frontier.aclose()


def _sync(server: RedisServer) -> redis.Redis:
    return redis.Redis(host=server.host, port=server.port, decode_responses=True)


async def test_returns_once_the_replica_holds_the_writes(
    pair: ReplicatedPair, frontier: Frontier
) -> None:
    await frontier.enqueue(_LINKS)
    meta = frontier.keys.key("meta")
    assert await wait_for_replicas(frontier.client, meta, 1, 5000) == 1
    stats = frontier.keys.key("stats")
    with _sync(pair.master) as master, _sync(pair.replica) as replica:
        assert replica.hgetall(stats) == master.hgetall(stats)
        assert int(master.hget(stats, "queued") or 0) == len(_LINKS)


async def test_a_stopped_replica_is_not_counted_even_for_another_connections_writes(
    pair: ReplicatedPair, frontier: Frontier
) -> None:
    """The enqueue goes on the frontier's connection and the wait on another client's, idle
    since before it (as a pooled connection is): a bare WAIT there counts the stopped
    replica at once, for it waits only for its own connection's writes."""
    waiter = connect(pair.url)
    meta = frontier.keys.key("meta")
    try:
        assert await waiter.execute_command("WAIT", 1, 5000) == 1  # in sync: then idle
        with pair.replica_stopped():
            await frontier.enqueue(_LINKS)
            assert await waiter.execute_command("WAIT", 1, 50) == 1  # what a bare WAIT says
            with pytest.raises(NotReplicated) as refused:
                await wait_for_replicas(waiter, meta, 1, 200)
        assert (refused.value.wanted, refused.value.acknowledged) == (1, 0)
        assert "only 0 of 1 replica(s)" in str(refused.value)
        assert "(it has 1 connected)" in str(refused.value)
        assert await wait_for_replicas(waiter, meta, 1, 5000) == 1  # continued: it catches up
    finally:
        await waiter.aclose()


async def test_waits_on_a_master_past_maxmemory(pair: ReplicatedPair, frontier: Frontier) -> None:
    """A wait stands before acks, which are what free memory: a full Redis still passes it."""
    await frontier.enqueue(_LINKS)
    with _sync(pair.master) as master:
        master.config_set("maxmemory", 1)
        try:
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                master.set(frontier.keys.key("probe"), "1")
            assert await wait_for_replicas(frontier.client, frontier.keys.key("meta"), 1, 5000)
        finally:
            master.config_set("maxmemory", 0)


async def test_a_lost_frontier_is_lost_and_gets_no_stray_key(
    pair: ReplicatedPair, frontier: Frontier
) -> None:
    meta = frontier.keys.key("meta")
    await frontier.client.delete(meta)
    with pytest.raises(FrontierLost, match="is missing"):
        await wait_for_replicas(frontier.client, meta, 1, 1000)
    assert await frontier.client.exists(frontier.keys.key(REPLICA_MARK)) == 0


async def test_a_redis_without_replicas_says_so(redis_server: RedisServer, job_id: str) -> None:
    frontier = await Frontier.connect(redis_server.url, frontier_settings(job_id, _JOB))
    try:
        with pytest.raises(NotReplicated, match=r"only 0 of 1 .* \(it has 0 connected\)"):
            await wait_for_replicas(frontier.client, frontier.keys.key("stats"), 1, 100)
    finally:
        await frontier.aclose()


async def test_arguments_that_would_wait_for_nothing_or_forever_are_refused(
    redis_server: RedisServer,
) -> None:
    client = connect(redis_server.url)
    try:
        with pytest.raises(ValueError, match="replicas must be at least 1"):
            await wait_for_replicas(client, JobKeys("test.args").key("meta"), 0, 100)
        with pytest.raises(ValueError, match="never ends"):
            await wait_for_replicas(client, JobKeys("test.args").key("meta"), 1, 0)
        with pytest.raises(ValueError, match="not a key of a crawlfleet frontier"):
            await wait_for_replicas(client, "some-key", 1, 100)
    finally:
        await client.aclose()


def _replica_of(cluster: RedisCluster, master: ClusterNode) -> ClusterNode:
    master_id = master.cli("cluster", "myid").strip()
    for line in master.cli("cluster", "nodes").splitlines():
        fields = line.split()
        if "slave" in fields[2] and fields[3] == master_id:
            port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
            return next(node for node in cluster.nodes if node.port == port)
    raise RuntimeError(f"{master} has no replica")


def _jobs_on_every_master(cluster: RedisCluster) -> dict[int, str]:
    """A job id per master (by its port) whose slot that master serves."""
    jobs: dict[int, str] = {}
    for number in range(200):
        job_id = f"test.replicas-{number}"
        master = cluster.master_of(cluster.slot(JobKeys(job_id).key("meta")))
        jobs.setdefault(master.port, job_id)
        if len(jobs) == 3:
            return jobs
    raise RuntimeError(f"no job ids on every master: {jobs}")


async def test_on_a_cluster_each_jobs_master_waits_for_its_own_replica(
    redis_cluster: RedisCluster,
) -> None:
    client: RedisClient = connect(redis_cluster.url)
    try:
        for port, job_id in _jobs_on_every_master(redis_cluster).items():
            frontier = await Frontier.open(client, frontier_settings(job_id, _JOB))
            await frontier.enqueue(_LINKS)
            meta = frontier.keys.key("meta")
            assert await wait_for_replicas(client, meta, 1, 5000) == 1
            master = next(node for node in redis_cluster.nodes if node.port == port)
            replica = _replica_of(redis_cluster, master)
            with _sync(replica) as reader:
                reader.execute_command("READONLY")  # a cluster's replica serves reads so
                assert reader.get(frontier.keys.key(REPLICA_MARK)) == "1"
            assert await frontier.delete() > 0
        # A stopped replica holds back its own master's waits (briefly: under the node timeout).
        job_id = next(iter(_jobs_on_every_master(redis_cluster).values()))
        frontier = await Frontier.open(client, frontier_settings(job_id, _JOB))
        meta = frontier.keys.key("meta")
        replica = _replica_of(redis_cluster, redis_cluster.master_of(redis_cluster.slot(meta)))
        assert replica.process is not None
        replica.process.send_signal(signal.SIGSTOP)
        try:
            await frontier.enqueue(_LINKS)
            with pytest.raises(NotReplicated, match=r"\(it has 1 connected\)"):
                await wait_for_replicas(client, meta, 1, 150)
        finally:
            replica.process.send_signal(signal.SIGCONT)
        assert await wait_for_replicas(client, meta, 1, 5000) == 1
        await frontier.delete()
    finally:
        await client.aclose()


def test_the_fixture_pair_is_a_real_replication(tmp_path: Path) -> None:
    """The replica refuses writes and has what the master was given."""
    with ReplicatedPair(tmp_path) as pair, _sync(pair.master) as master:
        master.set("cf:{test.pair}:x", "1")
        master.execute_command("WAIT", 1, 5000)
        with _sync(pair.replica) as replica:
            assert replica.get("cf:{test.pair}:x") == "1"
            with pytest.raises(redis.exceptions.ReadOnlyError):
                replica.set("cf:{test.pair}:y", "1")
