"""The transport: one pooled HTTP client whose connections go only where the guard allows.

One ``httpx_aiohttp.AiohttpTransport`` per ``Fetcher``, over one pooled ``aiohttp.ClientSession``:
httpx's ``Request``/``Response`` API at aiohttp's speed (the comparison is in
docs/benchmarks.md). Besides speed, aiohttp's connector takes a resolver object, which is what
lets connections use the guard's addresses; httpx's default transport resolves by itself at
connect time.

**SSRF** (DESIGN §6): the connector resolves through :class:`GuardResolver`, which asks the
``AddressGuard`` (and its cache) instead of the system resolver, so a name cannot answer
"public" to the check before a request and "private" to the connect (DNS rebinding). IP
literals skip DNS in aiohttp, and are fully judged by the guard's check before the request.
Proxies from the environment are ignored (``trust_env=False``): a proxy would make the checked
address meaningless. aiohttp's cookie jar is a ``DummyCookieJar``: one client serves every
site, and cookies from one must neither pile up nor leak to another.

**Header limits** are explicit (aiohttp ≥ 3.13.4 has all three): a status or header line of at
most :data:`MAX_HEADER_LINE_BYTES`, one header field of at most :data:`MAX_HEADER_FIELD_BYTES`
(a 100,000-character ``Location`` is refused here, before any URL is built from it), and at
most :data:`MAX_HEADERS` fields, so one response head costs at most ~2 MiB. A response past
them is ``headers_too_large``, a permanent failure: asking again gets the same head.

The errors the network, a server or a page can cause (:data:`NETWORK_ERRORS`) are translated
here, once, into failure classes (:func:`failure_from_exception`).
"""

from __future__ import annotations

import socket
import zlib
from collections.abc import AsyncGenerator
from typing import Any, Final

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult
from httpx_aiohttp import AiohttpTransport
from httpx_aiohttp.transport import AiohttpResponseStream, map_aiohttp_exceptions

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.proxying import ProxyObserver, ProxyRouter
from crawlfleet.crawler.fetching.safety import AddressGuard
from crawlfleet.errors import FetchError
from crawlfleet.proxies import ProxyPlan

__all__ = [
    "MAX_HEADERS",
    "MAX_HEADER_FIELD_BYTES",
    "MAX_HEADER_LINE_BYTES",
    "NETWORK_ERRORS",
    "STREAM_READ_BYTES",
    "GuardResolver",
    "build_transport",
    "failure_from_exception",
    "new_session",
    "request_timeouts",
]

#: The longest status line or header line of a response (aiohttp's default).
MAX_HEADER_LINE_BYTES: Final = 8190
#: The longest single header field: real sites send CSP and cookie headers of several KiB.
MAX_HEADER_FIELD_BYTES: Final = 16 * 1024
#: The most header fields in one response (aiohttp's default).
MAX_HEADERS: Final = 128
# How aiohttp's parsers word a response head past those limits (LineTooLong, and the count).
_HEAD_TOO_LARGE: Final = ("Got more than", "Too many headers")

#: The most bytes one read of a streamed body (a file download) returns: whatever aiohttp holds
#: for the connection, up to this. httpx-aiohttp reads in fixed 16 KiB chunks, each paying
#: ~20 µs of Python on its way through aiohttp, httpx and the reader (docs/benchmarks.md,
#: "Files"); aiohttp's own flow control still bounds what it buffers (its high-water mark).
STREAM_READ_BYTES: Final = 256 * 1024

#: Errors the network, a server or a page can cause; anything else is a bug and propagates.
NETWORK_ERRORS: Final = (
    FetchError,
    httpx.HTTPError,
    httpx.InvalidURL,
    aiohttp.ClientError,
    OSError,
    zlib.error,
    UnicodeError,
)


class GuardResolver(AbstractResolver):
    """aiohttp's DNS, answered by the guard: connections go to the addresses it approved.

    The guard caches its answers, so the check before a request and the resolution at connect
    time normally see the very same addresses from one lookup; if they differ (the cache
    expired in between), the connect-time answer is checked again, never trusted. The names
    of ``proxies`` (``spec.proxy``'s HTTP proxies, which aiohttp dials by name) are judged by
    their own guard, which ``proxy.allowPrivate`` may open to private addresses.
    """

    def __init__(
        self, guard: AddressGuard, proxies: tuple[frozenset[str], AddressGuard] | None = None
    ) -> None:
        self._guard = guard
        self._proxies = proxies

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        guard = self._guard
        if self._proxies is not None and host in self._proxies[0]:
            guard = self._proxies[1]
        addresses = await guard.check_host(host, port)
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


