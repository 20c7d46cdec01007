"""The news site (crawlfleet/testsite/news.py): its clocked arrivals, validators and log.

Revisit tests and bench/recrawl.py take this site's schedule and request log as ground truth,
so it is checked here over real HTTP with a stdlib client (never the crawler's stack, so that
a crawler bug cannot hide a site bug), its clock moved by hand.
"""

from __future__ import annotations

import http.client
import itertools
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from urllib.parse import urlsplit
from xml.etree import ElementTree

import pytest

from crawlfleet.testsite.freshness import audit, quantile
from crawlfleet.testsite.news import (
    ManualClock,
    NewsConfig,
    NewsSchedule,
    NewsSite,
    http_date,
)

#: Host 0: strong ETag, RSS; host 1: weak ETag, Atom; host 2: Last-Modified; host 3: none.
CONFIG = NewsConfig(
    hosts=4,
    sections=2,
    initial_articles=3,
    publish_interval_seconds=10,
    max_articles=40,
    listing_size=5,
    updated_share=0.3,
    deleted_share=0.3,
    seed=7,
)


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(scope="module")
def site(clock: ManualClock) -> Iterator[NewsSite]:
    with NewsSite(CONFIG, clock=clock) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(site: NewsSite, clock: ManualClock) -> None:
    clock.set(0.0)
    site.reset()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Message, bytes]:
    """One GET on its own connection, no proxy, no redirects: exactly what the site said."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=5)
    try:
        connection.request("GET", parts.path or "/", headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def listed_paths(body: bytes) -> list[str]:
    return [part.split("'", 1)[0] for part in body.decode().split("href='")[1:]]


# ---------------------------------------------------------------------------- schedule


def test_the_schedule_is_the_same_for_the_same_seed_and_differs_for_another() -> None:
    first, again = NewsSchedule(CONFIG), NewsSchedule(CONFIG)
    other = NewsSchedule(NewsConfig(**{**CONFIG.__dict__, "seed": 8}))
    assert first.articles(2) == again.articles(2)
    assert [a.published_at for a in first.articles(0)] != [
        a.published_at for a in other.articles(0)
    ] or [a.deleted_at for a in first.articles(0)] != [a.deleted_at for a in other.articles(0)]


def test_each_host_publishes_one_article_per_interval_on_whole_seconds() -> None:
    schedule = NewsSchedule(CONFIG)
    for host in range(CONFIG.hosts):
        times = [a.published_at for a in schedule.articles(host)]
        assert all(isinstance(t, int) for t in times)
        assert times[CONFIG.initial_articles - 1] <= 0 < times[CONFIG.initial_articles]
        assert {b - a for a, b in itertools.pairwise(times)} == {10}
        assert schedule.published(host, 0) == CONFIG.initial_articles
        assert schedule.published(host, times[5]) == 6
        assert schedule.published(host, times[5] - 0.5) == 5
        assert schedule.published(host, 10**9) == CONFIG.max_articles


def test_some_articles_are_updated_and_some_deleted_with_404_or_410() -> None:
    articles = [a for h in range(CONFIG.hosts) for a in NewsSchedule(CONFIG).articles(h)]
    assert any(a.updated_at is not None for a in articles)
    gone = [a for a in articles if a.deleted_at is not None]
    assert {a.gone_status for a in gone} == {404, 410}


def test_bad_configurations_are_refused() -> None:
    with pytest.raises(ValueError, match="whole number"):
        NewsConfig(publish_interval_seconds=0)
    with pytest.raises(ValueError, match="initial_articles"):
        NewsConfig(initial_articles=5, max_articles=2)


# ---------------------------------------------------------------------------- arrivals


def test_listings_and_feeds_gain_an_article_when_the_clock_reaches_it(
    site: NewsSite, clock: ManualClock
) -> None:
    upcoming = site.schedule.articles(0)[CONFIG.initial_articles]
    status, _, before = get(site.url(0))
    assert status == 200
    assert upcoming.path not in listed_paths(before)
    assert get(site.article_url(upcoming))[0] == 404  # not yet published
    clock.set(upcoming.published_at)
    _, _, after = get(site.url(0))
    assert listed_paths(after).index(upcoming.path) < listed_paths(after).index(
        site.schedule.articles(0)[CONFIG.initial_articles - 1].path
    )  # newest first
    section = get(site.url(0, f"/section/{upcoming.section}/"))[2]
    assert upcoming.path in listed_paths(section)
    assert get(site.article_url(upcoming))[0] == 200
    rss = ElementTree.fromstring(get(site.feeds()[0])[2])
    links = [item.findtext("link") for item in rss.iter("item")]
    assert site.article_url(upcoming) in links
    assert rss.find("channel/item/pubDate") is not None


def test_odd_hosts_serve_atom_and_every_front_page_names_its_feed(
    site: NewsSite, clock: ManualClock
) -> None:
    clock.set(100)
    status, headers, body = get(site.feeds()[1])
    assert status == 200
    assert headers["Content-Type"].startswith("application/atom+xml")
    atom = ElementTree.fromstring(body)
    namespace = "{http://www.w3.org/2005/Atom}"
    links = [e.find(f"{namespace}link") for e in atom.iter(f"{namespace}entry")]
    hrefs = [link.get("href", "") for link in links if link is not None]
    assert hrefs
    assert all(h.startswith(site.url(1, "/articles/")) for h in hrefs)
    for host, feed in enumerate(site.feeds()):
        front = get(site.url(host))[2].decode()
        assert "rel='alternate'" in front
        assert urlsplit(feed).path in front


def test_a_deleted_article_answers_its_gone_status_and_leaves_the_listings(
    site: NewsSite, clock: ManualClock
) -> None:
    article = next(a for a in site.schedule.articles(2) if a.deleted_at is not None)
    assert article.deleted_at is not None
    clock.set(article.published_at)
    assert article.path in listed_paths(get(site.url(2))[2])
    clock.set(article.deleted_at)
    assert get(site.article_url(article))[0] == article.gone_status
    assert article.path not in listed_paths(get(site.url(2))[2])


# ---------------------------------------------------------------------------- validators


@pytest.mark.parametrize(
    ("host", "header"), [(0, "ETag"), (1, "ETag"), (2, "Last-Modified")], ids=str
)
def test_unchanged_pages_answer_304_without_a_body_and_changed_ones_200(
    site: NewsSite, clock: ManualClock, host: int, header: str
) -> None:
    ask = "If-None-Match" if header == "ETag" else "If-Modified-Since"
    status, headers, body = get(site.url(host))
    validator = headers[header]
    assert status == 200
    assert validator
    assert body
    if host == 0:
        assert not validator.startswith("W/")
    if host == 1:
        assert validator.startswith('W/"')
    status, headers, body = get(site.url(host), {ask: validator})
    assert (status, body, headers[header]) == (304, b"", validator)
    clock.set(site.schedule.articles(host)[CONFIG.initial_articles].published_at)
    status, headers, body = get(site.url(host), {ask: validator})
    assert status == 200
    assert body
    assert headers[header] != validator
    log = site.requests()
    assert [(r.conditional, r.status) for r in log] == [(False, 200), (True, 304), (True, 200)]
    assert log[1].body_bytes == 0
    assert log[2].body_bytes == len(body)
    assert log[2].at == clock()


def test_an_updated_article_changes_its_validators(site: NewsSite, clock: ManualClock) -> None:
    article = next(
        a for a in site.schedule.articles(0) if a.updated_at is not None and a.deleted_at is None
    )
    assert article.updated_at is not None
    clock.set(article.published_at)
    _, headers, first = get(site.article_url(article))
    etag = headers["ETag"]
    clock.set(article.updated_at)
    status, headers, body = get(site.article_url(article), {"If-None-Match": etag})
    assert status == 200
    assert headers["ETag"] != etag
    assert body != first


def test_a_weak_etag_matches_a_strong_one_of_the_same_opaque_tag_and_a_star(
    site: NewsSite,
) -> None:
    _, headers, _ = get(site.url(1))
    strong = headers["ETag"].removeprefix("W/")
    assert get(site.url(1), {"If-None-Match": f'"other", {strong}'})[0] == 304
    assert get(site.url(1), {"If-None-Match": "*"})[0] == 304


def test_if_none_match_wins_over_if_modified_since_on_an_etag_host(site: NewsSite) -> None:
    far_future = http_date(10**8)
    status = get(site.url(0), {"If-None-Match": '"stale"', "If-Modified-Since": far_future})[0]
    assert status == 200


def test_a_host_without_validators_sends_none_and_always_answers_200(site: NewsSite) -> None:
    status, headers, _ = get(site.url(3))
    assert status == 200
    assert "ETag" not in headers
    assert "Last-Modified" not in headers
    status, _, body = get(site.url(3), {"If-Modified-Since": http_date(10**8)})
    assert status == 200
    assert body
    assert [r.conditional for r in site.requests()] == [False, True]


def test_an_unreadable_if_modified_since_is_ignored(site: NewsSite) -> None:
    assert get(site.url(2), {"If-Modified-Since": "yesterday"})[0] == 200


# ---------------------------------------------------------------------------- CLI


def test_the_cli_serves_the_news_site_and_writes_its_requests(tmp_path: Path) -> None:
    records = tmp_path / "requests.jsonl"
    command = [sys.executable, "-m", "crawlfleet.testsite", "--news", "--hosts", "2"]
    proc = subprocess.Popen(
        [*command, "--record-file", str(records)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["seeds"] == [f"http://{h}/" for h in ready["hosts"]]
        assert ready["feeds"] == [f"http://{ready['hosts'][0]}/feed.xml", ready["feeds"][1]]
        _, headers, _ = get(ready["seeds"][0])
        assert get(ready["seeds"][0], {"If-None-Match": headers["ETag"]})[0] == 304
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert out == b""
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(r["status"], r["conditional"]) for r in lines] == [(200, False), (304, True)]


# ---------------------------------------------------------------------------- audit


def test_the_audit_judges_a_crawl_by_the_sites_log(site: NewsSite, clock: ManualClock) -> None:
    """A hand-driven crawl of host 0 (strong ETag) and host 3 (no validators): latencies,
    articles asked twice and unchanged revisits, as freshness.audit counts them."""
    first, second = site.schedule.articles(0)[CONFIG.initial_articles : CONFIG.initial_articles + 2]
    etag = get(site.url(0))[1]["ETag"]
    get(site.url(3))
    get(site.url(3))  # unchanged, and no way to ask conditionally
    clock.set(first.published_at - 1)
    get(site.url(0), {"If-None-Match": etag})  # unchanged, conditional: 304
    clock.set(first.published_at + 2)
    etag = get(site.url(0), {"If-None-Match": etag})[1]["ETag"]  # changed: 200
    get(site.article_url(first))
    clock.set(first.published_at + 3)
    get(site.url(0))  # unchanged, asked without validators: counted against the share
    get(site.article_url(first))  # asked twice
    end = second.published_at + 20  # the second article is new, and never fetched
    found = audit(site.schedule, site.requests(), end=end, settle_seconds=5)
    assert found.latencies[:1] == [2.0]
    assert found.missed[:1] == [f"0:{second.path}"]
    assert found.fetched_twice == [f"0:{first.path}"]
    assert (found.unchanged_revisits_validating, found.conditional_not_modified) == (2, 1)
    assert found.conditional_share == 0.5
    assert found.unchanged_revisits_without_validators == 1
    assert found.requests == 8
    assert quantile([3.0, 1.0, 2.0, 10.0], 0.5) == 2.0
    assert quantile([], 0.95) is None
