"""A connection that breaks after Redis ran a state change but before its reply arrived:
redis-py sends the call again, and the change still applies exactly once, with its reply.

The break is made by a loopback proxy (tests/support/dropping_proxy.py, a test double of the
network): it forwards the EVALSHA, lets Redis run it, and hangs up instead of relaying the
answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from crawlfleet.frontier import FailOutcome, Failure, Frontier, Link, canonicalize
from crawlfleet.frontier.connection import connect
from crawlfleet.local import RedisServer
from tests.integration.frontier.conftest import TEST_JOB
from tests.support.dropping_proxy import DroppingProxy
from tests.support.specs import frontier_settings, merged

URLS = [canonicalize(f"http://h{h}.example/{i}") for h in range(3) for i in range(4)]


@pytest.fixture
async def proxy(redis_server: RedisServer) -> AsyncIterator[DroppingProxy]:
    async with DroppingProxy("127.0.0.1", redis_server.port) as proxy:
        yield proxy


@pytest.fixture
async def frontier(proxy: DroppingProxy, job_id: str) -> AsyncIterator[Frontier]:
    settings = frontier_settings(job_id, merged(TEST_JOB, {"concurrency": {"perHost": 2}}))
    frontier = await Frontier.open(connect(proxy.url, timeout_seconds=5), settings)
    await frontier.enqueue([Link(url, 1, "") for url in URLS])
    yield frontier
    await frontier.delete()
    await frontier.aclose()


async def _leases_in_redis(frontier: Frontier) -> list[str]:
    return list(await frontier.client.zrange(frontier.keys.key("leases"), 0, -1))


async def test_a_claim_whose_reply_is_lost_is_not_claimed_again(
    frontier: Frontier, proxy: DroppingProxy
) -> None:
    proxy.drop_reply_to_next(b"EVALSHA")
    leases = await frontier.claim("w1", 4)
    assert proxy.dropped == 1  # the connection did break after Redis ran the claim
    assert len(leases) == 4
    stats = await frontier.stats()
    assert (stats.leased, stats.queued) == (4, len(URLS) - 4)
    assert sorted(await _leases_in_redis(frontier)) == sorted(lease.lease_id for lease in leases)


async def test_acks_fails_releases_and_requeues_apply_once_and_answer_truly(
    frontier: Frontier, proxy: DroppingProxy
) -> None:
    leases = await frontier.claim("w1", 6)
    assert len(leases) == 6
    acked, failed, released = leases[:2], leases[2:4], leases[4:5]

    proxy.drop_reply_to_next(b"EVALSHA")
    assert await frontier.ack("w1", [lease.lease_id for lease in acked]) == [True, True]
    proxy.drop_reply_to_next(b"EVALSHA")
    failures = [Failure(lease.lease_id, "http_5xx", "503", True) for lease in failed]
    assert await frontier.fail("w1", failures) == [FailOutcome.RETRY] * 2
    proxy.drop_reply_to_next(b"EVALSHA")
    assert await frontier.release("w1", [released[0].lease_id]) == [True]
    proxy.drop_reply_to_next(b"EVALSHA")
    requeued = await frontier.requeue_owner("w1")
    assert proxy.dropped == 4
    assert (requeued.requeued, requeued.dead) == (1, 0)  # the one lease left, not 0

    stats = await frontier.stats()
    assert (stats.crawled, stats.failed, stats.released, stats.requeued) == (2, 2, 1, 1)
    assert stats.leased == 0
    assert stats.queued == len(URLS) - 2  # the acked two are done; the rest are back
    assert await _leases_in_redis(frontier) == []


async def test_a_caller_retrying_with_the_same_call_id_gets_the_same_claim(
    frontier: Frontier,
) -> None:
    call_id = Frontier.new_call_id()
    first = await frontier.claim("w1", 3, call_id=call_id)
    again = await frontier.claim("w1", 3, call_id=call_id)
    assert [lease.lease_id for lease in again] == [lease.lease_id for lease in first]
    assert (await frontier.stats()).leased == 3
    # A claim that gave nothing keeps nothing: the same id may then claim what came since.
    other = await frontier.claim("w2", 100)
    assert len(other) > 0


async def test_a_reply_is_kept_until_the_next_call_says_it_arrived(frontier: Frontier) -> None:
    """A kept reply serves re-sends of its call only; once the caller has it, the caller's
    next state change drops it, so a fast crawl's claims do not pile up in Redis."""

    async def kept() -> list[str]:
        return [key async for key in frontier.client.scan_iter(frontier.keys.key("reply:*"))]

    first = Frontier.new_call_id()
    leases = await frontier.claim("w1", 2, call_id=first)
    assert await kept() == [frontier.keys.key(f"reply:{first}")]
    await frontier.ack("w1", [leases[0].lease_id])
    (key,) = await kept()
    assert key != frontier.keys.key(f"reply:{first}")  # the claim's went, the ack's stays
    for _ in range(5):
        leases = await frontier.claim("w1", 1)
        await frontier.ack("w1", [lease.lease_id for lease in leases])
    assert len(await kept()) == 1


async def test_file_budget_content_and_counts_apply_once_and_answer_truly(
    frontier: Frontier, proxy: DroppingProxy
) -> None:
    """A reservation, a settlement, a content claim or a count sent twice would stay wrong
    for the whole run: a budget that fills with nothing, a copy that is its own duplicate."""
    proxy.drop_reply_to_next(b"EVALSHA")
    assert await frontier.reserve_file_bytes("l1", 600, 1000, ttl_seconds=60)
    proxy.drop_reply_to_next(b"EVALSHA")
    await frontier.settle_file_bytes("l1", 500)
    proxy.drop_reply_to_next(b"EVALSHA")
    assert await frontier.claim_content("ab" * 32, "files/sha256/ab/" + "ab" * 32) is None
    proxy.drop_reply_to_next(b"EVALSHA")
    await frontier.count_files(stored=1, bytes=500)
    assert proxy.dropped == 4
    stats = await frontier.file_stats()
    assert (stats.reserved, stats.settled, stats.stored, stats.bytes) == (0, 500, 1, 500)
