"""A real HTTP test site on loopback for crawler integration tests and benchmarks.

Why a real server: the crawler's politeness, retry, redirect, robots and size-limit logic is
only trustworthy if it is exercised over real sockets, against real timing, and verified from
the *server's* point of view.  :class:`TestSite` therefore serves a deterministic page graph
(:mod:`crawlfleet.testsite.graph`) over several virtual hosts and records every request it receives
in a :class:`RequestLog` that tests assert against.

Hosts
-----
In-scope host ``h`` listens on ``127.0.0.{2+h}:<free port>`` (Linux routes all of
127.0.0.0/8 to ``lo``, so no setup is needed); the out-of-scope host listens on the next
address.  A host's *netloc* is ``"127.0.0.2:43121"``-style and is what the request log is keyed
by.  Every host serves its normal pages (``/``, ``/d{i%7}/p{i}.html``), ``/robots.txt``, and
404 for anything else; the special paths below exist on **host 0 only**.

Special paths (host 0)
----------------------
Special endpoints are always served; ``SiteConfig.hostile`` (and ``hostile_slow`` /
``hostile_heavy``) only decide whether normal pages *link* to them.  Counters are per path and
per site and are cleared by :meth:`TestSite.reset`.

=========================== ===========================================================
Path                        Behaviour
=========================== ===========================================================
``/status/<code>``          ``<code>`` (400-599, e.g. 404, 410) with a small HTML body;
                            other codes -> 404.  ``/status/404`` and ``/status/410`` are
                            linked (permanent failures: fetch once, never retry).
``/ratelimited``            429 + ``Retry-After: 1`` for the first 2 requests
                            (``ratelimit_failures``, ``retry_after_seconds``), then 200 page.
``/flaky/<n>``              500 for the first 2 requests of that exact path
                            (``flaky_failures``), then 200 page ("heals after k tries").
                            ``/flaky/0`` and ``/flaky/1`` are linked.
``/slow``                   200 page after 1.5 s (``slow_seconds``).
``/hang``                   Never answers: the handler waits until the client disconnects
                            (its log record then gets ``end`` and ``status=None``) or the
                            site stops (503).
``/empty``                  200 ``text/html`` with an empty body (soft block).
``/redirect/chain/<n>``     302 to ``/redirect/chain/<n-1>`` (root-relative ``Location`` for
                            odd n, absolute for even n), ``n <= 1000``;
                            ``/redirect/chain/0`` is a 200 page.  ``/redirect/chain/3`` is
                            linked.
``/redirect/host/<i>``      302 to ``/`` of host ``i`` (absolute ``Location``; ``i`` up to the
                            out-of-scope host's index); linked from nowhere.
``/redirect/loop/a``        302 to ``/redirect/loop/b`` (root-relative ``Location``);
                            ``/redirect/loop/b`` 302s back to ``/redirect/loop/a``
                            (absolute ``Location``); forever.  ``/redirect/loop/a`` is linked.
``/big``                    200 ``text/html``, chunked, exactly 32 MiB (``big_bytes``)
                            generated lazily in 64 KiB writes (record ``status=None`` if the
                            client hangs up early).
``/bomb``                   200 ``text/html`` + ``Content-Encoding: gzip``; ~1 MiB body that
                            inflates to 1 GiB of zeros (``bomb_inflated_bytes``); valid
                            single-member gzip with correct CRC32/ISIZE.
``/calendar/<y>/<m>``       Infinite trap: 200 page linking to previous and next month
                            (``m`` in 1..12, else 404).  ``/calendar/2024/1`` is linked.
``/file.pdf``               200 ``application/pdf``, small body.
``/private/secret``         200 page -- but host 0's robots.txt disallows ``/private/``, so a
                            polite crawler never requests it.
``/nofollow/only``          200 page, linked only with ``rel="nofollow"``.
=========================== ===========================================================

Unlinked paths of the hostile-site suite (host 0; bodies in :mod:`crawlfleet.testsite.hostile`):

=========================== ===========================================================
``/go/<n>``                 302 to ``/private/<n>``: a redirect into a Disallowed path.
``/private/<n>``            200 page (Disallowed by host 0's robots.txt).
``/big.bin``                ``/big`` as ``application/octet-stream`` (not parsed for links).
``/trickle``                200 headers, then one body byte every
                            ``trickle_interval_seconds``, forever.
``/bomb/<coding>``          ``gzip`` (as ``/bomb``), ``deflate``, ``br`` or ``zstd``: a body
                            that decodes to ``bomb_inflated_bytes`` zeros.
``/links/<n>``              A page of ``n`` distinct links ``/links/to/<i>`` (404s), n ≤ 10⁶.
``/nodes/<n>``              A page of ``n`` empty elements (a quadratic selector's bane), n ≤ 10⁶.
``/regex/backtrack``        A ``<code>`` that makes Python's re backtrack for ever on
                            ``^(a+)+$``; ``/regex/lookahead``: one holding a look-ahead.
``/long-location``          302 whose ``Location`` has 100,000 characters.
``/many-headers``           200 with 128 extra header fields of 8 KiB each.
``/sjis/header``            A Shift_JIS page, its charset only in ``Content-Type``, linking
                            Japanese paths and a Japanese query.
``/sjis/meta``              The same page, its charset only in ``<meta charset>``.
``/cp1251/header``          A windows-1251 page (Cyrillic), its charset only in
                            ``Content-Type``; ``/cp1251/meta``: only in an http-equiv
                            ``<meta>``.
``/shop/``                  The test shop's listing (:mod:`crawlfleet.testsite.shop`),
                            linking ``/shop/product/<id>.html``, pages with known fields.
``/trap/…``                 Any depth: links ``same/`` and ``next-<depth>/`` (relative), an
                            endless space of repeated and of ever more path segments.
``/sitemaps/…``             Host 0's sitemaps (:mod:`crawlfleet.testsite.sitemaps`), named
                            by its robots.txt ``Sitemap:`` line: an index, a gzip'd sitemap
                            of ``/listed/<n>.html`` pages, an oversized gzip'd one, an
                            endless chain of nested indexes.
=========================== ===========================================================

``robots_failures`` makes every host's robots.txt answer 503 that many times first
(counted per host), with ``Retry-After: <robots_retry_after_seconds>`` when that is set;
``robots_hang`` makes it never answer; ``robots_down_hosts`` makes those hosts' answer 503
for ever. ``refusal_links_per_page`` links every normal page to that many
``/search/<page>-<k>`` paths, which every host's robots.txt then disallows, and to the cloud
metadata address (refusals a crawler decides before any request).

``feeds`` makes every in-scope host serve ``/feeds/rss.xml`` (as ``text/xml``) and
``/feeds/atom.xml`` (as ``application/atom+xml``), announced by ``<link rel="alternate">`` in
every normal page's head, listing ``/news/rss-<n>.html`` and ``/news/atom-<n>.html`` pages that
no page links (:mod:`crawlfleet.testsite.feeds`).

Where they are linked (hostile mode; page index taken modulo ``pages_per_host``):
host-0 page 1 links ``/status/404``, ``/status/410``, ``/private/secret``, ``/file.pdf`` and
the out-of-scope host; page 2 ``/ratelimited``, ``/flaky/0``, ``/flaky/1``, ``/empty``;
page 3 ``/redirect/chain/3``, ``/redirect/loop/a``, ``/calendar/2024/1``, ``/nofollow/only``;
page 4 ``/slow``, ``/hang`` (``hostile_slow``), ``/big``, ``/bomb`` (``hostile_heavy``) and
the unsafe links below.

``robots.txt`` (every host)

* host 0: ``User-agent: *`` / ``Disallow: /private/`` (allow-all when not hostile), and,
  when hostile, ``Sitemap: http://<host 0>/sitemaps/index.xml``.
* host 1: ``Crawl-delay: <crawl_delay_seconds>`` when that is set.
* host ``hosts-1`` (only if ``hosts >= 3`` and hostile): no robots.txt -> 404.
* all other hosts, including the out-of-scope one: ``User-agent: *`` / ``Disallow:``.

Links that must never be fetched (hostile mode, on a host-0 page):
``http://169.254.169.254/latest/meta-data/``, ``http://10.0.0.1/``, ``ftp://127.0.0.2/x``,
plus ``mailto:`` and ``javascript:`` links on every page, plus links to the out-of-scope host.
:meth:`crawlfleet.testsite.graph.SiteGraph.specials` lists every linked special URL by category.

Normal pages are ``text/html; charset=utf-8``, > 512 bytes, rendered once and cached.
Routing ignores the query string (``/d1/p1.html?x=1`` is page 1) but the log keeps it.
``SiteConfig.latency_seconds`` delays every response. ``SiteConfig.etag_hosts`` and
``last_modified_hosts`` make normal pages send validators and answer 304;
:meth:`TestSite.edit_page` and :meth:`TestSite.remove_page` change a page or make it a 404
(:mod:`crawlfleet.testsite.revisions`).

Request log: one :class:`RequestRecord` per request, appended on arrival; ``status`` is
``None`` if no response was completed (client gave up, or the site stopped mid-response:
:meth:`SiteServer.stop` aborts every connection immediately instead of draining).
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
import threading
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from aiohttp import web

from crawlfleet.testsite import feeds, hostile, shop, sitemaps
from crawlfleet.testsite.graph import SiteConfig, SiteGraph, SpecialUrls, page_path
from crawlfleet.testsite.listeners import bind_hosts, netlocs, serve
from crawlfleet.testsite.revisions import Revisions
from crawlfleet.testsite.threaded import BackgroundSite, LoopThread

__all__ = [
    "RequestLog",
    "RequestRecord",
    "SiteServer",
    "TestSite",
    "build_gzip_bomb",
]

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

HTML_TYPE: Final = "text/html; charset=utf-8"
_HTML_HEADERS: Final = {"Content-Type": HTML_TYPE}
_MIB: Final = 1 << 20
_BIG_CHUNK: Final = (b"<p>" + b"filler " * 1170 + b"</p>\n")[: 64 * 1024]
_PDF_BODY: Final = (
    b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
    b"2 0 obj << /Type /Pages /Kids [] /Count 0 >> endobj\n"
    b"trailer << /Root 1 0 R >>\n%%EOF\n"
)


# ---------------------------------------------------------------------------- request log


@dataclass(slots=True)
class RequestRecord:
    """One request as the server saw it.

    Appended when the request *arrives* (so a hanging request is visible while it hangs);
    ``end``/``status`` are filled in when the handler finishes.  ``status`` stays ``None``
    when no response was completed (client gave up, site stopped mid-stream).
    """

    #: Netloc of the listening host the request arrived on (not the Host header).
    host: str
    #: Raw path plus query string, exactly as sent.
    path: str
    method: str
    user_agent: str
    #: ``time.monotonic()`` when the handler started (comparable with the test's own clock).
    start: float
    end: float | None = None
    status: int | None = None
    #: The request's ``Via`` header: which proxies it came through (None: it came direct).
    via: str | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}{self.path}"


def _url_key(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    path = parts.path or "/"
    return parts.netloc, f"{path}?{parts.query}" if parts.query else path


class RequestLog:
    """Thread-safe record of every request, plus live per-host concurrency.

    Written from the server's event-loop thread, read from test threads; a single lock keeps
    the records, counters and concurrency gauges consistent with each other.  With
    ``keep_records=False`` (benchmark CLI) only counters and gauges are kept so memory stays
    flat under millions of requests.
    """

    def __init__(self, keep_records: bool = True) -> None:
        self._keep = keep_records
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        self._inflight: Counter[str] = Counter()
        self._max: Counter[str] = Counter()
        self._total = 0

    def begin(
        self, host: str, path: str, method: str, user_agent: str, via: str | None = None
    ) -> RequestRecord:
        """Register an arriving request; pass the result to :meth:`end`."""
        rec = RequestRecord(host, path, method, user_agent, time.monotonic(), via=via)
        with self._lock:
            if self._keep:
                self._records.append(rec)
            self._counts[host, path] += 1
            self._total += 1
            n = self._inflight[host] + 1
            self._inflight[host] = n
            if n > self._max[host]:
                self._max[host] = n
        return rec

    def end(self, record: RequestRecord, status: int | None) -> None:
        """Mark ``record`` finished with ``status`` (``None``: no response completed)."""
        with self._lock:
            record.end = time.monotonic()
            record.status = status
            self._inflight[record.host] -= 1

    def all_requests(self) -> list[RequestRecord]:
        """Snapshot of all records in arrival order."""
        with self._lock:
            return list(self._records)

    def requests_for(self, host: str) -> list[RequestRecord]:
        """Records of requests that arrived on ``host`` (a netloc), in arrival order."""
        with self._lock:
            return [r for r in self._records if r.host == host]

    def count(self, url: str) -> int:
        """How many requests arrived for ``url`` (fragment ignored; query significant)."""
        with self._lock:
            return self._counts[_url_key(url)]

    def max_concurrency(self, host: str) -> int:
        """Highest number of simultaneously in-flight requests ever seen on ``host``."""
        with self._lock:
            return self._max[host]

    def in_flight(self, host: str) -> int:
        """Requests currently being handled on ``host``."""
        with self._lock:
            return self._inflight[host]

    def total(self) -> int:
        """Total requests received (also counted when records are not kept)."""
        with self._lock:
            return self._total

    def reset(self) -> None:
        """Forget everything except requests still in flight (their gauges stay correct)."""
        with self._lock:
            self._records.clear()
            self._counts.clear()
            self._max = Counter({h: n for h, n in self._inflight.items() if n > 0})
            self._total = 0


# ---------------------------------------------------------------------------- gzip bomb


def _gf2_times(mat: list[int], vec: int) -> int:
    out = 0
    i = 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def _crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32 of ``A + B`` from ``crc(A)``, ``crc(B)``, ``len(B)`` (zlib's algorithm).

    Lets the bomb's gzip trailer be computed without CRC-ing a GiB of zeros.
    """
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # operator for one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


