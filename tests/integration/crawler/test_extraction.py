"""What a crawl yields (issue 15): worker processes crawl the test shop with extract rules and
``content: text``; the items are exactly the shop's, the legacy-charset pages read right, and a
SIGKILL mid-crawl leaves every item once per (url, source, position) for a reader.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.cli import main
from crawlfleet.crawljob import load_crawljob
from crawlfleet.destinations import parse_destination
from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.output.manifest import finish_output
from crawlfleet.output.reader import item_records, page_records
from crawlfleet.output.stores import FolderStore
from crawlfleet.testsite import SiteConfig, TestSite, hostile, shop
from tests.support.crawls import Crawl, make_crawl, requested_urls, wait_all

pytestmark = pytest.mark.slow

PRODUCT_RULE: dict[str, Any] = {
    "match": r"/shop/product/[0-9]+\.html$",
    "fields": {
        "name": {"css": "h1.name"},
        "price": {"css": "span.price::text", "re": r"[0-9.]+"},
        "sku": {"xpath": "//div[has-class('product')]/@data-sku"},
        "tags": {"css": "ul.tags li::text", "all": True},
    },
}
LISTING_RULE: dict[str, Any] = {
    "match": r"/shop/$",
    "each": {"css": "li.product"},
    "fields": {"name": {"css": "a::text"}, "link": {"css": "a", "attr": "href"}},
}
LEGACY_PATHS = ("/sjis/header", "/sjis/meta", "/cp1251/header", "/cp1251/meta")
REGEX_PAGES = ("backtrack", "lookahead")
#: Its cost grows with the page's nodes squared (lxml does not shortcut the count).
QUADRATIC_XPATH = "count(//*[count(following::*) > -1])"


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    with TestSite(SiteConfig(hosts=1, pages_per_host=5, latency_seconds=0.05)) as running:
        yield running


def shop_crawl(site: TestSite, redis_server: RedisServer, tmp_path: Path, **spec: Any) -> Crawl:
    shop_spec: dict[str, Any] = {
        "seeds": [site.url(0, shop.LISTING_PATH), *(site.url(0, path) for path in LEGACY_PATHS)],
        "scope": {"maxDepth": 1, "include": ["/shop/", "/sjis/(header|meta)$", "/cp1251/"]},
        "output": {"content": "text", "maxFileAgeSeconds": 1},
        "extract": [PRODUCT_RULE, LISTING_RULE],
    }
    return make_crawl(site, redis_server, tmp_path, **{**shop_spec, **spec})


def expected_items(site: TestSite) -> set[tuple[str, int, int, str]]:
    """(url, source, position, fields as JSON) of every item the shop holds."""
    expected = set()
    for product in shop.PRODUCTS:
        fields = {
            "name": product.name,
            "price": product.price,
            "sku": product.sku,
            "tags": list(product.tags),
        }
        expected.add(
            (canonicalize(site.url(0, product.path)), 0, 0, json.dumps(fields, sort_keys=True))
        )
    listing = canonicalize(site.url(0, shop.LISTING_PATH))
    for position, product in enumerate(shop.PRODUCTS):
        fields = {"name": product.name, "link": product.path}
        expected.add((listing, 1, position, json.dumps(fields, sort_keys=True)))
    return expected


async def read_items(crawl: Crawl) -> list[dict[str, Any]]:
    store = FolderStore(parse_destination(str(crawl.out)))
    return [json.loads(line) async for line in item_records(store)]


def as_names(items: list[dict[str, Any]]) -> list[tuple[str, int, int, str]]:
    return [
        (item["url"], item["source"], item["position"], json.dumps(item["fields"], sort_keys=True))
        for item in items
    ]


async def test_rules_extract_exactly_the_shops_items_and_content_reads_in_its_charset(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    crawl = shop_crawl(site, redis_server, tmp_path)
    assert wait_all([crawl.start("x0"), crawl.start("x1")], timeout=60) == [0, 0]

    items = await read_items(crawl)
    assert sorted(as_names(items)) == sorted(expected_items(site))
    for item in items:
        assert item["fetch_id"]
        assert isinstance(item["fetched_at"], float)

    store = FolderStore(parse_destination(str(crawl.out)))
    records = {r["url"]: r async for r in _records(store)}
    product = shop.PRODUCTS[0]
    text = records[canonicalize(site.url(0, product.path))]["content"]
    assert text.startswith(f"{product.name} Price: €{product.price}")
    assert "never visible" not in text
    for path, paragraph in [
        ("/sjis/header", hostile.SJIS_TEXT),
        ("/sjis/meta", hostile.SJIS_TEXT),
        ("/cp1251/header", hostile.CP1251_TEXT),
        ("/cp1251/meta", hostile.CP1251_TEXT),
    ]:
        record = records[canonicalize(site.url(0, path))]
        assert paragraph in record["content"], path
        assert record["content_truncated"] is False
    # The closing files, as the run (or the last worker in a cluster) writes them.
    frontier = await crawl.frontier()
    try:
        job = load_crawljob(crawl.job_file)
        stats = await frontier.stats()
        manifest = await finish_output(frontier, store, job.job_id, job.spec, stats)
    finally:
        await frontier.aclose()
    assert manifest["counts"]["itemRecords"] == len(expected_items(site))


async def test_a_page_whose_extraction_fails_is_a_parser_error_and_the_crawl_goes_on(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # The page's own text as a pattern, with an unclosed group: RE2 refuses it on the page.
    failing = {"match": "/cp1251/", "fields": {"x": {"xpath": "//p[re:test(., concat('(', .))]"}}}
    crawl = shop_crawl(site, redis_server, tmp_path, extract=[PRODUCT_RULE, LISTING_RULE, failing])
    assert wait_all([crawl.start("p0")], timeout=60) == [0]

    dead = await crawl.dead()
    for path in ("/cp1251/header", "/cp1251/meta"):
        letter = dead[canonicalize(site.url(0, path))]
        assert letter["failure_class"] == "parser_error"
        assert letter["message"].startswith("extract[2]: re:test(): '(")
        assert "is not a valid RE2 pattern: missing ): " in letter["message"]
    assert sorted(as_names(await read_items(crawl))) == sorted(expected_items(site))


async def test_xpath_regex_runs_on_re2_and_a_pattern_it_refuses_fails_only_its_page(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    backtrack, lookahead = (canonicalize(site.url(0, f"/regex/{p}")) for p in REGEX_PAGES)
    rule = {
        "match": "/regex/",
        "fields": {
            # Python's re (lxml's) would not return from this in the lifetime of the machine.
            "backtracks": {"xpath": "boolean(//code[re:test(., '^(a+)+$')])"},
            "as_pattern": {"xpath": "re:test('a', //code)"},  # the page's text is the pattern
        },
    }
    crawl = make_crawl(
        site,
        redis_server,
        tmp_path,
        seeds=[backtrack, lookahead],
        scope={"maxDepth": 0},
        output={"format": "jsonl"},
        extract=[rule],
    )
    assert wait_all([crawl.start("r0")], timeout=60) == [0]

    items = await read_items(crawl)
    assert [(item["url"], item["fields"]) for item in items] == [
        (backtrack, {"backtracks": "false", "as_pattern": "false"})
    ]
    assert await crawl.dead() == {
        lookahead: {
            "failure_class": "parser_error",
            "message": f"extract[0]: re:test(): {hostile.REGEX_REFUSED_PATTERN!r} is not a valid"
            " RE2 pattern: invalid perl operator: (?=",
        }
    }


async def test_heartbeats_go_on_while_an_xpath_runs_long_and_its_page_fails_past_the_bound(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A selector quadratic in the page's nodes, on 20,000 of them, runs for seconds: the
    worker's loop heartbeats meanwhile, and the page fails once past parserTimeoutSeconds."""
    bound_seconds, heartbeat_seconds = 1.0, 0.1
    slow = site.url(0, "/nodes/20000")
    crawl = make_crawl(
        site,
        redis_server,
        tmp_path,
        seeds=[slow],
        scope={"maxDepth": 0},
        lease={"heartbeatSeconds": heartbeat_seconds},
        parserTimeoutSeconds=bound_seconds,
        output={"format": "jsonl"},
        extract=[{"match": "/nodes/", "fields": {"n": {"xpath": QUADRATIC_XPATH}}}],
    )
    frontier = await crawl.frontier()
    since = time.monotonic()
    worker = crawl.start("h0")
    beats: list[float] = []  # when each new heartbeat of h0 was first seen here
    last_seen = None
    try:
        while worker.poll() is None:
            for beat in await frontier.workers():
                if beat.worker == "h0" and beat.last_seen != last_seen:
                    last_seen = beat.last_seen
                    beats.append(time.monotonic())
            await asyncio.sleep(0.02)
    finally:
        await frontier.aclose()
    assert worker.wait() == 0

    (fetched,) = [r for r in site.all_requests() if r.path == "/nodes/20000" and r.start >= since]
    assert fetched.end is not None
    # From the response to the bound, the page is in the worker's hands (its harvest starts a
    # flush linger after it arrived, and lasts the bound): a worker whose loop the selector
    # held would beat at most once in that second; this one beats every 0.1 s.
    during = [seen for seen in beats if fetched.end < seen < fetched.end + bound_seconds]
    assert len(during) >= 4, (during, fetched.end)
    assert await crawl.dead() == {
        canonicalize(slow): {
            "failure_class": "parser_error",
            "message": "extraction took longer than 1 s",
        }
    }
    assert (await crawl.stats()).complete


