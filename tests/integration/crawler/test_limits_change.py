"""perHost changed on a running job: raised, then lowered, the crawl completes.

A job's limits change when its workers are started again with an edited spec (a rollout in a
cluster): the last process to open the frontier writes them (init.lua), and every claim reads
them. A host that sat at the old cap had left the ready index; under a raised cap it must come
back (release_slots places it under the limits of the moment), and under a lowered one it
must give no more than the new cap once its extra requests are over.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.crawls import Crawl, make_crawl, wait_all

pytestmark = pytest.mark.slow


def _with_per_host(crawl: Crawl, per_host: int, tmp_path: Path) -> Crawl:
    """The same job, its perHost edited (a new job file: the workers already running keep
    theirs, as pods of an older ReplicaSet do)."""
    document = yaml.safe_load(crawl.job_file.read_text())
    document["spec"]["concurrency"]["perHost"] = per_host
    edited = tmp_path / f"{crawl.name}-per-host-{per_host}.yaml"
    edited.write_text(yaml.safe_dump(document))
    return Crawl(crawl.name, edited, crawl.out, crawl.redis_url)


async def _wait_for_per_host(crawl: Crawl, per_host: int) -> None:
    """Until the job's limits in the frontier say ``per_host`` (a worker opened it with them)."""
    frontier = await crawl.frontier()
    try:
        deadline = time.monotonic() + 60
        meta = frontier.keys.key("meta")
        while int(await frontier.client.hget(meta, "per_host") or 0) != per_host:
            assert time.monotonic() < deadline, f"perHost {per_host} never reached the frontier"
            await asyncio.sleep(0.02)
    finally:
        await frontier.aclose()


def _wait_for_pages(site: TestSite, count: int) -> None:
    deadline = time.monotonic() + 60
    while sum(1 for r in site.all_requests() if r.path != "/robots.txt") < count:
        assert time.monotonic() < deadline, "the crawl did not get that far"
        time.sleep(0.02)


async def test_per_host_raised_then_lowered_on_a_running_job_completes(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    config = SiteConfig(hosts=1, pages_per_host=240, hostile=False, latency_seconds=0.03)
    with TestSite(config) as site:
        crawl = make_crawl(
            site,
            redis_server,
            tmp_path,
            concurrency={"perHost": 1, "perWorker": 8, "hostDelaySeconds": 0},
            output={"maxFileAgeSeconds": 30},
        )
        first = crawl.start("w1")
        _wait_for_pages(site, 20)
        raised = _with_per_host(crawl, 4, tmp_path).start("w2")  # perHost 1 -> 4
        await _wait_for_per_host(crawl, 4)
        _wait_for_pages(site, len(site.all_requests()) + 30)
        peak_after_raise = site.max_concurrency(0)
        lowered = _with_per_host(crawl, 2, tmp_path).start("w3")  # 4 -> 2
        await _wait_for_per_host(crawl, 2)
        assert wait_all([first, raised, lowered], timeout=120) == [0, 0, 0]
        expected = {canonicalize(url) for url in site.expected_pages()}
        crawled = [canonicalize(page["url"]) for page in crawl.pages() if page["status"] == 200]
        stats = await crawl.stats()
    assert set(crawled) == expected
    assert len(crawled) == len(expected)  # each page once
    assert stats.complete
    assert stats.leased == 0
    assert 1 < peak_after_raise <= 4  # the raised cap was used, and held
