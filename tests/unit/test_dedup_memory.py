"""The Bloom filter's memory, known from the spec, against the Redis the job gets."""

from __future__ import annotations

import pytest

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.crawljob.dedup import BLOOM_MEMORY_SHARE, first_layer_bytes, memory_problem
from crawlfleet.errors import ConfigError
from crawlfleet.frontier.bloom import BloomParams

MIB = 1024 * 1024
SEED = "https://books.example/"


@pytest.mark.parametrize("capacity", [1, 1000, 1_000_000, 123_456_789])
@pytest.mark.parametrize("error_rate", [1e-9, 1e-4, 0.01, 0.3])
def test_the_model_counts_the_bytes_the_frontier_lays_out(capacity: int, error_rate: float) -> None:
    # One formula (crawljob.dedup.bloom_shape): the frontier only fits it to the allocator.
    laid_out = BloomParams.for_capacity(capacity, error_rate).layers[0].bytes
    counted = first_layer_bytes(capacity, error_rate)
    assert counted <= laid_out <= counted * 1.02 + 64 * 64


def test_a_filter_past_the_managed_redis_is_refused_with_both_figures_and_the_fix() -> None:
    with pytest.raises(ConfigError) as raised:
        CrawlJobSpec.from_mapping({"seeds": [SEED], "dedup": {"capacity": 1_000_000_000}})
    message = str(raised.value)
    assert (
        "spec.dedup.capacity: the Bloom filter of 1,000,000,000 URLs at errorRate 0.01 needs"
        in (message)
    )
    assert "it may take of the managed Redis of memoryLimit 1Gi (maxmemory 819.2 MiB;" in message
    limit = message.rsplit("redis.managed.memoryLimit: ", 1)[1].split("Mi", 1)[0]
    # The limit the sentence names is enough, and a little less is not.
    raised_to = {"managed": {"memoryLimit": f"{limit}Mi"}}
    fits = CrawlJobSpec.from_mapping(
        {"seeds": [SEED], "dedup": {"capacity": 1_000_000_000}, "redis": raised_to}
    )
    assert fits.redis.managed is not None
    short = {"managed": {"memoryLimit": f"{int(limit) - 2}Mi"}}
    with pytest.raises(ConfigError, match=r"spec\.dedup\.capacity: the Bloom filter"):
        CrawlJobSpec.from_mapping(
            {"seeds": [SEED], "dedup": {"capacity": 1_000_000_000}, "redis": short}
        )
    # An external Redis is measured when the frontier opens, not here.
    CrawlJobSpec.from_mapping(
        {"seeds": [SEED], "dedup": {"capacity": 1_000_000_000}, "redis": {"url": "redis://r"}}
    )


def test_the_share_is_of_what_is_free() -> None:
    need = first_layer_bytes(1_000_000, 0.01)
    exact = int(need / BLOOM_MEMORY_SHARE) + 1
    assert memory_problem(1_000_000, 0.01, exact, 0, "r") is None
    found = memory_problem(1_000_000, 0.01, exact, MIB, "this Redis")
    assert found is not None
    assert "of this Redis (maxmemory 1.5 MiB, 1.0 MiB of it in use;" in found
