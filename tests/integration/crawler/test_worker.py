"""Worker processes, started as a user would, crawl the loopback test site.

Everything is asserted from the site's own request log, Redis, and the output files (the
durable ones under ``pages/``: a file still being written is in ``.partial/``, no reader's).
"""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.crawls import (
    MAX_DEPTH,
    PER_HOST,
    Crawl,
    make_crawl,
    requested_urls,
    wait_all,
    wait_with_peak_rss,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    config = SiteConfig(
        hosts=3,
        pages_per_host=40,
        latency_seconds=0.01,  # lets overlapping requests show in the concurrency log
        slow_seconds=0.5,
        big_bytes=4 * 1024 * 1024,
        bomb_inflated_bytes=256 * 1024 * 1024,
    )
    with TestSite(config) as running:
        yield running


async def assert_complete_crawl(site: TestSite, crawl: Crawl, since: float) -> dict[str, int]:
    requested = requested_urls(site, since)
    expected = {canonicalize(u) for u in site.expected_pages(MAX_DEPTH)}
    missing = expected - set(requested)
    assert not missing, f"{len(missing)} reachable pages never fetched, e.g. {sorted(missing)[:3]}"
    pages = {r["url"] for r in crawl.pages() if r["status"] == 200 and not r["failure_class"]}
    assert expected <= pages, "fetched pages missing from the output"
    specials = site.specials()
    dead = await crawl.dead()
    want = {
        "/status/404": "http_404",
        "/status/410": "http_410",
        "/redirect/loop/a": ("redirect_loop", "too_many_redirects"),
        "/big": "body_too_large",
        "/bomb": "decompression_bomb",
        "/private/secret": "robots_disallowed",
        "/empty": "soft_block",
        "/hang": "timeout",
    }
    for path, classes in want.items():
        url = canonicalize(site.url(0, path))
        assert url in dead, f"{path} not dead-lettered"
        allowed = classes if isinstance(classes, tuple) else (classes,)
        assert dead[url]["failure_class"] in allowed, (path, dead[url])
    for url in specials.healing:
        assert canonicalize(url) in pages, f"{url} should have healed"
    # Never requested: out of scope, robots-disallowed, unsafe.
    assert site.requests_for(site.out_of_scope_host) == []
    assert site.count(site.url(0, "/private/secret")) == 0
    # The infinite calendar is cut at maxDepth: two new months per level at most.
    calendar = [r for r in crawl.pages() if "/calendar/" in r["url"]]
    assert calendar
    assert all(r["depth"] <= MAX_DEPTH for r in calendar)
    assert len([u for u in requested if "/calendar/" in u]) <= 2 * MAX_DEPTH + 1
    return requested


async def test_one_worker_crawls_the_site(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    crawl = make_crawl(site, redis_server, tmp_path)
    since = time.monotonic()
    assert wait_all([crawl.start("solo")]) == [0]
    requested = await assert_complete_crawl(site, crawl, since)
    frontier = await crawl.frontier()
    stats = await frontier.stats()
    assert stats.complete
    assert stats.crawled == len({r["url"] for r in crawl.pages() if not r["failure_class"]})
    # Permanent failures are fetched once; nothing else is fetched more than its retries.
    assert requested[canonicalize(site.url(0, "/status/404"))] == 1


#: The most a request may reach the site later than its claim, on a loaded 2-core machine.
MAX_SEND_JITTER_SECONDS = 0.25


def _most_ahead_of_pace(starts: list[float], delay: float) -> float:
    """How far some request k came before request i plus (k - i) delays, at most (i < k)."""
    ahead, latest = 0.0, float("-inf")  # latest: the max of start_i - i * delay so far
    for index, start in enumerate(starts):
        paced = start - index * delay
        ahead = max(ahead, latest - paced)
        latest = max(latest, paced)
    return ahead


async def test_three_workers_are_polite_and_complete(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    delay = 0.05  # well above the send jitter of three workers sharing two cores
    crawl = make_crawl(site, redis_server, tmp_path, concurrency={"hostDelaySeconds": delay})
    since = time.monotonic()
    procs = [crawl.start(f"w{i}") for i in range(3)]
    assert wait_all(procs) == [0, 0, 0]
    await assert_complete_crawl(site, crawl, since)
    workers = {r["worker"] for r in crawl.pages()}
    assert workers == {"w0", "w1", "w2"}
    for host in site.hosts:
        records = sorted(
            (r for r in site.requests_for(host) if r.start >= since), key=lambda r: r.start
        )
        assert site.max_concurrency(host) <= PER_HOST
        starts = [r.start for r in records if not r.path.startswith("/robots.txt")]
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        # Claims are spaced by the delay on Redis's clock. A request reaches the site after
        # scheduling jitter (three workers, Redis and the site share two cores), which can
        # squeeze a gap (9.95 ms once in CI, two of 20 ms under a loaded suite) but not a run
        # of requests: request k after request i is at least (k - i) delays later, less one
        # request's jitter at most. Without the delay, gaps would be a few milliseconds
        # throughout: 40 requests 2 s early.
        assert sum(gaps) / len(gaps) >= delay * 0.95, (host, gaps)
        assert _most_ahead_of_pace(starts, delay) <= MAX_SEND_JITTER_SECONDS, (host, gaps)


async def test_sigkill_costs_only_unacked_pages(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A SIGKILL costs the pages in flight and those whose file was not durable yet: both
    were never acked, so they come back (requeued) and are crawled again; nothing is lost."""
    crawl = make_crawl(site, redis_server, tmp_path)
    since = time.monotonic()
    procs = [crawl.start(f"k{i}") for i in range(3)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(requested_urls(site, since)) < 20:
        time.sleep(0.05)
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait()
    assert wait_all(procs[1:]) == [0, 0]
    requested = await assert_complete_crawl(site, crawl, since)
    expected = {canonicalize(u) for u in site.expected_pages(MAX_DEPTH)}
    twice = [u for u in expected if requested[u] > 1]
    frontier = await crawl.frontier()
    stats = await frontier.stats()
    await frontier.aclose()
    assert len(twice) <= stats.requeued, twice  # only what the dead worker never acked


async def test_a_peer_lost_after_its_response_arrived_does_not_stall_the_survivors(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # What the SIGKILL above can leave behind, made certain: the dead peer held a lease whose
    # response had arrived (its host slot already given back: perHost counts requests in
    # progress) and never acked it, and that host's queue ran dry before the lease expired.
    # The survivor must crawl the URL when it comes back, not wait for it forever.
    crawl = make_crawl(
        site, redis_server, tmp_path, seeds=[site.url(0), site.url(1)], scope={"maxDepth": 0}
    )
    frontier = await crawl.frontier()
    await frontier.seed([site.url(1)])  # the survivor seeds the rest (seeding is idempotent)
    lost = await frontier.claim("lost", 10)
    await frontier.claim("lost", 0, fetched=[lease.lease_id for lease in lost])
    assert [lease.url for lease in lost] == [canonicalize(site.url(1))]

    survivor = crawl.start("survivor")
    assert wait_all([survivor], timeout=30) == [0]
    assert {r["url"] for r in crawl.pages()} == {canonicalize(site.url(i)) for i in (0, 1)}
    assert (await frontier.stats()).requeued == 1  # the lost peer's lease, once it expired


async def test_sigterm_releases_leases_and_exits_zero(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # Only slow pages, so the worker surely holds leases when told to stop.
    slow = [site.url(0, "/slow") + f"?n={i}" for i in range(6)]
    crawl = make_crawl(
        site,
        redis_server,
        tmp_path,
        seeds=slow,
        scope={"maxDepth": 0},
        concurrency={"perHost": 6, "hostDelaySeconds": 0},
        robots={"obey": False},
    )
    proc = crawl.start("term", "--grace-seconds", "0.1")
    frontier = await crawl.frontier()
    deadline = time.monotonic() + 20
    while (await frontier.stats()).leased == 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    stats = await frontier.stats()
    assert stats.leased == 0
    assert stats.released >= 1
    assert stats.failed == 0  # released, not failed: no attempt counted
    leases = await frontier.claim("checker", 10)
    assert leases
    assert all(lease.attempts == 0 for lease in leases)


async def test_ssrf_refused_without_connecting(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    crawl = make_crawl(
        site,
        redis_server,
        tmp_path,
        seeds=[site.url(0, "/"), "http://169.254.169.254/latest/meta-data/"],
        scope={"allowPrivateNetworks": False, "allowedDomains": [*site.hosts, "169.254.169.254"]},
    )
    since = time.monotonic()
    assert wait_all([crawl.start("ssrf")]) == [0]
    assert [r for r in site.all_requests() if r.start >= since] == []
    dead = await crawl.dead()
    assert dead[canonicalize(site.url(0, "/"))]["failure_class"] == "forbidden_address"
    assert dead["http://169.254.169.254/latest/meta-data/"]["failure_class"] == "forbidden_address"


async def test_hostile_pages_keep_worker_memory_bounded(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    crawl = make_crawl(
        site,
        redis_server,
        tmp_path,
        seeds=[site.url(0, p) for p in ("/big", "/bomb", "/redirect/loop/a", "/hang", "/")],
        scope={"maxDepth": 0},
    )
    proc = crawl.start("hostile")
    code, peak_kib = wait_with_peak_rss(proc, 60)
    assert code == 0
    assert peak_kib < 300 * 1024, f"worker peaked at {peak_kib} KiB"
    dead = await crawl.dead()
    assert {d["failure_class"] for d in dead.values()} >= {
        "body_too_large",
        "decompression_bomb",
        "timeout",
    }
    assert canonicalize(site.url(0, "/")) in {
        r["url"] for r in crawl.pages() if not r["failure_class"]
    }
