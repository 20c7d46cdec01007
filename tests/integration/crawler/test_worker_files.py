"""File downloads through a real worker (issue 24): real redis-server, the loopback FileSite.

Each test runs a :class:`~crawlfleet.crawler.worker.worker.Worker` in this process on a job with
``spec.files`` and a folder destination, and judges it from the outside: the site's request
log, the stored bytes under ``files/sha256/`` hashed again here, the ``files/*.jsonl`` records,
and the frontier (dead letters, file counters). The frontier is the real one, subclassed only
to look at the durable record files at each ack: a file's lease must never be acked before its
record is durable (DESIGN §8).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis

from crawlfleet.crawler.fetching.fetch import Fetcher
from crawlfleet.crawler.files.parts import part_key
from crawlfleet.crawler.worker.worker import Worker
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.destinations import parse_destination
from crawlfleet.frontier import Frontier, Lease, Outcomes, canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.output.reader import verify
from crawlfleet.output.stores import FolderStore
from crawlfleet.testsite.files import FileSite, FileSiteConfig
from tests.support.slots import read_slots
from tests.support.specs import job_spec
from tests.support.workers import in_process_worker

pytestmark = pytest.mark.slow

#: The longest a test's crawl may take on a loaded two-core machine.
CRAWL_SECONDS = 30.0
SMALL = 64 * 1024


class AckCheckingFrontier(Frontier):
    """The real frontier, noting each acked URL whose file record is not durable yet."""

    out: ClassVar[Path]
    claimed: ClassVar[dict[str, str]]
    acked_before_written: ClassVar[list[str]]

    async def claim(
        self, worker: str, count: int, fetched: Sequence[str] = (), *, call_id: str | None = None
    ) -> list[Lease]:
        leases = await super().claim(worker, count, fetched, call_id=call_id)
        self.claimed.update((lease.lease_id, lease.url) for lease in leases)
        return leases

    async def ack(self, worker: str, lease_ids: Sequence[str], **options: Any) -> Outcomes[bool]:
        written = {record["url"] for record in file_records(self.out)} | {
            record["url"] for record in _lines(self.out.glob("pages/*.jsonl"))
        }
        self.acked_before_written += [
            url for i in lease_ids if (url := self.claimed[i]) not in written
        ]
        return await super().ack(worker, lease_ids, **options)


def _lines(paths: Iterator[Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(paths) for line in path.read_text().splitlines()]


def file_records(out: Path) -> list[dict[str, Any]]:
    return _lines(out.glob("files/*.jsonl"))


def stored_digest(out: Path, key: str) -> str:
    with (out / key).open("rb") as stored:
        return hashlib.file_digest(stored, "sha256").hexdigest()


@pytest.fixture(scope="module")
def site() -> Iterator[FileSite]:
    with FileSite(FileSiteConfig(default_size=SMALL)) as running:
        yield running


class Running:
    """A worker downloading in this process, and what it wrote."""

    def __init__(self, worker: Worker, task: asyncio.Task[int], out: Path, frontier: Frontier):
        self.worker = worker
        self.task = task
        self.out = out
        self.frontier = frontier

    def records(self) -> list[dict[str, Any]]:
        return file_records(self.out)

    async def until(self, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + CRAWL_SECONDS
        while not check():
            if self.task.done():
                raise AssertionError(f"the worker ended before {what}: {self.task.result()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {CRAWL_SECONDS} s: {what}")
            await asyncio.sleep(0.05)

    async def finished(self) -> int:
        return await asyncio.wait_for(self.task, CRAWL_SECONDS)

    async def dead(self) -> dict[str, str]:
        return {letter.url: letter.failure_class async for letter in self.frontier.dead_letters()}


_jobs = itertools.count()


@pytest.fixture
async def crawl(redis_server: RedisServer, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start a worker on a spec (it exits when the job is complete); stopped after."""
    started: list[tuple[Running, Fetcher]] = []

    async def start(spec: CrawlJobSpec, *, exit_when_done: bool = True) -> Running:
        job_id = f"test.files-{next(_jobs)}"
        out = tmp_path / job_id
        AckCheckingFrontier.out = out
        AckCheckingFrontier.claimed = {}
        AckCheckingFrontier.acked_before_written = []
        worker, fetcher, frontier = await in_process_worker(
            spec,
            redis_server.url,
            job_id,
            out,
            frontier_class=AckCheckingFrontier,
            exit_when_done=exit_when_done,
        )
        running = Running(worker, asyncio.create_task(worker.run()), out, frontier)
        started.append((running, fetcher))
        return running

    yield start
    for running, fetcher in started:
        running.worker.request_stop()
        await asyncio.wait_for(running.task, CRAWL_SECONDS)
        await fetcher.aclose()
        await running.frontier.aclose()
    assert AckCheckingFrontier.acked_before_written == []


