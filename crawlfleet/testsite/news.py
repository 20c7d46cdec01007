"""A loopback news site whose listings and feeds gain articles at known times.

Why a second site: revisits, conditional GET and change detection (issue 23) can only be
checked against pages that change on a schedule the test knows, and against servers that
answer validators the ways real ones do. :class:`NewsSite` is that site, and its
:class:`NewsLog` is the ground truth the tests and ``bench/recrawl.py`` assert against (every
new article crawled once and soon, unchanged revisits conditional, nothing fetched twice).

Time
----
Everything the site serves is a pure function of its clock: ``clock()`` returns site seconds
(0 = when the site's schedule starts). The default clock is ``time.monotonic()`` since
:meth:`NewsServer.start`; tests pass a :class:`ManualClock` and move it by hand. Events happen
on whole site seconds, so a ``Last-Modified`` (an HTTP date, whole seconds) is exact: a
client that fetched before an event always has an older date than the event's.

Hosts and pages
---------------
Host ``h`` listens on ``<base_address + h>:<free port>`` and serves:

========================== ===============================================================
``/``                      Front page: the newest ``listing_size`` live articles of every
                           section, links to each section and to the feed
                           (``<link rel="alternate">``).
``/section/<s>/``          Section ``s`` (``0 … sections-1``): its newest live articles.
``/feed.xml``              RSS 2.0 (even hosts) of the newest live articles, with
                           ``pubDate``; ``/atom.xml`` on odd hosts, with ``updated``.
``/articles/<k>.html``     Article ``k`` once published; 404 before, and after its deletion
                           404 or 410 (odd or even ``k``).
``/robots.txt``            Allows everything.
========================== ===============================================================

Schedule (:class:`NewsSchedule`, deterministic from ``seed``): each host starts with
``initial_articles`` published at or before 0, then publishes one article every
``publish_interval_seconds`` from a seeded offset in ``(0, interval]``, up to
``max_articles`` in all. Article ``k`` belongs to section ``k % sections``. A seeded share of
articles is updated once (``update_after_seconds`` after publication: new body, new
validators, same title) and a seeded share deleted (``delete_after_seconds`` after).
Listings and feeds show titles and publication dates only, so they change when an article
is published or deleted, never when one is updated.

Validators, by host (``validators``, cycled): ``etag`` (strong), ``weak_etag`` (``W/"…"``),
``last_modified``, ``none``. A host with an ETag answers ``If-None-Match`` (weak comparison,
``*`` included, RFC 9110 §13.1.2) and then ignores ``If-Modified-Since``; a host with
``Last-Modified`` answers ``If-Modified-Since``; both answer 304 with their validators and
no body. A host without validators always answers 200.

Every request is kept (:class:`NewsRequest`: URL, conditional or not, status, site time,
body bytes sent).
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from html import escape
from typing import Final, Literal

from aiohttp import web

from crawlfleet.testsite.listeners import bind_hosts, netlocs, serve
from crawlfleet.testsite.threaded import BackgroundSite, LoopThread

__all__ = [
    "Article",
    "ManualClock",
    "NewsConfig",
    "NewsLog",
    "NewsRequest",
    "NewsSchedule",
    "NewsServer",
    "NewsSite",
    "Validator",
]

Validator = Literal["etag", "weak_etag", "last_modified", "none"]
Clock = Callable[[], float]

#: What site second 0 is as a date (a fixed day, so bodies and dates are the same every run).
EPOCH: Final = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
_HTML: Final = "text/html; charset=utf-8"
_FEED_TYPES: Final = {"rss": "application/rss+xml", "atom": "application/atom+xml"}


@dataclass(frozen=True)
class NewsConfig:
    """The site's shape and schedule; every default is named here once."""

    hosts: int = 4
    sections: int = 2
    initial_articles: int = 4
    publish_interval_seconds: int = 10
    #: Articles per host, the initial ones included; publishing stops there.
    max_articles: int = 1000
    #: Live articles shown on a listing or in a feed, newest first.
    listing_size: int = 10
    updated_share: float = 0.1
    update_after_seconds: int = 30
    deleted_share: float = 0.05
    delete_after_seconds: int = 60
    #: Cycled over the hosts: host ``h`` gets ``validators[h % len(validators)]``.
    validators: tuple[Validator, ...] = ("etag", "weak_etag", "last_modified", "none")
    seed: int = 23
    #: Filler paragraphs per article: bodies of a realistic size.
    paragraphs: int = 6

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.sections < 1 or self.listing_size < 1:
            raise ValueError("hosts, sections and listing_size must be at least 1")
        if self.publish_interval_seconds < 1:
            raise ValueError("publish_interval_seconds must be a whole number of seconds ≥ 1")
        if not 0 <= self.initial_articles <= self.max_articles:
            raise ValueError("initial_articles must be between 0 and max_articles")
        if not self.validators:
            raise ValueError("validators must name at least one kind")

    def validator(self, host: int) -> Validator:
        return self.validators[host % len(self.validators)]

    def feed_kind(self, host: int) -> Literal["rss", "atom"]:
        return "rss" if host % 2 == 0 else "atom"

    def feed_path(self, host: int) -> str:
        return "/feed.xml" if self.feed_kind(host) == "rss" else "/atom.xml"


