"""The request layer (DESIGN §4 layer 1, §6): fetch one URL safely, politely and boundedly.

``Fetcher.fetch`` turns a URL into a ``FetchResult`` and never raises for anything the network
or the site does: a hostile page costs one failed result, never a worker. This module holds
the request layer's decisions — which redirects to follow, which failures to retry and when —
over two parts with one idea each: :mod:`~crawlfleet.crawler.fetching.transport` (the pooled client,
whose connections go only to addresses the ``AddressGuard`` approved, and the translation of
network errors into failure classes) and :mod:`~crawlfleet.crawler.fetching.bodies` (bodies streamed
and capped on the wire and after decoding).

* **SSRF** (DESIGN §6). Only http and https. Every host, the first URL's and every redirect
  hop's, is checked with ``AddressGuard`` before a connection is made (IP literals included),
  and the transport then connects to exactly the addresses the guard approved. With
  ``allow_private_networks`` the guard still refuses cloud metadata addresses.
* **Redirects** are followed by hand so that each hop is checked before it is requested:
  scheme, loop (a URL seen twice), count (``max_redirects``), the caller's scope
  (``allow_url``), the caller's own asynchronous check (``check_hop``: the worker asks
  robots.txt of the hop's origin there) and the guard.
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
* **Conditional GET** (``conditional``, see :mod:`~crawlfleet.crawler.fetching.conditional`):
  every request of the fetch carries ``If-None-Match`` / ``If-Modified-Since``; a 304 to it is
  a success without a body (nothing is read, ``FetchResult.not_modified``), and is never taken
  for a redirect. A 304 to a request that asked nothing conditional stays a protocol error.

**Streamed bodies** (``stream``, see :mod:`~crawlfleet.crawler.fetching.streaming`): the same
machinery, but the body of a response the caller's ``StreamedBody`` takes is handed to it chunk
by chunk, nothing is held, and there is no total deadline (a body of gigabytes may take hours:
the per-read timeout catches a stall); a file download
(``crawlfleet.crawler.files.download.fetch_file``) is read through it. ``fetch`` may also stop
after a 2xx's headers when the caller's ``stop_for_type`` wants its content type as a file
(``FetchResult.file_type``): the worker then downloads that URL as a file.

``FetchResult.attempts`` counts every HTTP request sent for the fetch: retries and redirect
hops alike (so retries = ``attempts - 1 - len(redirects)`` when the chain did not fail).
``wire_bytes`` counts body bytes as received (after chunked framing, before content decoding)
over all those requests.

Requests and responses are httpx's ``Request`` and ``Response``, handed to the transport
without ``AsyncClient.send``'s auth, cookie and redirect layers (see ``_exchange``); httpx's
cookie jar is thus never used, and aiohttp's is a dummy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urldefrag, urljoin, urlsplit

import httpx

from crawlfleet.crawler.fetching.bodies import ACCEPT_ENCODING, discard_body, read_body
from crawlfleet.crawler.fetching.conditional import Conditional
from crawlfleet.crawler.fetching.failures import (
    DEFAULT_MIN_HTML_BYTES,
    FailureClass,
    backoff_seconds,
    classify_response,
    parse_retry_after,
)
from crawlfleet.crawler.fetching.memory import Reservation
from crawlfleet.crawler.fetching.proxying import ProxyObserver
from crawlfleet.crawler.fetching.safety import AddressGuard
from crawlfleet.crawler.fetching.streaming import StreamedBody
from crawlfleet.crawler.fetching.transport import (
    NETWORK_ERRORS,
    build_transport,
    failure_from_exception,
    request_timeouts,
    stream_pieces,
)
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.proxies import ProxyPlan

__all__ = [
    "ACCEPT",
    "FetchResult",
    "FetchSettings",
    "Fetcher",
    "HopCheck",
]

_log = logging.getLogger(__name__)

#: What a crawler of HTML wants, in the order it wants it.
ACCEPT: Final = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"

#: Failure classes worth a new request at once (the others go back to the task layer).
_RETRIED: Final = frozenset(
    {
        FailureClass.CONNECT_ERROR,
        FailureClass.PROXY_ERROR,
        FailureClass.TIMEOUT,
        FailureClass.HTTP_5XX,
        FailureClass.PROTOCOL_ERROR,
        FailureClass.HTTP_429,
    }
)
_SCHEMES: Final = frozenset({"http", "https"})
_NOT_MODIFIED: Final = 304

#: A caller's check of a redirect hop before it is requested: None to follow it, else the
#: failure class and message that end the fetch.
HopCheck = Callable[[str], Awaitable[tuple[FailureClass, str] | None]]


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """Everything the request layer needs, as plain values; build them with :meth:`from_spec`.

    No defaults and no checks of their own: the CrawlJob model (``crawljob.py``) holds both.
    """

    user_agent: str
    connect_timeout_seconds: float
    read_timeout_seconds: float
    total_timeout_seconds: float
    max_body_bytes: int
    max_decompressed_bytes: int
    max_redirects: int
    request_attempts: int
    backoff_base_seconds: float
    backoff_factor: float
    backoff_max_seconds: float
    allow_private_networks: bool

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
    #: The content type of a 2xx whose body was not read because ``stop_for_type`` wanted it
    #: as a file (``failure`` None, ``body`` empty); None otherwise.
    file_type: str | None = None

    @property
    def not_modified(self) -> bool:
        """A conditional request's 304: the copy we hold is current (no body was read)."""
        return self.status == _NOT_MODIFIED and self.failure is None


