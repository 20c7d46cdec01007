"""Bloom sizing is the textbook optimum, and absurd settings are refused with the field name."""

from __future__ import annotations

import math

import pytest

from crawlfleet.errors import ConfigError
from crawlfleet.frontier.bloom import MAX_SEGMENT_BITS, BloomParams, allocated_bytes, digests


@pytest.mark.parametrize(
    ("capacity", "error_rate"),
    [(1_000, 0.01), (1_000_000, 0.01), (1_000_000, 0.001), (50_000_000, 0.05)],
)
def test_sizing_matches_formula(capacity: int, error_rate: float) -> None:
    params = BloomParams.for_capacity(capacity, error_rate)
    ideal_bits = -capacity * math.log(error_rate) / math.log(2) ** 2
    # At least the formula's size; above it only by allocator slack turned into bits.
    assert ideal_bits <= params.bits <= ideal_bits * 1.05 + 1024
    assert allocated_bytes(params) <= ideal_bits / 8 * 1.05 + 1024
    assert params.hashes == round(ideal_bits / capacity * math.log(2))
    # At capacity the expected rate is the target or a little better.
    assert error_rate * 0.8 <= params.false_positive_rate(capacity) <= error_rate * 1.02


@pytest.mark.parametrize("capacity", [10_000, 200_000, 1_000_000, 30_000_000])
def test_one_percent_costs_under_one_and_a_quarter_bytes_per_url(capacity: int) -> None:
    params = BloomParams.for_capacity(capacity, 0.01)
    assert allocated_bytes(params) / capacity <= 1.25


def test_large_filters_split_into_segments_under_512_mb() -> None:
    params = BloomParams.for_capacity(5_000_000_000, 0.01)
    assert params.segments > 1
    assert params.segment_bits <= MAX_SEGMENT_BITS < 2**32
    assert params.segment_bits * params.segments == params.bits


@pytest.mark.parametrize(
    ("capacity", "error_rate", "field"),
    [
        (0, 0.01, "dedup.capacity"),
        (-5, 0.01, "dedup.capacity"),
        (10**12, 0.01, "dedup.capacity"),
        (1.5, 0.01, "dedup.capacity"),
        (True, 0.01, "dedup.capacity"),
        (1000, 0.0, "dedup.errorRate"),
        (1000, 0.5, "dedup.errorRate"),
        (1000, 1.2, "dedup.errorRate"),
        (1000, float("nan"), "dedup.errorRate"),
    ],
)
def test_absurd_settings_refused(capacity: object, error_rate: float, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        BloomParams.for_capacity(capacity, error_rate)  # type: ignore[arg-type]


def test_meta_round_trip() -> None:
    params = BloomParams.for_capacity(123_456, 0.003)
    assert BloomParams.from_meta(params.to_meta()) == params


def test_digests_are_12_bytes_and_stable() -> None:
    a, b, a2 = digests(["http://a.com/", "http://b.com/", "http://a.com/"])
    assert len(a) == 12
    assert a == a2
    assert a != b
