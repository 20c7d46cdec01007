"""The hostile-site suite: a worker process against the loopback test site at its worst.

Each case ends classified (a page, or a dead letter with the class that says why), with the
worker alive to the end (exit 0) and its own peak RSS under the memory limit it was given
(``CRAWLFLEET_MEMORY_LIMIT_BYTES``, the stand-in for a container's cgroup limit). What the site
saw is asserted from its own request log. Every case is bounded in time: timeouts, robots
waits and give-ups are set to seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.crawls import Crawl, make_crawl, wait_with_peak_rss

pytestmark = pytest.mark.slow

_MIB = 1024 * 1024
#: The memory each worker is told it has (its budget derives from it, crawler/fetching/memory.py).
MEMORY_LIMIT = 320 * _MIB


def run_worker(crawl: Crawl, name: str = "hostile", timeout: float = 60) -> int:
    """Run one worker to the end: assert it exited 0 under its memory limit; its peak KiB."""
    proc = crawl.start(name, env={"CRAWLFLEET_MEMORY_LIMIT_BYTES": str(MEMORY_LIMIT)})
    code, peak_kib = wait_with_peak_rss(proc, timeout)
    log = (crawl.out / f"{name}.log").read_text(errors="replace")
    assert code == 0, log[-3000:]
    assert peak_kib * 1024 < MEMORY_LIMIT, f"worker peaked at {peak_kib} KiB"
    return peak_kib


def hostile_crawl(
    site: TestSite, redis_server: RedisServer, tmp_path: Path, seeds: list[str], **spec: Any
) -> Crawl:
    """A crawl of exactly ``seeds`` (depth 0 unless the case says otherwise), no host delay."""
    return make_crawl(
        site,
        redis_server,
        tmp_path,
        seeds=seeds,
        **{
            "scope": {"maxDepth": 0},
            "concurrency": {"perHost": 8, "hostDelaySeconds": 0},
            "robots": {"errorTtlSeconds": 1, "giveUpAfterSeconds": 30},
            **spec,
        },
    )


@pytest.fixture
def site() -> Iterator[TestSite]:
    config = SiteConfig(
        hosts=3, pages_per_host=12, trickle_interval_seconds=1.5, bomb_inflated_bytes=256 * _MIB
    )
    with TestSite(config) as running:
        yield running


def robots_requests(site: TestSite, host: int) -> list[Any]:
    return [r for r in site.requests_for(host) if r.path == "/robots.txt"]


# -- robots.txt ---------------------------------------------------------------------------------


async def test_robots_503_several_times_then_200_defers_the_host_then_crawls_it(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    failures = 4
    config = SiteConfig(hosts=1, pages_per_host=12, hostile=False, robots_failures=failures)
    with TestSite(config) as site:
        crawl = hostile_crawl(
            site,
            redis_server,
            tmp_path,
            site.seeds,
            scope={"maxDepth": 3},
            retry={"requestAttempts": 2, "backoffBaseSeconds": 0.05, "backoffMaxSeconds": 0.2},
        )
        run_worker(crawl)
        robots = robots_requests(site, 0)
        pages = [r for r in site.requests_for(0) if r.path != "/robots.txt"]
    assert len(robots) == failures + 1  # asked again after each wait, until it answered
    assert [r.status for r in robots] == [503] * failures + [200]
    assert pages, "the host was never crawled"
    assert min(r.start for r in pages) > robots[-1].start  # no page before robots.txt answered
    records = crawl.pages()
    assert {r["url"] for r in records} == {canonicalize(u) for u in site.expected_pages(3)}
    assert all(r["attempt"] == 1 for r in records)  # the waits spent no attempt
    assert await crawl.dead() == {}
    stats = await crawl.stats()
    assert stats.released >= 1  # the seed went back (deferred) at least once
    assert stats.failed == 0


async def test_robots_503_with_retry_after_is_asked_again_after_it_not_after_the_error_ttl(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # The error TTL stays at its 600 s default: the crawl can only end, within the worker's
    # time bound, if each of the three 503s is asked again after its Retry-After of 1 s.
    failures = 3
    config = SiteConfig(
        hosts=1,
        pages_per_host=12,
        hostile=False,
        robots_failures=failures,
        robots_retry_after_seconds=1,
    )
    with TestSite(config) as site:
        crawl = make_crawl(
            site,
            redis_server,
            tmp_path,
            seeds=site.seeds,
            scope={"maxDepth": 3},
            concurrency={"perHost": 2, "hostDelaySeconds": 0},
            # One request per ask, so every ask is one deferral on the frontier's clock.
            retry={"requestAttempts": 1},
        )
        run_worker(crawl)
        robots = robots_requests(site, 0)
        pages = [r for r in site.requests_for(0) if r.path != "/robots.txt"]
    assert [r.status for r in robots] == [503] * failures + [200]  # asked exactly 4 times
    assert pages, "the host was never crawled"
    assert min(r.start for r in pages) > robots[-1].start  # none before its answer
    records = crawl.pages()
    assert {r["url"] for r in records} == {canonicalize(u) for u in site.expected_pages(3)}
    assert all(r["attempt"] == 1 for r in records)  # the waits spent no attempt
    assert await crawl.dead() == {}
    stats = await crawl.stats()
    assert stats.released >= failures  # the seed went back once per 503
    log = (crawl.out / "hostile.log").read_text(errors="replace")
    assert "robots.txt unreachable (status 503, Retry-After 1 s" in log


async def test_robots_that_never_answers_gives_the_host_up_as_unavailable(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    with TestSite(SiteConfig(hosts=1, hostile=False, robots_hang=True)) as site:
        crawl = hostile_crawl(
            site,
            redis_server,
            tmp_path,
            [site.url(0, "/"), site.url(0, "/d1/p1.html")],
            fetch={
                "connectTimeoutSeconds": 0.5,
                "readTimeoutSeconds": 0.5,
                "totalTimeoutSeconds": 1,
            },
            robots={"errorTtlSeconds": 1, "giveUpAfterSeconds": 3},
        )
        run_worker(crawl)
        pages = [r for r in site.requests_for(0) if r.path != "/robots.txt"]
    assert pages == []  # RFC 9309: unreachable means "disallow everything" meanwhile
    dead = await crawl.dead()
    assert set(dead) == {canonicalize(site.url(0, "/")), canonicalize(site.url(0, "/d1/p1.html"))}
    for letter in dead.values():
        assert letter["failure_class"] == "robots_unavailable", letter
        assert "robots.txt unreachable" in letter["message"]


async def test_robots_404_allows_everything(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    host = 2  # hostile mode: the last host has no robots.txt at all
    assert site.graph.robots_txt(host) is None
    crawl = hostile_crawl(site, redis_server, tmp_path, [site.url(host)], scope={"maxDepth": 1})
    run_worker(crawl)
    assert [r.status for r in robots_requests(site, host)] == [404]
    pages = {r["url"] for r in crawl.pages() if not r["failure_class"]}
    assert canonicalize(site.url(host)) in pages
    assert len(pages) > 1  # its links too: nothing on the host is disallowed


async def test_a_redirect_into_a_disallowed_path_is_never_requested(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    goes = [site.url(0, f"/go/{n}") for n in range(20)]
    crawl = hostile_crawl(site, redis_server, tmp_path, goes)
    run_worker(crawl)
    assert all(site.count(url) == 1 for url in goes)
    private = [r for r in site.requests_for(0) if r.path.startswith("/private/")]
    assert private == []  # counted server-side: not one hop into /private/ was sent
    dead = await crawl.dead()
    assert set(dead) == {canonicalize(url) for url in goes}
    for letter in dead.values():
        assert letter["failure_class"] == "robots_disallowed", letter
        assert "redirect to" in letter["message"]


# -- hostile responses -------------------------------------------------------------------------


async def test_a_trickle_of_one_byte_at_a_time_ends_at_the_total_deadline(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # One byte every 1.5 s never trips the 2 s read timeout: only the total deadline ends it.
    crawl = hostile_crawl(
        site,
        redis_server,
        tmp_path,
        [site.url(0, "/trickle")],
        fetch={"readTimeoutSeconds": 2, "totalTimeoutSeconds": 4},
        retry={"taskAttempts": 1},
    )
    run_worker(crawl)
    letter = (await crawl.dead())[canonicalize(site.url(0, "/trickle"))]
    assert letter["failure_class"] == "timeout"
    assert "total deadline" in letter["message"]


async def test_bombs_in_every_coding_are_dead_lettered(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    bombs = [site.url(0, f"/bomb/{coding}") for coding in ("gzip", "deflate", "br", "zstd")]
    # The site builds each bomb on its first request: a slow first answer is not a timeout.
    crawl = hostile_crawl(
        site,
        redis_server,
        tmp_path,
        bombs,
        fetch={"readTimeoutSeconds": 5, "totalTimeoutSeconds": 10},
    )
    run_worker(crawl)
    dead = await crawl.dead()
    for url in bombs:
        assert dead[canonicalize(url)]["failure_class"] == "decompression_bomb", url
        assert site.count(url) == 1  # permanent: never asked again


async def test_big_bodies_at_once_wait_for_the_memory_budget(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # Twelve 24 MiB bodies streamed slowly enough to be read all at once: 288 MiB of bodies,
    # past the 320 MiB the worker is given once Python's own share is counted. The budget
    # (half the limit, less one body: 136 MiB) makes the later ones wait; all are crawled.
    config = SiteConfig(hosts=1, hostile=False, big_bytes=24 * _MIB, big_write_delay_seconds=0.004)
    with TestSite(config) as site:
        bigs = [site.url(0, f"/big.bin?n={n}") for n in range(12)]
        crawl = hostile_crawl(
            site,
            redis_server,
            tmp_path,
            bigs,
            concurrency={"perWorker": 16, "perHost": 16, "hostDelaySeconds": 0},
            fetch={
                "readTimeoutSeconds": 5,
                "totalTimeoutSeconds": 60,
                "maxBodyBytes": 32 * _MIB,
                "maxDecompressedBytes": 32 * _MIB,
            },
        )
        run_worker(crawl, timeout=120)
    crawled = {r["url"]: r for r in crawl.pages() if not r["failure_class"]}
    assert set(crawled) == {canonicalize(url) for url in bigs}, await crawl.dead()
    assert all(record["length"] == 24 * _MIB for record in crawled.values())


@pytest.mark.parametrize("path", ["/long-location", "/many-headers"])
async def test_oversized_response_heads_are_dead_lettered_after_one_request(
    site: TestSite, redis_server: RedisServer, tmp_path: Path, path: str
) -> None:
    crawl = hostile_crawl(site, redis_server, tmp_path, [site.url(0, path)])
    run_worker(crawl)
    assert site.count(site.url(0, path)) == 1
    assert (await crawl.dead())[canonicalize(site.url(0, path))]["failure_class"] == (
        "headers_too_large"
    )


# -- links: floods, legacy charsets, traps -----------------------------------------------------


async def test_a_page_of_200000_links_gives_only_its_cap_to_the_frontier(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    cap = 300
    flood = site.url(0, "/links/200000")
    crawl = hostile_crawl(
        site,
        redis_server,
        tmp_path,
        [flood],
        scope={"maxDepth": 1, "maxLinksPerPage": cap},
        fetch={"maxBodyBytes": 16 * _MIB, "maxDecompressedBytes": 16 * _MIB},
    )
    run_worker(crawl)
    record = next(r for r in crawl.pages() if r["url"] == canonicalize(flood))
    assert record["outlinks"] == cap
    stats = await crawl.stats()
    assert stats.seen == 1 + cap  # the frontier was not flooded: the seed and the first 300
    followed = {r.path for r in site.requests_for(0) if r.path.startswith("/links/to/")}
    assert followed == {f"/links/to/{i}" for i in range(cap)}  # in document order


async def test_links_of_a_shift_jis_page_are_decoded_right(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    pages = [site.url(0, "/sjis/header"), site.url(0, "/sjis/meta")]
    crawl = hostile_crawl(site, redis_server, tmp_path, pages, scope={"maxDepth": 1})
    run_worker(crawl)
    titles = {r["url"]: r["title"] for r in crawl.pages()}
    assert all(titles[canonicalize(url)] == "日本語のページ" for url in pages)
    requested = {r.path for r in site.requests_for(0)}
    # The path in UTF-8 and the query in the page's Shift_JIS, as a browser sends them.
    assert "/sjis/%E6%97%A5%E6%9C%AC%E8%AA%9E/%E3%83%9A%E3%83%BC%E3%82%B8.html" in requested
    assert "/sjis/%E6%A4%9C%E7%B4%A2?q=%93%8C%8B%9E" in requested
    assert not any("%EF%BF%BD" in path for path in requested)  # no replacement characters


async def test_repeated_segment_and_deep_path_traps_end(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    crawl = hostile_crawl(
        site,
        redis_server,
        tmp_path,
        [site.url(0, "/trap/")],
        scope={"maxDepth": 100, "maxPathSegments": 6, "maxRepeatedSegments": 2},
    )
    run_worker(crawl)
    paths = [r.path for r in site.requests_for(0) if r.path.startswith("/trap/")]
    assert "/trap/same/same/" in paths
    assert all("same/same/same/" not in path for path in paths)  # the third repeat is refused
    assert all(path.count("/") <= 6 for path in paths)  # and so is a seventh segment
    assert len(paths) == len(set(paths))  # the trap ended: each page once
    assert len(paths) < 100


async def test_a_calendar_trap_is_cut_at_max_depth(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    depth = 10
    crawl = hostile_crawl(
        site, redis_server, tmp_path, [site.url(0, "/calendar/2024/1")], scope={"maxDepth": depth}
    )
    run_worker(crawl)
    months = [r.path for r in site.requests_for(0) if r.path.startswith("/calendar/")]
    assert len(months) == len(set(months)) == 2 * depth + 1  # one month each way per level
