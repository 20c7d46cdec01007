"""A frontier that vanished or was re-created is FrontierLost, never a frontier made up anew.

Redis restarted without its data (FLUSHALL stands in for it), the job's meta key deleted, or
the frontier re-created under another epoch: every public method that reads or changes the
job's state raises FrontierLost (``ping``, ``memory`` and ``delete`` speak of the server or
clean up, and do not check), and opening with the remembered epoch says what was found.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from crawlfleet.errors import FrontierLayoutMismatch, FrontierLost, UnsafeRedis
from crawlfleet.frontier import Frontier, Link, canonicalize
from crawlfleet.frontier.frontier import LAYOUT_VERSION
from tests.integration.frontier.conftest import TEST_JOB, OpenFrontier
from tests.integration.frontier.test_unavailable import CALLS
from tests.support.specs import frontier_settings

#: Methods that do not check the epoch, and why (module docstring).
UNCHECKED = {"ping", "memory", "delete"}
CHECKED = sorted(set(CALLS) - UNCHECKED)


async def _seeded(client: aioredis.Redis, job_id: str) -> Frontier:
    frontier = await Frontier.open(client, frontier_settings(job_id, TEST_JOB))
    await frontier.seed(["http://a.example/"])
    await frontier.enqueue([Link(canonicalize("http://a.example/1"), 1, "http://a.example/")])
    await frontier.claim("w1", 1)
    await frontier.heartbeat("w1", {})
    return frontier


@pytest.mark.parametrize(
    ("loss", "found"),
    [("flushall", "Redis is empty"), ("meta key deleted", "the job's meta key is missing")],
)
@pytest.mark.parametrize("name", CHECKED)
async def test_every_method_is_lost(
    private_client: aioredis.Redis, backend: str, job_id: str, loss: str, found: str, name: str
) -> None:
    frontier = await _seeded(private_client, job_id)
    if loss == "flushall":
        await private_client.flushall()
    else:
        await private_client.delete(frontier.keys.key("meta"))
    keys_left = await private_client.dbsize()
    with pytest.raises(FrontierLost, match=f"job {job_id}: {found}"):
        await CALLS[name](frontier)
    # Nothing was made up on the way: no meta, no new key.
    assert await private_client.dbsize() == keys_left


@pytest.mark.parametrize("name", CHECKED)
async def test_a_handle_of_an_earlier_epoch_touches_nothing(
    redis_client: aioredis.Redis, job_id: str, name: str
) -> None:
    old = await _seeded(redis_client, job_id)
    await old.delete()
    new = await _seeded(redis_client, job_id)
    assert new.epoch != old.epoch
    before = await redis_client.hgetall(new.keys.key("stats"))
    with pytest.raises(FrontierLost, match="re-created"):
        await CALLS[name](old)
    assert await redis_client.hgetall(new.keys.key("stats")) == before


async def test_unchecked_methods_still_answer(
    private_client: aioredis.Redis, backend: str, job_id: str
) -> None:
    frontier = await _seeded(private_client, job_id)
    await private_client.flushall()
    await frontier.ping()
    assert (await frontier.memory()).used_bytes > 0
    assert await frontier.delete() == 0


async def test_open_with_the_remembered_epoch(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    assert len(frontier.epoch) == 16
    again = await Frontier.open(frontier.client, frontier.settings, expect_epoch=frontier.epoch)
    assert (again.epoch, again.reseeded) == (frontier.epoch, None)
    # Without a remembered epoch an open joins whatever is there (a worker's first open).
    assert (await Frontier.open(frontier.client, frontier.settings)).epoch == frontier.epoch


async def test_open_says_what_it_found(
    private_client: aioredis.Redis, backend: str, job_id: str
) -> None:
    frontier = await _seeded(private_client, job_id)
    settings, epoch = frontier.settings, frontier.epoch

    await private_client.delete(frontier.keys.key("meta"))
    with pytest.raises(FrontierLost, match=f"job {job_id}: the job's meta key is missing"):
        await Frontier.open(private_client, settings, expect_epoch=epoch)
    assert not await private_client.exists(frontier.keys.key("meta"))  # nothing re-created

    await private_client.flushall()
    with pytest.raises(FrontierLost, match="Redis is empty"):
        await Frontier.open(private_client, settings, expect_epoch=epoch)
    assert await private_client.dbsize() == 0

    other = await Frontier.open(private_client, settings)  # e.g. a worker's open re-created it
    with pytest.raises(FrontierLost, match=f"re-created \\(epoch {other.epoch}, created"):
        await Frontier.open(private_client, settings, expect_epoch=epoch)


async def test_reseed_starts_a_new_epoch_without_leftovers(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    frontier = await _seeded(redis_client, job_id)
    await redis_client.delete(frontier.keys.key("meta"))  # queues, leases, stats are left over
    reseeded = await Frontier.open(
        redis_client, frontier.settings, expect_epoch=frontier.epoch, reseed=True
    )
    assert reseeded.epoch != frontier.epoch
    assert reseeded.reseeded is not None
    assert "meta key is missing" in reseeded.reseeded
    stats = await reseeded.stats()
    assert (stats.seeded, stats.queued, stats.leased, stats.seen) == (False, 0, 0, 0)
    assert await reseeded.workers() == []
    assert await reseeded.seed(["http://a.example/"]) == 1  # the old filter is gone too
    # Reseeding a frontier that is not lost changes nothing.
    same = await Frontier.open(
        redis_client, frontier.settings, expect_epoch=reseeded.epoch, reseed=True
    )
    assert (same.epoch, same.reseeded, (await same.stats()).queued) == (reseeded.epoch, None, 1)


async def test_a_frontier_of_another_layout_is_refused(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    settings = frontier_settings(job_id, TEST_JOB)
    key = f"cf:{{{job_id}}}:meta"
    # A frontier written before epochs (layout 1): settings, no epoch.
    await redis_client.hset(key, mapping={"per_host": "2", "bloom_backend": "bitmap"})
    with pytest.raises(
        FrontierLayoutMismatch, match=rf"key layout 1, .* reads layout {LAYOUT_VERSION} only"
    ):
        await Frontier.open(redis_client, settings)
    for older in ("2", "3", "99"):  # 2, 3: before the growing filter, the compact queues
        await redis_client.hset(key, mapping={"epoch": "e", "layout": older})
        with pytest.raises(FrontierLayoutMismatch, match=f"key layout {older}, "):
            await Frontier.open(redis_client, settings)
    assert await redis_client.hget(key, "per_host") == "2"  # nothing was overwritten


@pytest.mark.parametrize(
    "policy", ["allkeys-lru", "volatile-lru", "allkeys-random", "volatile-ttl"]
)
async def test_an_evicting_redis_is_refused(
    private_client: aioredis.Redis, job_id: str, policy: str
) -> None:
    await private_client.config_set("maxmemory-policy", policy)
    with pytest.raises(UnsafeRedis, match=f"maxmemory-policy is {policy}.*noeviction"):
        await Frontier.open(private_client, frontier_settings(job_id, TEST_JOB))
    assert await private_client.dbsize() == 0  # refused before anything was written
    await private_client.config_set("maxmemory-policy", "noeviction")
    await Frontier.open(private_client, frontier_settings(job_id, TEST_JOB))
