"""A continuous crawl of the news site, as a user runs it: ``crawlfleet run`` of a job whose
feeds and listing pages are tracked by recrawl rules and whose articles are fetched once, then
``crawlfleet output changes`` on what it wrote. Issue 23, "Tests (real parts)", the first.

Four hosts: a strong ETag, a weak ETag, Last-Modified, and no validators at all. Each host
publishes an article every 7 site seconds; some of the articles that were there at the start
are updated or deleted during the crawl, and those few are tracked by a rule of their own
(the only way a crawler that fetches articles once could see an article change or go). The
rules' interval is 10 s, the spec's floor; the site's clock starts at the crawl's first
request (tests/support/news_crawls.py), so the crawl is watched for two revisits of every
tracked URL: rounds at about 0, 10 and 20 site seconds, stopped at 26.

Everything is judged from the site's side: its request log, each request answered again by
the site at the second it arrived (what a fetch found), and the schedule.
"""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite.freshness import audit
from crawlfleet.testsite.news import NewsConfig, NewsSite
from tests.support.news_crawls import (
    ContinuousRun,
    FirstRequestClock,
    expected_changes,
    fetches,
    fixed_rule,
    news_job,
    page_records,
    sleep_until,
    start_on_first_request,
)
from tests.support.runs import crawlfleet_done, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

INTERVAL_SECONDS = 10
#: What a revisit may be late by, and a new article's fetch after the listing that shows it:
#: the claim that promotes the due revisit, the fetch, the article's own claim and fetch.
TICK_SECONDS = 3.0
#: How much sooner than its interval a revisit may reach the site: the frontier keeps due
#: times in whole seconds, rounded (crawlfleet/frontier/lua/lib.lua).
EARLY_SECONDS = 0.5
#: Rounds at about 0, 10 and 20: stopped between the third and the fourth.
STOP_AT = 26.0
CONFIG = NewsConfig(
    hosts=4,
    sections=3,
    initial_articles=6,
    publish_interval_seconds=7,
    # Every live article on every listing: a deletion always changes the listings it was on,
    # so the site's "changed since" is exact (NewsSchedule.listing_changed_at).
    listing_size=30,
    updated_share=0.5,
    update_after_seconds=15,
    deleted_share=0.4,
    delete_after_seconds=24,
)
LISTINGS = r"^http://[^/]+/(section/[0-9]+/)?$"


def _watched(site: NewsSite) -> list[str]:
    """Articles there at the start that are updated or deleted while the crawl watches (site
    seconds 4 to 17, after the first round and before the last): the ones a rule tracks."""
    watched = []
    for host in range(CONFIG.hosts):
        for article in site.schedule.articles(host)[: CONFIG.initial_articles]:
            events = (article.updated_at, article.deleted_at)
            if any(at is not None and 4 <= at <= 17 for at in events):
                watched.append(canonicalize(site.article_url(article)))
    return watched


def _quiet_moment(times: list[float], start: float, end: float) -> float:
    """The middle of the longest stretch in [start, end] without a request."""
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    gap, middle = max((b - a, (a + b) / 2) for a, b in itertools.pairwise(edges))
    assert gap >= 2.0, f"no quiet second between rounds: {inside}"
    return middle


