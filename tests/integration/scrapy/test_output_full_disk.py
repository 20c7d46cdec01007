"""A Scrapy worker whose destination fills up mid-crawl, then is freed (a real 512 KiB tmpfs).

The same promise as crawlfleet's own worker (tests/integration/crawler/test_output_full_disk.py):
its heartbeat says ``output_blocked`` while the disk is full, the pages it could not write stay
its own (extended, not written twice, not given back), and once the space is back the crawl
completes with every page record and every item exactly once, every line whole.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.integration.scrapy.test_scrapy_runtime import (
    finish,
    frontier_of,
    start_worker,
    write_job,
)
from tests.support.tmpfs import fill, small_disk

DISK_BYTES = 512 * 1024
#: How long the test waits for something the worker must do soon: a bound on a hang only.
PATIENCE_SECONDS = 60


def lines(folder: Path) -> Counter[str]:
    """How often each URL is in the durable files of ``folder``; every line must parse."""
    return Counter(
        json.loads(line)["url"]
        for path in sorted(folder.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    )


async def test_a_scrapy_worker_blocks_on_a_full_disk_then_completes_with_every_page_once(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    config = SiteConfig(hosts=1, pages_per_host=100, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site, small_disk(tmp_path / "disk", DISK_BYTES) as disk:
        job = write_job(
            tmp_path,
            "graph",
            {"start": site.url(0, "/")},
            concurrency={"hostDelaySeconds": 0.05, "perHost": 2},
        )
        worker = start_worker(job, redis_server, "filling", tmp_path / "out", "--output", str(disk))
        frontier = await frontier_of(job, redis_server)
        try:
            deadline = time.monotonic() + PATIENCE_SECONDS
            while not ((disk / "pages").is_dir() and any((disk / "pages").glob("*.jsonl"))):
                assert worker.poll() is None, finish(worker)[1][-3000:]
                assert time.monotonic() < deadline, "no pages file became durable"
                await asyncio.sleep(0.05)
            filler = disk / "filler"
            fill(filler)
            while True:
                assert worker.poll() is None, finish(worker)[1][-3000:]
                assert time.monotonic() < deadline, "the heartbeat never said output_blocked"
                beats = {beat.worker: beat for beat in await frontier.workers()}
                beat = beats.get("filling")
                if beat is not None and beat.counters.get("output_blocked") == 1:
                    break
                await asyncio.sleep(0.05)
            assert not (await frontier.stats()).complete  # the full disk came mid-crawl
            filler.unlink()
            code, err = finish(worker, timeout=PATIENCE_SECONDS)
            assert code == 0, err[-3000:]
            stats = await frontier.stats()
        finally:
            await frontier.aclose()
        pages, items = lines(disk / "pages"), lines(disk / "items")
        assert list((disk / ".partial").iterdir()) == []

    assert "ENOSPC writing " in err
    assert "output spool writable again" in err
    assert stats.complete
    assert stats.leased == 0  # every lease settled: none left to expire
    assert stats.released == 0  # the refused pages were kept and written, not given back
    expected = set(site.expected_pages())
    assert set(pages) == expected
    assert max(pages.values()) == 1, [url for url, n in pages.items() if n > 1]
    assert set(items) == expected
    assert max(items.values()) == 1
    assert stats.crawled == len(expected)
    assert all(site.count(url) == 1 for url in expected)  # none fetched again
