"""AIMD: halve after five failures in a row, +1 after twenty successes, within 1..max."""

from __future__ import annotations

import pytest

from crawlfleet.crawler.politeness.concurrency import AdaptiveLimit


def test_starts_at_maximum_and_halves_after_five_failures() -> None:
    limit = AdaptiveLimit(maximum=16)
    assert limit.limit == 16
    for _ in range(4):
        assert limit.record(False) == 16
    assert limit.record(False) == 8
    for _ in range(5):
        limit.record(False)
    assert limit.limit == 4


def test_a_success_resets_the_failure_streak() -> None:
    limit = AdaptiveLimit(maximum=16)
    for _ in range(4):
        limit.record(False)
    limit.record(True)
    for _ in range(4):
        limit.record(False)
    assert limit.limit == 16


def test_grows_by_one_after_twenty_successes_up_to_maximum() -> None:
    limit = AdaptiveLimit(maximum=4)
    for _ in range(10):
        limit.record(False)
    assert limit.limit == 1
    for _ in range(19):
        limit.record(True)
    assert limit.limit == 1
    assert limit.record(True) == 2
    for _ in range(200):
        limit.record(True)
    assert limit.limit == 4


def test_never_below_one() -> None:
    limit = AdaptiveLimit(maximum=2)
    for _ in range(100):
        limit.record(False)
    assert limit.limit == 1


def test_refuses_zero_maximum() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AdaptiveLimit(maximum=0)
