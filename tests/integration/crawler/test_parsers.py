"""User parsers (spec.parser) in real worker processes: the example package yields the shop's
items, and a parser that raises, loops or returns junk costs only its page a parser_error while
the worker stays alive and keeps its leases (heartbeats go on through a 6 s CPU loop)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite, shop
from tests.integration.crawler.test_extraction import (
    LEGACY_PATHS,
    as_names,
    expected_items,
    read_items,
    shop_crawl,
)
from tests.support.crawls import make_crawl, wait_all

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parents[3] / "examples" / "shop_parser"
EXAMPLE_PARSER = "shop_parser:parse"


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    with TestSite(SiteConfig(hosts=1, pages_per_host=5, latency_seconds=0.01)) as running:
        yield running


def with_path(*folders: Path) -> dict[str, str]:
    existing = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([*map(str, folders), *([existing] if existing else [])])}


async def test_the_example_parser_yields_the_same_items_as_the_rules(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    crawl = shop_crawl(site, redis_server, tmp_path, extract=[], parser=EXAMPLE_PARSER)
    env = with_path(EXAMPLE)
    assert wait_all([crawl.start("e0", env=env), crawl.start("e1", env=env)], timeout=90) == [0, 0]

    by_rules = {(url, position, fields) for url, _, position, fields in expected_items(site)}
    items = await read_items(crawl)
    assert {item["source"] for item in items} == {EXAMPLE_PARSER}
    assert {(url, position, fields) for url, _, position, fields in as_names(items)} == by_rules


async def test_a_parser_that_raises_loops_or_returns_junk_costs_only_its_page(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # parserTimeoutSeconds (6) outlives a lease (4 s, heartbeats every 0.5 s): the looping page
    # keeps its lease only if heartbeats go on while the parser holds a CPU.
    crawl = make_crawl(
        site,
        redis_server,
        tmp_path,
        seeds=[site.url(0, path) for path in LEGACY_PATHS] + [site.url(0, shop.LISTING_PATH)],
        scope={"maxDepth": 0},
        parser="tests.support.parsers:hostile",
        parserTimeoutSeconds=6,
    )
    worker = crawl.start("h0")
    assert wait_all([worker], timeout=90) == [0]

    dead = await crawl.dead()
    expected: dict[str, str] = {
        "/cp1251/header": "ValueError: this parser refuses Cyrillic",
        "/cp1251/meta": "did not return within 6 s",
        "/sjis/header": "returned int",
        "/sjis/meta": "an item JSON cannot hold",
    }
    for path, reason in expected.items():
        letter = dead[canonicalize(site.url(0, path))]
        assert letter["failure_class"] == "parser_error", path
        assert letter["message"].startswith("parser tests.support.parsers:hostile: "), letter
        assert reason in letter["message"], letter
    stats = await crawl.stats()
    assert stats.requeued == 0  # no lease expired while the parser spun
    assert stats.crawled == 1  # the listing, whose item came after the parser was restarted
    items: list[dict[str, Any]] = await read_items(crawl)
    assert [item["fields"]["title"] for item in items] == ["Test shop"]


def test_an_unimportable_parser_stops_the_worker_at_start_with_one_sentence(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    crawl = make_crawl(site, redis_server, tmp_path, parser="no_such_package.parsers:parse")
    worker = crawl.start("u0")
    assert worker.wait(60) == 2
    log = (crawl.out / "u0.log").read_text()
    assert "spec.parser: cannot import no_such_package.parsers: ModuleNotFoundError" in log
    assert "Traceback" not in log