class ManualClock:
    """A clock a test moves by hand: site seconds, starting at ``start``."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, now: float) -> None:
        with self._lock:
            self._now = now


@dataclass(frozen=True, slots=True)
class Article:
    """One article of one host and its fate, in site seconds."""

    host: int
    number: int
    section: int
    published_at: int
    updated_at: int | None
    deleted_at: int | None
    gone_status: int

    @property
    def path(self) -> str:
        return f"/articles/{self.number}.html"

    def published(self, now: float) -> bool:
        return self.published_at <= now

    def deleted(self, now: float) -> bool:
        return self.deleted_at is not None and self.deleted_at <= now

    def version(self, now: float) -> int:
        return 1 if self.updated_at is not None and self.updated_at <= now else 0

    def modified_at(self, now: float) -> int:
        if self.updated_at is not None and self.updated_at <= now:
            return self.updated_at
        return self.published_at


class NewsSchedule:
    """When each article appears, changes and goes: a pure function of the config."""

    def __init__(self, config: NewsConfig) -> None:
        self.config = config
        rng = random.Random(config.seed)
        interval = config.publish_interval_seconds
        self._offsets = [rng.randint(1, interval) for _ in range(config.hosts)]
        self._articles: list[list[Article]] = [
            [self._article(h, k) for k in range(config.max_articles)] for h in range(config.hosts)
        ]

    def _article(self, host: int, number: int) -> Article:
        config = self.config
        rng = random.Random(f"{config.seed}:{host}:{number}")
        published = (
            number - config.initial_articles
        ) * config.publish_interval_seconds + self._offsets[host]
        updated = rng.random() < config.updated_share
        deleted = rng.random() < config.deleted_share
        return Article(
            host=host,
            number=number,
            section=number % config.sections,
            published_at=published,
            updated_at=published + config.update_after_seconds if updated else None,
            deleted_at=published + config.delete_after_seconds if deleted else None,
            gone_status=410 if number % 2 == 0 else 404,
        )

    def articles(self, host: int) -> list[Article]:
        """Every article host ``host`` will ever publish, oldest first."""
        return self._articles[host]

    def article(self, host: int, number: int) -> Article | None:
        articles = self._articles[host]
        return articles[number] if 0 <= number < len(articles) else None

    def published(self, host: int, now: float) -> int:
        """How many articles host ``host`` has published by ``now`` (deleted ones included)."""
        config = self.config
        since = math.floor((now - self._offsets[host]) / config.publish_interval_seconds)
        return max(0, min(config.max_articles, config.initial_articles + since + 1))

    def listing(self, host: int, section: int | None, now: float) -> list[Article]:
        """The live articles a listing shows at ``now``, newest first (all sections: None)."""
        shown: list[Article] = []
        for article in reversed(self._articles[host][: self.published(host, now)]):
            if (section is None or article.section == section) and not article.deleted(now):
                shown.append(article)
                if len(shown) == self.config.listing_size:
                    break
        return shown

    def listing_changed_at(self, host: int, section: int | None, now: float) -> int:
        """The last event at or before ``now`` that could change that listing (a publication
        or a deletion in it); 0 before any. Later than the true change at worst (a deletion
        of an article already off the listing), never earlier."""
        last = 0
        for article in self._articles[host][: self.published(host, now)]:
            if section is not None and article.section != section:
                continue
            last = max(last, article.published_at)
            if article.deleted(now) and article.deleted_at is not None:
                last = max(last, article.deleted_at)
        return last


# ---------------------------------------------------------------------------- rendering


def _date(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def http_date(seconds: float) -> str:
    """Site seconds as an HTTP date (``Mon, 05 Jan 2026 06:00:00 GMT``)."""
    return format_datetime(_date(math.floor(seconds)), usegmt=True)


def _title(article: Article) -> str:
    return f"Host {article.host} story {article.number}"


def _filler(article: Article, paragraphs: int) -> str:
    rng = random.Random(f"body:{article.host}:{article.number}")
    words = ("market", "council", "river", "league", "budget", "storm", "vote", "school")
    return "".join(
        "<p>" + " ".join(rng.choice(words) for _ in range(40)) + ".</p>\n"
        for _ in range(paragraphs)
    )


def render_article(config: NewsConfig, article: Article, now: float) -> bytes:
    update = (
        f"<p class='update'>Updated at {http_date(article.updated_at)}.</p>\n"
        if article.version(now) and article.updated_at is not None
        else ""
    )
    title = escape(_title(article))
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body><nav><a href='/'>Front page</a> <a href='/section/{article.section}/'>"
        f"Section {article.section}</a></nav>\n<h1>{title}</h1>\n"
        f"<time>{_date(article.published_at).isoformat()}</time>\n"
        f"{_filler(article, config.paragraphs)}{update}</body></html>\n"
    ).encode()


def render_listing(
    config: NewsConfig, host: int, section: int | None, articles: Sequence[Article]
) -> bytes:
    name = "Front page" if section is None else f"Section {section}"
    kind = config.feed_kind(host)
    items = "".join(
        f"<li><a href='{a.path}'>{escape(_title(a))}</a>"
        f" <time>{_date(a.published_at).isoformat()}</time></li>\n"
        for a in articles
    )
    sections = " ".join(f"<a href='/section/{s}/'>Section {s}</a>" for s in range(config.sections))
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{name}</title>"
        f"<link rel='alternate' type='{_FEED_TYPES[kind]}' href='{config.feed_path(host)}'>"
        f"</head><body><nav><a href='/'>Front page</a> {sections}</nav>\n<h1>{name}</h1>\n"
        f"<ul>\n{items}</ul></body></html>\n"
    ).encode()


def render_feed(config: NewsConfig, base: str, host: int, articles: Sequence[Article]) -> bytes:
    if config.feed_kind(host) == "rss":
        items = "".join(
            f"<item><title>{escape(_title(a))}</title><link>{base}{a.path}</link>"
            f"<guid>{base}{a.path}</guid><pubDate>{http_date(a.published_at)}</pubDate></item>\n"
            for a in articles
        )
        return (
            "<?xml version='1.0' encoding='utf-8'?>\n<rss version='2.0'><channel>"
            f"<title>Host {host}</title><link>{base}/</link>"
            f"<description>News of host {host}</description>\n{items}</channel></rss>\n"
        ).encode()
    entries = "".join(
        f"<entry><title>{escape(_title(a))}</title><link href='{base}{a.path}'/>"
        f"<id>{base}{a.path}</id><updated>{_date(a.published_at).isoformat()}</updated></entry>\n"
        for a in articles
    )
    updated = _date(articles[0].published_at if articles else 0).isoformat()
    return (
        "<?xml version='1.0' encoding='utf-8'?>\n<feed xmlns='http://www.w3.org/2005/Atom'>"
        f"<title>Host {host}</title><id>{base}/</id><updated>{updated}</updated>"
        f"<link href='{base}/'/>\n{entries}</feed>\n"
    ).encode()


# ---------------------------------------------------------------------------- request log


@dataclass(frozen=True, slots=True)
class NewsRequest:
    """One request as the site saw it: what a test asserts about a crawler's manners."""

    host: int
    path: str
    #: ``If-None-Match`` or ``If-Modified-Since`` was sent.
    conditional: bool
    status: int
    #: Site seconds when the request arrived.
    at: float
    #: Body bytes answered (0 for a 304).
    body_bytes: int
    url: str = field(compare=False)


