"""The frontier's pushback run (spec.autoPause): a failure of a pushback class (429, 403, a
soft block) starts it, more extend it, any other failure leaves it as it is, and a page acked
ends it; a partitioned frontier is pushed back only when each partition with work is."""

from __future__ import annotations

from crawlfleet.frontier import Failure, FrontierStats, Link, canonicalize
from crawlfleet.frontier.partitions import combine_stats
from tests.integration.frontier.conftest import OpenFrontier


async def test_pushback_starts_with_a_429_holds_through_other_failures_and_ends_with_a_page(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier(concurrency={"perHost": 8, "hostDelaySeconds": 0.0})
    await frontier.enqueue([Link(canonicalize(f"http://a.com/{k}"), 1, "") for k in range(6)])
    first, second, third, fourth, *_ = await frontier.claim("w", 10)
    assert (await frontier.stats()).pushed_back_since is None
    await frontier.fail("w", [Failure(first.lease_id, "http_404", "gone", retryable=False)])
    assert (await frontier.stats()).pushed_back_since is None  # not the site pushing back
    await frontier.fail("w", [Failure(second.lease_id, "http_429", "slow down", True, 5.0)])
    started = await frontier.stats()
    assert started.pushed_back_since is not None
    assert started.last_pushed_back == started.pushed_back_since
    await frontier.fail("w", [Failure(third.lease_id, "soft_block", "empty", True, 5.0)])
    extended = await frontier.stats()
    assert extended.pushed_back_since == started.pushed_back_since  # one run, from its start
    assert extended.last_pushed_back is not None
    assert extended.last_pushed_back >= started.pushed_back_since
    await frontier.ack("w", [fourth.lease_id])
    ended = await frontier.stats()
    assert ended.pushed_back_since is None  # a page came through
    assert ended.last_pushed_back == extended.last_pushed_back


def test_partitions_are_pushed_back_together_only_when_each_one_with_work_is() -> None:
    both = [
        FrontierStats(queued=3, pushed_back_since=10.0, last_pushed_back=20.0),
        FrontierStats(delayed=2, pushed_back_since=15.0, last_pushed_back=16.0),
        FrontierStats(pushed_back_since=None),  # no work here: it does not count
    ]
    combined = combine_stats(both)
    assert (combined.pushed_back_since, combined.last_pushed_back) == (15.0, 20.0)
    one_moving = [*both[:1], FrontierStats(queued=1, pushed_back_since=None)]
    assert combine_stats(one_moving).pushed_back_since is None
    assert combine_stats([FrontierStats(pushed_back_since=1.0)]).pushed_back_since is None