_bomb_lock = threading.Lock()
_bomb_cache: dict[int, bytes] = {}


def build_gzip_bomb(inflated_bytes: int = 1 << 30) -> bytes:
    """Single-member gzip of ``inflated_bytes`` zeros, built in milliseconds and cached per size.

    Compressing a GiB naively takes seconds.  Instead one 1 MiB block of zeros is compressed
    with ``Z_FULL_FLUSH`` (which resets the compressor, so every further identical block
    compresses to identical bytes) and the block is repeated; the trailer's CRC32 is derived
    with :func:`_crc32_combine`.  The result (~1 KiB per MiB inflated) stays small in memory.
    A single member matters: many clients stop inflating after the first gzip member.
    """
    if inflated_bytes <= 0 or inflated_bytes % _MIB:
        raise ValueError("inflated_bytes must be a positive multiple of 1 MiB")
    with _bomb_lock:
        cached = _bomb_cache.get(inflated_bytes)
        if cached is not None:
            return cached
        zeros = bytes(_MIB)
        comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS, 9)
        first = comp.compress(zeros) + comp.flush(zlib.Z_FULL_FLUSH)  # header + block
        block = comp.compress(zeros) + comp.flush(zlib.Z_FULL_FLUSH)
        again = comp.compress(zeros) + comp.flush(zlib.Z_FULL_FLUSH)
        final = comp.flush(zlib.Z_FINISH)[:-8]  # empty last block, minus the wrong trailer
        if block != again:  # pragma: no cover - would mean a zlib that keeps state
            raise RuntimeError("zlib did not produce repeatable full-flush blocks")
        blocks = inflated_bytes // _MIB
        # CRC of `blocks` MiB of zeros by binary doubling of the 1 MiB CRC.
        crc, power, power_len, remaining = 0, zlib.crc32(zeros), _MIB, blocks
        while remaining:
            if remaining & 1:
                crc = _crc32_combine(crc, power, power_len)
            power = _crc32_combine(power, power, power_len)
            power_len *= 2
            remaining >>= 1
        trailer = struct.pack("<II", crc, inflated_bytes & 0xFFFFFFFF)
        body = b"".join((first, block * (blocks - 1), final, trailer))
        _bomb_cache[inflated_bytes] = body
        return body