class NewsLog:
    """Thread-safe list of every request (written on the site's loop, read by tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[NewsRequest] = []

    def add(self, request: NewsRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def requests(self) -> list[NewsRequest]:
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()


# ---------------------------------------------------------------------------- server


def _etag_matches(header: str, etag: str) -> bool:
    """Weak comparison of an ``If-None-Match`` list with ``etag`` (RFC 9110 §13.1.2)."""
    opaque = etag.removeprefix("W/")
    for candidate in header.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == opaque:
            return True
    return False


def _not_modified_since(header: str, modified_at: float) -> bool:
    try:
        since = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return False  # an unreadable date is ignored (RFC 9110 §13.1.3)
    if since.tzinfo is None:
        return False
    return _date(math.floor(modified_at)) <= since


class NewsServer:
    """The asyncio core: one low-level aiohttp server per host, every request logged."""

    def __init__(
        self,
        config: NewsConfig | None = None,
        *,
        clock: Clock | None = None,
        base_address: str = "127.0.0.2",
    ) -> None:
        self.config = config or NewsConfig()
        self.schedule = NewsSchedule(self.config)
        self.log = NewsLog()
        self._clock = clock
        self._started_at = 0.0
        self._base = ipaddress.IPv4Address(base_address)
        if not (self._base.is_loopback and (self._base + self.config.hosts - 1).is_loopback):
            raise ValueError("the news site listens on loopback addresses only")
        self._netlocs: list[str] = []
        self._runners: list[web.ServerRunner] = []

    def now(self) -> float:
        """Site seconds: the injected clock's, else seconds since :meth:`start`."""
        if self._clock is not None:
            return self._clock()
        return time.monotonic() - self._started_at

    @property
    def hosts(self) -> list[str]:
        return list(self._netlocs)

    def base(self, host: int) -> str:
        return f"http://{self._netlocs[host]}"

    async def start(self) -> None:
        if self._runners:
            raise RuntimeError("already started")
        socks = bind_hosts(self._base, self.config.hosts)
        self._netlocs = netlocs(socks)
        servers = [
            web.Server(self._handler_for(h), access_log=None) for h in range(self.config.hosts)
        ]
        self._runners = await serve(zip(servers, socks, strict=True))
        self._started_at = time.monotonic()

    async def stop(self) -> None:
        runners, self._runners = self._runners, []
        await asyncio.gather(*(r.cleanup() for r in runners), return_exceptions=True)

    def _handler_for(self, host: int) -> Callable[[web.BaseRequest], Awaitable[web.Response]]:
        async def handle(request: web.BaseRequest) -> web.Response:
            now = self.now()
            response = self.answer(host, request.path, request.headers, now)
            conditional = "If-None-Match" in request.headers or (
                "If-Modified-Since" in request.headers
            )
            body = response.body
            self.log.add(
                NewsRequest(
                    host=host,
                    path=request.raw_path,
                    conditional=conditional,
                    status=response.status,
                    at=now,
                    body_bytes=len(body) if isinstance(body, bytes) else 0,
                    url=f"{self.base(host)}{request.raw_path}",
                )
            )
            return response

        return handle

    def answer(self, host: int, path: str, headers: Mapping[str, str], now: float) -> web.Response:
        """The response to ``path`` on ``host`` at ``now`` (headers: the request's)."""
        config = self.config
        if path == "/robots.txt":
            return web.Response(body=b"User-agent: *\nDisallow:\n", content_type="text/plain")
        if path == "/" or path.startswith("/section/"):
            section: int | None = None
            if path != "/":
                token = path.removeprefix("/section/").removesuffix("/")
                if not (token.isdigit() and int(token) < config.sections and path.endswith("/")):
                    return _status(404)
                section = int(token)
            shown = self.schedule.listing(host, section, now)
            body = render_listing(config, host, section, shown)
            changed_at = self.schedule.listing_changed_at(host, section, now)
            return self._validated(host, body, _HTML, changed_at, headers)
        if path == config.feed_path(host):
            shown = self.schedule.listing(host, None, now)
            body = render_feed(config, self.base(host), host, shown)
            changed_at = self.schedule.listing_changed_at(host, None, now)
            content_type = _FEED_TYPES[config.feed_kind(host)] + "; charset=utf-8"
            return self._validated(host, body, content_type, changed_at, headers)
        if path.startswith("/articles/") and path.endswith(".html"):
            token = path.removeprefix("/articles/").removesuffix(".html")
            article = self.schedule.article(host, int(token)) if token.isdigit() else None
            if article is None or not article.published(now):
                return _status(404)
            if article.deleted(now):
                return _status(article.gone_status)
            body = render_article(config, article, now)
            return self._validated(host, body, _HTML, article.modified_at(now), headers)
        return _status(404)

    def _validated(
        self,
        host: int,
        body: bytes,
        content_type: str,
        modified_at: float,
        headers: Mapping[str, str],
    ) -> web.Response:
        """200 with the host's validators, or 304 when the request's conditions say so."""
        kind = self.config.validator(host)
        validators: dict[str, str] = {}
        if kind in ("etag", "weak_etag"):
            opaque = '"' + hashlib.blake2b(body, digest_size=8).hexdigest() + '"'
            validators["ETag"] = opaque if kind == "etag" else "W/" + opaque
        elif kind == "last_modified":
            validators["Last-Modified"] = http_date(modified_at)
        if_none_match = headers.get("If-None-Match")
        if_modified_since = headers.get("If-Modified-Since")
        if "ETag" in validators and if_none_match is not None:
            fresh = _etag_matches(if_none_match, validators["ETag"])
        elif "Last-Modified" in validators and if_modified_since is not None:
            fresh = _not_modified_since(if_modified_since, modified_at)
        else:
            fresh = False
        if fresh:
            return web.Response(status=304, headers=validators)
        return web.Response(body=body, headers={"Content-Type": content_type, **validators})