async def test_after_a_sigkill_every_item_is_read_once(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # One page at a time per host, slowly: the kill lands while the crawl is in flight.
    crawl = shop_crawl(
        site, redis_server, tmp_path, concurrency={"perHost": 1, "hostDelaySeconds": 0.15}
    )
    since = time.monotonic()
    victim, *survivors = [crawl.start(f"k{i}") for i in range(3)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(requested_urls(site, since)) < 4:
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert wait_all(survivors, timeout=90) == [0, 0]

    names = as_names(await read_items(crawl))
    assert Counter(names).most_common(1)[0][1] == 1  # once each
    assert set(names) == expected_items(site)


async def _records(store: FolderStore) -> Any:
    async for line in page_records(store):
        yield json.loads(line)


def test_crawlfleet_extract_prints_the_items_of_one_page_or_file(
    site: TestSite, redis_server: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crawl = shop_crawl(site, redis_server, tmp_path)
    product = shop.PRODUCTS[2]
    url = site.url(0, product.path)

    assert main(["extract", "--job", str(crawl.job_file), url]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line) == {
        "url": url,
        "source": 0,
        "position": 0,
        "fields": {
            "name": product.name,
            "price": product.price,
            "sku": product.sku,
            "tags": list(product.tags),
        },
    }

    saved = tmp_path / "listing.html"
    saved.write_bytes(shop.render_listing())
    listing_url = site.url(0, shop.LISTING_PATH)
    assert main(["extract", "--job", str(crawl.job_file), str(saved), "--url", listing_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["position"] for line in lines] == list(range(len(shop.PRODUCTS)))

    assert main(["extract", "--job", str(crawl.job_file), str(saved)]) == 1  # file:// matches none
    assert "no rule of spec.extract matches file://" in capsys.readouterr().err
