"""A continuous crawl of the news site (``crawlfleet run`` of a job with recrawl rules), judged
from the site's own request log: every new article crawled once, within the feed rule's
interval plus a tick; unchanged listings and feeds asked again conditionally (304, no body)
where the host sends validators; no article fetched twice.

The rules' shortest interval is 10 s (crawljob/recrawl.py), so this test watches the site for
three of them: about half a minute, the price of a real clock on both sides.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import yaml

from crawlfleet.config import RunConfig
from crawlfleet.testsite.freshness import audit
from crawlfleet.testsite.news import NewsConfig, NewsSite
from tests.support.runs import crawlfleet, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

INTERVAL_SECONDS = 10
WINDOW_SECONDS = 3 * INTERVAL_SECONDS + 4
#: What "a tick" may add to an interval: the run's steering tick (which promotes due
#: revisits), a claim, and the article's own fetch after the feed that named it.
TICK_SECONDS = RunConfig().tick_seconds + 2.0


def news_job(site: NewsSite) -> dict[str, object]:
    fixed = {"whenChanged": 1, "whenUnchanged": 1}
    every = f"{INTERVAL_SECONDS}s"
    rule = {"interval": every, "minInterval": every, "maxInterval": every, "adaptive": fixed}
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": "news"},
        "spec": {
            "seeds": site.front_pages() + site.feeds(),
            "scope": {"allowedDomains": site.hosts, "maxDepth": 3, "allowPrivateNetworks": True},
            "concurrency": {"perWorker": 8, "perHost": 2, "hostDelaySeconds": 0},
            "recrawl": [
                {"kind": "feed", **rule},
                {"match": r"^http://[^/]+/(section/[0-9]+/)?$", **rule},
            ],
            "output": {"format": "jsonl", "maxFileAgeSeconds": 1},
        },
    }


def test_a_continuous_crawl_finds_each_new_article_once_and_revisits_conditionally(
    tmp_path: Path,
) -> None:
    config = NewsConfig(
        hosts=4,
        sections=2,
        initial_articles=4,
        publish_interval_seconds=INTERVAL_SECONDS,
        listing_size=10,
        updated_share=0.0,
        deleted_share=0.0,
    )
    with NewsSite(config) as site:
        job_file = tmp_path / "news.yaml"
        job_file.write_text(yaml.safe_dump(news_job(site)))
        run = crawlfleet("run", str(job_file), "--out", str(tmp_path / "out"), cwd=tmp_path)
        deadline = time.monotonic() + WINDOW_SECONDS - site.now()
        while time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        assert run.poll() is None, f"the crawl ended by itself: {run.communicate()[1][-2000:]}"
        end = site.now()
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=90)
        found = audit(
            site.schedule, site.requests(), end=end, settle_seconds=INTERVAL_SECONDS + TICK_SECONDS
        )
    assert found.new_articles >= 4 * 2
    assert found.missed == []
    assert max(found.latencies) <= INTERVAL_SECONDS + TICK_SECONDS, found.latencies
    assert found.fetched_twice == []
    assert found.unchanged_revisits_validating > 0
    assert found.conditional_not_modified == found.unchanged_revisits_validating
