"""What a crawl of the news site achieved, judged from the site's own request log.

A revisiting crawler is good when it finds each new article soon after it is published, fetches
it once, and asks for an unchanged listing conditionally so that the server can answer 304.
:func:`audit` measures exactly that from :class:`~crawlfleet.testsite.news.NewsSite`'s log and
schedule, so that tests and ``bench/recrawl.py`` judge any crawler (crawlfleet's continuous
crawl, a naive one re-run on a timer) by the same rules, from the server's side.

Definitions (site seconds):

* a **new article** is one published after 0 (the initial ones are there before the crawl
  starts) and at least ``settle_seconds`` before the end of the window, so that a crawler had
  the time to find it; its **detection latency** is its first successful fetch minus its
  publication; one never fetched is **missed**;
* an article **fetched twice** had more than one request;
* a **revisit** is any request for a listing or feed after the first for that URL; it is
  **unchanged** when the listing's last change (:meth:`NewsSchedule.listing_changed_at`) is
  no later than the previous request; on hosts that send validators the
  **conditional share** is the share of unchanged revisits that were conditional and got 304.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from crawlfleet.testsite.news import NewsConfig, NewsRequest, NewsSchedule

__all__ = ["Audit", "audit", "quantile"]


def quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile by the nearest-rank method (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Audit:
    """What :func:`audit` found; figures the bench prints and tests assert."""

    new_articles: int = 0
    detected: int = 0
    missed: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    fetched_twice: list[str] = field(default_factory=list)
    #: Every request but robots.txt.
    requests: int = 0
    article_requests: int = 0
    listing_requests: int = 0
    unchanged_revisits_validating: int = 0
    conditional_not_modified: int = 0
    unchanged_revisits_without_validators: int = 0

    @property
    def detection_p50_seconds(self) -> float | None:
        return quantile(self.latencies, 0.5)

    @property
    def detection_p95_seconds(self) -> float | None:
        return quantile(self.latencies, 0.95)

    @property
    def requests_per_new_item(self) -> float | None:
        return self.requests / self.detected if self.detected else None

    @property
    def conditional_share(self) -> float | None:
        if not self.unchanged_revisits_validating:
            return None
        return self.conditional_not_modified / self.unchanged_revisits_validating

    def figures(self) -> dict[str, float | int | None]:
        return {
            "new_articles": self.new_articles,
            "detected": self.detected,
            "missed": len(self.missed),
            "fetched_twice": len(self.fetched_twice),
            "requests": self.requests,
            "article_requests": self.article_requests,
            "listing_requests": self.listing_requests,
            "detection_p50_seconds": self.detection_p50_seconds,
            "detection_p95_seconds": self.detection_p95_seconds,
            "requests_per_new_item": self.requests_per_new_item,
            "unchanged_revisits_validating": self.unchanged_revisits_validating,
            "conditional_not_modified": self.conditional_not_modified,
            "conditional_share": self.conditional_share,
            "unchanged_revisits_without_validators": self.unchanged_revisits_without_validators,
        }


def _listing(config: NewsConfig, host: int, path: str) -> tuple[bool, int | None]:
    """(is a listing or the feed, its section: None for the front page and the feed)."""
    if path in ("/", config.feed_path(host)):
        return True, None
    token = path.removeprefix("/section/").removesuffix("/")
    if path.startswith("/section/") and token.isdigit():
        return True, int(token)
    return False, None


def audit(
    schedule: NewsSchedule,
    requests: Sequence[NewsRequest],
    *,
    end: float,
    settle_seconds: float,
) -> Audit:
    """Judge ``requests`` (the site's log, up to site time ``end``) against ``schedule``."""
    config = schedule.config
    result = Audit()
    article_requests: dict[tuple[int, str], list[NewsRequest]] = defaultdict(list)
    listing_requests: dict[tuple[int, str], list[NewsRequest]] = defaultdict(list)
    for request in requests:
        path = request.path.split("?", 1)[0]
        if path == "/robots.txt":
            continue
        result.requests += 1
        if path.startswith("/articles/"):
            article_requests[request.host, path].append(request)
            result.article_requests += 1
        elif _listing(config, request.host, path)[0]:
            listing_requests[request.host, path].append(request)
            result.listing_requests += 1
    for (host, path), asked in article_requests.items():
        if len(asked) > 1:
            result.fetched_twice.append(f"{host}:{path}")
    for host in range(config.hosts):
        for article in schedule.articles(host):
            if not 0 < article.published_at <= end - settle_seconds:
                continue
            result.new_articles += 1
            fetched = [
                r.at for r in article_requests.get((host, article.path), ()) if r.status == 200
            ]
            if fetched:
                result.detected += 1
                result.latencies.append(min(fetched) - article.published_at)
            else:
                result.missed.append(f"{host}:{article.path}")
    for (host, path), asked in listing_requests.items():
        section = _listing(config, host, path)[1]
        validating = config.validator(host) != "none"
        ordered = sorted(asked, key=lambda r: r.at)
        for previous, request in itertools.pairwise(ordered):
            if schedule.listing_changed_at(host, section, request.at) > previous.at:
                continue  # it changed since: a full answer was due
            if not validating:
                result.unchanged_revisits_without_validators += 1
                continue
            result.unchanged_revisits_validating += 1
            if request.conditional and request.status == 304:
                result.conditional_not_modified += 1
    return result
