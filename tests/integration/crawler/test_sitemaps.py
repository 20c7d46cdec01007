"""Sitemaps (issue 15, item 4): a real crawl of the loopback test site with ``scope.sitemaps``.

Host 0's robots.txt names an index listing two gzip'd sitemaps (crawlfleet/testsite/sitemaps.py):
the good one lists pages that no page links, so the sitemap is the only way to them; the other
inflates past the size bound. ``maxDepth: 0`` keeps the crawl to the seed and what sitemaps
list, and the same crawl without sitemaps is the control that reaches none of the listed pages.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.crawler.links.sitemaps import MAX_SITEMAP_BYTES, MAX_SITEMAP_INDEX_DEPTH
from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite, sitemaps
from tests.support.crawls import Crawl, make_crawl, requested_urls, wait_all

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    config = SiteConfig(hosts=1, pages_per_host=5, hostile_slow=False, hostile_heavy=False)
    with TestSite(config) as running:
        yield running


def sitemap_crawl(site: TestSite, redis_server: RedisServer, tmp_path: Path) -> Crawl:
    """Host 0's home page and what its sitemaps list, nothing further."""
    scope = {"maxDepth": 0, "sitemaps": True}
    return make_crawl(site, redis_server, tmp_path, seeds=[site.url(0, "/")], scope=scope)


async def test_sitemap_pages_are_crawled_with_their_lastmod_and_the_oversized_one_refused(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    since = time.monotonic()
    crawl = sitemap_crawl(site, redis_server, tmp_path)
    assert wait_all([crawl.start("s0"), crawl.start("s1")], timeout=90) == [0, 0]

    records = {record["url"]: record for record in crawl.pages()}
    dead = await crawl.dead()
    requested = requested_urls(site, since)

    # Every in-scope page of the good sitemap, linked from nowhere, is crawled once, with the
    # lastmod its entry gave (none when it gave none); the sitemap is its parent.
    for page in sitemaps.LISTED_PAGES:
        url = canonicalize(site.url(0, page.path))
        record = records[url]
        assert (record["status"], record["failure_class"]) == (200, None), url
        assert record.get("lastmod") == page.lastmod, url
        assert record["parent"] == canonicalize(site.url(0, sitemaps.PAGES_PATH))
        assert requested[url] == 1
    # Out of scope: dropped before the frontier, never requested. Disallowed by robots.txt:
    # a dead letter, never requested. The home page, a seed too: fetched once.
    elsewhere = canonicalize(site.out_of_scope_url("/listed/elsewhere.html"))
    assert elsewhere not in records
    assert elsewhere not in requested
    private = canonicalize(site.url(0, sitemaps.PRIVATE_LISTED_PATH))
    assert dead[private]["failure_class"] == "robots_disallowed"
    assert private not in requested
    assert requested[canonicalize(site.url(0, "/"))] == 1

    # The index and the good sitemap are read; the oversized one is refused with its reason,
    # as a dead letter and a record, and nothing it lists is fetched.
    index = records[canonicalize(site.url(0, sitemaps.INDEX_PATH))]
    assert (index["status"], index["outlinks"]) == (200, 3)
    assert records[canonicalize(site.url(0, sitemaps.PAGES_PATH))]["outlinks"] == 7
    oversized = canonicalize(site.url(0, sitemaps.OVERSIZED_PATH))
    assert dead[oversized]["failure_class"] == "sitemap_too_large"
    assert str(MAX_SITEMAP_BYTES) in dead[oversized]["message"]
    assert records[oversized]["failure_class"] == "sitemap_too_large"
    assert not any(sitemaps.OVERSIZED_LISTED_PREFIX in url for url in requested)
    logs = "".join(path.read_text() for path in crawl.out.glob("s*.log"))
    assert "sitemap_too_large" in logs

    # The endless chain of indexes ends at the depth bound: index.xml names level 1, which
    # names level 2, whose sitemaps would be one level too deep and are not fetched.
    nested = [canonicalize(site.url(0, sitemaps.nested_path(n))) for n in (1, 2, 3)]
    assert [records[url]["outlinks"] for url in nested[:2]] == [1, 1]
    assert nested[2] not in requested
    assert MAX_SITEMAP_INDEX_DEPTH == 2

    # The host's guessed /sitemap.xml: a 404 on the record, not a dead letter.
    guess = canonicalize(site.url(0, "/sitemap.xml"))
    assert (records[guess]["status"], records[guess]["failure_class"]) == (404, None)
    assert guess not in dead
    assert set(dead) == {private, oversized}


async def test_without_sitemaps_the_listed_pages_are_not_found(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    since = time.monotonic()
    crawl = make_crawl(
        site, redis_server, tmp_path, seeds=[site.url(0, "/")], scope={"maxDepth": 0}
    )
    assert wait_all([crawl.start("c0")], timeout=60) == [0]
    requested = requested_urls(site, since)
    assert [record["url"] for record in crawl.pages()] == [canonicalize(site.url(0, "/"))]
    assert not any("/sitemap" in url or "/listed/" in url for url in requested)


async def test_what_sitemaps_offer_and_the_crawl_leaves_out_is_counted_by_reason(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    """The worker's dropped-links counter, read from its /metrics while it keeps running."""
    crawl = sitemap_crawl(site, redis_server, tmp_path)
    frontier = await crawl.frontier()
    try:
        await frontier.seed([site.url(0, "/")])
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        worker = crawl.start(
            "m0", "--keep-running", "--metrics-port", str(port), "--metrics-host", "127.0.0.1"
        )
        deadline = time.monotonic() + 60
        while not (await frontier.stats()).complete and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert (await frontier.stats()).complete
    finally:
        await frontier.aclose()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    worker.send_signal(signal.SIGTERM)
    assert wait_all([worker], timeout=30) == [0]

    def dropped(reason: str) -> float:
        found = re.search(
            rf'^crawlfleet_worker_links_dropped_total{{reason="{reason}"}} (\S+)$', text, re.M
        )
        assert found is not None, reason
        return float(found[1])

    assert dropped("out_of_domain") >= 1  # the good sitemap's page of another host
    assert dropped("sitemap_depth") == 1  # the chain's third index
    assert dropped("sitemap_url_cap") == dropped("sitemap_count") == 0
