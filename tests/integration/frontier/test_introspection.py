"""What ``crawlfleet frontier hosts|url`` read, against a real redis-server mid-crawl.

A crawl-shaped workload (seeds on several hosts, claims, acks, a retry, a dead letter) is
driven through the frontier's own scripts; at each step the per-host counters the scripts
keep add up to the job's counters (they are the same events counted twice), the top hosts
come out in order, and one URL's story follows it through queued, leased, delayed and dead.
The same on one partition and on eight.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from crawlfleet.frontier import (
    Admission,
    Failure,
    Frontier,
    FrontierLimits,
    FrontierSettings,
    Lease,
    Link,
    canonicalize,
    host_of,
)
from crawlfleet.frontier.introspection import domain_counts, host_counts, top_hosts, url_story
from crawlfleet.frontier.keys import partition_of
from tests.integration.frontier.conftest import TEST_JOB
from tests.support.specs import frontier_settings

#: Host i has 2 + 3 i URLs queued: every host a different count, so the order is known.
_HOSTS = [f"h{i}.test" for i in range(6)]
_URLS = [f"http://{host}/p{n}" for i, host in enumerate(_HOSTS) for n in range(2 + 3 * i)]


def _settings(job_id: str, shards: int) -> FrontierSettings:
    return replace(frontier_settings(job_id, TEST_JOB), shards=shards)


async def _sums_agree(frontier: Frontier) -> dict[str, Counter[str]]:
    """The per-host counters, checked against the job's: equal sums."""
    counts = await host_counts(frontier, _HOSTS)
    stats = await frontier.stats()
    per: dict[str, Counter[str]] = {"queued": Counter(), "crawled": Counter(), "dead": Counter()}
    for host, c in counts.items():
        per["queued"][host], per["crawled"][host], per["dead"][host] = c.queued, c.crawled, c.dead
    assert per["queued"].total() == stats.queued, (per, stats)
    assert per["crawled"].total() == stats.crawled, (per, stats)
    assert per["dead"].total() == stats.dead, (per, stats)
    return per


@pytest.mark.parametrize("shards", [1, 8])
async def test_hosts_and_a_urls_story_follow_the_crawl(
    redis_client: aioredis.Redis, job_id: str, shards: int
) -> None:
    frontier = await Frontier.open(redis_client, _settings(f"{job_id}-{shards}", shards))
    urls = [canonicalize(u) for u in _URLS]
    await frontier.enqueue([Link(u, 0) for u in urls], seeding=True)
    expected = Counter(host_of(u) for u in urls)
    assert (await _sums_agree(frontier))["queued"] == expected

    rows = await top_hosts(frontier, by="queued", top=3)
    assert [r.host for r in rows] == ["h5.test", "h4.test", "h3.test"]
    assert [r.counts.queued for r in rows] == [17, 14, 11]
    assert all(r.in_flight == 0 and r.last_fetch_ms is None for r in rows)
    assert all(r.next_allowed_ms is not None for r in rows)  # queued, slots free: ready

    story = await url_story(frontier, "HTTP://h5.test/p16")  # canonicalised first
    assert (story.state, story.queued_depth, story.queued_position) == ("queued", 0, 17)
    assert story.seen
    assert story.attempts == 0

    # claim everything (perHost 4: each round's responses "arrived", freeing their slots),
    # then settle: ack most, one retry, one dead
    leases: list[Lease] = []
    while len(leases) < len(urls):
        got = await frontier.claim("w1", 50, fetched=[lease.lease_id for lease in leases])
        assert got, "the frontier stopped handing out its URLs"
        leases += got
    by_url = {lease.url: lease for lease in leases}
    leased = await url_story(frontier, "http://h5.test/p16")
    assert (leased.state, leased.leased_by, leased.queued_depth) == ("leased", "w1", None)
    assert leased.lease_expires_ms is not None
    assert leased.lease_expires_ms > leased.now_ms
    busy = await top_hosts(frontier, by="queued", top=10)
    assert busy == []  # nothing queued any more: no host has a queued count

    retry, dead = (
        by_url[canonicalize("http://h5.test/p16")],
        by_url[canonicalize("http://h1.test/p0")],
    )
    await frontier.fail(
        "w1",
        [
            Failure(retry.lease_id, "timeout", "read timed out", True, delay_seconds=60),
            Failure(dead.lease_id, "http_404", "404 Not Found", False),
        ],
    )
    rest = [lease.lease_id for lease in leases if lease not in (retry, dead)]
    await frontier.ack("w1", rest)
    per = await _sums_agree(frontier)
    assert per["crawled"] == expected - Counter(["h5.test", "h1.test"])
    assert per["dead"] == Counter(["h1.test"])

    delayed = await url_story(frontier, "http://h5.test/p16")
    assert delayed.state == "delayed"
    assert delayed.attempts == 1
    assert delayed.retry_at_ms is not None
    assert delayed.retry_at_ms > delayed.now_ms + 50_000
    buried = await url_story(frontier, "http://h1.test/p0")
    assert buried.state == "dead"
    assert buried.dead is not None
    assert buried.dead["failure_class"] == "http_404"
    done = await url_story(frontier, "http://h3.test/p1")
    assert done.state == "done"
    assert done.scans_cut == ()
    never = await url_story(frontier, "http://h3.test/never")
    assert never.state == "unseen"
    assert not never.seen

    top_crawled = await top_hosts(frontier, by="crawled", top=2)
    assert [r.host for r in top_crawled] == ["h5.test", "h4.test"]
    assert [r.counts.crawled for r in top_crawled] == [16, 14]
    assert [r.partition for r in top_crawled] == [partition_of(r.host, shards) for r in top_crawled]
    await frontier.delete()


