"""The frontier's robots.txt cache and its fetch lock (robots_store.lua) on a real redis-server.

The crawler's reading of robots.txt is tested in tests/integration/crawler/test_robots.py; these
tests hold the lock protocol itself: one fetch per origin, a lock only its holder releases,
nothing left locked after a failed fetch.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
import redis.asyncio as aioredis

from crawlfleet.frontier import Frontier, RobotsEntry
from crawlfleet.frontier.robots_cache import FetchEntry, RobotsCache, RobotsCacheState
from tests.support.specs import frontier_settings

ORIGIN = "http://a.test"
ENTRY = RobotsEntry(200, "User-agent: *\nDisallow: /\n", 1_700_000_000.0)

_jobs = itertools.count()


@pytest.fixture
async def frontier(redis_client: aioredis.Redis) -> Frontier:
    settings = frontier_settings(f"test.robots-cache-{next(_jobs)}")
    return await Frontier.open(redis_client, settings)


@pytest.fixture(params=["bitmap"])
def backend(request: pytest.FixtureRequest) -> str:
    """The robots cache does not touch the Bloom filter: one backend is enough."""
    return str(request.param)


def always_fresh(entry: RobotsEntry) -> bool:
    return True


async def test_one_fetch_for_many_workers_and_the_lock_is_gone_after(
    frontier: Frontier, redis_client: aioredis.Redis
) -> None:
    calls = 0

    async def fetch(stored: RobotsEntry | None) -> RobotsEntry:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.2)
        return ENTRY

    workers = [(await Frontier.open(redis_client, frontier.settings)).robots for _ in range(4)]
    got = await asyncio.gather(
        *(w.fetch_once(ORIGIN, fetch, fresh=always_fresh, lock_seconds=5.0) for w in workers)
    )
    assert got == [ENTRY] * 4
    assert calls == 1
    assert await frontier.robots.read([ORIGIN, "http://b.test"]) == [ENTRY, None]
    assert await redis_client.exists(frontier.keys.robots_lock(ORIGIN)) == 0


async def test_a_lock_taken_over_after_expiry_is_not_released_by_the_late_holder(
    frontier: Frontier, redis_client: aioredis.Redis
) -> None:
    lock = frontier.keys.robots_lock(ORIGIN)

    async def slow_fetch(stored: RobotsEntry | None) -> RobotsEntry:
        await asyncio.sleep(0.3)  # outlives the 0.1 s lock
        await redis_client.set(lock, "another-worker", px=5000)  # which another worker took
        return ENTRY

    got = await frontier.robots.fetch_once(ORIGIN, slow_fetch, fresh=always_fresh, lock_seconds=0.1)
    assert got == ENTRY
    assert await redis_client.get(lock) == "another-worker"  # fenced: not ours to release
    assert await frontier.robots.read([ORIGIN]) == [ENTRY]  # the answer is kept all the same


async def test_a_failed_fetch_releases_the_lock_and_stores_nothing(
    frontier: Frontier, redis_client: aioredis.Redis
) -> None:
    async def failing_fetch(stored: RobotsEntry | None) -> RobotsEntry:
        raise RuntimeError("cut")

    with pytest.raises(RuntimeError, match="cut"):
        await frontier.robots.fetch_once(
            ORIGIN, failing_fetch, fresh=always_fresh, lock_seconds=5.0
        )
    assert await redis_client.exists(frontier.keys.robots_lock(ORIGIN)) == 0
    assert await frontier.robots.read([ORIGIN]) == [None]


async def test_a_stale_stored_entry_is_fetched_again(frontier: Frontier) -> None:
    await frontier.robots.fetch_once(
        ORIGIN, _returning(ENTRY), fresh=always_fresh, lock_seconds=5.0
    )
    newer = RobotsEntry(404, "", ENTRY.fetched_at + 100)
    got = await frontier.robots.fetch_once(
        ORIGIN, _returning(newer), fresh=lambda e: e.fetched_at > ENTRY.fetched_at, lock_seconds=5.0
    )
    assert got == newer
    assert await frontier.robots.read([ORIGIN]) == [newer]


async def test_the_fetch_is_handed_the_stored_entry(frontier: Frontier) -> None:
    """A failure streak and the last good answer carry over from the entry stored before."""
    failing = RobotsEntry(
        503, "", ENTRY.fetched_at + 10, failures=2, failing_since=ENTRY.fetched_at, good=ENTRY
    )
    await frontier.robots.fetch_once(
        ORIGIN, _returning(failing), fresh=always_fresh, lock_seconds=5.0
    )
    assert await frontier.robots.read([ORIGIN]) == [failing]  # the nested entry round-trips
    handed: list[RobotsEntry | None] = []

    async def fetch(stored: RobotsEntry | None) -> RobotsEntry:
        handed.append(stored)
        return ENTRY

    await frontier.robots.fetch_once(ORIGIN, fetch, fresh=lambda e: False, lock_seconds=5.0)
    assert handed == [failing]


def _returning(entry: RobotsEntry) -> FetchEntry:
    async def fetch(stored: RobotsEntry | None) -> RobotsEntry:
        return entry

    return fetch


def _bounded_cache(frontier: Frontier, now: list[float], **bounds: int) -> RobotsCache:
    """Another worker's handle on the job's cache, with small bounds and a clock of its own."""
    return RobotsCache(
        frontier.client,
        frontier.keys,
        frontier._scripts,
        epoch=frontier.epoch,
        clock=lambda: now[0],
        **bounds,
    )


async def _store(cache: RobotsCache, origin: str, entry: RobotsEntry = ENTRY) -> None:
    async def fetch(stored: RobotsEntry | None) -> RobotsEntry:
        return entry

    await cache.fetch_once(origin, fetch, fresh=lambda entry: False, lock_seconds=5.0)


async def test_the_cache_keeps_its_origin_bound_least_recently_used_out_first(
    frontier: Frontier, redis_client: aioredis.Redis
) -> None:
    now = [1000.0]
    cache = _bounded_cache(frontier, now, max_origins=3)
    for name in "abc":
        now[0] += 1
        await _store(cache, f"http://{name}.test")
    now[0] += 1
    assert await cache.read(["http://a.test"]) == [ENTRY]  # a use: a is now the most recent
    now[0] += 1
    await _store(cache, "http://d.test")
    origins = ["http://a.test", "http://b.test", "http://c.test", "http://d.test"]
    assert await cache.read(origins) == [ENTRY, None, ENTRY, ENTRY]  # b, least recently used
    assert cache.state() == RobotsCacheState(3, 3 * len(ENTRY.to_json()), 1)
    assert await redis_client.zcard(frontier.keys.key("robots-used")) == 3
    assert await redis_client.hlen(frontier.keys.robots) == 3


async def test_the_cache_keeps_its_byte_bound_and_counts_what_it_holds(
    frontier: Frontier, redis_client: aioredis.Redis
) -> None:
    now = [1000.0]
    entry_bytes = len(ENTRY.to_json())
    large = RobotsEntry(200, "User-agent: *\n" + "Disallow: /x\n" * 100, 1_700_000_000.0)
    cache = _bounded_cache(frontier, now, max_bytes=3 * entry_bytes)
    for number in range(3):
        now[0] += 1
        await _store(cache, f"http://{number}.test")
    assert cache.state() == RobotsCacheState(3, 3 * entry_bytes, 0)
    now[0] += 1
    await _store(cache, "http://large.test", large)  # alone past the bound: kept, all else out
    assert cache.state() == RobotsCacheState(1, len(large.to_json()), 3)
    now[0] += 1
    await _store(cache, "http://large.test", ENTRY)  # replaced: the bytes follow
    assert cache.state() == RobotsCacheState(1, entry_bytes, 3)
    stats = await redis_client.hmget(frontier.keys.key("stats"), "robots_bytes", "robots_evictions")
    assert [int(v) for v in stats] == [entry_bytes, 3]
