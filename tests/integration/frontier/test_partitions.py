"""A job's frontier in partitions (frontier.shards) on real redis-servers and a real cluster.

Eight partitions answer a crawl-shaped workload as one partition does (every URL claimed
once, the same counters and dead letters), keep a host in one partition (its keys under its
partition's tag, so perHost holds across them), refuse another partition count, and say
FrontierLost when one partition's keys are gone. On the real cluster the partitions spread
over its masters, and a crawl there claims every URL once, with WAIT for a replica.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import yaml

from crawlfleet.errors import ConfigError, FrontierLost, NotReplicated, RedisTooSmall
from crawlfleet.frontier import (
    Failure,
    Frontier,
    FrontierSettings,
    JobKeys,
    Lease,
    Link,
    RobotsEntry,
    canonicalize,
    host_of,
)
from crawlfleet.frontier import frontier as frontier_module
from crawlfleet.frontier.connection import connect
from crawlfleet.frontier.keys import partition_of
from crawlfleet.frontier.partitions import PartitionedFrontier
from crawlfleet.testsite import SiteConfig, TestSite
from tests.integration.frontier.conftest import TEST_JOB
from tests.support.crawls import requested_urls
from tests.support.redis_cluster import RedisCluster
from tests.support.runs import crawlfleet, job_for_site, no_stray_runs  # noqa: F401 (a fixture)
from tests.support.specs import frontier_settings, merged

pytestmark = pytest.mark.usefixtures("no_stray_runs")

_HOSTS = [f"h{i}.test" for i in range(24)]
_SEEDS = [f"http://{host}/p{page}" for host in _HOSTS for page in range(5)]
_COUNTED = (
    "queued", "delayed", "leased", "fetched", "crawled", "failed", "dead", "seen",
    "duplicates", "requeued", "released",
)  # fmt: skip


def _settings(job_id: str, shards: int, **changes: Any) -> FrontierSettings:
    return replace(frontier_settings(job_id, merged(TEST_JOB, changes)), shards=shards)


def _links(lease: Lease) -> list[Link]:
    """What a page links to: two pages of its own host (a second visit offers the same,
    so duplicates too), one of the next host, and its own URL (a duplicate)."""
    if lease.depth >= 2:
        return []
    host = host_of(lease.url)
    after = _HOSTS[(_HOSTS.index(host) + 1) % len(_HOSTS)]
    urls = [f"http://{host}/d{lease.depth}/a", f"http://{host}/d{lease.depth}/b"]
    urls += [f"http://{after}/x", str(lease.url)]
    return [Link(canonicalize(u), lease.depth + 1, str(lease.url)) for u in urls]


async def _crawl(frontier: Frontier, *, batch: int = 7) -> dict[str, Any]:
    """Seed, then claim → (links, ack | fail) until the frontier is complete: pages ending
    in /p3 fail for good, /p4 fail once and are retried; a second worker's first claim is
    requeued as if it died; each claim names the previous one's leases as fetched."""
    seeded = await frontier.seed(_SEEDS)
    claims: Counter[str] = Counter()
    gone: list[Lease] = []
    while len(gone) < 5:  # a claim asks some partitions that hold fewer: it may come short
        gone += await frontier.claim("worker-b", 5 - len(gone))
    claims.update(lease.url for lease in gone)
    requeued = await frontier.requeue_owner("worker-b", ended=True)
    pending: list[Lease] = []
    for _ in range(500):
        leases = await frontier.claim("worker-a", batch, [lease.lease_id for lease in pending])
        claims.update(lease.url for lease in leases)
        await _settle(frontier, pending)
        pending = leases
        if not leases and (await frontier.stats()).complete:
            break
    else:
        raise AssertionError("the crawl did not complete")
    stats = await frontier.stats()
    dead = sorted([letter.url async for letter in frontier.dead_letters()])
    return {
        "seeded": seeded,
        "requeued": (requeued.requeued, requeued.dead),
        "claims": claims,
        "stats": {name: getattr(stats, name) for name in _COUNTED},
        "dead": dead,
        "complete": stats.complete,
        "seeded_flag": stats.seeded,
    }


async def _settle(frontier: Frontier, leases: list[Lease]) -> None:
    if not leases:
        return
    links = [link for lease in leases for link in _links(lease)]
    await frontier.enqueue(links)
    failures = [
        Failure(lease.lease_id, "gone", "a test's permanent failure", False)
        for lease in leases
        if lease.url.endswith("/p3")
    ]
    failures += [
        Failure(lease.lease_id, "transient", "a test's retryable failure", True)
        for lease in leases
        if lease.url.endswith("/p4") and lease.attempts == 0
    ]
    failed = {f.lease_id for f in failures}
    acked = await frontier.ack("worker-a", [x.lease_id for x in leases if x.lease_id not in failed])
    assert all(acked)
    outcomes = await frontier.fail("worker-a", failures)
    assert len(outcomes) == len(failures)
    assert all(outcomes)