@pytest.mark.parametrize("shards", [1, 8])
async def test_a_hosts_queue_never_passes_its_budget(
    redis_client: aioredis.Redis, job_id: str, shards: int
) -> None:
    """maxQueuedPerHost 500: an endless calendar's host holds 500 queued however many links
    come, the rest refused (counted, not added to the filter), and admitted once its queue
    drained; another host is not held back by it."""
    settings = replace(_settings(f"{job_id}-q{shards}", shards), max_queued_per_host=500)
    frontier = await Frontier.open(redis_client, settings)
    calendar = [canonicalize(f"http://cal.test/day/{n}") for n in range(700)]
    other = [canonicalize(f"http://other.test/p{n}") for n in range(20)]
    codes = await frontier.enqueue([Link(u, 1, "http://cal.test/") for u in calendar[:400]])
    codes += await frontier.enqueue([Link(u, 1, "http://cal.test/") for u in calendar[400:]])
    assert Counter(codes) == {Admission.NEW: 500, Admission.OVER_HOST_BUDGET: 200}
    assert set(await frontier.enqueue([Link(u, 1) for u in other])) == {Admission.NEW}
    counts = await host_counts(frontier, ["cal.test", "other.test"])
    assert (counts["cal.test"].queued, counts["other.test"].queued) == (500, 20)
    stats = await frontier.stats()
    assert (stats.host_budget, stats.queued, stats.seen) == (200, 520, 520)
    refused = calendar[500:]
    assert not any(await frontier.contains(refused))  # met again later, admitted then
    # a claim takes 4 of each host (perHost 4): room for 4 of the refused, no more
    taken = await frontier.claim("w1", 20)
    assert len([lease for lease in taken if lease.host == "cal.test"]) == 4
    again = await frontier.enqueue([Link(u, 1) for u in refused])
    assert Counter(again) == {Admission.NEW: 4, Admission.OVER_HOST_BUDGET: 196}
    assert (await host_counts(frontier, ["cal.test"]))["cal.test"].queued == 500
    await frontier.delete()


async def test_a_hosts_pages_stop_at_its_budget(redis_client: aioredis.Redis, job_id: str) -> None:
    """maxPagesPerHost 30: a host admits 30 URLs over the crawl, queued or crawled, and no
    more, seeds included."""
    settings = replace(_settings(f"{job_id}-p", 1), max_pages_per_host=30)
    frontier = await Frontier.open(redis_client, settings)
    urls = [canonicalize(f"http://big.test/p{n}") for n in range(50)]
    seeded = await frontier.enqueue([Link(u, 0) for u in urls[:10]], seeding=True)
    assert set(seeded) == {Admission.NEW}
    leases = await frontier.claim("w1", 4)
    await frontier.ack("w1", [lease.lease_id for lease in leases])
    codes = await frontier.enqueue([Link(u, 1) for u in urls[10:]])
    assert Counter(codes) == {Admission.NEW: 20, Admission.OVER_HOST_BUDGET: 20}
    counts = (await host_counts(frontier, ["big.test"]))["big.test"]
    assert (counts.queued, counts.crawled) == (26, 4)
    await frontier.delete()