def new_session(connector: aiohttp.BaseConnector) -> aiohttp.ClientSession:
    """A client session over ``connector`` with the crawler's settings: no cookies kept, no
    proxy from the environment, bodies left compressed, the response-head limits, and no
    silent resend."""
    session = aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        auto_decompress=False,
        max_line_size=MAX_HEADER_LINE_BYTES,
        max_field_size=MAX_HEADER_FIELD_BYTES,
        max_headers=MAX_HEADERS,
    )
    # aiohttp silently resends an idempotent request once when the server hangs up (on
    # fresh connections too), so a hostile server would see twice the requests we count
    # and pace. Retries are this module's job. No public switch exists (aiohttp 3.14).
    if hasattr(session, "_retry_connection"):
        session._retry_connection = False
    return session


def build_transport(
    guard: AddressGuard,
    proxies: ProxyPlan | None = None,
    *,
    observe_proxies: ProxyObserver | None = None,
) -> httpx.AsyncBaseTransport:
    """The one pooled transport: httpx's API over an aiohttp session resolving through the guard,
    routed through ``proxies`` when the job has any (``proxying.ProxyRouter``).

    The pool has no cap of its own (``limit=0``): the worker bounds its fetches
    (``concurrency.perWorker``) and each fetch makes one request at a time, so the connections
    in use never exceed that, and a second, smaller cap could only queue a fetch the worker
    meant to run. Politeness per host is the frontier's.
    """
    proxy_guard: AddressGuard | None = None
    if proxies is not None:
        proxy_guard = AddressGuard(allow_private=proxies.allow_private)
    made: list[aiohttp.ClientSession] = []

    def make_session() -> aiohttp.ClientSession:
        # One session for the direct route and every HTTP proxy's: made on the first request,
        # inside the loop that will own it, whichever route asks first.
        if not made:
            resolver = GuardResolver(
                guard,
                None
                if proxies is None or proxy_guard is None
                else (frozenset(p.host for p in proxies.proxies), proxy_guard),
            )
            connector = aiohttp.TCPConnector(
                limit=0,
                use_dns_cache=False,  # the guard caches, and only what it approved
                resolver=resolver,
            )
            made.append(new_session(connector))
        return made[0]

    direct = AiohttpTransport(client=make_session)
    if proxies is None or proxy_guard is None:
        return direct
    return ProxyRouter(
        direct,
        make_session,
        proxies,
        session_over=new_session,
        proxy_guard=proxy_guard,
        **({} if observe_proxies is None else {"observe": observe_proxies}),
    )


def request_timeouts(
    *, connect_seconds: float, read_seconds: float, total_seconds: float
) -> dict[str, Any]:
    """The request extension httpx transports read their timeouts from."""
    timeout = httpx.Timeout(
        connect=connect_seconds,
        read=read_seconds,
        write=read_seconds,
        # aiohttp's "connect" (waiting for a pooled connection, then connecting); the total
        # deadline bounds it anyway.
        pool=total_seconds,
    )
    return {"timeout": timeout.as_dict()}


def failure_from_exception(error: BaseException) -> tuple[FailureClass, str]:
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
    if isinstance(error, aiohttp.ClientResponseError) and error.message.startswith(_HEAD_TOO_LARGE):
        return FailureClass.HEADERS_TOO_LARGE
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


async def stream_pieces(response: httpx.Response) -> AsyncGenerator[bytes]:
    """A streamed response's body as received, in pieces of up to :data:`STREAM_READ_BYTES`:
    read from the aiohttp response under httpx-aiohttp's own error mapping (so a failure is the
    same ``httpx`` error as through ``aiter_raw``); any other transport's ``aiter_raw``.
    Pages keep ``aiter_raw`` (``bodies.py``): their caps and decoding count each chunk."""
    stream = response.stream
    if not isinstance(stream, AiohttpResponseStream):
        async for chunk in response.aiter_raw():
            yield chunk
        return
    content = stream._aiohttp_response.content  # the transport's own response
    with map_aiohttp_exceptions():
        while piece := await content.read(STREAM_READ_BYTES):
            yield piece
