"""Heartbeat ages as the steering tick judges them: silence while Redis was away is not
counted (crawlfleet/fleet/steer.py, ``heard_while_reachable``)."""

from __future__ import annotations

import dataclasses

from crawlfleet.fleet.steer import heard_while_reachable
from crawlfleet.frontier import WorkerHeartbeat

BEAT = WorkerHeartbeat("w-1", last_seen=100.0, age_seconds=30.0)
FRESH = dataclasses.replace(BEAT, worker="w-2", age_seconds=1.0)


def test_ages_stand_while_the_frontier_was_never_away() -> None:
    assert heard_while_reachable([BEAT, FRESH], now=200.0, reachable_since=None) == [BEAT, FRESH]


def test_ages_are_capped_at_the_time_since_the_frontier_came_back() -> None:
    capped = heard_while_reachable([BEAT, FRESH], now=200.0, reachable_since=195.0)
    assert [(b.worker, b.age_seconds) for b in capped] == [("w-1", 5.0), ("w-2", 1.0)]
    assert capped[0].counters == BEAT.counters


def test_a_tick_that_first_reaches_it_again_counts_no_silence() -> None:
    assert heard_while_reachable([BEAT], now=200.0, reachable_since=200.0)[0].age_seconds == 0
    # a clock that ran back (back after now) counts none either, never a negative age
    assert heard_while_reachable([BEAT], now=200.0, reachable_since=201.0)[0].age_seconds == 0