@dataclass(frozen=True, slots=True)
class _Call:
    """One ``fetch``'s own choices, handed down its redirect and retry loops as one value."""

    allow_url: Callable[[str], bool] | None
    check_hop: HopCheck | None
    pace: Callable[[str], Awaitable[None]] | None
    min_retry_delay_seconds: float
    max_redirects: int
    min_html_bytes: int
    deadline: float
    reservation: Reservation | None
    #: ``If-None-Match`` / ``If-Modified-Since`` for every request; empty: unconditional.
    conditional_headers: dict[str, str]
    #: ``fetch``: a 2xx of a content type this accepts is left unread (``file_type``).
    stop_for_type: Callable[[str | None], bool] | None = None
    #: ``stream``: the caller's body, which reads the responses it takes.
    body: StreamedBody | None = None


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
    #: The streamed body asked for a fresh request at once (``Consumed.again``).
    again: bool = False


class Fetcher:
    """Fetches URLs for one worker process over one pooled client; close with ``aclose``.

    ``guard`` defaults to an ``AddressGuard`` built from ``settings.allow_private_networks``;
    one passed in must agree with that setting, so the two can never silently disagree.
    ``rng`` drives the retry jitter (pass a seeded one for reproducible tests). The client is
    built here but its aiohttp session only on the first request, so a ``Fetcher`` may be made
    outside the event loop that will use it. ``proxies`` routes the requests through
    ``spec.proxy``'s proxies (``proxying.ProxyRouter``), telling ``observe_proxies`` how each
    went.
    """

    def __init__(
        self,
        settings: FetchSettings,
        *,
        guard: AddressGuard | None = None,
        rng: random.Random | None = None,
        proxies: ProxyPlan | None = None,
        observe_proxies: ProxyObserver | None = None,
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
        self._transport = build_transport(guard, proxies, observe_proxies=observe_proxies)
        self._timeouts = request_timeouts(
            connect_seconds=settings.connect_timeout_seconds,
            read_seconds=settings.read_timeout_seconds,
            total_seconds=settings.total_timeout_seconds,
        )

    @property
    def settings(self) -> FetchSettings:
        return self._settings

    async def fetch(
        self,
        url: str,
        *,
        allow_url: Callable[[str], bool] | None = None,
        check_hop: HopCheck | None = None,
        min_retry_delay_seconds: float = 0.0,
        pace: Callable[[str], Awaitable[None]] | None = None,
        max_redirects: int | None = None,
        min_html_bytes: int = DEFAULT_MIN_HTML_BYTES,
        reservation: Reservation | None = None,
        deadline: float | None = None,
        conditional: Conditional | None = None,
        stop_for_type: Callable[[str | None], bool] | None = None,
    ) -> FetchResult:
        """Fetch ``url``, following redirects that ``allow_url`` accepts; see the module doc.

        ``allow_url`` is the caller's scope check, applied to every redirect hop (the first URL
        is the caller's own choice), and ``check_hop`` its asynchronous one, awaited after it.
        ``min_retry_delay_seconds`` is the least pause before a retry of the same URL: the
        host's politeness delay. ``pace(url)`` is awaited before every request after the first
        (retries and redirect hops), so the caller can keep all requests to a host apart, as
        the frontier does for the first. ``max_redirects`` overrides the settings' cap (robots.txt
        follows its own); ``min_html_bytes`` is the soft-block threshold of a 2xx HTML body.
        ``reservation`` is charged with the body's decoded bytes (the worker's memory budget).
        ``deadline`` (the event loop's clock) ends the fetch sooner than the total timeout: the
        lease's fetch deadline, after which the frontier no longer counts its host slot.
        ``conditional`` holds the validators of the copy we have: the fetch asks only for a
        newer one, and a 304 ends it as a success without a body (see the module doc).
        ``stop_for_type(content_type)`` True for a 2xx ends the fetch after its headers, a
        success without a body whose ``file_type`` is that content type.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        total_deadline = started + self._settings.total_timeout_seconds
        deadline = total_deadline if deadline is None else min(deadline, total_deadline)
        call = _Call(
            allow_url=allow_url,
            check_hop=check_hop,
            pace=pace,
            min_retry_delay_seconds=min_retry_delay_seconds,
            max_redirects=self._settings.max_redirects if max_redirects is None else max_redirects,
            min_html_bytes=min_html_bytes,
            deadline=deadline,
            reservation=reservation,
            conditional_headers=conditional.request_headers() if conditional else {},
            stop_for_type=stop_for_type,
        )
        result = _empty_result(url)
        try:
            async with asyncio.timeout_at(deadline):
                await self._follow(result, call)
        except TimeoutError:
            # Per-request timeouts are translated inside; only the total deadline gets here.
            result.failure = FailureClass.TIMEOUT
            since = "" if deadline == total_deadline else " (counted from the lease's claim)"
            result.message = (
                f"total deadline of {self._settings.total_timeout_seconds:g} s{since} passed"
                f" after {result.attempts} request(s)"
            )
            result.body = b""
        result.elapsed_seconds = loop.time() - started
        if not result.fetched_at:
            result.fetched_at = time.time()
        return result

    async def stream(
        self,
        url: str,
        body: StreamedBody,
        *,
        allow_url: Callable[[str], bool] | None = None,
        check_hop: HopCheck | None = None,
        min_retry_delay_seconds: float = 0.0,
        pace: Callable[[str], Awaitable[None]] | None = None,
    ) -> FetchResult:
        """Fetch ``url`` as :meth:`fetch` does, but let ``body`` read the responses it takes
        (see :mod:`~crawlfleet.crawler.fetching.streaming`); the result's ``body`` stays empty.

        No total deadline and no body caps: ``body`` bounds what it reads, and each read has
        the settings' read timeout. ``failure`` None means the last response was taken and
        ``body`` found it good.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        call = _Call(
            allow_url=allow_url,
            check_hop=check_hop,
            pace=pace,
            min_retry_delay_seconds=min_retry_delay_seconds,
            max_redirects=self._settings.max_redirects,
            min_html_bytes=DEFAULT_MIN_HTML_BYTES,
            deadline=math.inf,
            reservation=None,
            conditional_headers={},
            body=body,
        )
        result = _empty_result(url)
        await self._follow(result, call)
        result.elapsed_seconds = loop.time() - started
        if not result.fetched_at:
            result.fetched_at = time.time()
        return result

    async def aclose(self) -> None:
        """Close the pooled connections; the Fetcher cannot be used afterwards."""
        await self._transport.aclose()

    # -- redirects -----------------------------------------------------------------------

    async def _follow(self, result: FetchResult, call: _Call) -> None:
        """Fetch ``result.url`` and its redirect hops, filling ``result`` as it goes."""
        current = result.url
        seen = {urldefrag(current).url}
        while True:
            exchange = await self._exchange_with_retries(current, result, call)
            result.failure, result.message = exchange.failure, exchange.message
            result.body = exchange.body
            if exchange.failure is not None or exchange.location is None:
                return
            failure, target = self._next_hop(
                current, exchange.location, seen, len(result.redirects), call
            )
            if failure is None and call.check_hop is not None:
                refused = await call.check_hop(target)
                if refused is not None:
                    failure, target = refused
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
        call: _Call,
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
        if hops_so_far >= call.max_redirects:
            return (
                FailureClass.TOO_MANY_REDIRECTS,
                f"more than {call.max_redirects} redirects (next: {target})",
            )
        if call.allow_url is not None and not call.allow_url(target):
            return FailureClass.OUT_OF_SCOPE, f"redirect to {target} is out of scope"
        return None, target

    # -- retries -------------------------------------------------------------------------

    async def _exchange_with_retries(self, url: str, result: FetchResult, call: _Call) -> _Exchange:
        """One URL (no redirects) with the request-layer retries; the last exchange."""
        settings = self._settings
        attempt = 0
        while True:
            if call.pace is not None and result.attempts > 0:
                await call.pace(url)
            exchange = await self._exchange(url, result, call)
            if exchange.again:
                continue  # a streamed body asked for a fresh request: not a retry
            attempt += 1
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
                call.min_retry_delay_seconds,
            )
            if asyncio.get_running_loop().time() + delay >= call.deadline:
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

    async def _exchange(self, url: str, result: FetchResult, call: _Call) -> _Exchange:
        """Send one GET for ``url`` and read its response; failures come back classified."""
        exchange = _Exchange()
        try:
            await self._guard.check_url(url)  # before any connection (also for IP literals)
            extra = await call.body.prepare() if call.body is not None else None
            # An explicit empty body skips httpx's body encoding and its second pass over the
            # headers (Host and Content-Length, which aiohttp sets for a bodiless GET itself);
            # read() marks it loaded, so the transport sends no body at all.
            request = httpx.Request(
                "GET",
                url,
                headers=self._request_headers(call, extra),
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
                if call.body is not None and call.body.takes(response.status_code):
                    await self._consume(call.body, response, headers, result, exchange)
                elif (
                    call.stop_for_type is not None
                    and 200 <= response.status_code < 300
                    and call.stop_for_type(headers.get("content-type"))
                ):  # the caller downloads it as a file: its body is not read here
                    result.file_type = headers.get("content-type")
                elif 200 <= response.status_code < 300:
                    body = await read_body(
                        response, headers, self._settings, result, call.reservation
                    )
                    exchange.failure = classify_response(
                        response.status_code,
                        headers.get("content-type"),
                        len(body),
                        min_html_bytes=call.min_html_bytes,
                    )
                    if exchange.failure is None:
                        exchange.body = body
                    else:
                        exchange.message = _status_message(response, headers, len(body))
                elif response.status_code == _NOT_MODIFIED and call.conditional_headers:
                    pass  # the copy we hold is current: a success, and there is no body to read
                else:
                    await discard_body(response, result)
                    self._classify_non_success(response, headers, exchange)
            finally:
                await response.aclose()
        except NETWORK_ERRORS as error:
            exchange.failure, exchange.message = failure_from_exception(error)
            exchange.body = b""
        return exchange

    def _request_headers(
        self, call: _Call, extra: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        # A new mapping per request: nothing a previous attempt did can leak into the next.
        headers = {
            "User-Agent": self._settings.user_agent,
            "Accept": ACCEPT,
            "Accept-Encoding": ACCEPT_ENCODING,
            **call.conditional_headers,
        }
        if extra:  # a streamed body's: each replaces ours of the same name, whatever its case
            replaced = {name.lower() for name in extra}
            headers = {k: v for k, v in headers.items() if k.lower() not in replaced}
            headers.update(extra)
        return headers

    @staticmethod
    async def _consume(
        body: StreamedBody,
        response: httpx.Response,
        headers: dict[str, str],
        result: FetchResult,
        exchange: _Exchange,
    ) -> None:
        """Hand the response to the streamed ``body``, counting its wire bytes."""
        async with contextlib.aclosing(_counted_chunks(response, result)) as chunks:
            consumed = await body.consume(response.status_code, headers, chunks)
        exchange.failure, exchange.message = consumed.failure, consumed.message
        exchange.again = consumed.again

    @staticmethod
    def _classify_non_success(
        response: httpx.Response, headers: dict[str, str], exchange: _Exchange
    ) -> None:
        status = response.status_code
        if 300 <= status < 400:
            location = headers.get("location")
            if location and location.strip() and status != _NOT_MODIFIED:
                exchange.location = location
                return
            exchange.failure = FailureClass.PROTOCOL_ERROR
            exchange.message = f"HTTP {status} without a usable Location header"
            return
        exchange.failure = classify_response(status, headers.get("content-type"), 0)
        if exchange.failure is None:  # a status below 200 that aiohttp handed on
            exchange.failure = FailureClass.PROTOCOL_ERROR
        exchange.message = _status_message(response, headers, None)


def _empty_result(url: str) -> FetchResult:
    """A result before any request: filled in as the fetch goes."""
    return FetchResult(
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


async def _counted_chunks(response: httpx.Response, result: FetchResult) -> AsyncGenerator[bytes]:
    """The body as received (in large pieces: ``transport.stream_pieces``), each counted in
    ``result.wire_bytes`` as it comes."""
    raw = stream_pieces(response)
    try:
        async for chunk in raw:
            result.wire_bytes += len(chunk)
            yield chunk
    finally:
        await raw.aclose()


def _status_message(
    response: httpx.Response, headers: dict[str, str], body_length: int | None
) -> str:
    reason = response.reason_phrase or ""
    text = f"HTTP {response.status_code} {reason}".rstrip()
    if body_length is not None:
        content_type = headers.get("content-type", "no Content-Type")
        text += f" ({body_length} bytes of {content_type})"
    return text
