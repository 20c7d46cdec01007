"""The request layer (DESIGN §4 layer 1, §6): fetch one URL safely, politely and boundedly.

``Fetcher.fetch`` turns a URL into a ``FetchResult`` and never raises for anything the network
or the site does: a hostile page costs one failed result, never a worker. Everything the
request layer decides on its own happens here, once:

* **SSRF** (DESIGN §6). Only http and https. Every host, the first URL's and every redirect
  hop's, is checked with ``AddressGuard`` before a connection is made, and the connection then
  goes to exactly the addresses the guard approved: the aiohttp connector resolves through
  ``_GuardResolver``, which asks the guard (and its cache) instead of the system resolver, so a
  name cannot answer "public" to the check and "private" to the connect (DNS rebinding). IP
  literals skip DNS in aiohttp, and are fully judged by the check before the request. With
  ``allow_private_networks`` the guard still refuses cloud metadata addresses. Proxies from
  the environment are ignored (``trust_env=False``): a proxy would make the checked address
  meaningless.
* **Redirects** are followed by hand so that each hop is checked: scheme, loop (a URL seen
  twice), count (``max_redirects``), the caller's scope (``allow_url``) and the guard.
* **Bodies** are streamed and capped: ``max_body_bytes`` of wire bytes (a larger
  ``Content-Length`` is refused before reading) and ``max_decompressed_bytes`` of decoded bytes.
  gzip and deflate are decoded here with ``decompressobj(...).decompress(data, max_length)``,
  so a gzip bomb never inflates past the cap plus one byte, whatever one network chunk holds
  (httpx's own decoder inflates a whole chunk at once: ~16 MiB per 16 KiB chunk of a bomb).
  Brotli is not advertised: neither ``brotli`` nor ``brotlicffi`` is installed, and before
  adding it the decoder must be bounded the same way (brotli ≥ 1.2's ``output_buffer_limit``).
  Non-2xx bodies are read up to 64 KiB (so a small error page keeps the connection reusable)
  and discarded.
* **Retries** (layer 1): connect errors, per-request timeouts, 5xx, protocol errors, and
  429/503 whose ``Retry-After`` is at most ``backoff_max_seconds`` are retried up to
  ``request_attempts`` times in all, after ``max(backoff, Retry-After,
  min_retry_delay_seconds)`` with a fresh request. Anything else, including 429 without a
  short ``Retry-After``, goes back at once to the task layer (the frontier), which knows the
  URL's history. A retry whose sleep would overrun the total deadline is not attempted: the
  real failure (say ``http_429`` with its ``retry_after_seconds``) is worth more to the task
  layer than a ``timeout``.
* **Deadlines**: separate connect and read timeouts per request, plus one total deadline per
  ``fetch`` around everything (redirects, retries and their sleeps) ending in ``timeout``.

``FetchResult.attempts`` counts every HTTP request sent for the fetch: retries and redirect
hops alike (so retries = ``attempts - 1 - len(redirects)`` when the chain did not fail).
``wire_bytes`` counts body bytes as received (after chunked framing, before content decoding)
over all those requests.

Transport: one ``httpx_aiohttp.AiohttpTransport`` per ``Fetcher`` over one pooled
``aiohttp.ClientSession``; requests and responses are httpx's ``Request`` and ``Response``,
handed to the transport without ``AsyncClient.send``'s auth, cookie and redirect layers (see
``_exchange``). Measured with ``python -m bench.transports`` (test site in a
subprocess, 2 hosts, 6000 normal pages per round, 64 concurrent tasks, best of 3 rounds, over
loopback on 2 shared CPUs; CPython 3.11.7, httpx 0.28.1, aiohttp 3.14.5, httpx-aiohttp 0.2.0;
rounds vary by ±20 %):

=====================  ========  ===========================================================
candidate              pages/s   note
=====================  ========  ===========================================================
httpx default            301     httpcore's pool degrades with concurrency: ~1,000 pages/s
                                 with 1 to 8 tasks, ~250-350 with 64 (three runs)
httpx-aiohttp          2,343     **chosen**: ~7.8× the default at 64 tasks, same httpx API
Fetcher (this module)  1,958     httpx-aiohttp plus guard, streaming, bounded decoding,
                                 classification (~16 % on top of the transport)
bare aiohttp           9,986     reference only, not a candidate: drops httpx's API; what
                                 httpx's request/response layer costs on a fast origin
=====================  ========  ===========================================================

Besides speed, aiohttp's connector takes a resolver object, which is what lets connections use
the guard's addresses; httpx's default transport resolves by itself at connect time. aiohttp's
cookie jar is a ``DummyCookieJar`` and httpx's jar refuses every cookie: one client serves
every site, and cookies from one must neither pile up nor leak to another.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urldefrag, urljoin, urlsplit

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult
from httpx_aiohttp import AiohttpTransport

from crawlfleet.crawler.failures import (
    FailureClass,
    backoff_seconds,
    classify_response,
    parse_retry_after,
)
from crawlfleet.crawler.safety import AddressGuard
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.errors import ConfigError, FetchError

__all__ = [
    "ACCEPT",
    "ACCEPT_ENCODING",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "ERROR_BODY_MAX_BYTES",
    "FetchResult",
    "FetchSettings",
    "Fetcher",
]

_log = logging.getLogger(__name__)

_MIB: Final = 1024 * 1024
DEFAULT_MAX_BODY_BYTES: Final = 10 * _MIB
DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 50 * _MIB
#: Non-2xx bodies are read up to this much (to keep the connection reusable), then dropped.
ERROR_BODY_MAX_BYTES: Final = 64 * 1024
#: What a crawler of HTML wants, in the order it wants it.
ACCEPT: Final = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"
#: Only codings this module decodes itself, with a bound (see the module docstring on br).
ACCEPT_ENCODING: Final = "gzip, deflate"

#: Failure classes worth a new request at once (the others go back to the task layer).
_RETRIED: Final = frozenset(
    {
        FailureClass.CONNECT_ERROR,
        FailureClass.TIMEOUT,
        FailureClass.HTTP_5XX,
        FailureClass.PROTOCOL_ERROR,
        FailureClass.HTTP_429,
    }
)
#: Errors the network, a server or a page can cause; anything else is a bug and propagates.
_NETWORK_ERRORS: Final = (
    FetchError,
    httpx.HTTPError,
    httpx.InvalidURL,
    aiohttp.ClientError,
    OSError,
    zlib.error,
    UnicodeError,
)
_SCHEMES: Final = frozenset({"http", "https"})
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
#: More stacked codings than this is not a real server.
_MAX_CODINGS: Final = 2


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """Everything the request layer needs, as plain values (defaults are the CrawlJob's)."""

    user_agent: str
    connect_timeout_seconds: float = 5.0
    read_timeout_seconds: float = 20.0
    total_timeout_seconds: float = 60.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    max_redirects: int = 5
    request_attempts: int = 3
    backoff_base_seconds: float = 1.0
    backoff_factor: float = 1.8
    backoff_max_seconds: float = 30.0
    allow_private_networks: bool = False
    #: Connections open at once over all hosts (the pool size); politeness is the frontier's.
    max_connections: int = 100

    def __post_init__(self) -> None:
        # The spec validates the same ranges; this catches hand-built settings.
        positive = {
            "connect_timeout_seconds": self.connect_timeout_seconds,
            "read_timeout_seconds": self.read_timeout_seconds,
            "total_timeout_seconds": self.total_timeout_seconds,
            "max_body_bytes": self.max_body_bytes,
            "max_decompressed_bytes": self.max_decompressed_bytes,
            "request_attempts": self.request_attempts,
            "max_connections": self.max_connections,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ConfigError(f"FetchSettings.{name}: must be greater than 0 (got {value})")
        if self.max_redirects < 0:
            raise ConfigError(f"FetchSettings.max_redirects: must be >= 0 ({self.max_redirects})")

    @classmethod
    def from_spec(cls, spec: CrawlJobSpec) -> FetchSettings:
        """The settings a CrawlJob asks for (``fetch``, ``retry``, ``userAgent``, ``scope``)."""
        return cls(
            user_agent=spec.user_agent,
            connect_timeout_seconds=spec.fetch.connect_timeout_seconds,
            read_timeout_seconds=spec.fetch.read_timeout_seconds,
            total_timeout_seconds=spec.fetch.total_timeout_seconds,
            max_body_bytes=spec.fetch.max_body_bytes,
            max_decompressed_bytes=spec.fetch.max_decompressed_bytes,
            max_redirects=spec.fetch.max_redirects,
            request_attempts=spec.retry.request_attempts,
            backoff_base_seconds=spec.retry.backoff_base_seconds,
            backoff_factor=spec.retry.backoff_factor,
            backoff_max_seconds=spec.retry.backoff_max_seconds,
            allow_private_networks=spec.scope.allow_private_networks,
        )


@dataclass(slots=True)
class FetchResult:
    """The outcome of one ``Fetcher.fetch``: a page or a classified failure, never both.

    ``failure`` None means a 2xx with an acceptable body in ``body`` (decoded). On failure
    ``body`` is empty and ``message`` says why. ``status``, ``content_type``, ``headers``,
    ``retry_after_seconds`` and ``fetched_at`` describe the last response received, even when
    what came after it failed (a redirect to a forbidden address keeps the 302; a connect
    error after a 503 keeps the 503); with no response at all they are None/empty and
    ``fetched_at`` is the time the fetch gave up.
    """

    url: str
    final_url: str
    status: int | None
    content_type: str | None
    body: bytes
    headers: dict[str, str]
    redirects: list[str]
    attempts: int
    elapsed_seconds: float
    fetched_at: float
    failure: FailureClass | None
    message: str
    retry_after_seconds: float | None
    wire_bytes: int


@dataclass(slots=True)
class _Exchange:
    """One HTTP request and what came of it (the retry loop looks at these)."""

    status: int | None = None
    body: bytes = b""
    location: str | None = None
    retry_after_seconds: float | None = None
    fetched_at: float | None = None
    failure: FailureClass | None = None
    message: str = ""


class Fetcher:
    """Fetches URLs for one worker process over one pooled client; close with ``aclose``.

    ``guard`` defaults to an ``AddressGuard`` built from ``settings.allow_private_networks``;
    one passed in must agree with that setting, so the two can never silently disagree.
    ``rng`` drives the retry jitter (pass a seeded one for reproducible tests). The client is
    built here but its aiohttp session only on the first request, so a ``Fetcher`` may be made
    outside the event loop that will use it.
    """

    def __init__(
        self,
        settings: FetchSettings,
        *,
        guard: AddressGuard | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if guard is None:
            guard = AddressGuard(allow_private=settings.allow_private_networks)
        elif guard.allow_private != settings.allow_private_networks:
            raise ValueError(
                f"guard.allow_private={guard.allow_private} contradicts "
                f"settings.allow_private_networks={settings.allow_private_networks}"
            )
        self._settings = settings
        self._guard = guard
        self._rng = rng if rng is not None else random.Random()
        self._transport = _build_transport(settings, guard)
        self._timeouts = _timeouts(settings)

    @property
    def settings(self) -> FetchSettings:
        return self._settings

    async def fetch(
        self,
        url: str,
        *,
        allow_url: Callable[[str], bool] | None = None,
        min_retry_delay_seconds: float = 0.0,
        pace: Callable[[str], Awaitable[None]] | None = None,
    ) -> FetchResult:
        """Fetch ``url``, following redirects that ``allow_url`` accepts; see the module doc.

        ``allow_url`` is the caller's scope check, applied to every redirect hop (the first URL
        is the caller's own choice). ``min_retry_delay_seconds`` is the least pause before a
        retry of the same URL: the host's politeness delay. ``pace(url)`` is awaited before
        every request after the first (retries and redirect hops), so the caller can keep
        all requests to a host apart, as the frontier does for the first.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self._settings.total_timeout_seconds
        result = FetchResult(
            url=url,
            final_url=url,
            status=None,
            content_type=None,
            body=b"",
            headers={},
            redirects=[],
            attempts=0,
            elapsed_seconds=0.0,
            fetched_at=0.0,
            failure=None,
            message="",
            retry_after_seconds=None,
            wire_bytes=0,
        )
        try:
            async with asyncio.timeout_at(deadline):
                await self._follow(result, allow_url, min_retry_delay_seconds, deadline, pace)
        except TimeoutError:
            # Per-request timeouts are translated inside; only the total deadline gets here.
            result.failure = FailureClass.TIMEOUT
            result.message = (
                f"total deadline of {self._settings.total_timeout_seconds:g} s passed"
                f" after {result.attempts} request(s)"
            )
            result.body = b""
        result.elapsed_seconds = loop.time() - started
        if not result.fetched_at:
            result.fetched_at = time.time()
        return result

    async def aclose(self) -> None:
        """Close the pooled connections; the Fetcher cannot be used afterwards."""
        await self._transport.aclose()

    # -- redirects -----------------------------------------------------------------------

    async def _follow(
        self,
        result: FetchResult,
        allow_url: Callable[[str], bool] | None,
        min_retry_delay_seconds: float,
        deadline: float,
        pace: Callable[[str], Awaitable[None]] | None,
    ) -> None:
        """Fetch ``result.url`` and its redirect hops, filling ``result`` as it goes."""
        current = result.url
        seen = {urldefrag(current).url}
        while True:
            exchange = await self._exchange_with_retries(
                current, result, min_retry_delay_seconds, deadline, pace
            )
            result.failure, result.message = exchange.failure, exchange.message
            result.body = exchange.body
            if exchange.failure is not None or exchange.location is None:
                return
            failure, target = self._next_hop(
                current, exchange.location, seen, len(result.redirects), allow_url
            )
            if failure is not None:
                result.failure, result.message = failure, target
                return
            result.redirects.append(target)
            seen.add(target)
            result.final_url = current = target

    def _next_hop(
        self,
        current: str,
        location: str,
        seen: set[str],
        hops_so_far: int,
        allow_url: Callable[[str], bool] | None,
    ) -> tuple[FailureClass | None, str]:
        """(None, the hop's URL) when the redirect may be followed, else (class, reason).

        The guard is not asked here: the hop's request asks it, like any request.
        """
        try:
            target = urldefrag(urljoin(current, location.strip())).url
            scheme = urlsplit(target).scheme.lower()
        except ValueError as error:
            return FailureClass.INVALID_URL, f"redirect to unusable {location!r}: {error}"
        if scheme not in _SCHEMES:
            return FailureClass.BAD_SCHEME, f"redirect to {target!r}: only http(s) is fetched"
        if target in seen:
            return FailureClass.REDIRECT_LOOP, f"redirect loop: {target} was already visited"
        if hops_so_far >= self._settings.max_redirects:
            return (
                FailureClass.TOO_MANY_REDIRECTS,
                f"more than {self._settings.max_redirects} redirects (next: {target})",
            )
        if allow_url is not None and not allow_url(target):
            return FailureClass.OUT_OF_SCOPE, f"redirect to {target} is out of scope"
        return None, target

    # -- retries -------------------------------------------------------------------------

    async def _exchange_with_retries(
        self,
        url: str,
        result: FetchResult,
        min_retry_delay_seconds: float,
        deadline: float,
        pace: Callable[[str], Awaitable[None]] | None,
    ) -> _Exchange:
        """One URL (no redirects) with the request-layer retries; the last exchange."""
        settings = self._settings
        attempt = 0
        while True:
            attempt += 1
            if pace is not None and result.attempts > 0:
                await pace(url)
            exchange = await self._exchange(url, result)
            if attempt >= settings.request_attempts or not self._worth_retrying(exchange):
                return exchange
            delay = max(
                backoff_seconds(
                    attempt,
                    settings.backoff_base_seconds,
                    settings.backoff_factor,
                    settings.backoff_max_seconds,
                    1.0,
                    self._rng,
                ),
                exchange.retry_after_seconds or 0.0,
                min_retry_delay_seconds,
            )
            if asyncio.get_running_loop().time() + delay >= deadline:
                exchange.message += f" (a retry in {delay:.2f} s would overrun the deadline)"
                return exchange
            _log.debug(
                "retrying %s in %.2f s after %s (attempt %d of %d)",
                url,
                delay,
                exchange.failure,
                attempt,
                settings.request_attempts,
                extra={"layer": "request", "host": urlsplit(url).hostname},
            )
            await asyncio.sleep(delay)

    def _worth_retrying(self, exchange: _Exchange) -> bool:
        """Transient failures are retried here; a server asking for a long pause is not."""
        if exchange.failure not in _RETRIED:
            return False
        retry_after = exchange.retry_after_seconds
        if retry_after is not None and retry_after > self._settings.backoff_max_seconds:
            return False
        # A 429 is only retried here when the server said how soon (and that is soon).
        return exchange.failure is not FailureClass.HTTP_429 or retry_after is not None

    # -- one request ---------------------------------------------------------------------

    async def _exchange(self, url: str, result: FetchResult) -> _Exchange:
        """Send one GET for ``url`` and read its response; failures come back classified."""
        exchange = _Exchange()
        try:
            await self._guard.check_url(url)  # before any connection (also for IP literals)
            # An explicit empty body skips httpx's body encoding and its second pass over the
            # headers (Host and Content-Length, which aiohttp sets for a bodiless GET itself);
            # read() marks it loaded, so the transport sends no body at all.
            request = httpx.Request(
                "GET",
                url,
                headers=self._request_headers(),
                extensions=dict(self._timeouts),
                stream=httpx.ByteStream(b""),
            )
            request.read()
            result.attempts += 1
            # Straight to the transport: AsyncClient.send adds auth, cookie and redirect
            # handling, which a crawler refuses (one client serves every site, so cookies must
            # not persist) or does itself (each hop is judged in _next_hop), and cost a third
            # of the request layer's CPU time per page. httpx would also parse a redirect's
            # Location, and a malformed one would throw the response away.
            response = await self._transport.handle_async_request(request)
            try:
                exchange.fetched_at = time.time()
                exchange.status = response.status_code
                # One plain dict: httpx.Headers decodes on every lookup. Its items() are
                # keyed by the lower-cased names, repeated fields joined with ", ".
                headers = dict(response.headers.items())
                exchange.retry_after_seconds = parse_retry_after(
                    headers.get("retry-after"), exchange.fetched_at
                )
                # The result describes the last response received, whatever happens next.
                result.status = exchange.status
                result.headers = headers
                result.content_type = headers.get("content-type")
                result.retry_after_seconds = exchange.retry_after_seconds
                result.fetched_at = exchange.fetched_at
                if 200 <= response.status_code < 300:
                    body = await self._read_body(response, headers, result)
                    exchange.failure = classify_response(
                        response.status_code, headers.get("content-type"), len(body)
                    )
                    if exchange.failure is None:
                        exchange.body = body
                    else:
                        exchange.message = _status_message(response, headers, len(body))
                else:
                    await self._discard_body(response, result)
                    self._classify_non_success(response, headers, exchange)
            finally:
                await response.aclose()
        except _NETWORK_ERRORS as error:
            exchange.failure, exchange.message = _failure_from_exception(error)
            exchange.body = b""
        return exchange

    def _request_headers(self) -> dict[str, str]:
        # A new mapping per request: nothing a previous attempt did can leak into the next.
        return {
            "User-Agent": self._settings.user_agent,
            "Accept": ACCEPT,
            "Accept-Encoding": ACCEPT_ENCODING,
        }

    @staticmethod
    def _classify_non_success(
        response: httpx.Response, headers: dict[str, str], exchange: _Exchange
    ) -> None:
        status = response.status_code
        if 300 <= status < 400:
            location = headers.get("location")
            if location and location.strip() and status != 304:
                exchange.location = location
                return
            exchange.failure = FailureClass.PROTOCOL_ERROR
            exchange.message = f"HTTP {status} without a usable Location header"
            return
        exchange.failure = classify_response(status, headers.get("content-type"), 0)
        if exchange.failure is None:  # a status below 200 that aiohttp handed on
            exchange.failure = FailureClass.PROTOCOL_ERROR
        exchange.message = _status_message(response, headers, None)

    async def _read_body(
        self, response: httpx.Response, headers: dict[str, str], result: FetchResult
    ) -> bytes:
        """The decoded body, or FetchError when it breaks a cap or cannot be decoded."""
        settings = self._settings
        declared = _content_length(headers.get("content-length"))
        if declared is not None and declared > settings.max_body_bytes:
            raise FetchError(
                FailureClass.BODY_TOO_LARGE,
                f"Content-Length {declared} exceeds max_body_bytes {settings.max_body_bytes}",
            )
        decoder = _ContentDecoder.for_header(headers.get("content-encoding"))
        # Pieces joined once at the end: a growing bytearray would hold two copies while it
        # reallocates, doubling the peak memory a bomb can cost.
        pieces: list[bytes] = []
        decoded = 0
        received = 0
        async with _RawChunks(response) as chunks:
            async for chunk in chunks:
                received += len(chunk)
                result.wire_bytes += len(chunk)
                if received > settings.max_body_bytes:
                    raise FetchError(
                        FailureClass.BODY_TOO_LARGE,
                        f"body exceeds max_body_bytes {settings.max_body_bytes}",
                    )
                piece = decoder.decode(chunk, settings.max_decompressed_bytes - decoded)
                decoded += len(piece)
                pieces.append(piece)
                if decoded > settings.max_decompressed_bytes:
                    raise FetchError(
                        FailureClass.DECOMPRESSION_BOMB
                        if decoder.encoded
                        else FailureClass.BODY_TOO_LARGE,
                        f"{received} bytes received decode to more than max_decompressed_bytes"
                        f" {settings.max_decompressed_bytes}",
                    )
        return b"".join(pieces)

    @staticmethod
    async def _discard_body(response: httpx.Response, result: FetchResult) -> None:
        """Read a little of an error body, so a small one leaves the connection reusable."""
        received = 0
        async with _RawChunks(response) as chunks:
            async for chunk in chunks:
                received += len(chunk)
                result.wire_bytes += len(chunk)
                if received >= ERROR_BODY_MAX_BYTES:
                    break  # closing the response drops the connection and the rest


class _GuardResolver(AbstractResolver):
    """aiohttp's DNS, answered by the guard: connections go to the addresses it approved.

    The guard caches its answers, so the check before a request and the resolution at connect
    time normally see the very same addresses from one lookup; if they differ (the cache
    expired in between), the connect-time answer is checked again, never trusted.
    """

    def __init__(self, guard: AddressGuard) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await self._guard.check_host(host, port)
        results: list[ResolveResult] = []
        for address in addresses:
            address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
            if family not in (socket.AF_UNSPEC, address_family):
                continue
            results.append(
                {
                    "hostname": host,
                    "host": address,
                    "port": port,
                    "family": address_family,
                    "proto": 0,
                    "flags": 0,
                }
            )
        if not results:
            raise FetchError(FailureClass.DNS_ERROR, f"{host} has no address of family {family}")
        return results

    async def close(self) -> None:
        """Nothing to release: the guard belongs to the Fetcher's owner."""


def _build_transport(settings: FetchSettings, guard: AddressGuard) -> AiohttpTransport:
    """The one pooled transport: httpx's API over an aiohttp session resolving through the guard."""

    def make_session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=settings.max_connections,
            use_dns_cache=False,  # the guard caches, and only what it approved
            resolver=_GuardResolver(guard),
        )
        session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            auto_decompress=False,
        )
        # aiohttp silently resends an idempotent request once when the server hangs up (on
        # fresh connections too), so a hostile server would see twice the requests we count
        # and pace. Retries are this module's job. No public switch exists (aiohttp 3.14).
        if hasattr(session, "_retry_connection"):
            session._retry_connection = False
        return session

    # Called on the first request, inside the loop that will own the session.
    return AiohttpTransport(client=make_session)


def _timeouts(settings: FetchSettings) -> dict[str, Any]:
    """The request extension httpx transports read their timeouts from."""
    timeout = httpx.Timeout(
        connect=settings.connect_timeout_seconds,
        read=settings.read_timeout_seconds,
        write=settings.read_timeout_seconds,
        # aiohttp's "connect" (waiting for a pooled connection, then connecting); the total
        # deadline bounds it anyway.
        pool=settings.total_timeout_seconds,
    )
    return {"timeout": timeout.as_dict()}


# -- bodies -------------------------------------------------------------------------------


class _ZlibStage:
    """Incremental gzip or deflate decoding that never returns more than it is allowed to.

    ``decode(data, limit)`` returns at most ``limit + 1`` bytes; getting more than ``limit``
    back means "over budget", which is all a caller needs to know to stop. Concatenated gzip
    members are decoded in turn; bytes after the end of the (last) stream are ignored, as
    browsers do. ``deflate`` is tried as zlib-wrapped first, then raw (servers send both),
    however the first bytes are split into chunks.
    """

    def __init__(self, coding: str) -> None:
        self._gzip = coding == "gzip"
        self._inflater = zlib.decompressobj(_GZIP_WBITS if self._gzip else zlib.MAX_WBITS)
        # deflate: raw (headerless) until zlib has accepted the 2-byte zlib header; the bytes
        # seen so far are kept to replay them into a raw inflater.
        self._may_be_raw = not self._gzip
        self._header = b""
        self._finished_members = 0
        self._done = False

    def decode(self, data: bytes, limit: int) -> bytes:
        pieces: list[bytes] = []  # not a bytearray: no second copy of up to `limit` bytes
        produced = 0
        while data and not self._done:
            try:
                piece = self._inflater.decompress(data, limit + 1 - produced)
            except zlib.error:
                if self._may_be_raw:
                    self._may_be_raw = False
                    self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                    data, self._header = self._header + data, b""
                    continue
                if self._finished_members:
                    self._done = True  # garbage after a complete gzip member
                    break
                raise
            if self._may_be_raw:
                self._header += data
                if len(self._header) >= 2:  # zlib checks its header on the second byte
                    self._may_be_raw, self._header = False, b""
            pieces.append(piece)
            produced += len(piece)
            if produced > limit:
                break
            if self._inflater.eof:
                self._finished_members += 1
                if not self._gzip:
                    self._done = True
                    break
                # Another member may follow, in this chunk or the next one.
                data = self._inflater.unused_data
                self._inflater = zlib.decompressobj(_GZIP_WBITS)
                continue
            # Fewer than the allowed bytes came out, so all input was consumed unless
            # unconsumed_tail says otherwise.
            data = self._inflater.unconsumed_tail
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class _ContentDecoder:
    """The ``Content-Encoding`` chain of one response, undone in reverse order."""

    def __init__(self, stages: list[_ZlibStage]) -> None:
        self._stages = stages

    @property
    def encoded(self) -> bool:
        return bool(self._stages)

    @classmethod
    def for_header(cls, header: str | None) -> _ContentDecoder:
        """Decoders for a ``Content-Encoding`` value; FetchError for codings not offered."""
        codings = [c.strip().lower() for c in (header or "").split(",")]
        codings = [c for c in codings if c and c != "identity"]
        if len(codings) > _MAX_CODINGS:
            raise FetchError(FailureClass.PROTOCOL_ERROR, f"Content-Encoding {header!r}")
        stages: list[_ZlibStage] = []
        for coding in reversed(codings):
            if coding in ("gzip", "x-gzip"):
                stages.append(_ZlibStage("gzip"))
            elif coding == "deflate":
                stages.append(_ZlibStage("deflate"))
            else:
                raise FetchError(
                    FailureClass.PROTOCOL_ERROR,
                    f"unsupported Content-Encoding {coding!r} (we accept {ACCEPT_ENCODING})",
                )
        return cls(stages)

    def decode(self, data: bytes, limit: int) -> bytes:
        """Decode a chunk; more than ``limit`` bytes back means the body is over budget."""
        for stage in self._stages:
            data = stage.decode(data, limit)
            if len(data) > limit:
                break
        return data


class _RawChunks:
    """The body as received, closed even when the reader stops early (a cap, an error).

    A class, not ``contextlib.asynccontextmanager``: entered once per response, and the
    generator-based version cost an extra generator and two of its steps each time.
    """

    __slots__ = ("_chunks",)

    def __init__(self, response: httpx.Response) -> None:
        self._chunks = response.aiter_raw()

    async def __aenter__(self) -> AsyncIterator[bytes]:
        return self._chunks

    async def __aexit__(self, *_: object) -> None:
        if isinstance(self._chunks, AsyncGenerator):
            await self._chunks.aclose()


def _content_length(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None  # absent or malformed: the streamed count still applies
    return int(value)


def _status_message(
    response: httpx.Response, headers: dict[str, str], body_length: int | None
) -> str:
    reason = response.reason_phrase or ""
    text = f"HTTP {response.status_code} {reason}".rstrip()
    if body_length is not None:
        content_type = headers.get("content-type", "no Content-Type")
        text += f" ({body_length} bytes of {content_type})"
    return text


# -- errors ---------------------------------------------------------------------------------


def _failure_from_exception(error: BaseException) -> tuple[FailureClass, str]:
    """The one translation of network, library and decoding errors into a failure class.

    The most telling exception in the ``__cause__`` chain decides: our own ``FetchError``
    (guard, caps, decoding), then aiohttp's original error (httpx_aiohttp's mapping to httpx
    exceptions loses detail: a server hanging up becomes ``ConnectTimeout``), then httpx's.
    """
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and len(chain) < 8:
        chain.append(cause)
        cause = cause.__cause__
    detail = f"{type(error).__name__}: {error}".rstrip(": ")
    for item in chain:
        if isinstance(item, FetchError):
            return FailureClass(item.failure_class), item.message
    for item in chain:
        if isinstance(item, aiohttp.ClientError):
            return _from_aiohttp(item), f"{type(item).__name__}: {item}".rstrip(": ")
    for item in chain:
        if isinstance(item, httpx.HTTPError | httpx.InvalidURL):
            return _from_httpx(item), detail
    if isinstance(error, zlib.error):
        return FailureClass.PROTOCOL_ERROR, f"undecodable body: {error}"
    if isinstance(error, UnicodeError):
        return FailureClass.INVALID_URL, detail
    if isinstance(error, TimeoutError):
        return FailureClass.TIMEOUT, detail
    return FailureClass.CONNECT_ERROR, detail  # any other OSError: the socket failed


def _from_aiohttp(error: aiohttp.ClientError) -> FailureClass:
    # Order matters: the subclasses come before their bases.
    if isinstance(error, aiohttp.ClientConnectorDNSError):
        return FailureClass.DNS_ERROR
    if isinstance(error, aiohttp.ServerTimeoutError):
        return FailureClass.TIMEOUT
    if isinstance(error, aiohttp.ClientConnectorError):
        return FailureClass.CONNECT_ERROR
    if isinstance(error, aiohttp.NonHttpUrlClientError):
        return FailureClass.BAD_SCHEME
    if isinstance(error, aiohttp.InvalidURL):
        return FailureClass.INVALID_URL
    return FailureClass.PROTOCOL_ERROR  # disconnects, bad framing, bad headers, payload errors


def _from_httpx(error: httpx.HTTPError | httpx.InvalidURL) -> FailureClass:
    if isinstance(error, httpx.TimeoutException):
        return FailureClass.TIMEOUT
    if isinstance(error, httpx.ConnectError):
        return FailureClass.CONNECT_ERROR
    if isinstance(error, httpx.UnsupportedProtocol):
        return FailureClass.BAD_SCHEME
    if isinstance(error, httpx.InvalidURL):
        return FailureClass.INVALID_URL
    return FailureClass.PROTOCOL_ERROR
