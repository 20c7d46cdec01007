"""A crawl whose destination fills up mid-crawl, then is freed: blocked, never torn, complete.

The destination is a real 512 KiB tmpfs; once the crawl has made its first file durable, a
filler file takes every byte left. The worker must say so (its heartbeat's ``output_blocked``,
its ``output_write_errors_total{errno="ENOSPC"}``), keep the pages it could not write (their
leases extended, nothing claimed), and once the filler is deleted finish the crawl with every
page exactly once in ``pages/*.jsonl`` and every lease settled. Asserted on what the worker
reports and what the site and Redis saw, never on elapsed seconds.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from crawlfleet.frontier import Frontier, canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.crawls import MAX_DEPTH, Crawl, make_crawl, requested_urls, wait_all
from tests.support.tmpfs import fill, small_disk

pytestmark = pytest.mark.slow

DISK_BYTES = 512 * 1024
#: How long the test waits for something the worker must do soon: a bound on a hang only.
PATIENCE_SECONDS = 60


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    """One plain host (no hostile pages): a page's only records are its one fetch."""
    with TestSite(SiteConfig(hosts=1, pages_per_host=100, hostile=False)) as running:
        yield running


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def enospc_errors(port: int) -> float:
    """The worker's own count of batches its disk refused, read from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(
        r'^crawlfleet_worker_output_write_errors_total\{errno="ENOSPC"\} (\S+)$', text, re.M
    )
    assert found is not None, "no output_write_errors_total{errno=ENOSPC} series"
    return float(found[1])


async def until(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    """Poll ``check`` until true; fail with ``what`` if it never is."""
    deadline = time.monotonic() + PATIENCE_SECONDS
    while not await check():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.05)


def start_on_small_disk(
    site: TestSite, redis_server: RedisServer, tmp_path: Path, disk: Path, port: int
) -> tuple[Crawl, subprocess.Popen[bytes]]:
    crawl = make_crawl(
        site,
        redis_server,
        tmp_path,
        seeds=[site.url(0, "/")],
        concurrency={"perHost": 2, "hostDelaySeconds": 0.05},
        output={"content": "html"},  # long lines: the disk refuses within a few batches
    )
    worker = crawl.start(
        "filling", "--output", str(disk), "--metrics-port", str(port),
        "--metrics-host", "127.0.0.1",
    )  # fmt: skip
    return crawl, worker


async def fill_once_a_file_is_durable(
    disk: Path, frontier: Frontier, worker: subprocess.Popen[bytes]
) -> Path:
    """Fill the disk once the crawl has made a first file durable; return when the worker's
    heartbeat says its output is blocked. The filler is returned, to be deleted."""

    async def first_file_durable() -> bool:
        assert worker.poll() is None, "the worker ended before its first file"
        return (disk / "pages").is_dir() and any((disk / "pages").glob("*.jsonl"))

    await until("a first durable pages file", first_file_durable)
    filler = disk / "filler"
    fill(filler)

    async def blocked() -> bool:
        assert worker.poll() is None, "the worker ended while its disk was full"
        beats = {beat.worker: beat for beat in await frontier.workers()}
        beat = beats.get("filling")
        return beat is not None and beat.counters.get("output_blocked") == 1

    await until("a heartbeat with output_blocked 1", blocked)
    assert not (await frontier.stats()).complete  # the full disk came mid-crawl
    return filler


def page_lines(disk: Path) -> Counter[str]:
    """How often each URL is in the durable page files; every line must parse (none torn)."""
    return Counter(
        json.loads(line)["url"]
        for path in sorted((disk / "pages").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    )


async def test_a_destination_that_fills_mid_crawl_blocks_then_completes_with_every_page_once(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    with small_disk(tmp_path / "disk", DISK_BYTES) as disk:
        port = free_port()
        since = time.monotonic()
        crawl, worker = start_on_small_disk(site, redis_server, tmp_path, disk, port)
        frontier = await crawl.frontier()
        try:
            filler = await fill_once_a_file_is_durable(disk, frontier, worker)
            assert enospc_errors(port) >= 1
            filler.unlink()
            assert wait_all([worker], timeout=PATIENCE_SECONDS) == [0]
            stats = await frontier.stats()
        finally:
            await frontier.aclose()

        assert stats.complete
        assert stats.leased == 0  # every lease settled: none left to expire
        assert stats.released == 0  # the refused pages were kept and written, not given back
        assert stats.requeued == 0
        expected = {canonicalize(url) for url in site.expected_pages(MAX_DEPTH)}
        written = page_lines(disk)
        assert set(written) == expected
        assert max(written.values()) == 1, [url for url, n in written.items() if n > 1]
        assert stats.crawled == len(expected)
        # Each page was fetched once: the pages the disk refused were not crawled again.
        requested = requested_urls(site, since)
        assert set(requested) == expected
        assert max(requested.values()) == 1
        assert list((disk / ".partial").iterdir()) == []
        log = (crawl.out / "filling.log").read_text()
        assert "ENOSPC writing " in log
        assert "output spool writable again" in log


async def test_a_worker_stopped_while_its_disk_is_full_releases_what_it_could_not_write(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    with small_disk(tmp_path / "disk", DISK_BYTES) as disk:
        since = time.monotonic()
        crawl, worker = start_on_small_disk(site, redis_server, tmp_path, disk, free_port())
        frontier = await crawl.frontier()
        try:
            await fill_once_a_file_is_durable(disk, frontier, worker)
            worker.send_signal(signal.SIGTERM)
            assert wait_all([worker], timeout=PATIENCE_SECONDS) == [0]
            stats = await frontier.stats()
            assert stats.leased == 0  # nothing left to wait out its lease ttl
            assert stats.released >= 1  # the pages the disk refused, given back at once
            assert stats.failed == 0  # released, not failed: no attempt counted
            leases = await frontier.claim("checker", 1000)
        finally:
            await frontier.aclose()
        assert all(lease.attempts == 0 for lease in leases)
        written = page_lines(disk)  # what was durable before the stop: whole, once each
        assert max(written.values()) == 1
        assert stats.crawled == len(written)  # acked: exactly the durable pages
        # Every page fetched is durable and acked, or was given back: none lost, none held.
        requested = requested_urls(site, since)
        assert set(written) <= set(requested)
        assert len(requested) == stats.crawled + stats.released
        assert list((disk / ".partial").iterdir()) == []
