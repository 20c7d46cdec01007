"""Queued tasks are compact (a list per host and depth, parents once per run) and lose nothing.

What a queue entry leaves out (the scheme's name, the host, the depth, a parent shared by its
run) comes back whole in the lease; the memory a queued URL costs is measured, not assumed.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from crawlfleet.frontier import FailOutcome, Failure, Frontier, Lease, Link, canonicalize
from tests.integration.frontier.conftest import TEST_JOB, OpenFrontier
from tests.support.queued import queued_links
from tests.support.specs import frontier_settings, merged

#: URLs whose every part must survive the compact entry.
TRICKY = [
    ("http://a.com/", ""),
    ("https://a.com/x?q=1&r=%20", "https://a.com/"),
    ("http://a.com:8080/p", "http://a.com:8080/"),
    ("https://a.com:8443", "https://other.net/from/here"),
    ("http://[::1]:9000/v6?x", "http://[::1]:9000/"),
    ("http://a.com/1/2/3", "not even a URL"),
    ("http://a.com/same-parent-run", "https://a.com/x?q=1&r=%20"),
]


def _by_url(leases: list[Lease]) -> dict[str, Lease]:
    return {lease.url: lease for lease in leases}


async def test_every_part_of_a_task_comes_back(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier(concurrency={"perHost": 100})
    links = [Link(canonicalize(url), 2, parent) for url, parent in TRICKY]
    await frontier.enqueue(links)
    leases = _by_url(await frontier.claim("w", 100))
    assert set(leases) == {link.url for link in links}
    for link in links:
        lease = leases[link.url]
        assert (lease.url, lease.depth, lease.parent, lease.attempts) == (
            link.url,
            2,
            link.parent,
            0,
        )
    # Retried and released tasks keep their attempts and parents.
    for lease in leases.values():
        outcome = await frontier.fail("w", [Failure(lease.lease_id, "timeout", "t", True)])
        assert outcome == [FailOutcome.RETRY]
    again = _by_url(await frontier.claim("w", 100))
    assert {(lease.url, lease.parent, lease.attempts) for lease in again.values()} == {
        (link.url, link.parent, 1) for link in links
    }
    assert await frontier.release("w", [lease.lease_id for lease in again.values()]) == [
        True
    ] * len(links)
    back = _by_url(await frontier.claim("w", 100))
    assert {(lease.url, lease.parent, lease.attempts) for lease in back.values()} == {
        (link.url, link.parent, 1) for link in links
    }


async def test_runs_of_parents_survive_claims_one_at_a_time(open_frontier: OpenFrontier) -> None:
    """A claim that stops inside a run of one parent's children puts the parent back."""
    frontier = await open_frontier(concurrency={"perHost": 1})
    parents = ["http://a.com/p1", "http://elsewhere.org/p2", ""]
    links = [
        Link(canonicalize(f"http://a.com/{p}/{i}"), 1, parent)
        for p, parent in enumerate(parents)
        for i in range(3)
    ]
    await frontier.enqueue(links[:4])
    await frontier.enqueue(links[4:])  # a new run of the same parent in a later call
    got = []
    for _ in links:
        (lease,) = await frontier.claim("w", 1)
        got.append((lease.url, lease.parent))
        assert await frontier.ack("w", [lease.lease_id]) == [True]
    assert got == [(link.url, link.parent) for link in links]  # FIFO, parents intact
    assert await frontier.claim("w", 1) == []


async def test_depths_are_breadth_first_and_released_work_goes_first(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier(concurrency={"perHost": 2})
    await frontier.enqueue([Link(canonicalize(f"http://a.com/d3/{i}"), 3, "") for i in range(2)])
    await frontier.enqueue([Link(canonicalize(f"http://a.com/d1/{i}"), 1, "") for i in range(3)])
    first = await frontier.claim("w", 2)
    assert [lease.url for lease in first] == ["http://a.com/d1/0", "http://a.com/d1/1"]
    await frontier.release("w", [first[1].lease_id])
    await frontier.ack("w", [first[0].lease_id])
    order = []
    while leases := await frontier.claim("w", 1):
        order.append(leases[0].url)
        await frontier.ack("w", [leases[0].lease_id])
    assert order == [
        "http://a.com/d1/1",
        "http://a.com/d1/2",
        "http://a.com/d3/0",
        "http://a.com/d3/1",
    ]
    # Drained: no queue key is left, and the host is out of the ready index.
    keys = [key async for key in frontier.client.scan_iter(match=frontier.keys.prefix + "q:*")]
    assert keys == []
    assert await frontier.client.zcard(frontier.keys.key("ready")) == 0


@pytest.mark.slow
@pytest.mark.parametrize("links_per_page", [50, 1])
async def test_a_queued_url_costs_at_most_100_bytes(
    private_client: aioredis.Redis, job_id: str, links_per_page: int
) -> None:
    """200,000 URLs of 76 characters on 1,000 hosts, parents of 61 characters: Redis's used
    memory grows by at most 100 bytes per queued URL (the Bloom filter, allocated at open,
    not counted). It was 261 before the compact layout; 50 links per page is a site crawl's
    shape, one link per page the worst case (a parent entry per URL)."""
    settings = frontier_settings(job_id, merged(TEST_JOB, {"dedup": {"capacity": 400_000}}))
    frontier = await Frontier.open(private_client, settings)
    links = queued_links(links_per_page)
    assert (len(links[0].url), len(links[0].parent)) == (76, 61)
    before = int((await private_client.info("memory"))["used_memory"])
    for start in range(0, len(links), 10_000):
        await frontier.enqueue(links[start : start + 10_000])
    after = int((await private_client.info("memory"))["used_memory"])
    queued = (await frontier.stats()).queued
    assert queued >= 199_000  # bar a few Bloom false positives
    assert (after - before) / queued <= 100