def files_spec(
    seeds: Sequence[str], rules: Sequence[dict[str, Any]], **changes: Any
) -> CrawlJobSpec:
    sections: dict[str, Any] = {
        "scope": {"maxDepth": 0, "allowPrivateNetworks": True},
        "concurrency": {"perWorker": 8, "perHost": 4, "hostDelaySeconds": 0},
        "lease": {"ttlSeconds": 5, "heartbeatSeconds": 0.5, "deadAfterSeconds": 4},
        "retry": {"backoffBaseSeconds": 0.05, "backoffMaxSeconds": 0.5},
        "output": {"maxFileAgeSeconds": 1},
        "fetch": {"connectTimeoutSeconds": 2, "readTimeoutSeconds": 5},
    }
    files = {"rules": list(rules), **changes.pop("files", {})}
    for key, value in changes.items():
        sections[key] = {**sections.get(key, {}), **value}
    return job_spec({**sections, "files": files}, seeds=seeds)


def assert_stored(running: Running, site: FileSite, names: dict[str, int]) -> None:
    """Each file of ``names`` (name -> size) has a record whose stored bytes are the site's."""
    by_url = {record["url"]: record for record in running.records()}
    for name, size in names.items():
        record = next((r for url, r in by_url.items() if f"/files/{name}" in url), None)
        assert record is not None, f"{name}: no file record in {sorted(by_url)}"
        assert record["size"] == size
        assert record["sha256"] == site.sha256(name, size)
        assert stored_digest(running.out, record["stored"]) == record["sha256"]


async def test_files_by_url_rule_are_stored_with_their_records(
    site: FileSite, crawl: Callable[..., Any]
) -> None:
    site.reset()
    names = {"clip.mp4": 300_000, "report.pdf": 70_000}
    seeds = [site.file_url("ranges", name, size) for name, size in names.items()]
    running: Running = await crawl(files_spec(seeds, [{"match": r"\.(mp4|pdf)"}]))
    assert await running.finished() == 0
    assert_stored(running, site, names)
    records = running.records()
    assert {(r["rule"], r["duplicate"], r["depth"], r["parent"]) for r in records} == {
        (0, False, 0, "")
    }
    assert not list(running.out.glob("pages/*.jsonl"))  # a file is not a page
    stats = await running.frontier.file_stats()
    assert (stats.stored, stats.bytes) == (2, sum(names.values()))
    assert (await running.frontier.stats()).complete


async def test_files_by_context_are_taken_one_level_past_max_depth(
    site: FileSite, crawl: Callable[..., Any]
) -> None:
    site.reset()
    rule = {"context": ["img", "source"]}
    running: Running = await crawl(files_spec([site.page_url("ranges", 0)], [rule]))
    assert await running.finished() == 0
    assert_stored(running, site, {"photo-0.png": SMALL, "clip-0.mp4": SMALL, "clip-0.webm": SMALL})
    page = canonicalize(site.page_url("ranges", 0))
    assert {r["parent"] for r in running.records()} == {page}  # the mark is not in the record
    assert {r["depth"] for r in running.records()} == {1}  # past maxDepth 0
    requested = {r.path for r in site.requests("ranges")}
    assert not any("report-0" in path or "/page/1" in path for path in requested)  # <a>: too deep


