"""Revisit state in the frontier against a real redis-server: tracked URLs scheduled by ack
and fail, promoted in due order, never lost by a dead worker, forgotten when gone; recurring
runs that restore only what a successful run committed; what a tracked URL costs in memory.

Due times are whole seconds (the sets' scores), so a URL tracked with a one-second interval
is due within about a second: the tests wait for ``promote_due`` to move it (an event, with
a bound), never for a fixed time.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from crawlfleet.frontier import (
    Admission,
    FailOutcome,
    Failure,
    Frontier,
    Lease,
    Link,
    Revisit,
    Validators,
    canonicalize,
)
from tests.integration.frontier.conftest import OpenFrontier
from tests.support.revisit_mix import tracked_urls

A, B, C = (canonicalize(f"http://a.com/{name}") for name in ("x", "y", "z"))
OTHER = canonicalize("https://b.com/feed.xml")
ETAG = Validators(etag='"5f7d8a2c-3e8"', digest="0123456789abcdef")


def every(leases: list[Lease], revisit: Revisit) -> dict[str, Revisit]:
    return {lease.lease_id: revisit for lease in leases}


async def job_keys(client: aioredis.Redis, frontier: Frontier) -> set[str]:
    return {str(key) async for key in client.scan_iter(match=frontier.keys.pattern)}


async def track(frontier: Frontier, urls: list[str], interval: float, change: str = "new") -> None:
    """Queue, claim and ack ``urls`` as a worker does, each with a revisit."""
    await frontier.enqueue([Link(canonicalize(url), 1, "") for url in urls])
    leases = await frontier.claim("w", len(urls))
    assert sorted(lease.url for lease in leases) == sorted(urls)
    revisit = Revisit(interval, ETAG, change)
    assert all(
        await frontier.ack("w", [x.lease_id for x in leases], revisits=every(leases, revisit))
    )


async def promoted(frontier: Frontier, want: int = 1, limit: int = 1000) -> int:
    """Promote until ``want`` URLs have moved (bounded: a due time is at most ~2 s away, an
    interval rounded up to the next whole second)."""
    moved, deadline = 0, time.monotonic() + 5.0
    while moved < want and time.monotonic() < deadline:
        moved += await frontier.promote_due(limit)
        if moved < want:
            await asyncio.sleep(0.1)
    return moved


async def test_a_one_shot_job_touches_no_revisit_key(
    open_frontier: OpenFrontier, redis_client: aioredis.Redis
) -> None:
    frontier = await open_frontier(retry={"taskAttempts": 1})
    await frontier.seed([A, B, C])
    leases = await frontier.claim("w", 3)
    await frontier.ack("w", [leases[0].lease_id])
    await frontier.fail("w", [Failure(leases[1].lease_id, "http_500", "x", retryable=False)])
    await frontier.requeue_owner("w", ended=True)
    assert await frontier.promote_due() == 0
    names = {
        key.removeprefix(frontier.keys.prefix) for key in await job_keys(redis_client, frontier)
    }
    assert not {name for name in names if name.startswith(("rv", "run:"))}
    assert await redis_client.hget(frontier.keys.key("meta"), "tracking") is None
    stats = await frontier.stats()
    assert (stats.tracked, stats.next_revisit_in_seconds, stats.dead) == (0, None, 2)


async def test_an_ack_with_a_revisit_schedules_it_and_its_state_comes_back(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    await track(frontier, [A], interval=1.0)
    stats = await frontier.stats()
    assert (stats.tracked, stats.new_tracked, stats.queued, stats.revisits_due) == (1, 1, 0, 0)
    assert stats.next_revisit_in_seconds is not None
    assert stats.next_revisit_in_seconds <= 2.0  # 1 s, rounded up to a whole second
    assert await frontier.revisit_states([A]) == {}  # at rest: nothing to claim yet

    assert await promoted(frontier) == 1
    stats = await frontier.stats()
    assert (stats.queued, stats.revisits_due, stats.next_revisit_in_seconds) == (1, 1, None)
    [lease] = await frontier.claim("w", 5)
    assert (lease.url, lease.depth, lease.attempts) == (A, 1, 0)
    state = (await frontier.revisit_states([lease.url, B]))[A]
    # the ETag is kept; the digest is not beside it (docs/frontier.md)
    assert state.validators == Validators(etag='"5f7d8a2c-3e8"')
    assert (state.interval_seconds, state.visits) == (1.0, 1)
    assert state.due_at <= lease.claimed_at

    revisit = Revisit(
        3600.0,
        Validators(last_modified="Wed, 21 Oct 2015 07:28:00 GMT", digest="ab" * 8),
        "not_modified",
        lag_seconds=0.4,
    )
    assert await frontier.ack("w", [lease.lease_id], revisits={lease.lease_id: revisit}) == [True]
    stats = await frontier.stats()
    assert (stats.tracked, stats.new_tracked, stats.not_modified, stats.revisits_due) == (
        1,
        1,
        1,
        0,
    )
    assert (stats.revisit_lag.total, stats.revisit_lag.quantile(0.5)) == (1, 1.0)
    assert stats.next_revisit_in_seconds is not None
    assert stats.next_revisit_in_seconds > 3500
    assert (stats.pending, stats.revisits_waiting) == (0, False)  # nothing due: all done


async def test_due_urls_are_promoted_in_due_order_a_bounded_number_at_a_time(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    await track(frontier, [B], interval=2.0)
    await track(frontier, [OTHER], interval=1.0)
    await track(frontier, [A], interval=4.0)
    assert await promoted(frontier, limit=1) == 1
    assert set(await frontier.revisit_states([A, B, OTHER])) == {OTHER}
    assert await promoted(frontier, limit=1) == 1
    assert set(await frontier.revisit_states([A, B, OTHER])) == {OTHER, B}
    assert await frontier.promote_due() == 0  # A is not due for seconds yet
    assert (await frontier.stats()).tracked == 3


async def test_claims_promote_due_revisits_themselves(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await track(frontier, [A, B], interval=1.0)
    leases: list[Lease] = []
    deadline = time.monotonic() + 5.0
    while len(leases) < 2 and time.monotonic() < deadline:
        leases += await frontier.claim("w", 5)
        await asyncio.sleep(0.1)
    assert sorted(lease.url for lease in leases) == [A, B]


async def test_a_final_failure_of_a_tracked_url_schedules_it_again(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    await track(frontier, [A, B], interval=1.0)
    assert await promoted(frontier, want=2) == 2
    leases = {lease.url: lease for lease in await frontier.claim("w", 5)}
    failures = [
        Failure(leases[A].lease_id, "http_500", "server error", retryable=False),
        Failure(leases[B].lease_id, "http_410", "gone", retryable=False),
    ]
    gone = Revisit(1.0, Validators(), "gone")
    outcome = await frontier.fail("w", failures, revisits={leases[B].lease_id: gone})
    assert outcome == [FailOutcome.RETRY, FailOutcome.DEAD]
    stats = await frontier.stats()
    assert (stats.tracked, stats.revisit_failures, stats.gone, stats.dead) == (1, 1, 1, 1)
    assert [dead.url async for dead in frontier.dead_letters()] == [B]
    assert await promoted(frontier) == 1  # A comes back with its kept state
    assert [lease.url for lease in await frontier.claim("w", 5)] == [A]
    assert (await frontier.revisit_states([A]))[A].validators.etag == ETAG.etag


async def test_a_dead_workers_tracked_url_is_never_lost(open_frontier: OpenFrontier) -> None:
    """SIGKILL-like: the worker's leases are requeued (an attempt each); past taskAttempts a
    tracked URL is scheduled again, not dead-lettered, its state kept."""
    frontier = await open_frontier(retry={"taskAttempts": 2})
    await track(frontier, [A], interval=1.0)
    assert await promoted(frontier) == 1
    await frontier.claim("w", 5)
    assert await frontier.requeue_owner("w", ended=True) == (
        1,
        0,
        pytest.approx(time.time(), abs=60),
        0,
    )
    [lease] = await frontier.claim("w2", 5)
    assert (lease.url, lease.attempts) == (A, 1)
    assert A in await frontier.revisit_states([A])  # queued again with its state
    requeued = await frontier.requeue_owner("w2", ended=True)
    assert (requeued.requeued, requeued.dead, requeued.rescheduled) == (0, 0, 1)
    stats = await frontier.stats()
    assert (stats.tracked, stats.revisit_failures, stats.dead, stats.leased, stats.queued) == (
        1,
        1,
        0,
        0,
        0,
    )
    assert (stats.revisits_due, stats.next_revisit_in_seconds is not None) == (0, True)


async def test_an_ack_without_a_revisit_forgets_a_tracked_url(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await track(frontier, [A], interval=1.0)
    assert await promoted(frontier) == 1
    [lease] = await frontier.claim("w", 5)
    await frontier.ack("w", [lease.lease_id])
    stats = await frontier.stats()
    assert (stats.tracked, stats.untracked, stats.revisits_due) == (0, 1, 0)
    assert stats.next_revisit_in_seconds is None


async def test_bad_revisits_are_refused_before_anything_is_written(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    await frontier.seed([A])
    [lease] = await frontier.claim("w", 1)
    for revisits, why in (
        ({"not-a-lease": Revisit(60.0, Validators(), "new")}, "not in this call"),
        ({lease.lease_id: Revisit(60.0, Validators(), "moved")}, "unknown change"),
        ({lease.lease_id: Revisit(0.0, Validators(), "new")}, "out of range"),
    ):
        with pytest.raises(ValueError, match=why):
            await frontier.ack("w", [lease.lease_id], revisits=revisits)
    assert (await frontier.stats()).leased == 1


async def test_a_run_starts_from_the_last_committed_run_only(
    open_frontier: OpenFrontier, redis_client: aioredis.Redis
) -> None:
    frontier = await open_frontier()
    start = await frontier.begin_run("r1")
    assert (start.restored_from, start.tracked) == (None, 0)
    assert await frontier.seed([A], every_run=True) == 1
    [seed] = await frontier.claim("w", 5)
    await frontier.enqueue([Link(B, 1, A)])
    revisit = Revisit(3600.0, ETAG, "new")
    await frontier.ack("w", [seed.lease_id], revisits={seed.lease_id: revisit})
    [page] = await frontier.claim("w", 5)
    await frontier.ack("w", [page.lease_id])  # B: fetched once, not tracked
    assert (await frontier.stats()).complete
    await frontier.commit_run("r1")

    start = await frontier.begin_run("r2")
    assert (start.restored_from, start.tracked) == ("r1", 1)
    stats = await frontier.stats()
    assert (stats.seeded, stats.queued, stats.crawled, stats.tracked) == (False, 0, 0, 1)
    assert await frontier.seed([A], every_run=True) == 1  # tracked: due now, with its state
    [seed] = await frontier.claim("w", 5)
    assert (await frontier.revisit_states([A]))[A].validators.etag == ETAG.etag
    assert await frontier.enqueue([Link(B, 1, A), Link(C, 1, A)]) == [Admission.SEEN, Admission.NEW]
    await frontier.ack(
        "w", [seed.lease_id], revisits={seed.lease_id: Revisit(60.0, ETAG, "unchanged")}
    )
    [page] = await frontier.claim("w", 5)
    await frontier.ack("w", [page.lease_id], revisits={page.lease_id: revisit})
    stats = await frontier.stats()
    assert (stats.tracked, stats.unchanged, stats.new_tracked) == (2, 1, 1)
    # r2 fails: it never commits, and the next run starts from r1's state again
    start = await frontier.begin_run("r3")
    assert (start.restored_from, start.tracked) == ("r1", 1)
    assert await frontier.enqueue([Link(C, 1, A)]) == [Admission.NEW]
    with pytest.raises(ValueError, match="r3"):
        await frontier.commit_run("r2")

    assert await frontier.delete() > 0
    assert await job_keys(redis_client, frontier) == set()


async def test_a_run_takes_only_the_revisits_due_by_its_start(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.begin_run("r1")
    await track(frontier, [A], interval=1.0)
    await frontier.commit_run("r1")
    await frontier.begin_run("r2")  # A is not due yet when r2 starts: the next run's
    await asyncio.sleep(2.1)  # past A's due time (1 s, rounded up to a whole second)
    assert await frontier.promote_due() == 0
    stats = await frontier.stats()
    assert stats.next_revisit_in_seconds is not None
    assert stats.next_revisit_in_seconds <= 0
    assert not stats.revisits_waiting
    await frontier.begin_run("r3")
    assert (await frontier.stats()).revisits_waiting  # due by r3's start: not complete
    assert not (await frontier.stats()).complete
    assert await frontier.promote_due() == 1


async def test_a_tracked_seed_is_found_in_any_chunk_of_its_host(
    open_frontier: OpenFrontier,
) -> None:
    """A host's tracked URLs fill chunks of 128; the seed is in the second one."""
    frontier = await open_frontier(concurrency={"perHost": 256})
    urls = [f"http://a.com/p/{i}" for i in range(130)]
    await frontier.begin_run("r1")
    await track(frontier, urls, interval=3600.0)
    await frontier.commit_run("r1")
    assert (await frontier.begin_run("r2")).tracked == 130
    assert await frontier.seed([urls[-1]], every_run=True) == 1
    [lease] = await frontier.claim("w", 5)
    assert lease.url == urls[-1]
    assert (await frontier.revisit_states([lease.url]))[lease.url].validators == Validators(
        etag=ETAG.etag
    )
    stats = await frontier.stats()
    assert (stats.tracked, stats.revisits_due, stats.queued) == (130, 1, 0)


@pytest.mark.parametrize("backend", ["bitmap"])  # the revisit chunks do not depend on it
async def test_a_tracked_url_costs_at_most_100_bytes_of_redis(
    open_frontier: OpenFrontier,
) -> None:
    """10,000 URLs shaped like a news site's (mean length 81) over 100 hosts, with the ETag
    and Last-Modified mix common servers send: MEMORY USAGE of every chunk of them and their
    index, over the URLs tracked. docs/frontier.md gives the figure."""
    frontier = await open_frontier(concurrency={"perHost": 256}, dedup={"capacity": 20_000})
    validators = {canonicalize(url): v for url, v in tracked_urls(10_000, hosts=100)}
    await frontier.enqueue([Link(url, 1, "") for url in validators])
    while leases := await frontier.claim("w", 2000):
        revisits = {x.lease_id: Revisit(86400.0, validators[x.url], "new") for x in leases}
        await frontier.ack("w", [x.lease_id for x in leases], revisits=revisits)
    stats = await frontier.stats()
    assert stats.tracked == 10_000
    per_url = await frontier.tracked_bytes() / stats.tracked
    assert 50 < per_url <= 100, per_url
