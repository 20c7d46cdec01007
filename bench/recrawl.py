"""Recrawl benchmark: a continuous crawl against "use cron" on a news site, one run.

    python -m bench.recrawl [--quick] [--json]

The site is crawlfleet's loopback news site (crawlfleet/testsite/news.py): hosts whose front
page, sections and RSS/Atom feed gain one article per host every ``publish_interval`` seconds,
some answering validators (strong ETag, weak ETag, Last-Modified) and one none. Each crawler
gets a fresh site (same seed, so the same schedule from its own start) for ``duration``
seconds, and is judged from the site's request log (crawlfleet/testsite/freshness.py):

- ``crawlfleet``: ``crawlfleet run`` of a CrawlJob with recrawl rules -- feeds (``kind: feed``)
  and listings every ``interval``, articles matched by no rule, so fetched once -- against a
  private redis-server; stopped with SIGTERM at the end of the window.
- ``naive``: what "use cron" gives: a one-shot crawl re-run on a timer, every ``interval``
  (the cadence that could meet the same freshness), each run starting afresh from the front
  pages (no memory between runs, no conditional requests), following in-host links two deep.
  It is a bare fetch loop with crawlfleet's link parser, not ``crawlfleet run`` per round: a
  process and a Redis per round would cost start-up time, not requests, and requests are
  what is compared.
- ``naive_same_budget``: the same one-shot crawl on a timer slowed until its requests equal
  crawlfleet's: the freshness cron buys with crawlfleet's request budget.

Figures (targets from issue 23):

- ``detection_p95_vs_interval``: crawlfleet's p95 delay from an article's publication to its
  first fetch, over the feed rule's interval (≤ 1.5);
- ``requests_per_new_item_vs_naive``: crawlfleet's requests per new article over the naive
  crawl's (≤ 0.33);
- ``conditional_share``: of crawlfleet's revisits of unchanged listings and feeds on hosts with
  validators, the share that were conditional and answered 304 (≥ 0.9);
- ``tracked_bytes_per_url``: Redis memory of the revisit state over tracked URLs, from
  ``MEMORY USAGE`` of the frontier's revisit keys (≤ 100).

A figure that cannot be measured on this checkout (the continuous crawl needs ``spec.recrawl``
and the frontier's revisit state) is null, with the reason under ``not_measured``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import yaml

from crawlfleet.crawler.links.links import extract_links
from crawlfleet.crawljob import CrawlJobSpec, load_crawljob
from crawlfleet.destinations import parse_destination
from crawlfleet.frontier import Frontier, FrontierSettings
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.output.changes import changes
from crawlfleet.output.stores import FolderStore
from crawlfleet.testsite.freshness import Audit, audit
from crawlfleet.testsite.news import NewsConfig, NewsSite


@dataclass(frozen=True)
class Scenario:
    """One bench run's site and rules; every figure is relative to these."""

    duration_seconds: float
    hosts: int
    publish_interval_seconds: int
    #: The feed and listing rules' interval, and the naive crawl's period.
    interval_seconds: float
    listing_size: int
    sections: int

    def site(self) -> NewsConfig:
        return NewsConfig(
            hosts=self.hosts,
            sections=self.sections,
            initial_articles=self.listing_size,
            publish_interval_seconds=self.publish_interval_seconds,
            listing_size=self.listing_size,
            update_after_seconds=max(5, self.publish_interval_seconds * 3),
            delete_after_seconds=max(10, self.publish_interval_seconds * 6),
        )


#: Intervals are at least 10 s, the shortest a recrawl rule takes (crawljob/recrawl.py).
QUICK = Scenario(80.0, 4, 10, 10.0, 20, 3)
FULL = Scenario(300.0, 8, 15, 10.0, 30, 4)
#: In-flight requests of the naive crawl (crawlfleet's perHost over the hosts is comparable).
NAIVE_CONCURRENCY = 8


# ---------------------------------------------------------------------------- naive baseline


