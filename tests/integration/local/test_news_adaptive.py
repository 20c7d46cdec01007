"""Adaptive intervals in one continuous crawl (issue 23: "adaptive intervals grow on unchanged
and shrink on changed pages within their bounds ... plus one integration run").

Two feeds, each on a news site of its own: one whose site publishes nothing more (every revisit
finds it unchanged: a 304) and one that gains an article every 2 s (every revisit finds it
changed). Each has its rule: the still one from 10 s by x2 up to at most 15 s, the busy one
from 16 s by x0.5 down to at least 10 s (the spec's floor). The gaps between the site's
requests are the intervals the frontier applied: the still feed's grow 10 -> 15 (20 cut to
the bound), the busy feed's shrink 16 -> 10 (8 raised to the bound).
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

import pytest

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite.news import NewsConfig, NewsSite
from tests.support.news_crawls import ContinuousRun, news_job, page_records
from tests.support.runs import no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

#: A revisit's lateness: the ack after the output file is durable, the claim, the fetch.
TICK_SECONDS = 3.0
#: How much sooner than its interval a revisit may reach the site: the frontier keeps due
#: times in whole seconds, rounded (crawlfleet/frontier/lua/lib.lua).
EARLY_SECONDS = 0.5
STILL = NewsConfig(
    hosts=1, initial_articles=3, max_articles=3, updated_share=0.0, deleted_share=0.0
)
BUSY = NewsConfig(hosts=1, publish_interval_seconds=2, updated_share=0.0, deleted_share=0.0)


def _rule(url: str, interval: int, bounds: tuple[int, int], **adaptive: float) -> dict[str, object]:
    return {
        "match": f"^{re.escape(url)}$",
        "interval": f"{interval}s",
        "minInterval": f"{bounds[0]}s",
        "maxInterval": f"{bounds[1]}s",
        "adaptive": adaptive,
    }


def _gaps(site: NewsSite, url: str) -> list[float]:
    times = sorted(r.at for r in site.requests() if r.url == url)
    return [b - a for a, b in itertools.pairwise(times)]


def test_intervals_grow_when_unchanged_and_shrink_when_changed(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with (
        NewsSite(STILL, base_address="127.0.0.2") as still,
        NewsSite(BUSY, base_address="127.0.0.3") as busy,
    ):
        still_feed, busy_feed = still.feeds()[0], busy.feeds()[0]
        rules = [
            _rule(still_feed, 10, (10, 15), whenChanged=0.5, whenUnchanged=2.0),
            _rule(busy_feed, 16, (10, 30), whenChanged=0.5, whenUnchanged=2.0),
        ]
        job = news_job(
            "adaptive",
            [still_feed, busy_feed],
            still.hosts + busy.hosts,
            rules,
            scope={"allowedDomains": still.hosts + busy.hosts, "maxDepth": 0,
                   "allowPrivateNetworks": True},
        )  # fmt: skip
        run = ContinuousRun(job, tmp_path, redis_url=redis_server.url, workers=1)
        # Three visits of each feed: 0, 10, 25 and 0, 16, 26 seconds after their first.
        deadline = time.monotonic() + 60
        while len(_gaps(still, still_feed)) < 2 or len(_gaps(busy, busy_feed)) < 2:
            run.assert_running()
            assert time.monotonic() < deadline, (_gaps(still, still_feed), _gaps(busy, busy_feed))
            time.sleep(0.1)
        run.stop()
        still_gaps, busy_gaps = _gaps(still, still_feed)[:2], _gaps(busy, busy_feed)[:2]
        still_log, busy_log = still.requests(), busy.requests()

    # Unchanged: 10 s, then x2 = 20 s cut to the 15 s bound.
    assert 10 - EARLY_SECONDS <= still_gaps[0] <= 10 + TICK_SECONDS, still_gaps
    assert 15 - EARLY_SECONDS <= still_gaps[1] <= 15 + TICK_SECONDS, still_gaps
    # Changed: 16 s, then x0.5 = 8 s raised to the 10 s bound.
    assert 16 - EARLY_SECONDS <= busy_gaps[0] <= 16 + TICK_SECONDS, busy_gaps
    assert 10 - EARLY_SECONDS <= busy_gaps[1] <= 10 + TICK_SECONDS, busy_gaps
    # What each revisit found, from the site's side and in the records.
    assert [r.status for r in still_log if r.url == still_feed][:3] == [200, 304, 304]
    assert [r.status for r in busy_log if r.url == busy_feed][:3] == [200, 200, 200]
    changes = {
        feed: [r.get("change") for r in page_records(run.out) if canonicalize(r["url"]) == feed]
        for feed in (canonicalize(still_feed), canonicalize(busy_feed))
    }
    assert changes[canonicalize(still_feed)][:3] == ["new", "not_modified", "not_modified"]
    assert changes[canonicalize(busy_feed)][:3] == ["new", "changed", "changed"]
