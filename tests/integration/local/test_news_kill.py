"""SIGKILL chaos during a continuous crawl of the news site (issue 23, "Tests (real parts)").

``crawlfleet run`` of a job that keeps going, two workers; a worker holding leases is
SIGKILLed during the first round (the initial crawl), one between rounds and one during the
first revisits. A killed worker's leases go back to the queue (tracked URLs keep their revisit
state through the requeue), so:

* no due URL is lost: every listing and feed is revisited in the round after the last kill,
  and every article is fetched;
* nothing is fetched twice in one due period beyond the pages in flight at the kills: the
  second fetches of an article, and the revisits sooner than an interval after the last one,
  are at most the leases the run requeued (its LeasesRequeued events).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import time
from pathlib import Path

import pytest
import redis

from crawlfleet.crawler.worker.leases import Stage
from crawlfleet.frontier import JobKeys, canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite.news import NewsConfig
from tests.support.news_crawls import (
    ContinuousRun,
    FirstRequestClock,
    SlowNewsSite,
    fixed_rule,
    news_job,
    sleep_until,
    start_on_first_request,
)
from tests.support.processes import worker_pid
from tests.support.runs import no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

INTERVAL_SECONDS = 10
TICK_SECONDS = 3.0
#: Each answer waits this long, so that a kill finds pages in flight.
LATENCY_SECONDS = 0.3
#: Site seconds from which a kill is tried: the initial crawl, a quiet moment, the revisits.
KILL_FROM = (0.2, 5.0, INTERVAL_SECONDS + 0.2)
#: A kill waits this long for a worker that holds leases, then takes any live worker.
KILL_WAIT_SECONDS = 3.0
#: The round after the last kill (about 20 s) has run by then.
STOP_AT = 2 * INTERVAL_SECONDS + 2 * TICK_SECONDS
CONFIG = NewsConfig(
    hosts=4,
    sections=2,
    initial_articles=12,
    publish_interval_seconds=3,
    listing_size=40,
    updated_share=0.0,
    deleted_share=0.0,
)
LISTINGS = r"^http://[^/]+/(section/[0-9]+/)?$"


def _victim(client: redis.Redis, run: ContinuousRun, holding: bool) -> int | None:
    """A live worker's pid: the one whose last heartbeat holds the most leases (with
    ``holding``, only one that holds some)."""
    beats = client.hgetall(JobKeys(run.job_id).key("workers"))
    held = {
        worker.decode(): sum(json.loads(payload).get(f"leases_{stage}", 0) for stage in Stage)
        for worker, payload in beats.items()
    }
    for worker, count in sorted(held.items(), key=lambda item: -item[1]):
        if holding and count == 0:
            break
        if (pid := worker_pid(run.job_file, worker)) is not None:
            return pid
    return None


def test_no_due_url_is_lost_to_killed_workers(tmp_path: Path, redis_server: RedisServer) -> None:
    clock = FirstRequestClock()
    rng = random.Random(23)
    with SlowNewsSite(CONFIG, clock=clock, latency_seconds=LATENCY_SECONDS) as site:
        rules = [
            fixed_rule(INTERVAL_SECONDS, kind="feed"),
            fixed_rule(INTERVAL_SECONDS, match=LISTINGS),
        ]
        job = news_job("killnews", site.front_pages(), site.hosts, rules)
        run = ContinuousRun(job, tmp_path, redis_url=redis_server.url, workers=2)
        client = redis.Redis.from_url(redis_server.url)
        kills: list[float] = []
        try:
            start_on_first_request(site, run)
            for start in KILL_FROM:
                sleep_until(site, start + rng.uniform(0.0, 0.3), run)
                deadline = time.monotonic() + KILL_WAIT_SECONDS
                victim = None
                while victim is None:
                    holding = time.monotonic() < deadline
                    victim = _victim(client, run, holding)
                    time.sleep(0.02)
                os.kill(victim, signal.SIGKILL)
                kills.append(site.now())
            sleep_until(site, STOP_AT, run)
            run.stop()
        finally:
            client.close()
        requests = [r for r in site.requests() if r.path != "/robots.txt"]

    assert len(kills) == len(KILL_FROM)
    events = [json.loads(line) for line in (run.out / "events.jsonl").read_text().splitlines()]
    requeued = sum(e["requeued"] for e in events if e["kind"] == "LeasesRequeued")
    # The kills in the two rounds took pages in flight with them.
    assert len([e for e in events if e["kind"] == "LeasesRequeued"]) >= 2, events

    by_url: dict[str, list[float]] = {}
    for request in requests:
        by_url.setdefault(canonicalize(request.url), []).append(request.at)
    tracked = {canonicalize(u) for u in site.front_pages() + site.sections() + site.feeds()}
    articles = {u for u in by_url if re.search(r"/articles/[0-9]+\.html$", u)}

    # No due URL lost: every tracked URL revisited after the last kill; every article that
    # was on a listing by the last round (published an interval and a tick before the end) is
    # fetched.
    last_kill = max(kills)
    assert {u for u in tracked if max(by_url.get(u, [0.0])) <= last_kill} == set()
    late = {
        u: gaps
        for u in tracked
        if (gaps := [b - a for a, b in itertools.pairwise(sorted(by_url[u]))])
        and max(gaps) > INTERVAL_SECONDS + 2 * TICK_SECONDS
    }
    assert late == {}
    published = {
        canonicalize(site.article_url(a))
        for a in site.published(STOP_AT - INTERVAL_SECONDS - TICK_SECONDS)
    }
    assert published <= articles, sorted(published - articles)[:5]

    # Nothing fetched twice in one due period beyond the pages in flight at the kills.
    again = sum(len(by_url[u]) - 1 for u in articles)
    sooner = sum(
        1
        for u in tracked
        for a, b in itertools.pairwise(sorted(by_url[u]))
        if b - a < INTERVAL_SECONDS
    )
    assert again + sooner <= requeued, (again, sooner, requeued)