async def test_eight_partitions_answer_a_crawl_as_one_does(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    one = await Frontier.open(redis_client, _settings(f"{job_id}-one", 1))
    eight = await Frontier.open(redis_client, _settings(f"{job_id}-eight", 8))
    assert not isinstance(one, PartitionedFrontier)
    assert isinstance(eight, PartitionedFrontier)
    assert len(eight.partitions) == 8
    on_one, on_eight = await _crawl(one), await _crawl(eight)

    assert on_eight["stats"] == on_one["stats"]
    assert on_eight["dead"] == on_one["dead"]
    assert on_eight["requeued"] == on_one["requeued"] == (5, 0)
    assert on_eight["seeded"] == on_one["seeded"] == len(_SEEDS)
    assert on_eight["complete"]
    assert on_eight["seeded_flag"]
    # every URL claimed, and claimed once unless it was retried or requeued
    assert set(on_eight["claims"]) == set(on_one["claims"])
    assert sum(on_eight["claims"].values()) == sum(on_one["claims"].values())
    again = {url for url, n in on_eight["claims"].items() if n > 1}
    retried = {url for url in on_eight["claims"] if url.endswith("/p4")}
    assert len(again - retried) <= 5
    assert on_eight["stats"]["dead"] == len(on_eight["dead"]) == len(_HOSTS)
    # the work really spread: every partition crawled some hosts
    per_partition = await _each_crawled(eight)
    assert all(n > 0 for n in per_partition), per_partition
    await one.delete()
    assert await eight.delete() > 0


async def _each_crawled(frontier: PartitionedFrontier) -> list[int]:
    return [(await Frontier.stats(part)).crawled for part in frontier.partitions]


async def test_a_host_keeps_its_politeness_across_partitions(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    frontier = await Frontier.open(
        redis_client, _settings(job_id, 8, concurrency={"perHost": 2, "hostDelaySeconds": 0})
    )
    await frontier.seed([f"http://{host}/p{page}" for host in _HOSTS[:6] for page in range(20)])
    leases = await frontier.claim("worker-a", 100)
    per_host = Counter(lease.host for lease in leases)
    assert per_host
    assert max(per_host.values()) <= 2
    assert len(per_host) == 6  # every host gave its two: a partition's hosts are all asked
    more = await frontier.claim("worker-b", 100)
    assert more == []  # every host is at perHost, in whichever partition it lives
    await frontier.ack("worker-a", [lease.lease_id for lease in leases])
    again = await frontier.claim("worker-b", 100)
    assert Counter(lease.host for lease in again) == Counter(dict.fromkeys(per_host, 2))
    await frontier.delete()


async def test_every_key_of_a_host_carries_its_partitions_tag(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    frontier = await Frontier.open(redis_client, _settings(job_id, 8))
    await frontier.seed(_SEEDS)
    leases = await frontier.claim("worker-a", 20)
    await frontier.ack("worker-a", [lease.lease_id for lease in leases[:10]])
    await frontier.defer_host(_HOSTS[5], 30.0, status=503)
    keys = [key async for key in redis_client.scan_iter(match=f"cf:{{{job_id}*")]
    tags = {re.match(r"cf:\{([^}]*)\}:", key).group(1) for key in keys}  # type: ignore[union-attr]
    assert tags == {JobKeys(job_id, k).tag for k in range(8)}
    queues = [key for key in keys if ":q:" in key]
    assert len(queues) >= len(_HOSTS) - 10
    for key in queues:
        host = key.split(":q:", 1)[1].split(":", 1)[1]
        assert key.startswith(JobKeys(job_id, partition_of(host, 8)).prefix), key
    for k in range(8):  # each partition's host table and waits hold its own hosts only
        hosts = await redis_client.hkeys(JobKeys(job_id, k).key("hosts"))
        assert all(partition_of(host, 8) == k for host in hosts)
        waits = await redis_client.zrange(JobKeys(job_id, k).key("robots-waits"), 0, -1)
        assert all(partition_of(str(w).split("\t")[0], 8) == k for w in waits)
    assert (await frontier.stats()).waits.robots_hosts == 1
    await frontier.delete()
    assert [key async for key in redis_client.scan_iter(match=f"cf:{{{job_id}*")] == []


async def test_another_partition_count_is_refused_with_a_sentence(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    frontier = await Frontier.open(redis_client, _settings(job_id, 8))
    await frontier.seed(_SEEDS[:3])
    sentence = (
        f"job {job_id} was created with 8 frontier partitions; shards cannot change on a "
        "running job (delete the job's frontier to start over)"
    )
    for shards in (4, 1, 9):
        with pytest.raises(ConfigError) as refused:
            await Frontier.open(redis_client, _settings(job_id, shards))
        assert sentence in str(refused.value)
    again = await Frontier.open(redis_client, _settings(job_id, 8), expect_epoch=frontier.epoch)
    assert again.epoch == frontier.epoch
    await frontier.delete()
    # a job of one partition refuses eight the same way
    single = await Frontier.open(redis_client, _settings(job_id, 1))
    with pytest.raises(ConfigError, match="created with 1 frontier partitions"):
        await Frontier.open(redis_client, _settings(job_id, 8))
    await single.delete()


async def test_a_partition_that_lost_its_keys_is_a_lost_frontier(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    frontier = await Frontier.open(redis_client, _settings(job_id, 8))
    assert isinstance(frontier, PartitionedFrontier)
    await frontier.seed(_SEEDS)
    assert {part.epoch for part in frontier.partitions} == {frontier.epoch}
    lost = JobKeys(job_id, 3)
    doomed = [key async for key in redis_client.scan_iter(match=lost.pattern)]
    assert doomed
    await redis_client.delete(*doomed)

    with pytest.raises(FrontierLost, match=re.escape(f"job {lost.tag}:")):
        await frontier.stats()
    with pytest.raises(FrontierLost):
        await frontier.claim("worker-a", 16)
    with pytest.raises(FrontierLost):
        await Frontier.open(redis_client, _settings(job_id, 8), expect_epoch=frontier.epoch)
    with pytest.raises(FrontierLost):  # a later open without the epoch finds it lost too
        await Frontier.open(redis_client, _settings(job_id, 8))
    reseeded = await Frontier.open(
        redis_client, _settings(job_id, 8), expect_epoch=frontier.epoch, reseed=True
    )
    assert reseeded.reseeded
    assert reseeded.epoch != frontier.epoch
    assert (await reseeded.stats()).queued == 0
    assert await reseeded.seed(_SEEDS) == len(_SEEDS)
    await reseeded.delete()


async def test_revisits_and_runs_are_refused_with_a_sentence(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    frontier = await Frontier.open(redis_client, _settings(job_id, 4))
    for call in (frontier.begin_run("r1"), frontier.promote_due(), frontier.tracked_bytes()):
        with pytest.raises(ConfigError, match=re.escape("not available with frontier.shards > 1")):
            await call
    with pytest.raises(ConfigError, match=re.escape("scope.maxPages")):
        await Frontier.open(redis_client, _settings(f"{job_id}-max", 4, scope={"maxPages": 10}))
    await frontier.delete()


async def test_a_crawl_on_the_cluster_spreads_its_partitions_and_claims_once(
    redis_cluster: RedisCluster, job_id: str
) -> None:
    masters = {
        redis_cluster.master_of(redis_cluster.slot(JobKeys(job_id, k).key("meta"))).port
        for k in range(8)
    }
    assert len(masters) >= 2
    settings = replace(_settings(job_id, 8), wait_replicas=1)
    frontier = await Frontier.connect(redis_cluster.url, settings)
    try:
        crawl = await _crawl(frontier)
        assert crawl["complete"]
        again = {url for url, n in crawl["claims"].items() if n > 1}
        assert len(again - {u for u in crawl["claims"] if u.endswith("/p4")}) <= 5
        assert crawl["stats"]["crawled"] + crawl["stats"]["dead"] == len(crawl["claims"])
        assert crawl["dead"] == sorted(f"http://{host}/p3" for host in _HOSTS)
        memory = await frontier.memory()
        assert memory.policy == "noeviction"
    finally:
        await frontier.delete()
        await frontier.aclose()
    client = connect(redis_cluster.url)
    try:
        assert sum([await client.exists(JobKeys(job_id, k).key("meta")) for k in range(8)]) == 0
    finally:
        await client.aclose()


async def test_links_wait_for_the_replicas_asked_even_when_seen_before(
    redis_client: aioredis.Redis, job_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis without replicas never confirms: the enqueue fails as unavailable (so the
    pages are not acked), and its retry, whose links are all seen now, fails alike."""
    monkeypatch.setattr(frontier_module, "WAIT_TIMEOUT_MS", 50)
    frontier = await Frontier.open(redis_client, replace(_settings(job_id, 4), wait_replicas=1))
    links = [Link(canonicalize(url), 1, "http://h0.test/") for url in _SEEDS[:20]]
    with pytest.raises(NotReplicated):
        await frontier.enqueue(links)
    with pytest.raises(NotReplicated):
        await frontier.enqueue(links)
    assert (await frontier.stats()).duplicates == len(links)
    assert await frontier.enqueue([]) == []  # nothing sent, nothing to wait for
    await frontier.delete()


def test_a_local_run_of_four_partitions_crawls_every_page_once(tmp_path: Path) -> None:
    site_config = SiteConfig(hosts=6, pages_per_host=25, hostile=False, latency_seconds=0.01)
    with TestSite(site_config) as site:
        since = time.monotonic()
        job = job_for_site(site, "four-partitions", frontier={"shards": 4})
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        run = crawlfleet(
            "run", str(job_file), "--out", str(tmp_path / "out"), "--workers", "2", "--json",
            cwd=tmp_path,
        )  # fmt: skip
        stdout, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-3000:]
        summary = json.loads(stdout.strip().splitlines()[-1])
        expected = {canonicalize(u) for u in site.expected_pages()}
        requested = requested_urls(site, since)
    assert summary["crawled"] == len(expected)
    assert summary["dead_lettered"] == 0
    assert set(requested) == expected
    assert max(requested.values()) == 1


async def test_a_small_claim_finds_the_one_partition_that_has_work(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    """A claim of one lease among eight partitions, all of whose work is one host's: never
    empty while that host has room (the split's first guess is asked, then where work is)."""
    frontier = await Frontier.open(
        redis_client, _settings(job_id, 8, concurrency={"perHost": 3, "hostDelaySeconds": 0})
    )
    await frontier.seed([f"http://{_HOSTS[0]}/p{page}" for page in range(6)])
    leases = [lease for _ in range(3) for lease in await frontier.claim("worker-a", 1)]
    assert len(leases) == 3
    assert await frontier.claim("worker-a", 1) == []  # the host is at perHost now
    await frontier.ack("worker-a", [lease.lease_id for lease in leases])
    assert len(await frontier.claim("worker-a", 5)) == 3
    await frontier.delete()


async def test_a_claim_sent_again_with_its_call_id_answers_the_same_leases(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    """A worker sends a claim again with its call id when the claim raised (no partition
    answered; a claim that some partitions answered returns their leases and is not sent
    again): every partition the first call asked answers its first reply, no lease twice."""
    frontier = await Frontier.open(redis_client, _settings(job_id, 8))
    await frontier.seed(_SEEDS)
    call_id = frontier.new_call_id()
    first = await frontier.claim("worker-a", 8, call_id=call_id)
    again = await frontier.claim("worker-a", 8, call_id=call_id)
    assert len(first) == 8
    assert [lease.lease_id for lease in again] == [lease.lease_id for lease in first]
    assert (await frontier.stats()).leased == len(first)
    await frontier.delete()


async def test_robots_answers_live_in_their_hosts_partitions(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    frontier = await Frontier.open(redis_client, _settings(job_id, 8))
    origins = [f"http://{host}" for host in _HOSTS[:12]]

    async def fetch(_: RobotsEntry | None) -> RobotsEntry:
        return RobotsEntry(200, "User-agent: *\nDisallow: /private\n", time.time())

    for origin in origins:
        await frontier.robots.fetch_once(origin, fetch, fresh=lambda _: True, lock_seconds=5)
    found = await frontier.robots.read([*origins, "http://never.test"])
    assert [entry.status if entry else None for entry in found] == [200] * 12 + [None]
    for origin in origins:
        home = JobKeys(job_id, partition_of(origin.removeprefix("http://"), 8))
        assert await redis_client.hexists(home.robots, origin)
    assert frontier.robots.state().origins == 12
    await frontier.delete()


async def test_partitions_on_one_redis_must_fit_it_together(
    private_client: aioredis.Redis, job_id: str
) -> None:
    """Eight filters of an eighth each are one filter's memory on one Redis: refused whole,
    before any partition is written, where each alone would have fitted."""
    await private_client.config_set("maxmemory", 64 * 1024 * 1024)
    large = replace(_settings(job_id, 8, dedup={"capacity": 50_000_000}), shards=8)
    with pytest.raises(RedisTooSmall, match="50,000,000 URLs"):
        await Frontier.open(private_client, large)
    assert await private_client.dbsize() == 0