async def one_shot_crawl(session: aiohttp.ClientSession, seeds: list[str]) -> int:
    """One run of a one-shot crawl from ``seeds``: every in-host link two deep, once each;
    returns its requests."""
    hosts = {urlsplit(seed).netloc for seed in seeds}
    seen = set(seeds)
    frontier = [(seed, 0) for seed in seeds]
    requests = 0
    semaphore = asyncio.Semaphore(NAIVE_CONCURRENCY)

    async def fetch(url: str, depth: int) -> list[tuple[str, int]]:
        nonlocal requests
        async with semaphore, session.get(url, allow_redirects=False) as response:
            requests += 1
            body = await response.read()
        if response.status != 200 or depth >= 2:
            return []
        return [(link, depth + 1) for link in extract_links(body, url).links]

    while frontier:
        found = await asyncio.gather(*(fetch(url, depth) for url, depth in frontier))
        frontier = []
        for link, depth in (pair for links in found for pair in links):
            if urlsplit(link).netloc in hosts and link not in seen:
                seen.add(link)
                frontier.append((link, depth))
    return requests


async def naive(scenario: Scenario, period_seconds: float) -> tuple[Audit, float]:
    """The one-shot crawl re-run every ``period_seconds`` for the scenario's duration, on a
    fresh site; its audit and the mean requests of one run."""
    with NewsSite(scenario.site()) as site:
        runs, requests = 0, 0
        connector = aiohttp.TCPConnector(limit=NAIVE_CONCURRENCY)
        async with aiohttp.ClientSession(connector=connector) as session:
            while site.now() < scenario.duration_seconds:
                next_run = runs * period_seconds
                await asyncio.sleep(max(0.0, next_run - site.now()))
                if site.now() >= scenario.duration_seconds:
                    break
                requests += await one_shot_crawl(session, site.front_pages())
                runs += 1
        settle = period_seconds + scenario.interval_seconds
        found = audit(
            site.schedule, site.requests(), end=scenario.duration_seconds, settle_seconds=settle
        )
    return found, requests / max(1, runs)


# ---------------------------------------------------------------------------- crawlfleet


def continuous_job(site: NewsSite, scenario: Scenario) -> dict[str, Any]:
    """The news-monitoring CrawlJob of docs/recrawl.md, pointed at ``site``."""
    interval = f"{scenario.interval_seconds:g}s"
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": "news", "namespace": "bench"},
        "spec": {
            "seeds": site.front_pages() + site.feeds(),
            "scope": {"allowedDomains": site.hosts, "maxDepth": 3, "allowPrivateNetworks": True},
            "concurrency": {"perHost": 2, "hostDelaySeconds": 0},
            "recrawl": [
                {
                    "kind": "feed",
                    "interval": interval,
                    "minInterval": interval,
                    "maxInterval": f"{2 * scenario.interval_seconds:g}s",
                },
                {
                    "match": r"^http://[^/]+/(section/[0-9]+/)?$",
                    "interval": interval,
                    "minInterval": interval,
                    "maxInterval": f"{6 * scenario.interval_seconds:g}s",
                },
            ],
            "output": {"format": "jsonl"},
        },
    }


def continuous_unavailable() -> str | None:
    """Why the continuous crawl cannot run on this checkout; None when it can."""
    if "recrawl" not in CrawlJobSpec.model_fields:
        return "this checkout's CrawlJob has no spec.recrawl (issue 23's spec part)"
    return None


class CrawlEndedEarly(RuntimeError):
    """The continuous crawl exited before its window ended: it did not keep going."""


async def continuous(scenario: Scenario, tmp: Path) -> tuple[Audit, dict[str, Any]]:
    """``crawlfleet run`` of :func:`continuous_job` for the scenario's duration."""
    with RedisServer(tmp / "redis") as redis, NewsSite(scenario.site()) as site:
        job_file = tmp / "news.yaml"
        job_file.write_text(yaml.safe_dump(continuous_job(site, scenario)))
        out = tmp / "news-run"
        command = [sys.executable, "-m", "crawlfleet", "--log-level", "warning", "run"]
        log_path = tmp / "run.log"
        # The window's second half in wall-clock seconds: `output changes --since` of it.
        halfway = time.time() + scenario.duration_seconds / 2 - site.now()
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*command, str(job_file), "--out", str(out), "--redis-url", redis.url],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                while site.now() < scenario.duration_seconds and process.poll() is None:
                    await asyncio.sleep(0.5)
            finally:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if site.now() < scenario.duration_seconds:
            lines = log_path.read_text(errors="replace").strip().splitlines()
            raise CrawlEndedEarly(
                f"crawlfleet run exited with {process.returncode} at {site.now():.0f} s of"
                f" {scenario.duration_seconds:g} s: {(lines or [''])[-1][:300]}"
            )
        settle = 1.5 * scenario.interval_seconds + 1
        found = audit(
            site.schedule, site.requests(), end=scenario.duration_seconds, settle_seconds=settle
        )
        tracked, tracked_bytes = await revisit_memory(job_file, redis.url)
        extra = {
            "exit_code": process.returncode,
            "output_changes": await output_changes(out, None),
            "output_changes_second_half": await output_changes(out, halfway),
            "tracked": tracked,
            "tracked_bytes": tracked_bytes,
            "tracked_bytes_per_url": tracked_bytes / tracked if tracked else None,
        }
    return found, extra


