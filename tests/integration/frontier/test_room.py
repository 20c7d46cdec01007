"""A frontier is not created on a Redis whose free memory its Bloom filter would not fit.

A job on an external Redis (redis.url, redis.secretRef) is measured when its frontier opens:
INFO memory's maxmemory less what the Redis holds, against the filter's first layer, which its
first few hundred URLs write whole. A managed Redis is measured before that, by the model.
"""

from __future__ import annotations

import re

import pytest
import redis.asyncio as aioredis

from crawlfleet.crawljob.dedup import first_layer_bytes
from crawlfleet.errors import RedisTooSmall, UnsafeRedis
from crawlfleet.frontier import Frontier
from tests.integration.frontier.conftest import TEST_JOB
from tests.support.specs import frontier_settings, merged

MIB = 1024 * 1024


async def test_a_filter_past_the_free_memory_is_refused_at_open_with_both_figures(
    private_client: aioredis.Redis, job_id: str
) -> None:
    await private_client.config_set("maxmemory", 64 * MIB)
    large = frontier_settings(job_id, merged(TEST_JOB, {"dedup": {"capacity": 50_000_000}}))
    assert first_layer_bytes(50_000_000, 0.01) > 48 * MIB  # 3/4 of 64 MiB
    with pytest.raises(RedisTooSmall) as raised:
        await Frontier.open(private_client, large)
    message = str(raised.value)
    assert isinstance(raised.value, UnsafeRedis)  # the operator shows it as it shows those
    assert f"job {job_id}: the Bloom filter of 50,000,000 URLs at errorRate 0.01 needs" in message
    # 3/4 of what is free: of 64 MiB less the little the empty Redis holds.
    assert re.search(
        r"more than the 4\d\.\d MiB it may take of this Redis \(maxmemory 64\.0", message
    )
    assert await private_client.dbsize() == 0  # nothing of the job was written
    # A filter that fits opens; once it exists the job joins it whatever the Redis holds since.
    settings = frontier_settings(job_id, merged(TEST_JOB, {"dedup": {"capacity": 1_000_000}}))
    frontier = await Frontier.open(private_client, settings)
    assert await frontier.seed(["https://a.example/"]) == 1
    used = int((await private_client.info("memory"))["used_memory"])
    await private_client.config_set("maxmemory", used + MIB)
    again = await Frontier.open(private_client, settings)
    assert again.epoch == frontier.epoch


async def test_a_redis_without_maxmemory_is_not_measured(
    private_client: aioredis.Redis, job_id: str
) -> None:
    await private_client.config_set("maxmemory", 0)
    settings = frontier_settings(job_id, merged(TEST_JOB, {"dedup": {"capacity": 50_000_000}}))
    frontier = await Frontier.open(private_client, settings)  # nothing written yet: no filter
    assert frontier.bloom.capacity == 50_000_000
