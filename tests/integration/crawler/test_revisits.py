"""Revisits (issue 23, item 3): a real worker, a real redis-server and the loopback test site.

Three seeds, one per host: host 0 sends ETags, host 1 Last-Modified dates, host 2 neither
(crawlfleet/testsite/revisions.py). Every URL matches a recrawl rule whose interval is half a
second -- below the model's 10-second floor, set past validation so that a test of several
rounds takes seconds (the policy itself has its own unit tests). The worker runs in this
process and is stopped gracefully at the end; what it did is read from its output (pages,
items, WARC), the site's request log and the frontier's dead letters.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawlfleet.crawler.fetching.fetch import Fetcher
from crawlfleet.crawler.worker.worker import Worker
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.crawljob.recrawl import Adaptive, RecrawlRule
from crawlfleet.frontier import Frontier, canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite, page_path
from tests.support.specs import job_spec
from tests.support.workers import in_process_worker

pytestmark = pytest.mark.slow

INTERVAL_SECONDS = 0.5
#: How long a round of visits may take: the interval, a flush, an output file's age (1 s).
ROUND_SECONDS = 20.0
PAGE = page_path(1)
#: A page the first test leaves alone (it edits and removes PAGE).
UNTOUCHED = page_path(2)


@pytest.fixture
def site() -> Iterator[TestSite]:
    config = SiteConfig(
        hosts=3, pages_per_host=4, hostile=False, etag_hosts=(0,), last_modified_hosts=(1,)
    )
    with TestSite(config) as running:
        yield running


def fast_rule() -> RecrawlRule:
    """Every URL, every half second, fixed (model_construct: below the model's floor)."""
    return RecrawlRule.model_construct(
        match=".",
        kind=None,
        interval=INTERVAL_SECONDS,
        min_interval=INTERVAL_SECONDS,
        max_interval=INTERVAL_SECONDS,
        adaptive=Adaptive(when_changed=1.0, when_unchanged=1.0),
    )


def recrawl_spec(site: TestSite, page: str = PAGE, **changes: Any) -> CrawlJobSpec:
    spec = job_spec(
        {
            "scope": {"allowedDomains": site.hosts, "maxDepth": 0, "allowPrivateNetworks": True},
            "concurrency": {"perHost": 1, "hostDelaySeconds": 0.0},
            "lease": {"ttlSeconds": 5, "heartbeatSeconds": 0.5, "deadAfterSeconds": 4},
            "output": {"maxFileAgeSeconds": 1},
            "extract": [{"match": ".", "fields": {"title": {"css": "title::text"}}}],
            "fetch": {"connectTimeoutSeconds": 2, "readTimeoutSeconds": 2},
            **changes,
        },
        seeds=[site.url(host, page) for host in range(3)],
    )
    return spec.model_copy(update={"recrawl": (fast_rule(),)})


class Running:
    """A worker crawling in this process, and what it wrote."""

    def __init__(self, worker: Worker, task: asyncio.Task[int], out: Path) -> None:
        self.worker = worker
        self.task = task
        self.out = out

    def records(self) -> list[dict[str, Any]]:
        return _lines(self.out.glob("pages/*.jsonl"))

    def items(self) -> list[dict[str, Any]]:
        return _lines(self.out.glob("items/*.jsonl"))

    def visits(self, url: str) -> list[dict[str, Any]]:
        found = [r for r in self.records() if r["url"] == url]
        return sorted(found, key=lambda record: record["fetched_at"])

    async def until(self, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + ROUND_SECONDS
        while not check():
            if self.task.done():
                raise AssertionError(f"the worker ended before {what}: {self.task.result()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {ROUND_SECONDS} s: {what}")
            await asyncio.sleep(0.05)


_jobs = itertools.count()


def _lines(paths: Iterator[Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(paths) for line in path.read_text().splitlines()]


@pytest.fixture
async def crawl(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> AsyncIterator[Callable[[CrawlJobSpec], Running]]:
    """Start a worker on a spec; it is stopped (SIGTERM's path) and its parts closed after."""
    started: list[tuple[Running, Fetcher, Frontier]] = []

    async def start(spec: CrawlJobSpec) -> Running:
        job_id = f"test.revisits-{next(_jobs)}"
        out = tmp_path / job_id
        worker, fetcher, frontier = await in_process_worker(spec, redis_server.url, job_id, out)
        running = Running(worker, asyncio.create_task(worker.run()), out)
        started.append((running, fetcher, frontier))
        return running

    yield start  # type: ignore[misc]
    for running, fetcher, frontier in started:
        running.worker.request_stop()
        await asyncio.wait_for(running.task, 30)
        await fetcher.aclose()
        await frontier.aclose()


async def test_revisits_are_conditional_judged_and_written_by_what_they_found(
    site: TestSite, crawl: Callable[[CrawlJobSpec], Any]
) -> None:
    site.reset()
    urls = [canonicalize(site.url(host, PAGE)) for host in range(3)]
    etag_url, dated_url, plain_url = urls
    running: Running = await crawl(recrawl_spec(site, output={"format": "warc"}))

    # First visits are new, written with their items; second visits find the pages as they
    # were: a 304 where the host validates, the same digest where it does not.
    await running.until(
        "every seed visited twice", lambda: all(len(running.visits(url)) >= 2 for url in urls)
    )
    for url in urls:
        first, again = running.visits(url)[:2]
        assert (first["change"], first["status"]) == ("new", 200), url
        assert "content" not in again
        assert again["outlinks"] == 0
    assert [running.visits(url)[1]["status"] for url in urls] == [304, 304, 200]
    assert [running.visits(url)[1]["change"] for url in urls] == [
        "not_modified",
        "not_modified",
        "unchanged",
    ]
    requests = {canonicalize(r.url): r for r in site.all_requests() if r.status == 304}
    assert set(requests) <= {etag_url, dated_url}
    assert {etag_url, dated_url} <= set(requests)
    new_items = {item["url"] for item in running.items()}
    assert new_items == set(urls)  # one batch of items each, from the first visit only
    assert len(running.items()) == 3

    # An edited page is changed: a new record with its items. A removed one is gone: a dead
    # letter, and never asked for again.
    site.edit_page(site.url(0, PAGE))
    site.edit_page(site.url(2, PAGE))
    site.remove_page(site.url(1, PAGE))
    await running.until(
        "the edited pages changed and the removed one gone",
        lambda: (
            any(r["change"] == "changed" for r in running.visits(etag_url))
            and any(r["change"] == "changed" for r in running.visits(plain_url))
            and any(r.get("change") == "gone" for r in running.visits(dated_url))
        ),
    )
    for url in (etag_url, plain_url):
        changed = next(r for r in running.visits(url) if r["change"] == "changed")
        assert changed["status"] == 200
        # Its generation's items file is committed just after its pages file.
        await running.until(
            f"the items of {url}'s changed page",
            lambda url=url, fetch_id=changed["fetch_id"]: any(  # type: ignore[misc]
                item["url"] == url and item["fetch_id"] == fetch_id for item in running.items()
            ),
        )
    gone = next(r for r in running.visits(dated_url) if r.get("change") == "gone")
    assert (gone["status"], gone["failure_class"]) == (404, "http_404")
    # The record is durable before its lease is failed: the dead letter follows.
    frontier = running.worker.frontier
    deadline = time.monotonic() + ROUND_SECONDS
    dead = {letter.url: letter async for letter in frontier.dead_letters()}
    while dated_url not in dead and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        dead = {letter.url: letter async for letter in frontier.dead_letters()}
    assert dead[dated_url].failure_class == "http_404"
    asked_when_gone = site.count(site.url(1, PAGE))
    await running.until(
        "the changed pages revisited once more",
        lambda: all(
            running.visits(url)[-1]["change"] in ("not_modified", "unchanged")
            for url in (etag_url, plain_url)
        ),
    )
    assert site.count(site.url(1, PAGE)) == asked_when_gone

    # The WARC: a response per new or changed capture, a revisit record per page found as it
    # was, naming the capture it refers to by URI, date and payload digest (the frontier keeps
    # a WARC job's whole digest and capture second, ETag or not).
    await running.until("the WARC files sealed", lambda: _warc_records(running.out) != [])
    records = _warc_records(running.out)
    captures = {
        (h.get_header("WARC-Target-URI"), h.get_header("WARC-Date")): h.get_header(
            "WARC-Payload-Digest"
        )
        for kind, h in records
        if kind == "response"
    }
    revisits = [h for kind, h in records if kind == "revisit"]
    profiles = {h.get_header("WARC-Profile").rsplit("/", 1)[1] for h in revisits}
    assert profiles == {"server-not-modified", "identical-payload-digest"}
    for header in revisits:
        uri = header.get_header("WARC-Refers-To-Target-URI")
        assert uri == header.get_header("WARC-Target-URI")
        date = header.get_header("WARC-Refers-To-Date")
        assert captures[uri, date] == header.get_header("WARC-Payload-Digest"), uri
    assert {h.get_header("WARC-Target-URI") for h in revisits} == set(urls)


def _warc_records(out: Path) -> list[tuple[str, Any]]:
    found = []
    for path in sorted(out.glob("warc/*.warc.gz")):
        with path.open("rb") as stream:
            found += [(r.rec_type, r.rec_headers) for r in ArchiveIterator(stream)]
    return found


async def test_a_job_without_rules_reads_and_sends_no_revisit_state(
    site: TestSite, crawl: Callable[[CrawlJobSpec], Any]
) -> None:
    """The one-shot path is unchanged: no change field, no conditional request, no revisit
    counted."""
    site.reset()
    spec = recrawl_spec(site, UNTOUCHED).model_copy(update={"recrawl": ()})
    running: Running = await crawl(spec)
    await running.until("the three seeds written", lambda: len(running.records()) == 3)
    assert all("change" not in record for record in running.records())
    assert [r.status for r in site.all_requests() if r.path == UNTOUCHED] == [200, 200, 200]
    metrics = running.worker.metrics.registry
    assert metrics.get_sample_value("crawlfleet_worker_revisits_total", {"change": "new"}) == 0