# ---------------------------------------------------------------------------- server


#: Where a site may listen: loopback, or a private network (the e2e real node's bridge, since a
#: pod's own loopback is not the machine's), never a public address.
_SITE_NETWORKS: Final = tuple(
    ipaddress.IPv4Network(net)
    for net in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)


class SiteServer:
    """The asyncio core: binds all hosts, routes requests, records them.

    Use it directly from an event loop (the CLI does); tests normally use :class:`TestSite`,
    which runs one of these in a background thread.  One low-level ``aiohttp.web.Server`` per
    host (no router, no access log) keeps per-request overhead minimal.
    """

    def __init__(
        self,
        config: SiteConfig | None = None,
        *,
        base_address: str = "127.0.0.2",
        keep_records: bool = True,
        shutdown_timeout: float = 0.5,
        backlog: int = 1024,
    ) -> None:
        self.config = config or SiteConfig()
        self.log = RequestLog(keep_records)
        self._base = ipaddress.IPv4Address(base_address)
        last = self._base + self.config.hosts
        if not any(self._base in net and last in net for net in _SITE_NETWORKS):
            raise ValueError(
                "all host addresses must be inside one of "
                + ", ".join(str(net) for net in _SITE_NETWORKS)
            )
        self._shutdown_timeout = shutdown_timeout
        self._backlog = backlog
        self._graph: SiteGraph | None = None
        self._netlocs: list[str] = []
        self._runners: list[web.ServerRunner] = []
        self._stopping = asyncio.Event()
        n = self.config.pages_per_host
        self._page_index = {page_path(i): i for i in range(n)}
        self._bodies: list[list[bytes | None]] = [[None] * n for _ in range(self.config.hosts + 1)]
        self._leaf_cache: dict[tuple[int, str], bytes] = {}
        self._hits: Counter[str] = Counter()
        #: Every request but robots.txt answers 429 (TestSite.rate_limit_everything).
        self.limit_everything = False
        self.revisions = Revisions(self.config.etag_hosts, self.config.last_modified_hosts)
        self._exact: dict[str, Handler] = {
            "/ratelimited": self._ratelimited,
            "/slow": self._slow,
            "/hang": self._hang,
            "/empty": self._empty,
            "/big": self._big,
            "/big.bin": self._big,
            "/bomb": self._bomb,
            "/file.pdf": self._pdf,
            "/private/secret": self._leaf_route("Private: you should not be here"),
            "/nofollow/only": self._leaf_route("Reachable only through nofollow"),
            "/redirect/loop/a": self._loop_a,
            "/redirect/loop/b": self._loop_b,
            "/trickle": self._trickle,
            "/long-location": self._long_location,
            "/many-headers": self._many_headers,
            "/sjis/header": _html_route(
                hostile.render_sjis_page(declare_in_meta=False), "text/html; charset=Shift_JIS"
            ),
            "/sjis/meta": _html_route(hostile.render_sjis_page(declare_in_meta=True)),
            "/cp1251/header": _html_route(
                hostile.render_cp1251_page(declare_in_meta=False),
                "text/html; charset=windows-1251",
            ),
            "/cp1251/meta": _html_route(hostile.render_cp1251_page(declare_in_meta=True)),
            "/regex/backtrack": _html_route(
                hostile.render_regex_page(hostile.REGEX_BACKTRACK_VALUE)
            ),
            "/regex/lookahead": _html_route(
                hostile.render_regex_page(hostile.REGEX_REFUSED_PATTERN)
            ),
            shop.LISTING_PATH: _html_route(shop.render_listing()),
        }
        self._products = {product.path: product for product in shop.PRODUCTS}
        self._listed = frozenset(page.path for page in sitemaps.LISTED_PAGES)
        self._feed_pages = frozenset(page.path for page in feeds.RSS_ONLY + feeds.ATOM_ONLY)
        # Sitemap bodies name the hosts' ports: built at the first request, then kept.
        self._sitemap_bodies: dict[str, bytes] = {}

    # ------------------------------------------------------------------ lifecycle

    @property
    def graph(self) -> SiteGraph:
        if self._graph is None:
            raise RuntimeError("site not started")
        return self._graph

    @property
    def hosts(self) -> list[str]:
        """Netlocs of the in-scope hosts, host 0 first."""
        return self._netlocs[: self.config.hosts]

    @property
    def out_of_scope_host(self) -> str:
        if not self._netlocs:
            raise RuntimeError("site not started")
        return self._netlocs[-1]

    def netloc(self, host_index: int) -> str:
        """Netloc of host ``host_index`` (``config.hosts`` = the out-of-scope host)."""
        return self._netlocs[host_index]

    async def start(self) -> None:
        """Bind every host on a free port and start serving; returns once all listen."""
        if self._runners:
            raise RuntimeError("already started")
        socks = bind_hosts(self._base, self.config.hosts + 1)
        self._netlocs = netlocs(socks)
        self._graph = SiteGraph(self.config, self._netlocs[:-1], self._netlocs[-1])
        self._stopping = asyncio.Event()
        servers = [
            web.Server(
                self._handler_for(i),
                handler_cancellation=not self.config.finish_abandoned_requests,
                access_log=None,
            )
            for i in range(len(socks))
        ]
        self._runners = await serve(
            zip(servers, socks, strict=True),
            shutdown_timeout=self._shutdown_timeout,
            backlog=self._backlog,
        )

    async def stop(self) -> None:
        """Stop now: abort every connection (cancelling its handler) and close the listeners.

        Deliberately not graceful: a test site stopping while ``/hang``, ``/slow`` or a
        half-read ``/big`` is in flight must not wait for them, and aborting (rather than
        closing) also drops unsent buffered data, so no socket outlives the loop.
        """
        self._stopping.set()
        runners, self._runners = self._runners, []
        for runner in runners:
            if runner.server is not None:
                for conn in list(runner.server.connections):
                    if conn.transport is not None:
                        conn.transport.abort()
        await asyncio.gather(*(r.cleanup() for r in runners), return_exceptions=True)

    def reset(self) -> None:
        """Clear the request log and the flaky/ratelimit counters (call on the loop thread)."""
        self.log.reset()
        self._hits.clear()

    # ------------------------------------------------------------------ dispatch

    def _handler_for(self, host: int) -> Handler:
        netloc = self._netlocs[host]
        log = self.log

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            headers = request.headers
            rec = log.begin(
                netloc, request.raw_path, request.method, headers.get("User-Agent", ""),
                headers.get("Via"),
            )  # fmt: skip
            status: int | None = None
            try:
                if self.config.latency_seconds:
                    await asyncio.sleep(self.config.latency_seconds)
                resp = await self._route(host, request)
                status = resp.status
                return resp
            finally:
                log.end(rec, status)

        return handle

    async def _route(self, host: int, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if self.limit_everything and path != "/robots.txt":
            limited = _small(429, "Too Many Requests")
            limited.headers["Retry-After"] = str(self.config.retry_after_seconds)
            return limited
        index = self._page_index.get(path)
        if index is not None:  # the hot path: a cached normal page
            bodies = self._bodies[host]
            body = bodies[index]
            if body is None:
                body = bodies[index] = self.graph.render_page(host, index)
            if self.revisions.active:  # validators, edits, removals (revisions.py)
                return self.revisions.respond(host, path, body, request)
            return web.Response(body=body, headers=_HTML_HEADERS)
        if path == "/robots.txt":
            if self.config.robots_hang:
                await self._stopping.wait()
                return _small(503, "Shutting down")
            self._hits[f"robots:{host}"] += 1
            if (
                self._hits[f"robots:{host}"] <= self.config.robots_failures
                or host in self.config.robots_down_hosts
            ):
                unavailable = _small(503, "Service Unavailable")
                if self.config.robots_retry_after_seconds is not None:
                    retry_after = str(self.config.robots_retry_after_seconds)
                    unavailable.headers["Retry-After"] = retry_after
                return unavailable
            robots = self.graph.robots_txt(host)
            if robots is None:
                return _not_found()
            if host == 0 and self.config.hostile:
                robots += f"Sitemap: http://{self.netloc(0)}{sitemaps.INDEX_PATH}\n".encode()
            return web.Response(body=robots, headers={"Content-Type": "text/plain"})
        if self.config.feeds and host < self.config.hosts:
            fed = self._feed_route(host, path)
            if fed is not None:
                return fed
        if host != 0:
            return _not_found()
        handler = self._exact.get(path)
        if handler is not None:
            return await handler(request)
        parts = path.split("/")
        kind = parts[1] if len(parts) > 1 else ""
        if kind == "status" and len(parts) == 3 and parts[2].isdigit():
            code = int(parts[2])
            if 400 <= code <= 599:
                return _small(code, f"Status {code}")
        elif kind == "flaky" and len(parts) == 3 and parts[2].isdigit():
            return self._flaky(path)
        elif kind == "go" and len(parts) == 3:
            return _redirect(f"/private/{parts[2]}")
        elif kind == "unlinked" and len(parts) == 3 and parts[2].isdigit():
            # Linked from nowhere: reached only when given to the crawl (crawlfleet enqueue).
            return self._leaf(path, f"Unlinked page {parts[2]}")
        elif kind == "private" and len(parts) == 3:
            return self._leaf(path, "Private: you should not be here")
        elif kind == "bomb" and len(parts) == 3:
            return self._coded_bomb(parts[2])
        elif kind == "links" and len(parts) == 3 and parts[2].isdigit():
            if int(parts[2]) <= 1_000_000:
                body = hostile.render_link_flood(int(parts[2]))
                return web.Response(body=body, headers=_HTML_HEADERS)
        elif kind == "nodes" and len(parts) == 3 and parts[2].isdigit():
            if int(parts[2]) <= 1_000_000:
                body = hostile.render_node_flood(int(parts[2]))
                return web.Response(body=body, headers=_HTML_HEADERS)
        elif kind == "sitemaps":
            return self._sitemap(path)
        elif kind == "listed" and path in self._listed:
            return self._leaf(path, "Listed in a sitemap, linked from nowhere")
        elif kind == "shop" and path in self._products:
            body = shop.render_product(self._products[path])
            return web.Response(body=body, headers=_HTML_HEADERS)
        elif kind == "trap":
            return web.Response(body=hostile.render_trap_page(path), headers=_HTML_HEADERS)
        elif kind == "redirect" and len(parts) == 4 and parts[2] == "chain":
            if parts[3].isdigit() and int(parts[3]) <= 1000:
                return self._chain(int(parts[3]))
        elif kind == "redirect" and len(parts) == 4 and parts[2] == "host":
            if parts[3].isdigit() and int(parts[3]) <= self.config.hosts:
                return _redirect(self.graph.url(int(parts[3]), "/"))
        elif (
            kind == "calendar"
            and len(parts) == 4
            and parts[2].isdigit()
            and parts[3].isdigit()
            and 1 <= int(parts[3]) <= 12
        ):
            body = self.graph.render_calendar(0, int(parts[2]), int(parts[3]))
            return web.Response(body=body, headers=_HTML_HEADERS)
        return _not_found()

    # ------------------------------------------------------------------ special routes

    def _sitemap(self, path: str) -> web.Response:
        """Host 0's sitemaps (:mod:`crawlfleet.testsite.sitemaps`); the oversized one takes a
        few hundred milliseconds to build, once."""
        body = self._sitemap_bodies.get(path)
        if body is None:
            base = f"http://{self.netloc(0)}"
            if path == sitemaps.INDEX_PATH:
                body = sitemaps.render_index(base)
            elif path == sitemaps.PAGES_PATH:
                body = sitemaps.render_pages(base, f"http://{self.out_of_scope_host}")
            elif path == sitemaps.OVERSIZED_PATH:
                body = sitemaps.render_oversized(base)
            elif path.startswith(sitemaps.NESTED_PREFIX) and path.endswith(".xml"):
                level = path.removeprefix(sitemaps.NESTED_PREFIX).removesuffix(".xml")
                if not (level.isdigit() and 0 < int(level) <= 1000):
                    return _not_found()
                body = sitemaps.render_nested(base, int(level))
            else:
                return _not_found()
            self._sitemap_bodies[path] = body
        kind = "application/xml" if path.endswith(".xml") else "application/gzip"
        return web.Response(body=body, headers={"Content-Type": kind})

    def _feed_route(self, host: int, path: str) -> web.Response | None:
        """A host's feeds and the pages only they list (:mod:`crawlfleet.testsite.feeds`)."""
        if path in (feeds.RSS_PATH, feeds.ATOM_PATH):
            base, elsewhere = f"http://{self.netloc(host)}", f"http://{self.out_of_scope_host}"
            if path == feeds.RSS_PATH:
                body, kind = feeds.render_rss(base, elsewhere), feeds.RSS_CONTENT_TYPE
            else:
                body, kind = feeds.render_atom(base, elsewhere), feeds.ATOM_CONTENT_TYPE
            return web.Response(body=body, headers={"Content-Type": kind})
        if path == feeds.HOSTILE_PATH:
            headers = {"Content-Type": "application/rss+xml"}
            return web.Response(body=feeds.render_hostile(), headers=headers)
        if path in self._feed_pages:
            body = self.graph.render_leaf(host, path, "Listed in a feed, linked from nowhere")
            return web.Response(body=body, headers=_HTML_HEADERS)
        return None

    def _leaf(self, path: str, title: str) -> web.Response:
        body = self._leaf_cache.get((0, path))
        if body is None:
            body = self._leaf_cache[0, path] = self.graph.render_leaf(0, path, title)
        return web.Response(body=body, headers=_HTML_HEADERS)

    def _leaf_route(self, title: str) -> Handler:
        async def route(request: web.BaseRequest) -> web.StreamResponse:
            return self._leaf(request.path, title)

        return route

    async def _ratelimited(self, request: web.BaseRequest) -> web.StreamResponse:
        self._hits[request.path] += 1
        if self._hits[request.path] <= self.config.ratelimit_failures:
            resp = _small(429, "Too Many Requests")
            resp.headers["Retry-After"] = str(self.config.retry_after_seconds)
            return resp
        return self._leaf(request.path, "Rate limit lifted")

    def _flaky(self, path: str) -> web.StreamResponse:
        self._hits[path] += 1
        if self._hits[path] <= self.config.flaky_failures:
            return _small(500, "Internal Server Error")
        return self._leaf(path, f"Flaky page {path.rsplit('/', 1)[1]} healed")

    async def _slow(self, request: web.BaseRequest) -> web.StreamResponse:
        await asyncio.sleep(self.config.slow_seconds)
        return self._leaf(request.path, "Slow page")

    async def _hang(self, request: web.BaseRequest) -> web.StreamResponse:
        # Cancelled (handler_cancellation) when the client disconnects; released on stop.
        await self._stopping.wait()
        return _small(503, "Shutting down")

    async def _empty(self, request: web.BaseRequest) -> web.StreamResponse:
        return web.Response(body=b"", headers=_HTML_HEADERS)

    async def _pdf(self, request: web.BaseRequest) -> web.StreamResponse:
        return web.Response(body=_PDF_BODY, headers={"Content-Type": "application/pdf"})

    async def _big(self, request: web.BaseRequest) -> web.StreamResponse:
        binary = request.path.endswith(".bin")
        headers = {"Content-Type": "application/octet-stream"} if binary else _HTML_HEADERS
        resp = web.StreamResponse(headers=headers)
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        remaining = self.config.big_bytes
        head = b"<!DOCTYPE html>\n<html><head><title>Big page</title></head><body>\n"
        try:
            first = head[:remaining]
            if first:
                await resp.write(first)
                remaining -= len(first)
            chunk = _BIG_CHUNK
            pause = self.config.big_write_delay_seconds
            while remaining > 0:
                piece = chunk if remaining >= len(chunk) else chunk[:remaining]
                await resp.write(piece)
                remaining -= len(piece)
                if pause:
                    await asyncio.sleep(pause)
            await resp.write_eof()
        except ConnectionError:  # the client stopped reading: exactly what /big is for
            pass
        return resp

    async def _bomb(self, request: web.BaseRequest) -> web.StreamResponse:
        body = build_gzip_bomb(self.config.bomb_inflated_bytes)
        return web.Response(body=body, headers={**_HTML_HEADERS, "Content-Encoding": "gzip"})

    def _coded_bomb(self, coding: str) -> web.StreamResponse:
        inflated = self.config.bomb_inflated_bytes
        if coding == "gzip":
            body = build_gzip_bomb(inflated)
        elif coding in hostile.BOMB_CODINGS:
            body = hostile.build_bomb(coding, inflated)
        else:
            return _not_found()
        return web.Response(body=body, headers={**_HTML_HEADERS, "Content-Encoding": coding})

    async def _trickle(self, request: web.BaseRequest) -> web.StreamResponse:
        resp = web.StreamResponse(headers=_HTML_HEADERS)
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            while not self._stopping.is_set():
                await resp.write(b"<")
                await asyncio.sleep(self.config.trickle_interval_seconds)
        except ConnectionError:  # the client gave up: what /trickle is for
            pass
        return resp

    async def _long_location(self, request: web.BaseRequest) -> web.StreamResponse:
        resp = _small(302, "Found")
        resp.headers["Location"] = "/" + "a" * (hostile.LONG_LOCATION_CHARACTERS - 1)
        return resp

    async def _many_headers(self, request: web.BaseRequest) -> web.StreamResponse:
        resp = self._leaf(request.path, "Many headers")
        for i in range(hostile.MANY_HEADERS):
            resp.headers[f"X-Filler-{i}"] = "h" * hostile.MANY_HEADER_BYTES
        return resp

    def _chain(self, n: int) -> web.StreamResponse:
        if n == 0:
            return self._leaf("/redirect/chain/0", "End of the redirect chain")
        target = f"/redirect/chain/{n - 1}"
        if n % 2 == 0:
            target = self.graph.url(0, target)
        return _redirect(target)

    async def _loop_a(self, request: web.BaseRequest) -> web.StreamResponse:
        return _redirect("/redirect/loop/b")

    async def _loop_b(self, request: web.BaseRequest) -> web.StreamResponse:
        return _redirect(self.graph.url(0, "/redirect/loop/a"))


def _html_route(body: bytes, content_type: str = "text/html") -> Handler:
    """A route that always answers ``body`` (built once) as ``content_type``."""

    async def route(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response(body=body, headers={"Content-Type": content_type})

    return route


def _small(status: int, text: str) -> web.Response:
    body = f"<!DOCTYPE html><html><head><title>{text}</title></head><body><h1>{text}</h1>"
    return web.Response(
        status=status, body=(body + "</body></html>\n").encode(), headers=_HTML_HEADERS
    )


def _not_found() -> web.Response:
    return _small(404, "Not Found")


def _redirect(location: str) -> web.Response:
    resp = _small(302, "Found")
    resp.headers["Location"] = location
    return resp


# ---------------------------------------------------------------------------- threaded wrapper


class TestSite(BackgroundSite):
    """Runs a :class:`SiteServer` in a background thread with its own event loop.

    Why a thread: tests (sync or async) and the crawler under test keep their own event loop,
    so the site's timing is not distorted by the code it is measuring.  Use as a context
    manager or call :meth:`start` / :meth:`stop`.
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(
        self,
        config: SiteConfig | None = None,
        *,
        base_address: str = "127.0.0.2",
        keep_records: bool = True,
        start_timeout: float = 30.0,
    ) -> None:
        self.config = config or SiteConfig()
        self._server = SiteServer(self.config, base_address=base_address, keep_records=keep_records)
        self._thread = LoopThread(
            self._server, name="crawlfleet-test-site", start_timeout=start_timeout
        )

    # ------------------------------------------------------------------ lifecycle

    def edit_page(self, url: str) -> int:
        """Give the normal page at ``url`` its next revision (a changed body and validators);
        returns the revision's number (crawlfleet/testsite/revisions.py)."""
        host, path = self._page_of(url)
        return self._thread.call(lambda: self._server.revisions.edit(host, path))

    def rate_limit_everything(self, on: bool = True) -> None:
        """Every request but robots.txt answers 429 (with ``Retry-After``) while ``on``: a site
        that has had enough of the crawler."""

        def flip() -> None:
            self._server.limit_everything = on

        self._thread.call(flip)

    def remove_page(self, url: str) -> None:
        """The normal page at ``url`` answers 404 from now on."""
        host, path = self._page_of(url)
        self._thread.call(lambda: self._server.revisions.remove(host, path))

    def _page_of(self, url: str) -> tuple[int, str]:
        parts = urlsplit(url)
        return self._server.hosts.index(parts.netloc), parts.path or "/"

    def reset(self) -> None:
        """Clear the request log and flaky/ratelimit counters (runs on the site's loop)."""
        self._thread.call(self._server.reset)

    # ------------------------------------------------------------------ addresses & graph

    @property
    def graph(self) -> SiteGraph:
        return self._server.graph

    @property
    def log(self) -> RequestLog:
        return self._server.log

    @property
    def hosts(self) -> list[str]:
        """Netlocs (``"127.0.0.2:43121"``) of the in-scope hosts, host 0 first."""
        return self._server.hosts

    @property
    def out_of_scope_host(self) -> str:
        """Netloc of the host that serves pages but must never be crawled."""
        return self._server.out_of_scope_host

    @property
    def seeds(self) -> list[str]:
        """``/`` of every in-scope host."""
        return self.graph.seeds()

    def url(self, host_index: int, path: str = "/") -> str:
        """Absolute URL of ``path`` on in-scope host ``host_index``."""
        if not 0 <= host_index < self.config.hosts:
            raise IndexError(f"no in-scope host {host_index}")
        return self.graph.url(host_index, path)

    def out_of_scope_url(self, path: str = "/") -> str:
        """Absolute URL of ``path`` on the out-of-scope host."""
        return self.graph.url(self.graph.out_of_scope_index, path)

    def expected_pages(self, max_depth: int | None = None) -> dict[str, int]:
        """See :meth:`SiteGraph.expected_pages`."""
        return self.graph.expected_pages(max_depth)

    def specials(self) -> SpecialUrls:
        """See :meth:`SiteGraph.specials`."""
        return self.graph.specials()

    def permanent_failure_urls(self) -> frozenset[str]:
        """Linked URLs that fail permanently (``/status/404``, ``/status/410``)."""
        return self.graph.permanent_failure_urls()

    def healing_urls(self) -> frozenset[str]:
        """Linked URLs that fail a few times, then serve a page."""
        return self.graph.healing_urls()

    def trap_urls(self) -> frozenset[str]:
        """Linked entry points of infinite URL spaces (calendar, redirect loop)."""
        return self.graph.trap_urls()

    # ------------------------------------------------------------------ request log

    def _netloc(self, host: str | int) -> str:
        if isinstance(host, int):
            return self._server.netloc(host)
        return host

    def all_requests(self) -> list[RequestRecord]:
        return self.log.all_requests()

    def requests_for(self, host: str | int) -> list[RequestRecord]:
        """Records for a host, given as netloc or index (``hosts`` = out-of-scope host)."""
        return self.log.requests_for(self._netloc(host))

    def count(self, url: str) -> int:
        return self.log.count(url)

    def max_concurrency(self, host: str | int) -> int:
        return self.log.max_concurrency(self._netloc(host))
