"""Enqueued URLs and seeds go ahead of discovered links, and politeness still holds.

No priority field is needed for it: a host's queues are one list per depth
(``q:<depth>:<host>``) and claims take a host's lowest depth first, so URLs given to a running
crawl (``crawlfleet enqueue``, seeds added to a running job) are depth 0 and are the next its
host hands out, once it has a free slot and its delay has passed.
"""

from __future__ import annotations

import asyncio

from crawlfleet.enqueue import enqueue_urls
from crawlfleet.frontier import Link, canonicalize
from tests.integration.frontier.conftest import OpenFrontier
from tests.support.specs import job_spec

SPEC = job_spec({"scope": {"allowedDomains": ["a.com", "b.com"]}})


def _discovered(count: int) -> list[Link]:
    """``count`` links of a.com found at depths 1 and 2 (as a crawl's pages give them)."""
    return [
        Link(canonicalize(f"http://a.com/found/{k}"), 1 + k % 2, "http://a.com/")
        for k in range(count)
    ]


async def test_an_enqueued_url_is_claimed_before_the_hosts_discovered_links(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier(concurrency={"perHost": 2, "hostDelaySeconds": 0.0})
    await frontier.enqueue(_discovered(500))
    first = await frontier.claim("w", 10)
    assert [lease.depth for lease in first] == [1, 1]  # the host's cap: two at a time
    report = await enqueue_urls(frontier, SPEC, ["http://a.com/urgent/1", "http://a.com/urgent/2"])
    assert len(report.new) == 2
    assert await frontier.claim("w", 10) == []  # still at perHost: no slot jumps the cap
    await frontier.ack("w", [first[0].lease_id])
    [next_one] = await frontier.claim("w", 10)
    assert (next_one.url, next_one.depth) == ("http://a.com/urgent/1", 0)
    await frontier.ack("w", [first[1].lease_id, next_one.lease_id])
    after = await frontier.claim("w", 10)
    assert [(lease.url, lease.depth) for lease in after] == [
        ("http://a.com/urgent/2", 0),
        ("http://a.com/found/4", 1),  # then the discovered ones (0 and 2 went first)
    ]
    stats = await frontier.stats()
    assert stats.leased == 2
    assert stats.queued == 500 - 3


async def test_an_enqueued_url_waits_for_its_hosts_delay(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(concurrency={"perHost": 2, "hostDelaySeconds": 0.4})
    await frontier.enqueue(_discovered(50))
    loop = asyncio.get_running_loop()
    [first] = await frontier.claim("w", 10)  # a delayed host: one at a time
    claimed_at = loop.time()
    await frontier.ack("w", [first.lease_id])
    await enqueue_urls(frontier, SPEC, ["http://a.com/urgent", "http://b.com/other"])
    # b.com has no fetch to wait for; a.com's delay still runs: the urgent URL waits for it.
    assert [lease.url for lease in await frontier.claim("w", 10)] == ["http://b.com/other"]
    while not (got := await frontier.claim("w", 10)):
        await asyncio.sleep(0.01)
    assert loop.time() - claimed_at >= 0.38
    assert [(lease.url, lease.depth) for lease in got] == [("http://a.com/urgent", 0)]