async def output_changes(out: Path, since: float | None) -> dict[str, int]:
    """What ``crawlfleet output changes [--since]`` lists for the run's output, by kind."""
    store = FolderStore(parse_destination(str(out)))
    return dict(Counter([event.change async for event in changes(store, since=since)]))


async def revisit_memory(job_file: Path, redis_url: str) -> tuple[int, int]:
    """(tracked URLs, Redis bytes of their revisit state at rest): ``Frontier.tracked_bytes``,
    ``MEMORY USAGE`` of every host's revisit set and their index."""
    job = load_crawljob(job_file)
    frontier = await Frontier.connect(redis_url, FrontierSettings.from_spec(job.job_id, job.spec))
    try:
        return (await frontier.stats()).tracked, await frontier.tracked_bytes()
    finally:
        await frontier.aclose()


# ---------------------------------------------------------------------------- report


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _line(label: str, found: Audit) -> str:
    def seconds(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f} s"

    share = found.conditional_share
    return (
        f"{label + ':':<20} {found.requests:5d} requests, {found.detected}/{found.new_articles}"
        f" new articles, p95 detection {seconds(found.detection_p95_seconds)},"
        f" {len(found.fetched_twice)} articles fetched again,"
        f" conditional share {'n/a' if share is None else f'{share:.2f}'}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller site and window")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    scenario = QUICK if args.quick else FULL
    results: dict[str, Any] = {"quick": args.quick, "scenario": asdict(scenario)}
    not_measured: dict[str, Any] = {}
    started = time.perf_counter()

    crawlfleet: Audit | None = None
    reason = continuous_unavailable()
    # The naive crawl is a light fetch loop in this process: it runs beside crawlfleet's (on
    # its own site) rather than after it, to keep the bench's wall time to one window.
    cron_run = asyncio.create_task(naive(scenario, scenario.interval_seconds))
    if reason is None:
        try:
            with tempfile.TemporaryDirectory() as tmp_name:
                crawlfleet, extra = await continuous(scenario, Path(tmp_name))
        except CrawlEndedEarly as error:
            reason = str(error)
        else:
            results["crawlfleet"] = {**crawlfleet.figures(), **extra}
            print(_line("crawlfleet", crawlfleet))
    if reason is not None:
        not_measured["reason"] = reason
        not_measured["figures"] = [
            "detection_p95_vs_interval",
            "requests_per_new_item_vs_naive",
            "conditional_share",
            "tracked_bytes_per_url",
            "naive_same_budget",
        ]

    cron, requests_per_run = await cron_run
    results["naive"] = {**cron.figures(), "requests_per_run": requests_per_run}
    print(_line("naive (cron)", cron))

    if crawlfleet is not None and crawlfleet.requests:
        runs_in_budget = max(1.0, crawlfleet.requests / requests_per_run)
        period = scenario.duration_seconds / runs_in_budget
        same_budget, _ = await naive(scenario, period)
        results["naive_same_budget"] = {**same_budget.figures(), "period_seconds": period}
        print(_line("naive, same budget", same_budget))
        results["detection_p95_vs_interval"] = _ratio(
            crawlfleet.detection_p95_seconds, scenario.interval_seconds
        )
        results["requests_per_new_item_vs_naive"] = _ratio(
            crawlfleet.requests_per_new_item, cron.requests_per_new_item
        )
        results["conditional_share"] = crawlfleet.conditional_share
        results["tracked_bytes_per_url"] = results["crawlfleet"]["tracked_bytes_per_url"]
    results["not_measured"] = not_measured
    results["seconds"] = round(time.perf_counter() - started, 1)
    for name, target, better in (
        ("detection_p95_vs_interval", 1.5, "≤"),
        ("requests_per_new_item_vs_naive", 0.33, "≤"),
        ("conditional_share", 0.9, "≥"),
        ("tracked_bytes_per_url", 100, "≤"),
    ):
        value = results.get(name)
        shown = "not measured" if value is None or math.isnan(value) else f"{value:.2f}"
        print(f"{name}: {shown} (target {better} {target})")
    if args.json:
        print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main())
