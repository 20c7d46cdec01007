"""Freshness: what a job that revisits its pages shows instead of a progress."""

from __future__ import annotations

import dataclasses

from crawlfleet.fleet import Freshness
from crawlfleet.frontier import FrontierStats
from crawlfleet.frontier.models import LAG_BUCKETS_SECONDS, LagHistogram

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def test_freshness_is_read_from_the_frontiers_counters() -> None:
    stats = FrontierStats(
        seeded=True,
        tracked=120,
        revisits_due=4,
        next_revisit_in_seconds=42.4,
        changed=3,
        unchanged=10,
        not_modified=40,
        gone=1,
        revisit_lag=LagHistogram((0, 10, 0, 0, 1) + (0,) * (len(LAG_BUCKETS_SECONDS) - 4)),
    )
    fresh = Freshness.of(stats, now=NOW)
    assert (fresh.tracked, fresh.due, fresh.next_revisit_at) == (120, 4, NOW + 42.4)
    assert (fresh.lag_p50_seconds, fresh.lag_p95_seconds) == (5.0, 60.0)
    assert fresh.to_mapping() == {
        "tracked": 120,
        "due": 4,
        "nextRevisitAt": "2027-01-15T08:00:42Z",
        "lagP50Seconds": 5.0,
        "lagP95Seconds": 60.0,
        "changed": 3,
        "unchanged": 10,
        "notModified": 40,
        "gone": 1,
    }
    # Nothing tracked, no revisit yet: the unknowns are left out, not zeros.
    empty = Freshness.of(FrontierStats(seeded=True), now=NOW).to_mapping()
    assert "nextRevisitAt" not in empty
    assert "lagP95Seconds" not in empty


#: A job's freshness, as the local line and the metrics show it.
FRESH = Freshness(
    tracked=120,
    due=4,
    next_revisit_at=NOW + 42,
    lag_p50_seconds=5.0,
    lag_p95_seconds=60.0,
    changed=3,
    unchanged=10,
    not_modified=40,
    gone=1,
)


def test_the_local_line_says_freshness_instead_of_progress() -> None:
    fresh = FRESH
    assert fresh.line(NOW) == (
        "tracked 120  due 4  next revisit in 42s  lag p50 5.0s p95 1m00s"
        "  changed 3  unchanged 10  not-modified 40  gone 1"
    )
    assert fresh.line(NOW + 43).startswith("tracked 120  due 4  next revisit due now  lag")
    unknown = dataclasses.replace(
        fresh, next_revisit_at=None, lag_p50_seconds=None, lag_p95_seconds=None
    )
    assert unknown.line(NOW).startswith("tracked 120  due 4  next revisit: none scheduled  changed")
