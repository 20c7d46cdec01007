"""A partitioned frontier with one shard of a real Redis Cluster stopped (master and replica).

What the partitions that answer must still do, and what the caller is told about the others:
an enqueue answers for the links of the live partitions and names the silent ones
(PartitionsUnavailable), extends count the silent partition's leases as held, requeues skip it,
stats name it, and an ack sent again with its call id once the shard is back asks only the
partition that owed its reply (the others' leases are not counted lost). The lease book holds a
page whose links wait and settles the rest meanwhile: one settlement stuck on the silent
partition holds up no other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio.cluster import RedisCluster as ClusterClient
from redis.crc import key_slot

from crawlfleet.crawler.worker.flow import worker_counters
from crawlfleet.crawler.worker.leases import LeaseBook
from crawlfleet.crawler.worker.metrics import WorkerMetrics
from crawlfleet.errors import FrontierUnavailable, PartitionsUnavailable
from crawlfleet.fleet import steer
from crawlfleet.frontier import Frontier, JobKeys, Lease, Link, canonicalize, host_of, partitions
from crawlfleet.frontier.connection import call, connect
from crawlfleet.frontier.partitions import PartitionedFrontier
from tests.integration.frontier.conftest import TEST_JOB
from tests.support.redis_cluster import ClusterNode, RedisCluster
from tests.support.specs import frontier_settings, merged

pytestmark = pytest.mark.slow

SHARDS = 8
HOSTS = [f"h{i}.test" for i in range(24)]
WORKER = "w1"
_T = TypeVar("_T")


async def _open(cluster: RedisCluster, job_id: str) -> PartitionedFrontier:
    settings = replace(frontier_settings(job_id, merged(TEST_JOB, {})), shards=SHARDS)
    frontier = await Frontier.connect(cluster.url, settings, timeout_seconds=2.0)
    assert isinstance(frontier, PartitionedFrontier)
    return frontier


def _down_partitions(cluster: RedisCluster, job_id: str) -> tuple[set[int], int]:
    """The partitions of a master that does not hold the home, and a slot of it."""
    slots = [cluster.slot(JobKeys(job_id, k).key("meta")) for k in range(SHARDS)]
    home = cluster.master_of(slots[0])
    for k in range(1, SHARDS):
        master = cluster.master_of(slots[k])
        if master is not home:
            return {p for p in range(SHARDS) if cluster.master_of(slots[p]) is master}, slots[k]
    raise AssertionError("every partition is on the home's master")


async def _answered(call: Callable[[], Awaitable[_T]], *, whole: bool = False) -> _T:
    """``call()`` until it is not refused whole (FrontierUnavailable but not
    PartitionsUnavailable), as the product's loops do: the first command after another met a
    node that is down may fail on every node (redis-py's cluster client re-reads the slots
    after a connection error, through its default node, which may be the one down).
    ``whole``: until every partition answers (a partition is skipped for a while after it
    was silent)."""
    for _ in range(30):
        try:
            return await call()
        except PartitionsUnavailable:
            if not whole:
                raise
        except FrontierUnavailable:
            pass
        await asyncio.sleep(0.5)
    raise AssertionError("the cluster never answered")


async def _partial(call: Callable[[], Awaitable[object]]) -> PartitionsUnavailable:
    """The PartitionsUnavailable ``call()`` raises once the client has found the node down."""
    try:
        await _answered(call)
    except PartitionsUnavailable as raised:
        return raised
    raise AssertionError("every partition answered")


async def _every_host_leased(
    frontier: PartitionedFrontier, claim: Callable[[int], Awaitable[list[Lease] | None]]
) -> list[Lease]:
    """Every host's seed, seeded and claimed (a claim may come back short of a partition's
    share: claimed again)."""
    await frontier.seed([f"http://{host}/" for host in HOSTS])
    leases: list[Lease] = []
    for _ in range(10):
        leases += await claim(len(HOSTS) - len(leases)) or []
        if len(leases) == len(HOSTS):
            break
    assert len(leases) == len(HOSTS)
    return leases


async def test_a_stopped_shard_costs_only_its_own_partitions(
    private_redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = private_redis_cluster
    # calls skip the silent partitions past the test's steps before the restart
    monkeypatch.setattr(partitions, "SKIP_SILENT_SECONDS", 5.0)
    job_id = "test.outage"
    frontier = await _open(cluster, job_id)
    stopped: list[ClusterNode] = []
    try:
        book = LeaseBook(
            frontier,
            WORKER,
            metrics=WorkerMetrics(CollectorRegistry()),
            counters=worker_counters(),
        )
        leases = await _every_host_leased(frontier, book.claim)
        down, slot = _down_partitions(cluster, job_id)
        on_down = [lease for lease in leases if frontier.index_of(lease.url) in down]
        elsewhere = [lease for lease in leases if lease not in on_down]
        assert on_down
        assert elsewhere
        stopped = cluster.stop_shard(slot)

        # links: the live partitions answer theirs; the silent ones are named, None for theirs
        links = [Link(canonicalize(f"http://{host}/next"), 1, "http://h0.test/") for host in HOSTS]
        raised = await _partial(lambda: frontier.enqueue(links))
        assert set(raised.partitions) == down
        missing = {
            host_of(link.url)
            for link, code in zip(links, raised.answered, strict=True)
            if code is None
        }
        assert missing == {h for h in HOSTS if frontier.index_of(f"http://{h}/") in down}
        # extends: the silent partition's leases count as held; requeues skip it
        assert await frontier.extend(WORKER, [lease.lease_id for lease in leases]) == [True] * len(
            leases
        )
        await frontier.requeue_expired()
        # stats name the silent partitions; the steering's sentence says what goes on
        unread = await _partial(frontier.stats)
        assert set(unread.partitions) == down
        said = await steer.partition_outage(frontier, unread)
        assert said is not None
        assert set(said.partitions) == down
        assert said.spool_full == 0
        assert f"of {SHARDS} unavailable" in said.message
        assert "the workers go on crawling the other partitions' hosts" in said.message

        # the lease book: one page held for its links, the silent partition's settlement
        # stuck, and the others settled meanwhile
        held = elsewhere[0].lease_id
        book.hold([held])
        with pytest.raises(PartitionsUnavailable):
            await book.settle([lease.lease_id for lease in on_down])
        settled = await book.settle([lease.lease_id for lease in elsewhere])
        assert settled.acked == len(elsewhere) - 1  # all but the held one
        assert settled.lost == 0
        assert book.unsettled == 1  # the silent partition's, kept with its call ids
        assert held in book

        cluster.restart(stopped)
        stopped = []
        # the stuck settlement again, under its call ids: only the partition that owed its
        # reply is asked; nothing counted lost
        again = await _answered(lambda: book.settle(()), whole=True)
        assert again.acked == len(on_down)
        assert again.lost == 0
        assert book.unsettled == 0
        unheld = await book.unhold([held])
        assert unheld.acked == 1
        stats = await frontier.stats()
        assert stats.crawled == len(leases)
        assert stats.leased == 0
        assert await frontier.enqueue(links) != []  # every partition answers again
    finally:
        if stopped:  # a failure while it was down: back, to clean up
            cluster.restart(stopped)
        await frontier.delete()
        await frontier.aclose()


async def test_a_call_that_asks_only_the_stopped_partitions_is_an_outage_of_those(
    private_redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long after the silent partitions' skip ran out, a call that asks them alone (a claim
    of one lease, a heartbeat's extend of leases all held there) while the home answers is an
    outage of those partitions, not of Redis: the extend counts them held, the claim comes
    back empty instead of raising (retried under its call id it would ask them alone until
    they are back, and the worker would claim nothing meanwhile), and a claim of one lease
    goes to a live partition."""
    cluster = private_redis_cluster
    monkeypatch.setattr(partitions, "SKIP_SILENT_SECONDS", 1.0)
    job_id = "test.alone"
    frontier = await _open(cluster, job_id)
    stopped: list[ClusterNode] = []
    try:
        leases = await _every_host_leased(frontier, lambda n: frontier.claim(WORKER, n))
        down, slot = _down_partitions(cluster, job_id)
        on_down = [lease.lease_id for lease in leases if frontier.index_of(lease.url) in down]
        live = next(lease for lease in leases if frontier.index_of(lease.url) not in down)
        assert (await frontier.stats()).fetched == 0
        stopped = cluster.stop_shard(slot)
        await _partial(frontier.stats)  # the client has met the node down

        async def home_answers_after_the_skip() -> None:
            await asyncio.sleep(1.1)  # the skip ran out: the next call asks them again
            await _answered(lambda: frontier.heartbeat(WORKER, {}))

        await home_answers_after_the_skip()
        assert await frontier.extend(WORKER, on_down) == [True] * len(on_down)
        await home_answers_after_the_skip()
        # their finished fetches' slots, and nothing else, asked of them alone: told again
        # with the next claims until they hear of them (the caller has forgotten them)
        assert await frontier.claim(WORKER, 0, on_down) == []
        # the live partition's host made ready again: a claim of one finds it, however it
        # rotates, never sent to the silent partitions alone
        await frontier.release(WORKER, [live.lease_id])
        await home_answers_after_the_skip()
        found: list[Lease] = []
        for _ in range(3 * SHARDS):  # the partitions that filled their last share first
            found += await frontier.claim(WORKER, 1)
            if found:
                break
        assert [lease.url for lease in found] == [live.url]
        cluster.restart(stopped)
        stopped = []
        await _answered(frontier.stats, whole=True)
        assert await frontier.claim(WORKER, 0) == []
        assert (await frontier.stats()).fetched == len(on_down)
    finally:
        if stopped:
            cluster.restart(stopped)
        await frontier.delete()
        await frontier.aclose()


