"""Workers of a job that keeps going (revisit rules, no schedule) never take the job for complete.

A worker that exits when the job is done (``crawlfleet worker`` without ``--keep-running``)
goes on waiting for revisits once everything is crawled, and stops only when told to; one of
a fleet (``--keep-running``) that drains with nothing leased writes the output's closing files
as a snapshot, without marking the job's output finished (it never is).
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.crawls import Crawl, make_crawl

pytestmark = pytest.mark.slow

#: Heartbeats a worker sends after the crawl drained that prove it did not take the job for
#: complete (a worker of a job that ends exits at its first idle claim).
BEATS_AFTER_DRAIN = 3


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    with TestSite(SiteConfig(hosts=1, pages_per_host=8, hostile=False)) as running:
        yield running


def keeps_going(site: TestSite, redis_server: RedisServer, tmp_path: Path) -> Crawl:
    (seed,) = site.seeds
    rule = {"match": f"^{re.escape(seed)}$", "interval": "1h"}
    return make_crawl(site, redis_server, tmp_path, recrawl=[rule], robots={"obey": False})


async def drained_and_beating(crawl: Crawl, worker: str) -> float:
    """Wait for the crawl to drain, then for the worker's heartbeats past it; when it drained."""
    frontier = await crawl.frontier()
    try:
        deadline = time.monotonic() + 120  # a generous bound: a loaded CI machine is slow
        while not (await frontier.stats()).complete:  # seeded, nothing queued or leased
            assert time.monotonic() < deadline
            time.sleep(0.05)
        drained_at = time.time()
        beats = 0
        last = 0.0
        while beats < BEATS_AFTER_DRAIN:
            assert time.monotonic() < deadline
            seen = [b.last_seen for b in await frontier.workers() if b.worker == worker]
            if seen and seen[0] > max(last, drained_at):  # none yet: it is starting
                beats, last = beats + 1, seen[0]
            time.sleep(0.1)
        return drained_at
    finally:
        await frontier.aclose()


async def test_a_worker_that_exits_when_done_keeps_waiting_for_revisits(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    crawl = keeps_going(site, redis_server, tmp_path)
    proc = crawl.start("alone")
    await drained_and_beating(crawl, "alone")
    assert proc.poll() is None  # crawled out, and still there for the revisits
    assert "job complete" not in (crawl.out / "alone.log").read_text()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


async def test_a_fleet_worker_draining_with_nothing_leased_writes_a_manifest_snapshot(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    crawl = keeps_going(site, redis_server, tmp_path)
    seeding = crawl.start("seeder")  # a fleet's workers never seed: a lone one does it first
    await drained_and_beating(crawl, "seeder")
    seeding.send_signal(signal.SIGTERM)
    assert seeding.wait(30) == 0
    assert not (crawl.out / "manifest.json").exists()  # a lone worker writes no closing files
    proc = crawl.start("fleet-1", "--keep-running")
    await drained_and_beating(crawl, "fleet-1")
    assert not (crawl.out / "manifest.json").exists()  # not while it runs: nothing completes
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    manifest = json.loads((crawl.out / "manifest.json").read_text())
    assert manifest["counts"]["crawled"] == len(crawl.pages()) > 0
    assert (crawl.out / "dead-letters.jsonl").exists()
    frontier = await crawl.frontier()
    try:
        assert await frontier.output_finished() is None  # a snapshot: the job is not finished
    finally:
        await frontier.aclose()
