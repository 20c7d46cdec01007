"""A job's frontier on a real Redis Cluster (three masters, a replica each) over loopback.

The frontier's operations answer on a cluster what they answer on one Redis, and a local
crawl pointed at the cluster (``redis+cluster://``) crawls every page once. What a crawl on
a cluster survives (a master killed, its slot moved, a shard stopped) is
tests/integration/local/test_cluster_chaos.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crawlfleet.frontier import Failure, Frontier, FrontierStats, JobKeys
from crawlfleet.frontier.connection import connect
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.cluster_runs import start_run
from tests.support.redis_cluster import RedisCluster
from tests.support.runs import no_stray_runs  # noqa: F401 (a fixture)
from tests.support.specs import frontier_settings

pytestmark = pytest.mark.usefixtures("no_stray_runs")

_JOB: dict[str, Any] = {
    "concurrency": {"perHost": 4, "hostDelaySeconds": 0.0},
    "lease": {"ttlSeconds": 30.0},
    "retry": {"taskAttempts": 2},
    "dedup": {"capacity": 100_000},
}
_SEEDS = [f"http://h{host}.test/p{page}" for host in range(5) for page in range(8)]


async def _exercise(url: str, job_id: str) -> dict[str, Any]:
    """Every main operation of the frontier, in order, on the Redis at ``url``: what each
    answered (leases by URL, not by their ids, which carry times)."""
    frontier = await Frontier.connect(url, frontier_settings(job_id, _JOB))
    try:
        seeded = await frontier.seed(_SEEDS)
        again = await frontier.seed(_SEEDS[:5])
        claimed = await frontier.claim("worker-a", 12)
        by_url = {lease.url: lease for lease in claimed}
        urls = sorted(by_url)
        acked = await frontier.ack("worker-a", [by_url[u].lease_id for u in urls[:6]])
        failures = [
            Failure(by_url[urls[6]].lease_id, "transient", "a test failure", True),
            Failure(by_url[urls[7]].lease_id, "gone", "a test failure", False),
        ]
        failed = await frontier.fail("worker-a", failures)
        requeued = await frontier.requeue_owner("worker-a")
        stats = await frontier.stats()
        workers = await frontier.workers()
        memory = await frontier.memory()
        dead = [letter.url async for letter in frontier.dead_letters()]
        deleted = await frontier.delete()
        return {
            "seeded": seeded,
            "again": again,
            "claimed": len(claimed),
            "acked": list(acked),
            "failed": list(failed),
            "dead": dead,
            "requeued": (requeued.requeued, requeued.dead),
            "stats": _counts(stats),
            "workers": [w.worker for w in workers],
            "policy": memory.policy,
            "deleted": deleted > 0,
        }
    finally:
        await frontier.aclose()


def _counts(stats: FrontierStats) -> dict[str, int]:
    return {
        name: getattr(stats, name)
        for name in ("queued", "delayed", "leased", "crawled", "failed", "dead", "seen")
    }


async def test_the_frontier_answers_on_a_cluster_what_it_answers_on_one_redis(
    redis_cluster: RedisCluster, redis_server: RedisServer, job_id: str
) -> None:
    on_cluster = await _exercise(redis_cluster.url, job_id)
    on_one = await _exercise(redis_server.url, job_id)
    assert on_cluster == on_one
    assert on_cluster["seeded"] == len(_SEEDS)
    assert on_cluster["claimed"] == 12
    assert len(on_cluster["dead"]) == 1
    assert on_cluster["policy"] == "noeviction"
    # every key went, and only the job's node held any: one slot (keys.py's hash tag)
    client = connect(redis_cluster.url)
    try:
        assert await client.exists(JobKeys(job_id).key("meta")) == 0
    finally:
        await client.aclose()


async def test_an_evicting_node_holding_the_job_is_refused(
    redis_cluster: RedisCluster, job_id: str
) -> None:
    node = redis_cluster.master_of(redis_cluster.slot(JobKeys(job_id).key("meta")))
    node.cli("config", "set", "maxmemory-policy", "allkeys-lru")
    try:
        with pytest.raises(Exception, match="maxmemory-policy is allkeys-lru"):
            await Frontier.connect(redis_cluster.url, frontier_settings(job_id, _JOB))
    finally:
        node.cli("config", "set", "maxmemory-policy", "noeviction")


@pytest.mark.slow
@pytest.mark.parametrize("shards", [1, 8])
def test_a_local_crawl_on_a_cluster_crawls_every_page_once(
    redis_cluster: RedisCluster, tmp_path: Path, shards: int
) -> None:
    """One partition on one master, or eight spread over the three."""
    config = SiteConfig(hosts=8, pages_per_host=15, hostile=False, latency_seconds=0.02)
    with TestSite(config) as site:
        run = start_run(site, redis_cluster, tmp_path, f"on-cluster-{shards}", shards=shards)
        summary = run.finish()
        losses = run.losses()
    assert summary["crawled"] == len(site.expected_pages())
    assert summary["dead_lettered"] == 0
    assert losses.lost == frozenset()
    assert losses.repeats == 0
    assert losses.written_twice == 0
