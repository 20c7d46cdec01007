"""Feeds (issue 23, item 4): a real crawl of the loopback test site with ``SiteConfig.feeds``.

Every normal page announces its host's RSS and Atom feeds with ``<link rel="alternate">``
(crawlfleet/testsite/feeds.py); the feeds list pages that no page links, so a crawl that
records them found them through the feeds, with the entries' dates as their lastmod. A
hostile feed given as a seed (billion laughs, an external entity) is refused, one dead letter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite, feeds
from tests.support.crawls import make_crawl, requested_urls, wait_all

pytestmark = pytest.mark.slow

HOSTS = 2


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    config = SiteConfig(hosts=HOSTS, pages_per_host=4, hostile=False, feeds=True)
    with TestSite(config) as running:
        yield running


async def test_pages_only_feeds_list_are_crawled_once_with_their_dates(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    since = time.monotonic()
    seeds = [site.url(host, "/") for host in range(HOSTS)] + [site.url(0, feeds.HOSTILE_PATH)]
    crawl = make_crawl(site, redis_server, tmp_path, seeds=seeds, scope={"maxDepth": 1})
    assert wait_all([crawl.start("f0"), crawl.start("f1")], timeout=90) == [0, 0]

    records = {record["url"]: record for record in crawl.pages()}
    dead = await crawl.dead()
    requested = requested_urls(site, since)

    for host in range(HOSTS):
        for path, listed in ((feeds.RSS_PATH, feeds.RSS_ONLY), (feeds.ATOM_PATH, feeds.ATOM_ONLY)):
            # The feed itself: found in the pages' heads (depth 1), read, its entries counted
            # (the listed pages, the home page and an out-of-scope page).
            feed_url = canonicalize(site.url(host, path))
            feed = records[feed_url]
            assert (feed["status"], feed["failure_class"]) == (200, None), feed_url
            assert (feed["depth"], feed["outlinks"], feed["title"]) == (
                1,
                len(listed) + 2,
                "Site news",
            )
            assert requested[feed_url] == 1
            # Each page it alone lists: crawled once, at the feed's depth, the feed its
            # parent and the entry's date its lastmod.
            for page in listed:
                url = canonicalize(site.url(host, page.path))
                record = records[url]
                assert (record["status"], record["failure_class"]) == (200, None), url
                assert record["parent"] == feed_url
                assert (record["depth"], record.get("lastmod")) == (1, page.lastmod), url
                assert requested[url] == 1
        assert requested[canonicalize(site.url(host, "/"))] == 1  # a seed the feeds list too
    away = {site.out_of_scope_url("/news/away.html"), site.out_of_scope_url("/news/a")}
    assert not {canonicalize(url) for url in away} & set(requested)  # out of scope

    # The hostile feed: refused unexpanded, a dead letter and a record with its reason; the
    # entities it would have made links of were never requested.
    hostile = canonicalize(site.url(0, feeds.HOSTILE_PATH))
    assert dead[hostile]["failure_class"] == "feed_invalid"
    assert "entit" in dead[hostile]["message"]  # our check's, or libxml2's amplification bound
    assert records[hostile]["failure_class"] == "feed_invalid"
    assert set(dead) == {hostile}
    logs = "".join(path.read_text() for path in crawl.out.glob("f*.log"))
    assert "feed_invalid" in logs
    assert sorted(url for url in requested if "/news/" in url) == sorted(
        canonicalize(site.url(host, page.path))
        for host in range(HOSTS)
        for page in feeds.RSS_ONLY + feeds.ATOM_ONLY
    )
