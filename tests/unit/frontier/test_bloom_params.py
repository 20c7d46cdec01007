"""Bloom sizing is the textbook optimum, its layers' rates sum to at most the target, and absurd
settings are refused with the field name."""

from __future__ import annotations

import itertools
import math

import pytest

from crawlfleet.errors import ConfigError
from crawlfleet.frontier.bloom import (
    FIRST_LAYER_SHARE,
    GROWTH,
    MAX_CAPACITY,
    MAX_LAYERS,
    MAX_SEGMENT_BITS,
    BloomParams,
    allocated_bytes,
    digests,
)


@pytest.mark.parametrize(
    ("capacity", "error_rate"),
    [(1_000, 0.01), (1_000_000, 0.01), (1_000_000, 0.001), (50_000_000, 0.05)],
)
def test_sizing_matches_formula(capacity: int, error_rate: float) -> None:
    params = BloomParams.for_capacity(capacity, error_rate)
    first = error_rate * FIRST_LAYER_SHARE
    ideal_bits = -capacity * math.log(first) / math.log(2) ** 2
    # At least the formula's size; above it only by allocator slack turned into bits (and
    # what rounding k to an integer asks for).
    assert ideal_bits <= params.bits <= ideal_bits * 1.05 + 1024
    assert allocated_bytes(params) <= ideal_bits / 8 * 1.05 + 1024
    assert params.hashes == round(ideal_bits / capacity * math.log(2))
    # At capacity the expected rate is the first layer's target or a little better.
    assert first * 0.8 <= params.false_positive_rate(capacity) <= first


@pytest.mark.parametrize(
    ("capacity", "error_rate"), [(1, 0.01), (1_000, 0.01), (10**6, 1e-9), (10**9, 0.3)]
)
def test_layers_grow_and_their_rates_sum_below_the_target(capacity: int, error_rate: float) -> None:
    params = BloomParams.for_capacity(capacity, error_rate)
    layers = params.layers
    assert layers[0].capacity == capacity
    assert all(b.capacity == a.capacity * GROWTH for a, b in itertools.pairwise(layers))
    assert all(b.error_rate < a.error_rate for a, b in itertools.pairwise(layers))
    assert len(layers) <= MAX_LAYERS
    assert sum(layer.capacity for layer in layers[:-1]) < MAX_CAPACITY
    # Every layer full: the sum of their rates (the estimate) is still the target or less.
    full = sum(layer.capacity for layer in layers)
    assert params.estimate(full).false_positive_rate <= error_rate
    assert sum(layer.false_positive_rate(layer.capacity) for layer in layers) <= error_rate


def test_estimate_follows_the_layers() -> None:
    params = BloomParams.for_capacity(1_000, 0.01)
    assert params.estimate(0) == params.estimate(0, layers=1)
    one = params.estimate(1_000)
    assert (one.layers, one.capacity, one.fill_ratio) == (1, 1_000, 1.0)
    two = params.estimate(1_001)
    assert (two.layers, two.capacity, two.fill_ratio) == (2, 3_000, 1 / 2_000)
    three = params.estimate(5_000)
    assert (three.layers, three.capacity, three.fill_ratio) == (3, 7_000, 0.5)
    assert one.false_positive_rate < three.false_positive_rate <= 0.01
    # A filter that could not grow (no room under maxmemory) overfills its newest layer.
    stuck = params.estimate(5_000, layers=1)
    assert (stuck.layers, stuck.fill_ratio) == (1, 5.0)
    assert stuck.false_positive_rate > 0.01


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


def test_digests_are_16_bytes_and_stable() -> None:
    a, b, a2 = digests(["http://a.com/", "http://b.com/", "http://a.com/"])
    assert len(a) == 16
    assert a == a2
    assert a != b


@pytest.mark.parametrize(
    ("capacity", "error_rate"), [(1, 0.5 - 1e-9), (1_000, 1e-7), (12_345, 0.01), (10**7, 1e-9)]
)
def test_every_segment_has_a_prime_number_of_bits(capacity: int, error_rate: float) -> None:
    # The stride h2 is 1..bits-1: coprime with a prime size, so k positions are k bits.
    for layer in BloomParams.for_capacity(capacity, error_rate).layers[:6]:
        bits = layer.segment_bits
        assert bits * layer.segments == layer.bits
        assert bits > 1
        assert all(bits % d for d in range(2, math.isqrt(bits) + 1)), bits
