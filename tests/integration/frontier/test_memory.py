"""A Redis that fills up slows the crawl down instead of failing it.

The scripts enforce the fleet's backpressure (``set_pressure``): fewer claims per second and a
budget of new links per page; and work can always be finished: ack, fail, release and requeue
get through even when Redis refuses every other write (``maxmemory`` reached, noeviction).
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError

from crawlfleet.errors import FrontierFull
from crawlfleet.frontier import (
    Admission,
    Backpressure,
    FailOutcome,
    Failure,
    Frontier,
    Link,
    PressureLevel,
    canonicalize,
)
from crawlfleet.frontier.parents import listed_parent
from tests.integration.frontier.conftest import SHORT_LEASE, TEST_JOB, OpenFrontier
from tests.support.frontier_actor import FETCH_BUDGET_SECONDS, fetch_budget
from tests.support.specs import frontier_settings, merged


def page_links(parent: str, count: int, depth: int = 1) -> list[Link]:
    return [Link(canonicalize(f"{parent}p/{i}"), depth, parent) for i in range(count)]


async def test_memory_state(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    state = await frontier.memory()
    assert state.used_bytes > 0
    assert (state.max_bytes, state.policy, state.ratio) == (0, "noeviction", 0.0)


async def test_high_pressure_admits_a_budget_of_links_per_page(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    await frontier.set_pressure(Backpressure.at(PressureLevel.HIGH))
    assert (await frontier.stats()).pressure == Backpressure(PressureLevel.HIGH, 4, None)
    first = page_links("http://a.com/one/", 6)
    second = page_links("http://b.com/two/", 3)
    result = await frontier.enqueue([*first[:3], *second, *first[3:]])
    assert (
        result
        == [Admission.NEW] * 3 + [Admission.NEW] * 3 + [Admission.NEW] + [Admission.OVER_BUDGET] * 2
    )
    # Duplicates spend no budget; seeds have none.
    assert await frontier.enqueue(first[:1]) == [Admission.SEEN]
    assert await frontier.seed([f"http://c.com/{i}" for i in range(6)]) == 6
    stats = await frontier.stats()
    assert (stats.queued, stats.over_budget) == (13, 2)
    # Refused links never reached the filter: once the pressure is off they are admitted.
    assert await frontier.contains([first[4].url, first[5].url]) == [False, False]
    await frontier.set_pressure(Backpressure())
    assert (await frontier.stats()).pressure == Backpressure()
    assert await frontier.enqueue(first[4:]) == [Admission.NEW, Admission.NEW]


async def test_a_sitemaps_pages_share_its_budget_whatever_their_lastmods(
    open_frontier: OpenFrontier,
) -> None:
    """Each listed page's parent carries its own lastmod mark; the budget is the sitemap's."""
    frontier = await open_frontier()
    await frontier.set_pressure(Backpressure.at(PressureLevel.HIGH))
    sitemap = "http://a.com/sitemap.xml"
    listed = [
        Link(canonicalize(f"http://a.com/p/{i}"), 0, listed_parent(sitemap, f"2026-01-{i + 1:02}"))
        for i in range(6)
    ]
    assert await frontier.enqueue(listed) == [Admission.NEW] * 4 + [Admission.OVER_BUDGET] * 2
    leases = await frontier.claim("w", 10)
    assert {lease.parent for lease in leases} == {link.parent for link in listed[:4]}


async def test_critical_pressure_admits_no_new_links(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.set_pressure(Backpressure.at(PressureLevel.CRITICAL))
    links = page_links("http://a.com/", 3)
    assert await frontier.enqueue(links) == [Admission.OVER_BUDGET] * 3
    assert await frontier.seed(["http://a.com/"]) == 1
    stats = await frontier.stats()
    assert (stats.queued, stats.over_budget, stats.seen) == (1, 3, 1)


async def test_claims_per_second_are_capped_for_the_whole_job(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier(concurrency={"perHost": 100})
    await frontier.enqueue([link for h in "abc" for link in page_links(f"http://{h}.com/", 30)])
    await frontier.set_pressure(Backpressure(PressureLevel.HIGH, None, 10.0))
    first = await frontier.claim("w1", 50)
    assert len(first) == 10  # a second's worth, whoever asks
    assert len(await frontier.claim("w2", 50)) <= 1
    await asyncio.sleep(0.35)
    refilled = await frontier.claim("w1", 50)
    assert 2 <= len(refilled) <= 5  # ~10 a second: about 3.5 back after 0.35 s
    await frontier.set_pressure(Backpressure())
    assert len(await frontier.claim("w1", 50)) == 50


@pytest.mark.parametrize("flags", ["redis7", "redis6"])
async def test_work_is_finished_when_redis_refuses_writes(
    private_client: aioredis.Redis, job_id: str, flags: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if flags == "redis6":
        # Run the scripts bare, as on a Redis without script flags: the probe fails there.
        monkeypatch.setattr("crawlfleet.frontier.frontier._FLAGS_PROBE", "#! not lua")
    changes = {"lease": SHORT_LEASE, "fetch": fetch_budget(FETCH_BUDGET_SECONDS)}
    settings = frontier_settings(job_id, merged(TEST_JOB, changes))
    frontier = await Frontier.open(private_client, settings)
    await frontier.enqueue(page_links("http://a.com/", 8))
    await frontier.heartbeat("w1", {})
    leases = await frontier.claim("w1", 6)
    assert len(leases) == 4  # perHost 4

    await private_client.config_set("maxmemory", 1)  # past it from now on: noeviction refuses
    with pytest.raises(OutOfMemoryError):
        await private_client.set("other", "write")

    assert await frontier.ack("w1", [leases[0].lease_id]) == [True]
    retry = Failure(leases[1].lease_id, "http_5xx", "503", retryable=True)
    assert await frontier.fail("w1", [retry]) == [FailOutcome.RETRY]
    dead = Failure(leases[2].lease_id, "http_404", "gone" * 400, retryable=False)
    assert await frontier.fail("w1", [dead]) == [FailOutcome.DEAD]
    assert await frontier.release("w1", [leases[3].lease_id]) == [True]
    again = await frontier.claim("gone", 4)  # claims pop before they count: Redis 6 too
    assert len(again) == 4
    assert (await frontier.requeue_owner("gone")).requeued == 4
    # Their host slots stay counted until their fetch deadline; then claims free them.
    await asyncio.sleep(FETCH_BUDGET_SECONDS + 0.05)
    assert len(await frontier.claim("w1", 1)) == 1
    await asyncio.sleep(1.05)
    assert (await frontier.requeue_expired()).requeued == 1
    # Links are refused, not failed: the worker can still ack the pages they came from.
    assert (
        await frontier.enqueue(page_links("http://a.com/more/", 2)) == [Admission.OVER_BUDGET] * 2
    )
    with pytest.raises(FrontierFull):
        await frontier.seed(["http://b.com/"])
    with pytest.raises(FrontierFull):
        await frontier.add_if_new([canonicalize("http://b.com/")])
    if flags == "redis7":
        # Declared allow-oom: they only overwrite or move what exists.
        await frontier.heartbeat("w1", {"pages": 1})
        (live,) = await frontier.claim("w1", 1)
        assert await frontier.extend("w1", [live.lease_id]) == [True]
        await frontier.set_pressure(Backpressure.at(PressureLevel.CRITICAL))
        await frontier.set_host_delay("a.com", 0.0)
        await frontier.defer_host("a.com", 1.0, status=503)
    stats = await frontier.stats()
    assert (stats.crawled, stats.dead, stats.queued + stats.leased) == (1, 1, 6)
    # The refused links are counted (on Redis 6, with the next write Redis takes).
    await private_client.config_set("maxmemory", 0)
    await frontier.set_pressure(Backpressure())
    assert await frontier.enqueue(page_links("http://a.com/after/", 1)) == [Admission.NEW]
    assert (await frontier.stats()).over_budget == 2


#: What the bounded crawl below may use above an empty Redis: room for about a thousand of its
#: 230-byte URLs queued with their parents, the Bloom filter and the job's counters.
JOB_HEADROOM_BYTES = 1_500_000


async def test_a_bounded_crawl_in_a_small_redis_slows_down_and_completes(
    private_client: aioredis.Redis, job_id: str
) -> None:
    """A fleet that watches memory() and sets the pressure, over a crawl that would not fit.

    Every page links 20 new pages (8,000 in all) of long URLs, more than maxmemory holds
    queued at once; the fleet turns HIGH pressure on at 60 % of maxmemory and CRITICAL at
    75 %. No call fails, Redis never passes maxmemory, and the crawl completes with every
    link either crawled or counted as refused.
    """
    settings = frontier_settings(job_id, merged(TEST_JOB, {"dedup": {"capacity": 20_000}}))
    frontier = await Frontier.open(private_client, settings)
    await frontier.seed(["http://a.com/"])
    used = (await frontier.memory()).used_bytes
    # The job gets a fixed 1.5 MB above what Redis uses empty (its baseline varies).
    await private_client.config_set("maxmemory", used + JOB_HEADROOM_BYTES)
    pressures: set[PressureLevel] = set()
    peak = 0.0

    async def steer() -> None:
        nonlocal peak
        state = await frontier.memory()
        peak = max(peak, state.ratio)
        level = (
            PressureLevel.CRITICAL
            if state.ratio >= 0.75
            else PressureLevel.HIGH
            if state.ratio >= 0.6
            else PressureLevel.NONE
        )
        pressures.add(level)
        await frontier.set_pressure(Backpressure.at(level))

    number = 0
    while not (stats := await frontier.stats()).complete:
        await steer()
        leases = await frontier.claim("w", 4)
        links = []
        for lease in leases:
            for _ in range(20):
                if number < 8_000:
                    number += 1
                    url = f"http://h{number % 7}.com/page/{number}/{'x' * 200}"
                    links.append(Link(canonicalize(url), lease.depth + 1, lease.url))
        await frontier.enqueue(links)
        await frontier.ack("w", [lease.lease_id for lease in leases])
    assert stats.over_budget > 0
    # About 1,000 pages' worth fits (5,000 of these URLs would need about 1.4 MB queued):
    # more than a sliver went on under pressure, far fewer than the 8,000 linked.
    assert 500 < stats.crawled < 4_000
    assert stats.crawled + stats.over_budget == 1 + number
    assert {PressureLevel.HIGH, PressureLevel.CRITICAL} <= pressures
    assert peak < 1.0