def _status(code: int) -> web.Response:
    text = {404: "Not Found", 410: "Gone"}.get(code, "Error")
    body = f"<!DOCTYPE html><html><head><title>{text}</title></head><body>{text}</body></html>\n"
    return web.Response(status=code, body=body.encode(), content_type="text/html")


# ---------------------------------------------------------------------------- threaded site


class NewsSite(BackgroundSite):
    """A :class:`NewsServer` on a background thread: what tests and benches use.

    ``with NewsSite(NewsConfig(...), clock=ManualClock()) as site: ...``; :attr:`requests`
    is the log, :meth:`published` the articles published so far.
    """

    def __init__(
        self,
        config: NewsConfig | None = None,
        *,
        clock: Clock | None = None,
        base_address: str = "127.0.0.2",
    ) -> None:
        self.server = NewsServer(config, clock=clock, base_address=base_address)
        self.config = self.server.config
        self.schedule = self.server.schedule
        self._thread = LoopThread(self.server, name="crawlfleet-news-site")

    def now(self) -> float:
        return self.server.now()

    @property
    def hosts(self) -> list[str]:
        """Netlocs of the hosts, host 0 first."""
        return self.server.hosts

    def url(self, host: int, path: str = "/") -> str:
        return self.server.base(host) + path

    def front_pages(self) -> list[str]:
        return [self.url(h) for h in range(self.config.hosts)]

    def feeds(self) -> list[str]:
        return [self.url(h, self.config.feed_path(h)) for h in range(self.config.hosts)]

    def sections(self) -> list[str]:
        return [
            self.url(h, f"/section/{s}/")
            for h in range(self.config.hosts)
            for s in range(self.config.sections)
        ]

    def article_url(self, article: Article) -> str:
        return self.url(article.host, article.path)

    def published(self, now: float | None = None) -> list[Article]:
        """Articles published by ``now`` (the site's now by default), every host."""
        at = self.now() if now is None else now
        return [
            article
            for h in range(self.config.hosts)
            for article in self.schedule.articles(h)[: self.schedule.published(h, at)]
        ]

    def requests(self) -> list[NewsRequest]:
        return self.server.log.requests()

    def reset(self) -> None:
        self._thread.call(self.server.log.reset)
