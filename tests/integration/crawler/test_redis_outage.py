"""Redis stopped while a worker fetches a host's robots.txt: the page waits, it does not fail.

Before its first request to a host a worker fetches the host's robots.txt under a fleet-wide
lock and stores the answer in the frontier. Redis away at that moment (restarting, failing
over, a cluster slot moving, the host's partition on a node that is down) used to fail the
page as a protocol error: an attempt spent, and with its last attempt the page dead-lettered,
never crawled (found by the cluster chaos tests, tests/integration/local/test_cluster_chaos.py,
where two hosts' seeds waited a minute for their retry). Now the worker waits for Redis and
asks again, the lease kept. Real parts: a redis-server with its AOF, stopped while the site
answers robots.txt slowly, started again on the same port; one ``crawlfleet worker``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.crawls import make_crawl, wait_all

pytestmark = pytest.mark.slow

#: Every response of the site takes this long: Redis is stopped while robots.txt is on its way.
LATENCY_SECONDS = 0.8
#: How long Redis stays down: past the robots.txt answer, so its store finds Redis away.
OUTAGE_SECONDS = 2.5


def test_a_redis_outage_during_a_robots_fetch_loses_no_page(tmp_path: Path) -> None:
    config = SiteConfig(hosts=1, pages_per_host=6, hostile=False, latency_seconds=LATENCY_SECONDS)
    with (
        RedisServer(tmp_path / "redis", appendonly=True) as redis_server,
        TestSite(config) as site,
    ):
        # one attempt: a page whose fetch is taken for failed is dead-lettered at once
        crawl = make_crawl(
            site,
            redis_server,
            tmp_path,
            retry={"taskAttempts": 1},
            fetch={"readTimeoutSeconds": 5, "totalTimeoutSeconds": 10},
        )
        worker = crawl.start("w1")
        deadline = time.monotonic() + 30
        while not any(r.path == "/robots.txt" for r in site.all_requests()):
            assert time.monotonic() < deadline, "the worker did not ask for robots.txt"
            time.sleep(0.01)
        redis_server.stop()  # SHUTDOWN: the AOF has every write so far
        time.sleep(OUTAGE_SECONDS)
        redis_server.start()
        assert wait_all([worker], timeout=90) == [0]
        pages = crawl.pages()
    failed = [p for p in pages if p["failure_class"]]
    assert failed == []
    assert {canonicalize(p["url"]) for p in pages} == {
        canonicalize(url) for url in site.expected_pages()
    }
    assert all(p["attempt"] == 1 for p in pages), [(p["url"], p["attempt"]) for p in pages]
    log = (crawl.out / "w1.log").read_text()
    assert "waits for Redis" in log
