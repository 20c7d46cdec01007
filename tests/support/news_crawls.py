"""Continuous crawls of the news site (crawlfleet/testsite/news.py) as a user runs them, and
what the site's own log says they should have found.

The site's clock is injected (:class:`FirstRequestClock`): it starts at the crawl's first
request and then runs with the wall clock. So the site's schedule (publications, updates,
deletions at whole site seconds) is laid out from the crawl's start whatever the
start-up of ``crawlfleet run`` costs, and a test knows which event falls between which
revisits. Rules keep the spec's 10-second floor (crawljob/recrawl.py): nothing here goes below
it; the tests watch three or four intervals.

:func:`expected_changes` replays the log: every request is answered again by the site's own
``answer`` at the site second it arrived (the site is a pure function of its clock), so what a
fetch found -- new, changed, unchanged, not modified, gone -- is known from the server's side
and compared with what the crawler wrote.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from crawlfleet.crawljob import load_crawljob
from crawlfleet.frontier import canonicalize
from crawlfleet.testsite.news import Clock, NewsConfig, NewsRequest, NewsServer, NewsSite
from crawlfleet.testsite.threaded import LoopThread
from tests.support.runs import crawlfleet

__all__ = [
    "ContinuousRun",
    "Fetch",
    "FirstRequestClock",
    "SlowNewsSite",
    "expected_changes",
    "fetches",
    "fixed_rule",
    "news_job",
    "page_records",
    "sleep_until",
    "start_on_first_request",
]

#: How long ``crawlfleet run`` may take to send its first request (Python, Redis, workers).
_START_SECONDS = 60.0
#: SIGTERM's exit code for ``crawlfleet run`` (crawlfleet/local/runner.py, EXIT_INTERRUPTED).
EXIT_TERMINATED = 143


class FirstRequestClock:
    """Site seconds since the clock was first read: the site reads it for each request it
    answers, so site second 0 is the crawl's first request (and it never runs before)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started_at: float | None = None
        #: The wall-clock time (seconds since the epoch) of site second 0, once started.
        self.epoch_wall: float | None = None

    def __call__(self) -> float:
        with self._lock:
            if self._started_at is None:
                self._started_at = time.monotonic()
                self.epoch_wall = time.time()
            return time.monotonic() - self._started_at

    def wall(self, site_seconds: float) -> float:
        """The wall-clock time of a site second (seconds since the epoch)."""
        assert self.epoch_wall is not None, "the site answered nothing yet"
        return self.epoch_wall + site_seconds


class _SlowNewsServer(NewsServer):
    """The news site answering each request ``latency_seconds`` late (its log and answer
    taken after the wait): pages stay in flight long enough for a kill to catch some."""

    def __init__(self, config: NewsConfig, *, clock: Clock, latency_seconds: float) -> None:
        super().__init__(config, clock=clock)
        self.latency_seconds = latency_seconds

    def _handler_for(self, host: int) -> Callable[[web.BaseRequest], Awaitable[web.Response]]:
        answer = super()._handler_for(host)

        async def slowly(request: web.BaseRequest) -> web.Response:
            await asyncio.sleep(self.latency_seconds)
            return await answer(request)

        return slowly


class SlowNewsSite(NewsSite):
    """:class:`NewsSite` over :class:`_SlowNewsServer`."""

    def __init__(self, config: NewsConfig, *, clock: Clock, latency_seconds: float) -> None:
        super().__init__(config, clock=clock)
        self.server = _SlowNewsServer(config, clock=clock, latency_seconds=latency_seconds)
        self.schedule = self.server.schedule
        self._thread = LoopThread(self.server, name="crawlfleet-slow-news-site")


def fixed_rule(seconds: float, **selector: str) -> dict[str, object]:
    """A recrawl rule with a fixed interval (both adaptive factors 1), for ``match`` or
    ``kind``."""
    every = f"{seconds:g}s"
    return {
        **selector,
        "interval": every,
        "minInterval": every,
        "maxInterval": every,
        "adaptive": {"whenChanged": 1, "whenUnchanged": 1},
    }


def news_job(
    name: str, seeds: Sequence[str], hosts: Sequence[str], recrawl: Sequence[dict[str, object]],
    **spec: object,
) -> dict[str, object]:  # fmt: skip
    """A continuous CrawlJob of the news site (or of any loopback site): ``recrawl`` rules,
    quick to notice dead workers, output files closed within a second."""
    base: dict[str, object] = {
        "seeds": list(seeds),
        "scope": {"allowedDomains": list(hosts), "maxDepth": 10, "allowPrivateNetworks": True},
        "concurrency": {"perWorker": 8, "perHost": 2, "hostDelaySeconds": 0},
        "lease": {"ttlSeconds": 30, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
        "output": {"format": "jsonl", "maxFileAgeSeconds": 1},
        "recrawl": list(recrawl),
    }
    base.update(spec)
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": name},
        "spec": base,
    }