async def test_files_by_content_type_stop_the_page_read_and_are_downloaded(
    site: FileSite, crawl: Callable[..., Any]
) -> None:
    site.reset()
    rule = {"contentTypes": ["application/pdf"]}
    running: Running = await crawl(
        files_spec([site.page_url("ranges", 0)], [rule], scope={"maxDepth": 1})
    )
    assert await running.finished() == 0
    assert_stored(running, site, {"report-0.pdf": SMALL})
    assert [r["content_type"] for r in running.records()] == ["application/pdf"]
    pages = {r["url"] for r in _lines(running.out.glob("pages/*.jsonl"))}
    assert canonicalize(site.file_url("ranges", "archive-0.zip")) in pages  # not a pdf: a page
    assert not any("report-0" in url for url in pages)
    asked = [r for r in site.requests("ranges") if "report-0" in r.path]
    # The page fetch, which stopped after the headers, then the download, which read it all.
    assert len(asked) == 2
    assert asked[-1].completed


async def test_identical_bytes_are_stored_once(site: FileSite, crawl: Callable[..., Any]) -> None:
    site.reset()
    seeds = [site.file_url(kind, "mirror.mp4", 100_000) for kind in ("ranges", "norange")]
    running: Running = await crawl(files_spec(seeds, [{"match": r"\.mp4"}]))
    assert await running.finished() == 0
    records = running.records()
    assert len(records) == 2
    assert len({r["stored"] for r in records}) == 1
    assert sorted(r["duplicate"] for r in records) == [False, True]
    assert len(list(running.out.glob("files/sha256/*/*"))) == 1
    stats = await running.frontier.file_stats()
    assert (stats.stored, stats.duplicates, stats.bytes) == (1, 1, 100_000)


async def test_a_file_past_the_budget_is_refused_and_counted(
    site: FileSite, crawl: Callable[..., Any]
) -> None:
    site.reset()
    seeds = [site.file_url("ranges", f"part-{n}.pdf", 60_000) for n in range(3)]
    running: Running = await crawl(
        files_spec(seeds, [{"match": r"\.pdf"}], files={"maxTotalBytes": 150_000})
    )
    assert await running.finished() == 0
    assert len(running.records()) == 2
    dead = await running.dead()
    assert list(dead.values()) == ["file_budget"]
    metrics = running.worker.metrics.registry.get_sample_value
    assert metrics("crawlfleet_files_total", {"outcome": "failed"}) == 1
    assert metrics("crawlfleet_worker_failures_total", {"failure_class": "file_budget"}) == 1
    stats = await running.frontier.file_stats()
    assert (stats.bytes, stats.reserved, stats.settled) == (120_000, 0, 120_000)


async def test_one_download_at_a_time_per_host(site: FileSite, crawl: Callable[..., Any]) -> None:
    site.reset()
    site.throttle(400_000)
    try:
        seeds = [site.file_url("ranges", f"one-{n}.mp4", 120_000) for n in range(4)]
        running: Running = await crawl(files_spec(seeds, [{"match": r"\.mp4"}]))
        most = 0
        while not running.task.done():
            busy = [r for r in site.requests("ranges") if r.status is not None and not r.completed]
            most = max(most, len(busy))
            await asyncio.sleep(0.02)
        assert await running.finished() == 0
    finally:
        site.throttle(0)
    assert len(running.records()) == 4
    assert most == 1