def _views(client: ClusterClient, cluster: RedisCluster, key: str, stopped: ClusterNode) -> str:
    """Who serves ``key`` as the client and as the live nodes see it, and who was stopped."""
    owner = client.get_node_from_key(key)
    default = client.get_default_node()
    view = {f"{node.host}:{node.port}": ranges for node, ranges in cluster.masters().items()}
    return (
        f"{key} (slot {key_slot(key.encode())}): the client's owner"
        f" {owner.name if owner else None}, its default node {default.name if default else None};"
        f" stopped {stopped.host}:{stopped.port}; the live nodes' masters {view}"
    )


async def test_a_client_whose_default_node_stopped_serves_the_other_nodes(
    private_redis_cluster: RedisCluster,
) -> None:
    """redis-py's cluster client asks ``COMMAND`` of its default node (the first primary it
    knows: the one with slot 0) each time it reloads the slots, which it does after any
    connection error; a node that failed there, or only in pipelines, was never moved aside,
    and every command of the client failed before it was sent for as long as that node was
    down (a worker of the chaos test crawled nothing for 25 s). connection.py's client moves
    it aside: the other masters' keys answer at once."""
    cluster = private_redis_cluster
    client = connect(cluster.url, timeout_seconds=2.0)
    assert isinstance(client, ClusterClient)
    try:
        first = cluster.master_of(0)
        keys = {cluster.master_of(key_slot(f"k{i}".encode())): f"k{i}" for i in range(64)}
        assert len(keys) == len(cluster.masters())
        for key in keys.values():
            await client.set(key, "kept")
        assert client.get_default_node().port == first.port
        stopped = cluster.stop_shard(0)
        try:
            await client.aclose()  # what a CLUSTERDOWN does: the next command reloads the slots
            for node, key in keys.items():
                if node is not first:
                    try:
                        answer = await call(client.get(key))
                    except FrontierUnavailable as error:  # seen once in CI: say whose view
                        raise AssertionError(_views(client, cluster, key, first)) from error
                    assert answer == "kept"
        finally:
            cluster.restart(stopped)
        assert await _answered(lambda: call(client.get(keys[first]))) == "kept"
    finally:
        await client.aclose()
