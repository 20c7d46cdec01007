"""A scheduled job's later runs revisit conditionally and crawl only what is new: `crawlfleet
run` against the news test site, whose front pages gain articles when the test moves its clock.

Two clocks, both moved by the test: the site's (articles appear) and the run's file clock
(due times come). Everything else is real: processes, Redis, HTTP over loopback, validators.
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.fleet.clock import FileClock
from crawlfleet.testsite.news import ManualClock, NewsConfig, NewsRequest, NewsSite
from tests.integration.local.test_schedule import FIRST, SECOND, T0, running, with_clock
from tests.support.runs import no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

THIRD = "20261202T084500Z"
QUARTER = timedelta(minutes=15)


@pytest.fixture
def site_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def news(site_clock: ManualClock) -> Any:
    config = NewsConfig(
        hosts=2,
        sections=1,
        initial_articles=4,
        publish_interval_seconds=10,
        updated_share=0.0,
        deleted_share=0.0,
        validators=("etag", "last_modified"),
    )
    with NewsSite(config, clock=site_clock) as site:
        yield site


def pages(requests: list[NewsRequest]) -> list[NewsRequest]:
    return [r for r in requests if r.path != "/robots.txt"]


def test_later_runs_revisit_the_tracked_front_pages_conditionally_and_fetch_only_new_articles(
    news: NewsSite, site_clock: ManualClock, tmp_path: Path
) -> None:
    job = {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": "news"},
        "spec": {
            "seeds": news.front_pages(),
            "scope": {"allowedDomains": news.hosts, "maxDepth": 3, "allowPrivateNetworks": True},
            "concurrency": {"perWorker": 4, "perHost": 2, "hostDelaySeconds": 0},
            # The front pages are tracked (revisited conditionally); articles are fetched once.
            "recrawl": [{"match": r"^http://[^/]+/$", "interval": "1h"}],
            "schedule": {"cron": "*/15 * * * *"},
            "output": {"maxFileAgeSeconds": 1},
        },
    }
    proc, said, clock = running(*with_clock(tmp_path, job), tmp_path)

    FileClock.set(clock, T0 + timedelta(seconds=10))
    said.wait_for(f"run {FIRST} complete")
    first = pages(news.requests())
    fetched_first = {r.url for r in first if r.status == 200}
    initial = {news.article_url(a) for a in news.published()}
    assert initial <= fetched_first
    assert not any(r.conditional for r in first)

    news.reset()
    site_clock.advance(25)  # two or three new articles per host
    fresh = {news.article_url(a) for a in news.published()} - initial
    assert fresh
    FileClock.set(clock, T0 + QUARTER + timedelta(seconds=10))
    said.wait_for(f"run {SECOND} complete")
    second = pages(news.requests())
    fronts = [r for r in second if r.path == "/"]
    assert len(fronts) == len(news.front_pages())
    assert all(r.conditional and r.status == 200 for r in fronts)  # changed: new articles
    articles = {r.url for r in second if r.path.startswith("/articles/")}
    assert articles == fresh  # the new ones, each once; none of the first run's again
    assert len([r for r in second if r.path.startswith("/articles/")]) == len(fresh)
    assert {r.path for r in second} <= {"/", *(r.path for r in second if r.url in fresh)}

    news.reset()  # nothing new on the site: the third run's front pages are not modified
    FileClock.set(clock, T0 + 2 * QUARTER + timedelta(seconds=10))
    said.wait_for(f"run {THIRD} complete")
    third = pages(news.requests())
    assert [(r.path, r.conditional, r.status) for r in third] == [("/", True, 304)] * len(
        news.front_pages()
    )

    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(60)
    assert proc.returncode == 0, said.text()[-3000:]