async def test_stop_mid_download_releases_the_lease_and_keeps_the_part(
    site: FileSite, crawl: Callable[..., Any]
) -> None:
    site.reset()
    size = 2_000_000
    url = site.file_url("ranges", "long.mp4", size)
    site.throttle(500_000)
    try:
        running: Running = await crawl(
            files_spec([url], [{"match": r"\.mp4"}], files={"partSizeBytes": 5 * 1024 * 1024})
        )
        await running.until("most of it sent", lambda: site.bytes_sent(url) > size * 4 // 5)
        # Over three seconds into the download, its lease moved in the last two (each chunk
        # tells the book, at most once a second): the watchdog sees progress, not a stall.
        assert running.worker.leases.account()["oldest_processing_seconds"] < 2.0
        running.worker.request_stop()
        assert await running.finished() == 0
    finally:
        site.throttle(0)
    assert running.records() == []
    stats = await running.frontier.stats()
    assert (stats.queued, stats.failed, stats.leased) == (1, 0, 0)  # released, not failed
    key = part_key(canonicalize(url))
    part = running.out / "files" / ".parts" / f"{key}.part"
    state = json.loads((running.out / "files" / ".parts" / f"{key}.json").read_bytes())
    assert 0 < state["offset"] <= part.stat().st_size < size


async def test_a_download_outlives_its_lease_ttl_and_fetch_deadline_and_holds_no_page_slot(
    site: FileSite, crawl: Callable[..., Any], redis_server: RedisServer
) -> None:
    site.reset()
    size = 1_500_000
    url = site.file_url("ranges", "longer.mp4", size)
    site.throttle(300_000)  # about 5 s: past the lease's 2 s ttl and its 2 s fetch deadline
    try:
        running: Running = await crawl(
            files_spec(
                [url],
                [{"match": r"\.mp4"}],
                lease={"ttlSeconds": 2, "heartbeatSeconds": 0.5, "deadAfterSeconds": 1.5},
                fetch={
                    "connectTimeoutSeconds": 2,
                    "readTimeoutSeconds": 2,
                    "totalTimeoutSeconds": 2,
                },
            )
        )
        await running.until("3 s into the download", lambda: site.bytes_sent(url) > 900_000)
        client = redis.Redis.from_url(redis_server.url)
        try:
            account = read_slots(client, running.frontier.keys.job_id)
        finally:
            client.close()
        assert account.wrong == {}
        assert sum(account.counted.values()) == 0  # its file slot counts it, not a page slot
        assert await running.finished() == 0
    finally:
        site.throttle(0)
    assert_stored(running, site, {"longer.mp4": size})
    assert running.worker.counters["leases_lost"] == 0


async def test_the_manifest_counts_the_files_and_verify_rehashes_them(
    site: FileSite, crawl: Callable[..., Any]
) -> None:
    site.reset()
    seeds = [site.file_url(kind, "same.pdf", 80_000) for kind in ("ranges", "norange")]
    seeds.append(site.file_url("ranges", "other.pdf", 90_000))
    running: Running = await crawl(files_spec(seeds, [{"match": r"\.pdf"}]), exit_when_done=False)
    manifest_path = running.out / "manifest.json"
    await running.until("the manifest is written", manifest_path.exists)
    counts = json.loads(manifest_path.read_text())["counts"]
    assert (counts["fileRecords"], counts["storedFiles"], counts["fileBytes"]) == (3, 2, 170_000)
    store = FolderStore(parse_destination(str(running.out)))
    result = await verify(store, deep=True)
    assert result.ok
    assert (result.files_checked, result.unlisted) == (2, [])
    stored = next(iter(running.out.glob("files/sha256/*/*")))
    stored.write_bytes(b"%PDF-" + b"\0" * (stored.stat().st_size - 5))  # same size, other bytes
    assert (await verify(store)).ok
    assert not (await verify(store, deep=True)).ok


async def test_a_link_marked_as_a_file_is_not_also_crawled_as_a_page(
    site: FileSite, crawl: Callable[..., Any]
) -> None:
    site.reset()
    rule = {"match": r"\.pdf$", "context": ["a"]}
    running: Running = await crawl(
        files_spec([site.page_url("ranges", 0)], [rule], scope={"maxDepth": 1})
    )
    assert await running.finished() == 0
    # report-1.pdf is linked from page 1, at maxDepth: its file one level past it.
    assert_stored(running, site, {"report-0.pdf": SMALL, "report-1.pdf": SMALL})
    pages = {r["url"] for r in _lines(running.out.glob("pages/*.jsonl"))}
    assert canonicalize(site.page_url("ranges", 1)) in pages
    assert not any(".pdf" in url for url in pages)
    asked = [r.path for r in site.requests("ranges") if "report-" in r.path]
    assert sorted(asked) == ["/files/report-0.pdf", "/files/report-1.pdf"]  # once each


async def test_the_worker_bandwidth_cap_holds_for_all_its_downloads(
    site: FileSite, crawl: Callable[..., Any]
) -> None:
    site.reset()
    seeds = [site.file_url(kind, f"capped-{kind}.mp4", 200_000) for kind in ("ranges", "norange")]
    started = time.monotonic()
    running: Running = await crawl(
        files_spec(seeds, [{"match": r"\.mp4"}], files={"bandwidthBytesPerSecond": 200_000})
    )
    assert await running.finished() == 0
    elapsed = time.monotonic() - started
    assert len(running.records()) == 2
    # 400 kB at 200 kB/s for the two hosts together (a quarter second's burst aside): not the
    # tenth of a second the loopback takes unthrottled.
    assert elapsed >= 1.5
