"""Refusals decided before any request free their host's slot at once (issue: a host whose
pages mostly link into Disallowed paths advanced by perHost refusals per maxFileAgeSeconds).

The test site links every page to paths its robots.txt disallows (``/search/...``, as real
sites disallow search and edit links) and to a cloud metadata address the address guard
refuses; its second host's robots.txt answers 503 for ever (given up: robots_unavailable).
One worker, perHost 1 and 2, and the default 30 s output file age: with a refusal's slot
waiting for its record's file, the crawl would crawl a handful of pages and then wait; with
the lifecycle's rule it completes, for crawlfleet's worker and for a Scrapy spider alike.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from crawlfleet.testsite.graph import METADATA_URL, REFUSED_PREFIX
from tests.support.crawls import make_crawl, wait_all

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2] / "scrapy_project"
REFUSALS_PER_PAGE = 6
#: The crawl's own bound, far longer than it takes (seconds); a stall would need minutes.
TIMEOUT_SECONDS = 120


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    config = SiteConfig(
        hosts=2,
        pages_per_host=30,
        hostile=False,
        refusal_links_per_page=REFUSALS_PER_PAGE,
        robots_down_hosts=(1,),
    )
    with TestSite(config) as running:
        yield running


def _spec(site: TestSite, per_host: int) -> dict[str, object]:
    return {
        "scope": {
            "allowedDomains": [*site.hosts, "169.254.169.254"],
            "maxDepth": 10,
            "allowPrivateNetworks": True,
        },
        "concurrency": {"perWorker": 8, "perHost": per_host, "hostDelaySeconds": 0},
        # The defaults a user has: a record's file is sealed after 30 s.
        "output": {"maxFileAgeSeconds": 30},
        "robots": {"errorTtlSeconds": 1, "giveUpAfterSeconds": 2},
        "retry": {"taskAttempts": 5, "backoffBaseSeconds": 0.05, "backoffMaxSeconds": 0.5},
    }


def _requested(site: TestSite, since: float) -> Counter[str]:
    return Counter(
        f"{record.host}{record.path}" for record in site.all_requests() if record.start >= since
    )


@pytest.mark.parametrize("per_host", [1, 2])
async def test_crawlfleet_worker_completes_past_refusals(
    site: TestSite, redis_server: RedisServer, tmp_path: Path, per_host: int
) -> None:
    since = time.monotonic()
    crawl = make_crawl(site, redis_server, tmp_path, **_spec(site, per_host))
    assert wait_all([crawl.start("w1")], timeout=TIMEOUT_SECONDS) == [0]
    requested = _requested(site, since)
    assert not [path for path in requested if REFUSED_PREFIX in path]  # nothing disallowed
    down = site.hosts[1]
    assert {path for path in requested if path.startswith(down)} == {f"{down}/robots.txt"}
    crawled = {canonicalize(page["url"]) for page in crawl.pages() if page["status"] == 200}
    host0 = {canonicalize(url) for url in site.expected_pages() if site.hosts[0] in url}
    assert crawled == host0
    dead = await crawl.dead()
    classes = Counter(letter["failure_class"] for letter in dead.values())
    disallowed = {url for url, letter in dead.items() if REFUSED_PREFIX in url}
    assert {dead[url]["failure_class"] for url in disallowed} == {"robots_disallowed"}
    assert len(disallowed) == REFUSALS_PER_PAGE * len(host0)
    assert classes["forbidden_address"] == len(host0)  # one metadata link per host-0 page
    assert classes["robots_unavailable"] > 0  # host 1's pages, given up
    assert all(url.startswith(METADATA_URL) for url, d in dead.items() if
               d["failure_class"] == "forbidden_address")  # fmt: skip
    stats = await crawl.stats()
    assert stats.complete
    assert stats.leased == 0


@pytest.mark.parametrize("per_host", [1, 2])
async def test_scrapy_spider_completes_past_refusals(
    site: TestSite, redis_server: RedisServer, tmp_path: Path, per_host: int
) -> None:
    since = time.monotonic()
    spec = _spec(site, per_host)
    crawl = make_crawl(
        site,
        redis_server,
        tmp_path,
        **spec,
        crawler={
            "scrapy": {
                "spider": "graph",
                "args": {"start": site.url(0, "/"), "follow": "all"},
            }
        },
    )
    document = yaml.safe_load(crawl.job_file.read_text())
    document["spec"]["seeds"] = [site.url(0, "/")]
    crawl.job_file.write_text(yaml.safe_dump(document))
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawlfleet", "worker", str(crawl.job_file),
         "--redis-url", redis_server.url, "--worker-id", "w1", "--out", str(crawl.out)],
        cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, err = await asyncio.to_thread(proc.communicate, timeout=TIMEOUT_SECONDS)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    requested = _requested(site, since)
    assert not [path for path in requested if REFUSED_PREFIX in path]  # nothing disallowed
    crawled = {canonicalize(page["url"]) for page in crawl.pages() if page["status"] == 200}
    host0 = {canonicalize(url) for url in site.expected_pages() if site.hosts[0] in url}
    assert host0 <= crawled
    dead = await crawl.dead()
    disallowed = {url for url, letter in dead.items() if REFUSED_PREFIX in url}
    assert {dead[url]["failure_class"] for url in disallowed} == {"robots_disallowed"}
    assert len(disallowed) == REFUSALS_PER_PAGE * len(host0)
    forbidden = {url for url, d in dead.items() if d["failure_class"] == "forbidden_address"}
    assert forbidden
    assert all(url.startswith(METADATA_URL) for url in forbidden)
    stats = await crawl.stats()
    assert stats.complete
    assert stats.leased == 0