class ContinuousRun:
    """``crawlfleet run`` of a job that keeps going, against a private or given redis-server;
    :meth:`stop` is the user's SIGTERM (the workers drain, the output is made durable)."""

    def __init__(
        self, job: dict[str, object], tmp_path: Path, *, redis_url: str, workers: int = 2
    ) -> None:
        self.job_file = tmp_path / "job.yaml"
        self.job_file.write_text(yaml.safe_dump(job))
        self.job_id = load_crawljob(self.job_file).job_id
        self.out = tmp_path / "out"
        self.process = crawlfleet(
            "run", str(self.job_file), "--out", str(self.out), "--workers", str(workers),
            "--json", "--redis-url", redis_url, cwd=tmp_path,
        )  # fmt: skip

    def running(self) -> bool:
        return self.process.poll() is None

    def assert_running(self) -> None:
        if not self.running():
            _out, err = self.process.communicate()
            raise AssertionError(f"crawlfleet run ended by itself ({self.process.returncode}):"
                                 f" {err[-3000:]}")  # fmt: skip

    def stop(self) -> dict[str, Any]:
        """SIGTERM, then the summary a job that keeps going prints when stopped."""
        self.assert_running()
        self.process.send_signal(signal.SIGTERM)
        stdout, err = self.process.communicate(timeout=90)
        assert self.process.returncode == EXIT_TERMINATED, err[-3000:]
        lines = stdout.strip().splitlines()
        assert lines, err[-3000:]
        summary: dict[str, Any] = json.loads(lines[-1])
        return summary


def start_on_first_request(site: NewsSite, run: ContinuousRun) -> None:
    """Wait for ``run``'s first request to reach ``site`` (its clock starts then)."""
    deadline = time.monotonic() + _START_SECONDS
    while not site.requests():
        run.assert_running()
        assert time.monotonic() < deadline, "no request reached the site"
        time.sleep(0.01)


def sleep_until(site: NewsSite, site_seconds: float, run: ContinuousRun) -> None:
    """Wait until the site's clock reads ``site_seconds``, the run still going."""
    while site.now() < site_seconds:
        run.assert_running()
        time.sleep(min(0.1, max(0.0, site_seconds - site.now())))


def page_records(out: Path) -> list[dict[str, Any]]:
    """Every page record the run wrote, in fetch order."""
    records = [
        json.loads(line)
        for path in sorted(out.glob("pages/*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    return sorted(records, key=lambda record: float(record.get("fetched_at") or 0.0))


@dataclass(frozen=True)
class Fetch:
    """One request of the site's log and what it found, judged by the site itself."""

    request: NewsRequest
    #: new, changed, unchanged, not_modified, gone; None: a failure before any 200.
    change: str | None

    @property
    def url(self) -> str:
        return canonicalize(self.request.url)


def fetches(site: NewsSite, requests: Iterable[NewsRequest]) -> dict[str, list[Fetch]]:
    """The log's requests by canonical URL (robots.txt left out), each with what it found:
    the body the site answered then against the last 200's, a 304, or a 404/410 after a 200."""
    by_url: dict[str, list[NewsRequest]] = defaultdict(list)
    for request in requests:
        if request.path != "/robots.txt":
            by_url[canonicalize(request.url)].append(request)
    found: dict[str, list[Fetch]] = {}
    for url, asked in by_url.items():
        last_body: bytes | None = None
        judged: list[Fetch] = []
        for request in sorted(asked, key=lambda r: r.at):
            change: str | None = None
            if request.status == 200:
                answer = site.server.answer(request.host, request.path, {}, request.at)
                body = answer.body if isinstance(answer.body, bytes) else b""
                change = "new" if last_body is None else (
                    "unchanged" if body == last_body else "changed"
                )  # fmt: skip
                last_body = body
            elif request.status == 304:
                change = "not_modified"
            elif request.status in (404, 410) and last_body is not None:
                change = "gone"
            judged.append(Fetch(request, change))
        found[url] = judged
    return found


def expected_changes(found: dict[str, list[Fetch]], since: float) -> dict[str, str]:
    """What ``crawlfleet output changes --since`` must list (URL -> new, changed or gone) for
    the site seconds from ``since``: gone when a URL's last event is, else new when it
    appeared then, else changed (crawlfleet/output/changes.py)."""
    expected: dict[str, str] = {}
    for url, judged in found.items():
        events = [
            f.change
            for f in judged
            if f.request.at >= since and f.change in ("new", "changed", "gone")
        ]
        if not events:
            continue
        if events[-1] == "gone":
            expected[url] = "gone"
        elif "new" in events:
            expected[url] = "new"
        else:
            expected[url] = "changed"
    return expected