async def test_a_domain_budget_counts_its_subdomains_together(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    """maxQueuedPerDomain 100 and maxPagesPerDomain 200: a forum with a host per user
    (u<n>.forum.co.uk) holds 100 queued URLs over all its hosts, each host far under
    any per-host figure; claims free room; past 200 admitted the domain takes no more.
    Another domain and an IP address are budgets apart."""
    settings = replace(
        _settings(f"{job_id}-d", 1), max_queued_per_domain=100, max_pages_per_domain=200
    )
    frontier = await Frontier.open(redis_client, settings)
    forum = [canonicalize(f"http://u{n % 40}.forum.co.uk/t/{n}") for n in range(300)]
    codes = await frontier.enqueue([Link(u, 1, "http://forum.co.uk/") for u in forum])
    assert Counter(codes) == {Admission.NEW: 100, Admission.OVER_HOST_BUDGET: 200}
    others = [canonicalize(f"http://www.another.co.uk/p{n}") for n in range(30)]
    others += [canonicalize(f"http://127.0.0.9:8080/p{n}") for n in range(30)]
    assert set(await frontier.enqueue([Link(u, 1) for u in others])) == {Admission.NEW}
    stats = await frontier.stats()
    assert (stats.queued, stats.host_budget) == (160, 200)
    per_host = await host_counts(frontier, [f"u{n}.forum.co.uk" for n in range(40)])
    assert sum(c.queued for c in per_host.values()) == 100
    assert max(c.queued for c in per_host.values()) <= 4  # no host near a per-host figure
    # claims (perHost 4 on each of 40 hosts) free room for as many, no more
    taken = await frontier.claim("w1", 60)
    from_forum = [lease for lease in taken if lease.host.endswith("forum.co.uk")]
    refused = [u for u, code in zip(forum, codes, strict=True) if code != Admission.NEW]
    again = await frontier.enqueue([Link(u, 1) for u in refused])
    assert again.count(Admission.NEW) == len(from_forum)
    # admitted so far: 100 + len(from_forum); the page budget stops the domain at 200
    await frontier.ack("w1", [lease.lease_id for lease in taken])
    more = await frontier.claim("w1", 200)
    await frontier.ack("w1", [lease.lease_id for lease in more])
    last = await frontier.enqueue([Link(u, 1) for u in refused])
    admitted = 100 + len(from_forum) + last.count(Admission.NEW)
    assert admitted == 200
    per_host = await host_counts(frontier, [f"u{n}.forum.co.uk" for n in range(40)])
    assert sum(c.queued for c in per_host.values()) <= 100
    # `crawlfleet frontier count --domain`: the domain's hosts together, nobody else's
    forum_counts = await domain_counts(frontier, "forum.co.uk")
    assert len(forum_counts.hosts) == 40
    assert not forum_counts.cut
    assert forum_counts.counts.admitted == 200
    assert forum_counts.counts.queued == sum(c.queued for c in per_host.values())
    assert forum_counts.counts.crawled == sum(c.crawled for c in per_host.values())
    other = await domain_counts(frontier, "another.co.uk")
    assert (other.hosts, other.counts.admitted) == (("www.another.co.uk",), 30)
    await frontier.delete()


@pytest.mark.parametrize("shards", [1, 8])
async def test_limits_changed_on_a_running_job_apply_at_the_next_claim(
    redis_client: aioredis.Redis, job_id: str, shards: int
) -> None:
    """perHost 1 -> 3 written into the running frontier (what a tick does when the spec
    changed): said once, in the spec's words; the host, capped at 1, takes 3 leases once its
    lease settles; a budget set live refuses the next batch's links past it."""
    frontier = await Frontier.open(
        redis_client, replace(_settings(f"{job_id}-l{shards}", shards), per_host=1)
    )
    urls = [canonicalize(f"http://one.test/p{n}") for n in range(10)]
    await frontier.enqueue([Link(u, 0) for u in urls], seeding=True)
    first = await frontier.claim("w1", 10)
    assert len(first) == 1
    wider = FrontierLimits(per_host=3, host_delay_seconds=0.0, max_queued_per_host=10)
    changes = await frontier.retune(wider)
    assert [str(c) for c in changes] == [
        "concurrency.perHost 1 -> 3",
        "scope.maxQueuedPerHost 0 -> 10",
    ]
    assert await frontier.retune(wider) == []  # said once
    await frontier.ack("w1", [first[0].lease_id])
    assert len(await frontier.claim("w1", 10)) == 3
    more = [canonicalize(f"http://one.test/q{n}") for n in range(10)]
    codes = await frontier.enqueue([Link(u, 1) for u in more])
    assert Counter(codes) == {Admission.NEW: 4, Admission.OVER_HOST_BUDGET: 6}  # 6 + 4 = 10
    await frontier.delete()