def test_a_continuous_crawl_of_the_news_site(tmp_path: Path, redis_server: RedisServer) -> None:
    clock = FirstRequestClock()
    with NewsSite(CONFIG, clock=clock) as site:
        watched = _watched(site)
        assert len(watched) >= 5
        rules = [
            fixed_rule(INTERVAL_SECONDS, kind="feed"),
            fixed_rule(INTERVAL_SECONDS, match=LISTINGS),
            fixed_rule(
                INTERVAL_SECONDS, match="^(" + "|".join(re.escape(u) for u in watched) + ")$"
            ),
        ]
        # Seeds are the front pages only: the feeds are found by <link rel="alternate">.
        job = news_job(
            "news",
            site.front_pages(),
            site.hosts,
            rules,
            output={"format": "jsonl", "maxFileAgeSeconds": 1, "content": "html"},
            extract=[{"match": ".", "fields": {"title": {"css": "title::text"}}}],
        )
        run = ContinuousRun(job, tmp_path, redis_url=redis_server.url)
        start_on_first_request(site, run)
        sleep_until(site, STOP_AT, run)
        summary = run.stop()
        requests = site.requests()
        found = fetches(site, requests)

    feeds = {canonicalize(url) for url in site.feeds()}
    listings = {canonicalize(url) for url in site.front_pages() + site.sections()}
    tracked = feeds | listings | set(watched)
    assert set(found) >= tracked  # every feed found from its front page, every listing
    assert not [r for r in requests if r.at > STOP_AT]

    # Articles: each one fetched exactly once, every one there at the start and every new
    # one found within the interval plus a tick.
    is_article = re.compile(r"/articles/[0-9]+\.html$").search
    once = {url for url in found if is_article(url) and url not in set(watched)}
    assert {url: len(found[url]) for url in once if len(found[url]) != 1} == {}
    initial = {canonicalize(site.article_url(a)) for a in site.published(0.0) if not a.deleted(0.0)}
    assert initial <= set(found), sorted(initial - set(found))[:5]
    judged = audit(
        site.schedule,
        [r for r in requests if canonicalize(r.url) not in set(watched)],
        end=STOP_AT,
        settle_seconds=INTERVAL_SECONDS + TICK_SECONDS,
    )
    assert judged.new_articles >= 6
    assert judged.missed == []
    assert max(judged.latencies) <= INTERVAL_SECONDS + TICK_SECONDS, judged.latencies

    # Every tracked URL was revisited every interval: three rounds.
    for url in tracked:
        visits = found[url]
        if visits[-1].change == "gone":
            continue
        assert len(visits) >= 3, (url, [(round(f.request.at, 1), f.change) for f in visits])
        gaps = [b.request.at - a.request.at for a, b in itertools.pairwise(visits)]
        assert all(INTERVAL_SECONDS - EARLY_SECONDS <= gap <= INTERVAL_SECONDS + TICK_SECONDS
                   for gap in gaps), (url, gaps)  # fmt: skip

    # Revisits: conditional where the host sends validators, and unchanged ones answered 304
    # with no body; without validators, asked in full and judged by the body's digest.
    not_modified = {kind: 0 for kind in ("etag", "weak_etag", "last_modified")}
    digest_unchanged = 0
    for url in tracked:
        for fetch in found[url][1:]:
            kind = CONFIG.validator(fetch.request.host)
            if kind == "none":
                assert not fetch.request.conditional, fetch
                digest_unchanged += fetch.change == "unchanged"
                continue
            if found[url][0].change is None:
                continue
            assert fetch.request.conditional, fetch
            assert fetch.change != "unchanged", fetch  # the site answers 304 when unchanged
            if fetch.change == "not_modified":
                assert fetch.request.body_bytes == 0
                not_modified[kind] += 1
    assert all(not_modified.values()), not_modified
    assert digest_unchanged >= 2

    # The output says what the site says, fetch by fetch: a tracked URL's records carry the
    # change the site's log predicts (a not_modified or unchanged one is an entry without
    # content or items), an article's one record has none.
    records = page_records(run.out)
    written: dict[str, list[str | None]] = {}
    for record in records:
        written.setdefault(canonicalize(record["url"]), []).append(record.get("change"))
    for url in tracked:
        assert written.get(url) == [f.change for f in found[url]], url
    for url in once:
        assert written.get(url) in ([None], ["new"]), (url, written.get(url))
    for record in records:  # HTML content and items only for what is new or changed
        if not str(record.get("content_type")).startswith("text/html"):
            continue
        has_content = record["status"] == 200 and record.get("change") != "unchanged"
        assert ("content" in record) == has_content, (record.get("change"), sorted(record))
    items: dict[str, int] = {}
    for path in sorted(run.out.glob("items/*.jsonl")):
        for line in path.read_text().splitlines():
            url = canonicalize(json.loads(line)["url"])
            items[url] = items.get(url, 0) + 1
    for url in tracked - feeds:
        found_anew = sum(1 for f in found[url] if f.change in ("new", "changed"))
        assert items.get(url, 0) == found_anew, (url, items.get(url), written[url])
    changes = {c for url in tracked for c in written[url]}
    assert changes == {"new", "changed", "unchanged", "not_modified", "gone"}

    # crawlfleet output changes, from a quiet moment after the first round: exactly the URLs
    # the log says appeared, changed or went away since.
    since = _quiet_moment([r.at for r in requests], 3.0, INTERVAL_SECONDS)
    since_text = datetime.fromtimestamp(clock.wall(since), UTC).isoformat()
    listed = crawlfleet_done(
        "output", "changes", str(run.out), "--since", since_text, "--json", cwd=tmp_path
    )
    assert listed.returncode == 0, listed.stderr
    reported = {}
    for line in listed.stdout.splitlines():
        event = json.loads(line)
        reported[canonicalize(event["url"])] = event["change"]
    expected = expected_changes(found, since)
    assert set(expected.values()) == {"new", "changed", "gone"}
    assert reported == expected

    # The frontier's freshness counters (the summary a stopped run prints) count the same.
    counted = [f.change for url in tracked for f in found[url]]
    gone = counted.count("gone")
    freshness = summary["freshness"]
    assert freshness["tracked"] == len(tracked) - gone
    assert freshness["changed"] == counted.count("changed")
    assert freshness["unchanged"] == counted.count("unchanged")
    assert freshness["notModified"] == counted.count("not_modified")
    assert freshness["gone"] == gone
