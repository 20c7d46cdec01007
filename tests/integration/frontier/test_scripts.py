"""Each frontier script against a real redis-server, with and without the Bloom module."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

import pytest

from crawlfleet.frontier import (
    Admission,
    FailOutcome,
    Failure,
    Frontier,
    Lease,
    Link,
    canonicalize,
)
from tests.integration.frontier.conftest import SHORT_LEASE, OpenFrontier
from tests.support.frontier_actor import fetch_budget


def links(urls: list[str], depth: int = 1, parent: str = "http://a.com/") -> list[Link]:
    return [Link(canonicalize(u), depth, parent) for u in urls]


async def test_seed_once_and_dedup(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    assert not (await frontier.stats()).seeded
    assert not await frontier.is_complete()  # nothing queued, but not seeded either
    assert await frontier.seed(["http://a.com/", "http://b.com/", "http://A.com:80/#x"]) == 2
    assert await frontier.seed(["http://a.com/"]) == 0
    stats = await frontier.stats()
    assert (stats.seeded, stats.queued, stats.seen, stats.duplicates) == (True, 2, 2, 2)


async def test_with_sitemaps_each_seed_origin_queues_its_marked_root_once(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier(scope={"sitemaps": True})
    assert await frontier.seed(["http://a.com/", "http://a.com/x", "https://b.com/"]) == 3
    assert await frontier.seed(["http://a.com/y"]) == 1  # its root is seen already
    leases = await frontier.claim("w", 10)
    roots = {lease.url: lease.parent for lease in leases if lease.url.endswith("/sitemap.xml")}
    assert roots == {
        "http://a.com/sitemap.xml": "http://a.com/robots.txt#sitemap=root",
        "https://b.com/sitemap.xml": "https://b.com/robots.txt#sitemap=root",
    }
    assert {lease.depth for lease in leases} == {0}
    assert (await frontier.stats()).seen == 6


async def test_a_long_seed_list_goes_in_batches_and_is_seeded_only_when_whole(
    open_frontier: OpenFrontier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """25,000 seeds are three round trips; cut short after the first (the operator restarts
    mid-list), the job is not seeded yet, so the next tick seeds it again, whole."""
    frontier = await open_frontier(dedup={"capacity": 100_000})
    seeds = [f"http://h{k % 7}.com/p/{k}" for k in range(25_000)]
    batches: list[str] = []
    real = frontier._enqueue_batch

    async def cut_short(
        batch: list[Link], mode: str, unfiltered: Sequence[bool] = ()
    ) -> list[Admission]:
        batches.append(mode)
        if len(batches) == 2:
            raise ConnectionError("the operator is gone")
        return await real(batch, mode, unfiltered)

    monkeypatch.setattr(frontier, "_enqueue_batch", cut_short)
    with pytest.raises(ConnectionError):
        await frontier.seed(seeds)
    stats = await frontier.stats()
    assert (stats.seeded, stats.queued) == (False, 10_000)
    monkeypatch.setattr(frontier, "_enqueue_batch", real)
    assert await frontier.seed(seeds) == 15_000
    stats = await frontier.stats()
    assert (stats.seeded, stats.queued) == (True, 25_000)


async def test_enqueue_reports_new_and_seen(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    first = await frontier.enqueue(links(["http://a.com/1", "http://a.com/2", "http://a.com/1"]))
    assert first == [Admission.NEW, Admission.NEW, Admission.SEEN]
    again = await frontier.enqueue(links(["http://a.com/2", "http://a.com/3"]))
    assert again == [Admission.SEEN, Admission.NEW]
    assert (await frontier.stats()).queued == 3


async def test_add_if_new_is_shared_with_enqueue(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.enqueue(links(["http://a.com/1"]))
    assert await frontier.add_if_new(["http://a.com/1", "http://a.com/9", "http://a.com/9"]) == [
        False,
        True,
        False,
    ]
    assert (await frontier.stats()).queued == 1  # add_if_new only dedups


async def test_max_pages_refuses_past_limit_without_marking_seen(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier(scope={"maxPages": 3})
    await frontier.seed(["http://a.com/"])
    result = await frontier.enqueue(links([f"http://a.com/{i}" for i in range(4)]))
    assert result == [Admission.NEW, Admission.NEW, Admission.OVER_LIMIT, Admission.OVER_LIMIT]
    # Raising the limit later admits what was refused: it was never added to the filter.
    frontier = await open_frontier(scope={"maxPages": 10})
    assert await frontier.enqueue(links(["http://a.com/2"])) == [Admission.NEW]


async def test_claim_is_breadth_first_per_host(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(concurrency={"perHost": 10})
    await frontier.enqueue(links(["http://a.com/deep"], depth=3))
    await frontier.enqueue(links(["http://a.com/mid"], depth=2))
    await frontier.seed(["http://a.com/"])
    await frontier.enqueue(links(["http://a.com/mid2"], depth=2))
    claimed = await frontier.claim("w", 10)
    assert [lease.url for lease in claimed] == [
        "http://a.com/",
        "http://a.com/mid",
        "http://a.com/mid2",
        "http://a.com/deep",
    ]
    assert [lease.depth for lease in claimed] == [0, 2, 2, 3]


async def test_per_host_cap(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(concurrency={"perHost": 2})
    await frontier.enqueue(links([f"http://a.com/{i}" for i in range(5)]))
    await frontier.enqueue(links([f"http://b.com/{i}" for i in range(5)]))
    first = await frontier.claim("w", 100)
    assert sorted(lease.host for lease in first) == ["a.com", "a.com", "b.com", "b.com"]
    assert await frontier.claim("w2", 100) == []  # both hosts at their cap
    assert await frontier.ack("w", [first[0].lease_id]) == [True]
    more = await frontier.claim("w2", 100)
    assert [lease.host for lease in more] == [first[0].host]


async def test_fetched_leases_free_their_host_slot_but_stay_leased(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier(concurrency={"perHost": 2})
    await frontier.enqueue(links([f"http://a.com/{i}" for i in range(6)]))
    first = await frontier.claim("w", 100)
    assert len(first) == 2
    assert await frontier.claim("w", 100) == []  # at the cap
    # Another worker cannot free slots it does not hold.
    assert await frontier.claim("w2", 100, fetched=[first[0].lease_id]) == []
    # The responses arrived: both slots are free in the same round trip as the next claim.
    second = await frontier.claim("w", 100, fetched=[lease.lease_id for lease in first])
    assert len(second) == 2
    assert (await frontier.stats()).leased == 4  # fetched leases are still leases
    # Marking twice frees nothing more; acking a fetched lease frees no slot a second time.
    assert await frontier.claim("w", 100, fetched=[first[0].lease_id]) == []
    assert await frontier.ack("w", [lease.lease_id for lease in first]) == [True, True]
    assert await frontier.claim("w", 100) == []  # the two of `second` still hold the cap
    assert await frontier.ack("w2", [second[0].lease_id]) == [False]  # fencing unchanged
    assert await frontier.extend("w", [second[0].lease_id]) == [True]
    await frontier.claim("w", 0, fetched=[second[0].lease_id])
    assert await frontier.extend("w", [second[0].lease_id]) == [True]  # either form
    assert len(await frontier.claim("w", 100)) == 1  # the slot second[0] freed
    # Fail and release of a fetched lease keep the count right: the cap stays 2.
    assert await frontier.fail("w", [Failure(second[0].lease_id, "x", "y", True)]) == [
        FailOutcome.RETRY
    ]
    assert await frontier.release("w", [second[1].lease_id]) == [True]
    assert len(await frontier.claim("w", 100)) == 1  # the last claim holds one slot of two
    stats = await frontier.stats()
    assert (stats.crawled, stats.leased) == (2, 2)


async def test_requeue_of_fetched_leases_frees_no_slot_twice(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(concurrency={"perHost": 2}, fetch=fetch_budget(0.3))
    await frontier.enqueue(links([f"http://a.com/{i}" for i in range(4)]))
    first = await frontier.claim("dead", 100)
    await frontier.claim("dead", 0, fetched=[first[0].lease_id])
    other = await frontier.claim("live", 100)
    assert len(other) == 1  # one slot freed by the fetched mark
    requeued = await frontier.requeue_owner("dead")
    assert requeued.requeued == 2
    # Slots: `other` holds one; the dead worker's unfetched lease holds its slot until its
    # fetch deadline, then gives it back once.
    assert await frontier.claim("live", 100) == []
    await asyncio.sleep(max(0.0, first[1].fetch_deadline_at - requeued.at) + 0.02)
    assert len(await frontier.claim("live", 100)) == 1
    assert await frontier.claim("live", 100) == []
    assert await frontier.ack("dead", [first[0].lease_id]) == [False]


@pytest.mark.parametrize("mode", ["owner", "expired"])
async def test_a_dead_workers_fetches_keep_their_host_slots_until_their_deadline(
    open_frontier: OpenFrontier, mode: str
) -> None:
    """A SIGKILLed worker's request may still be running at the site: until the lease's
    fetch deadline (claim + the fetch budget), its slot counts against perHost."""
    frontier = await open_frontier(
        concurrency={"perHost": 2, "hostDelaySeconds": 0},
        lease=SHORT_LEASE,
        fetch=fetch_budget(2.0),
    )
    await frontier.enqueue(links([f"http://a.com/{i}" for i in range(6)] + ["http://b.com/1"]))
    dead = await frontier.claim("dead", 3)  # two of a.com, one of b.com
    assert sorted(lease.host for lease in dead) == ["a.com", "a.com", "b.com"]
    for lease in dead:
        assert lease.fetch_deadline_at == pytest.approx(lease.claimed_at + 2.0)
    if mode == "owner":
        back = await frontier.requeue_owner("dead")
    else:
        await asyncio.sleep(SHORT_LEASE["ttlSeconds"] + 0.05)
        back = await frontier.requeue_expired()
    assert back.requeued == 3
    # Requeued and claimable by host, but a.com's two slots are still the dead worker's.
    assert [lease.host for lease in await frontier.claim("live", 10)] == ["b.com"]
    assert await frontier.claim("live", 10) == []
    waits = (await frontier.stats()).waits
    assert waits.held_slots == 3  # what the fleet says a crawl that does not move waits for
    assert waits.next_held_release_in_seconds is not None
    assert 0 < waits.next_held_release_in_seconds <= 2.0
    await asyncio.sleep(max(lease.fetch_deadline_at for lease in dead) - back.at + 0.02)
    again = await frontier.claim("live", 10)
    assert [lease.host for lease in again] == ["a.com", "a.com"]
    assert (await frontier.stats()).leased == 3


async def test_fetched_leases_are_counted_apart_until_they_end(
    open_frontier: OpenFrontier,
) -> None:
    """stats.fetched: leased pages whose response arrived (they wait for their output to be
    durable, DESIGN §8). Demand counts the rest; every way a lease ends takes it off."""
    frontier = await open_frontier(concurrency={"perHost": 4}, lease=SHORT_LEASE)
    await frontier.enqueue(links([f"http://a.com/{i}" for i in range(5)]))
    held = await frontier.claim("w", 100)
    assert len(held) == 4
    await frontier.claim("w", 0, fetched=[lease.lease_id for lease in held])
    await frontier.claim("w", 0, fetched=[held[0].lease_id])  # marking twice counts once
    stats = await frontier.stats()
    assert (stats.leased, stats.fetched, stats.fetching) == (4, 4, 0)
    last = await frontier.claim("w", 100)
    assert (await frontier.stats()).fetching == 1  # in progress: not marked
    assert await frontier.ack("w", [held[0].lease_id]) == [True]
    assert await frontier.fail("w", [Failure(held[1].lease_id, "x", "y", True)]) == [
        FailOutcome.RETRY
    ]
    assert await frontier.release("w", [held[2].lease_id]) == [True]
    assert await frontier.ack("w", [last[0].lease_id]) == [True]  # never marked: no change
    stats = await frontier.stats()
    assert (stats.leased, stats.fetched) == (1, 1)
    await asyncio.sleep(1.2)  # held[3] expires
    assert (await frontier.requeue_expired()).requeued >= 1
    stats = await frontier.stats()
    assert (stats.leased, stats.fetched) == (0, 0)


async def test_output_files_are_remembered_by_path(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    assert await frontier.output_files() == []
    first = {"path": "pages/w-1-00001.jsonl", "size": 10, "sha256": "a" * 64, "records": 2}
    second = {"path": "pages/w-1-00000.jsonl", "size": 5, "sha256": "b" * 64, "records": 1}
    await frontier.record_output_files([first, second])
    await frontier.record_output_files([first])  # a retry after a lost answer: one entry
    await frontier.record_output_files([])
    assert await frontier.output_files() == [second, first]  # sorted by path


async def test_host_delay_spaces_claims(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(concurrency={"perHost": 4, "hostDelaySeconds": 0.3})
    await frontier.enqueue(links([f"http://a.com/{i}" for i in range(3)]))
    loop = asyncio.get_running_loop()
    times = []
    while len(times) < 3:
        got = await frontier.claim("w", 10)
        assert len(got) <= 1  # a delayed host hands out one URL per interval
        times += [loop.time()] * len(got)
        await asyncio.sleep(0.01)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap >= 0.28 for gap in gaps), gaps


async def test_crawl_delay_override_per_host(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(concurrency={"perHost": 4, "hostDelaySeconds": 0.0})
    await frontier.set_host_delay("a.com", 5.0)
    await frontier.enqueue(links([f"http://a.com/{i}" for i in range(3)]))
    await frontier.enqueue(links([f"http://b.com/{i}" for i in range(3)]))
    claimed = await frontier.claim("w", 10)
    assert sorted(lease.host for lease in claimed) == ["a.com", "b.com", "b.com", "b.com"]
    await frontier.set_host_delay("a.com", None)
    assert [lease.host for lease in await frontier.claim("w", 10)] == ["a.com", "a.com"]


async def test_a_deferred_host_is_held_and_its_robots_wait_recorded_until_it_is_read(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier(concurrency={"perHost": 4, "hostDelaySeconds": 0.0})
    await frontier.enqueue(links(["http://a.com/1", "http://a.com/2"]))
    assert (await frontier.stats()).waits.robots_hosts == 0
    (lease, other) = await frontier.claim("w", 2)
    next_try = await frontier.defer_host("a.com", 60.0, status=503)
    assert next_try == pytest.approx(lease.claimed_at + 60.0, abs=0.01)
    await frontier.release("w", [lease.lease_id, other.lease_id])
    stats = await frontier.stats()
    assert stats.queued == 2
    waits = stats.waits
    assert (waits.robots_hosts, waits.robots_status, waits.ready_hosts) == (1, 503, 1)
    assert waits.robots_next_try_in_seconds is not None
    assert 59.0 < waits.robots_next_try_in_seconds <= 60.0
    assert waits.next_ready_in_seconds == pytest.approx(waits.robots_next_try_in_seconds)
    assert await frontier.claim("w", 10) == []  # held: every worker's claims skip it
    # Deferred again, now with no answer at all: still one host, its status the last one.
    await frontier.defer_host("a.com", 30.0, status=None)
    waits = (await frontier.stats()).waits
    assert (waits.robots_hosts, waits.robots_status) == (1, None)
    # Its robots.txt was read: the wait is over, and the host is claimed again.
    await frontier.set_host_delay("a.com", None)
    waits = (await frontier.stats()).waits
    assert waits.robots_hosts == 0
    assert waits.robots_next_try_in_seconds is None
    assert waits.next_ready_in_seconds is not None
    assert waits.next_ready_in_seconds <= 0
    assert len(await frontier.claim("w", 10)) == 2


async def test_hosts_waiting_for_their_delay_are_counted_with_the_next_one(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier(concurrency={"perHost": 1, "hostDelaySeconds": 30.0})
    await frontier.enqueue(links(["http://a.com/1", "http://a.com/2", "http://b.com/1"]))
    waits = (await frontier.stats()).waits
    assert waits.ready_hosts == 2  # never fetched: both may be fetched now
    assert waits.next_ready_in_seconds is not None
    assert waits.next_ready_in_seconds <= 0
    claimed = await frontier.claim("w", 10)
    assert sorted(lease.host for lease in claimed) == ["a.com", "b.com"]
    await frontier.ack("w", [lease.lease_id for lease in claimed])
    waits = (await frontier.stats()).waits
    assert waits.ready_hosts == 1  # b.com ran dry; a.com waits out its 30 s
    assert waits.next_ready_in_seconds is not None
    assert 29.0 < waits.next_ready_in_seconds <= 30.0
    assert waits.robots_hosts == 0


async def test_ack_is_fenced(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.seed(["http://a.com/"])
    (lease,) = await frontier.claim("w1", 1)
    assert await frontier.ack("w2", [lease.lease_id]) == [False]
    assert await frontier.extend("w2", [lease.lease_id]) == [False]
    assert await frontier.release("w2", [lease.lease_id]) == [False]
    assert await frontier.fail("w2", [Failure(lease.lease_id, "x", "y", True)]) == [
        FailOutcome.NOT_OWNER
    ]
    assert await frontier.ack("w1", [lease.lease_id]) == [True]
    assert await frontier.ack("w1", [lease.lease_id]) == [False]  # never twice
    stats = await frontier.stats()
    assert (stats.crawled, stats.leased, stats.queued) == (1, 0, 0)
    assert stats.complete


async def test_requeued_lease_cannot_be_acked_by_old_owner(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.seed(["http://a.com/"])
    (old,) = await frontier.claim("w1", 1)
    assert (await frontier.requeue_owner("w1")).total == 1
    (new,) = await frontier.claim("w2", 1)
    assert new.url == old.url
    assert new.lease_id != old.lease_id
    assert new.attempts == 1
    assert await frontier.ack("w1", [old.lease_id]) == [False]
    assert await frontier.ack("w2", [new.lease_id]) == [True]
    assert (await frontier.stats()).crawled == 1


async def test_fail_retries_then_dead_letters(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(retry={"taskAttempts": 3})
    await frontier.seed(["http://a.com/x"])
    for attempt in range(3):
        (lease,) = await frontier.claim("w", 1)
        assert lease.attempts == attempt
        outcome = await frontier.fail(
            "w", [Failure(lease.lease_id, "http_5xx", f"500 #{attempt}", True)]
        )
        assert outcome == [FailOutcome.RETRY if attempt < 2 else FailOutcome.DEAD]
    stats = await frontier.stats()
    assert (stats.failed, stats.dead, stats.queued, stats.leased) == (3, 1, 0, 0)
    (dead,) = [d async for d in frontier.dead_letters()]
    assert (dead.url, dead.failure_class, dead.message, dead.attempts) == (
        "http://a.com/x",
        "http_5xx",
        "500 #2",
        3,
    )
    assert stats.complete


async def test_permanent_failure_dead_at_once(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(retry={"taskAttempts": 5})
    await frontier.seed(["http://a.com/gone"])
    (lease,) = await frontier.claim("w", 1)
    assert await frontier.fail("w", [Failure(lease.lease_id, "http_404", "404", False)]) == [
        FailOutcome.DEAD
    ]
    (dead,) = [d async for d in frontier.dead_letters()]
    assert (dead.failure_class, dead.attempts) == ("http_404", 1)


async def test_delayed_retry_becomes_due(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.seed(["http://a.com/x"])
    (lease,) = await frontier.claim("w", 1)
    await frontier.fail("w", [Failure(lease.lease_id, "http_429", "slow down", True, 0.3)])
    stats = await frontier.stats()
    assert (stats.delayed, stats.queued, stats.complete) == (1, 0, False)
    assert await frontier.claim("w", 1) == []
    await asyncio.sleep(0.35)
    (again,) = await frontier.claim("w", 1)
    assert (again.url, again.attempts) == ("http://a.com/x", 1)
    assert (await frontier.stats()).delayed == 0


async def test_release_counts_no_attempt(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.seed(["http://a.com/x"])
    (lease,) = await frontier.claim("w", 1)
    assert await frontier.release("w", [lease.lease_id]) == [True]
    (again,) = await frontier.claim("w2", 1)
    assert again.attempts == 0
    stats = await frontier.stats()
    assert (stats.released, stats.leased) == (1, 1)


async def test_extend_keeps_lease_alive(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(lease=SHORT_LEASE)
    await frontier.seed(["http://a.com/x", "http://b.com/y"])
    leases = await frontier.claim("w", 2)
    await asyncio.sleep(0.6)
    assert await frontier.extend("w", [leases[0].lease_id]) == [True]
    await asyncio.sleep(0.6)
    assert (await frontier.requeue_expired()).total == 1  # only the one not extended
    assert await frontier.ack("w", [leases[0].lease_id, leases[1].lease_id]) == [True, False]


async def test_requeue_expired_dead_letters_past_attempts(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(lease=SHORT_LEASE, retry={"taskAttempts": 1})
    await frontier.seed(["http://a.com/x"])
    await frontier.claim("w", 1)
    await asyncio.sleep(1.05)
    assert (await frontier.requeue_expired()).total == 1
    (dead,) = [d async for d in frontier.dead_letters()]
    assert dead.failure_class == "lease_expired"
    assert (await frontier.stats()).complete


async def test_heartbeats_age_on_server_clock(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.heartbeat("w1", {"pages": 5})
    await asyncio.sleep(0.2)
    await frontier.heartbeat("w2", {"pages": 1})
    beats = {beat.worker: beat for beat in await frontier.workers()}
    assert beats["w1"].counters == {"pages": 5}
    assert beats["w1"].age_seconds >= 0.19 > beats["w2"].age_seconds
    await frontier.forget_worker("w1")
    assert [beat.worker for beat in await frontier.workers()] == ["w2"]


async def test_bloom_shape_fixed_at_creation(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(dedup={"capacity": 1000})
    reopened = await open_frontier(dedup={"capacity": 5_000_000, "errorRate": 0.001})
    assert reopened.bloom == frontier.bloom


async def test_delete_removes_every_key(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.seed(["http://a.com/", "http://b.com/"])
    await frontier.claim("w", 1)
    await frontier.heartbeat("w", {})
    assert await frontier.delete() > 5
    assert [k async for k in frontier.client.scan_iter(match=frontier.keys.pattern)] == []


async def test_an_idle_claim_writes_nothing(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    await frontier.seed(["http://a.com/"])
    (lease,) = await frontier.claim("w", 10)
    await frontier.ack("w", [lease.lease_id])
    stats_key = frontier.keys.key("stats")
    before = await frontier.client.hgetall(stats_key)
    assert await frontier.claim("w", 10) == []
    # Idle workers poll often; a poll that finds nothing must not touch the keys (nor the AOF).
    assert await frontier.client.hgetall(stats_key) == before


async def _give_back(frontier: Frontier, how: str, lease: Lease) -> None:
    if how == "release":
        assert await frontier.release("gone", [lease.lease_id]) == [True]
    elif how == "fail":
        failure = Failure(lease.lease_id, "timeout", "read timed out", True, delay_seconds=0)
        assert await frontier.fail("gone", [failure]) == [FailOutcome.RETRY]
    elif how == "requeue_owner":
        assert (await frontier.requeue_owner("gone")).requeued == 1
    else:
        await asyncio.sleep(1.1)  # past the lease's ttl
        assert (await frontier.requeue_expired()).requeued == 1


@pytest.mark.parametrize("how", ["release", "fail", "requeue_owner", "requeue_expired"])
async def test_work_given_back_to_a_host_that_ran_dry_is_claimed_again(
    open_frontier: OpenFrontier, how: str
) -> None:
    # A host whose queue runs dry leaves the ready index at the next claim. A lease whose
    # response had arrived (fetched form) no longer holds a slot, so giving its URL back
    # frees none: the host must still go back into the index, or the URL waits forever and
    # the job never completes (e.g. a SIGKILLed worker's fetched, unacked pages).
    frontier = await open_frontier(concurrency={"perHost": 2}, lease=SHORT_LEASE)
    await frontier.enqueue(links(["http://a.com/0", "http://a.com/1"]))
    (held,) = await frontier.claim("gone", 1)
    await frontier.claim("gone", 0, fetched=[held.lease_id])
    (other,) = await frontier.claim("live", 100)
    assert await frontier.ack("live", [other.lease_id]) == [True]
    assert await frontier.claim("live", 100) == []  # ran dry: out of the ready index

    await _give_back(frontier, how, held)
    back = await frontier.claim("live", 100)
    assert [lease.url for lease in back] == [held.url]
    assert await frontier.ack("live", [back[0].lease_id]) == [True]
    assert (await frontier.stats()).pending == 0


async def test_an_unfiltered_link_is_queued_again_and_not_counted_as_seen(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    url = canonicalize("https://example.com/again")
    first = await frontier.enqueue([Link(url, 0, "")])
    seen = (await frontier.stats()).seen
    again = await frontier.enqueue([Link(url, 1, ""), Link(url, 1, "")], unfiltered=[True, False])
    stats = await frontier.stats()
    assert first == [Admission.NEW]
    assert again == [Admission.NEW, Admission.SEEN]
    assert stats.queued == 2
    assert stats.seen == seen


async def test_seeding_with_nothing_left_to_queue_marks_the_job_seeded(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    assert not (await frontier.stats()).seeded
    assert await frontier.enqueue([], seeding=True) == []
    stats = await frontier.stats()
    assert stats.seeded
    assert stats.complete


async def test_a_raised_per_host_places_hosts_that_were_at_the_old_cap(
    open_frontier: OpenFrontier,
) -> None:
    """perHost raised on a running job (a worker opening with the edited spec): a host at the
    old cap left the ready index, and must come back when a slot frees under the new cap."""
    frontier = await open_frontier(concurrency={"perHost": 2, "hostDelaySeconds": 0})
    await frontier.enqueue(links([f"http://a.com/{i}" for i in range(10)]))
    first = await frontier.claim("w", 10)
    assert len(first) == 2  # at the cap: out of the index
    raised = await open_frontier(concurrency={"perHost": 4, "hostDelaySeconds": 0})
    again = await raised.claim("w", 10, fetched=[first[0].lease_id])
    assert len(again) == 3  # 4 - the one still fetching
    lowered = await open_frontier(concurrency={"perHost": 1, "hostDelaySeconds": 0})
    assert await lowered.claim("w", 10, fetched=[lease.lease_id for lease in again]) == []
    assert len(await lowered.claim("w", 10, fetched=[first[1].lease_id])) == 1


async def test_a_gone_workers_urls_come_back_first_with_their_slots(
    open_frontier: OpenFrontier,
) -> None:
    """A worker whose process ended: its URLs go back to the front of their host's queue and
    its slots come back with them, so the crawl resumes where it stopped; an expired lease's
    URL (its holder may still be at it) goes to the back."""
    frontier = await open_frontier(concurrency={"perHost": 2, "hostDelaySeconds": 0})
    urls = [f"http://a.com/{i}" for i in range(6)]
    await frontier.enqueue(links(urls))
    dead = await frontier.claim("dead", 10)
    assert [lease.url for lease in dead] == urls[:2]
    back = await frontier.requeue_owner("dead", ended=True)
    assert back.requeued == 2
    again = await frontier.claim("live", 10)
    # first (in either order), and both slots free at once
    assert sorted(lease.url for lease in again) == urls[:2]
    assert [lease.attempts for lease in again] == [1, 1]
