"""A loopback site that serves large generated files, each host with its own way of failing.

Why a third site: resumable downloads (issue 24) are only trustworthy against servers that
honour ``Range`` the way RFC 9110 says, that ignore it, that change a file between two
attempts, that reset a connection mid-body or answer an empty 200 or an HTML error page where a
video should be. :class:`FileSite` is those servers, and its request log (the ``Range`` and
``If-Range`` each request carried, the bytes each response really sent) is the ground truth
the tests and ``bench/files.py`` assert against.

Hosts
-----
Host ``k`` of :data:`KINDS` listens on ``<base_address + k>:<free port>`` (127.0.24.1 … by
default: no other site uses that range, so politeness per host never mixes two sites), and
:meth:`FileSite.url` names it by its kind:

================ ===========================================================================
``ranges``       Honours a single ``Range`` (``bytes=N-``, ``bytes=N-M``, ``bytes=-N``) with
                 206 and ``Content-Range``; 416 with ``Content-Range: bytes */<size>`` when
                 ``N`` ≥ size; ``ETag`` (strong) and ``Last-Modified`` on every file;
                 ``If-Range`` that does not match the current validator gets 200 whole.
``norange``      Sends the validators but ignores ``Range``: always 200 whole (a CDN that
                 does not do ranges).
``changing``     Each request of a file serves its next version (new bytes, ETag and
                 Last-Modified); ranges as ``ranges``, so ``If-Range`` with the old ETag gets
                 200 whole, and a ``Range`` without ``If-Range`` gets the new version's bytes.
``flaky``        The first response of each file sends half of its body, waits until those
                 bytes left the socket, then resets the connection (RST); later ones are as
                 ``ranges``.
``empty_once``   The first request of each file gets 200 with an empty body (the file's
                 content type, ``Content-Length: 0``); later ones are as ``ranges``.
``html_error``   200 ``text/html`` with a small error page for every file (a soft block).
``lengthless``   200 whole, chunked, no ``Content-Length``; validators sent, ``Range``
                 ignored.
================ ===========================================================================

Paths, on every host: ``/files/<name>.<ext>?size=<bytes>`` (size defaults to
:attr:`FileSiteConfig.default_size`), ``/page/<n>.html`` (``n < pages``: a page linking files
in ``<a>``, ``<img>``, ``<video poster>`` and ``<video><source>``, see :func:`page_links`),
``/robots.txt`` (allows everything); anything else is 404. ``HEAD`` answers the headers a
``GET`` would.

Bodies
------
A file's bytes are a pure function of ``(name, size, version)`` (``name`` with its extension):
its extension's magic header, then pseudo-random bytes generated on the fly, never held whole
(:mod:`crawlfleet.testsite.file_bodies`, re-exported here). :meth:`FileSite.sha256` is the
digest of those bytes (computed streaming, cached).

Throttle: :attr:`FileSiteConfig.bytes_per_second` per response (0: as fast as the socket goes),
changed at run time with :meth:`FileSite.throttle`; a response reads the rate before each
piece it writes, so a change applies to responses already streaming.

Request log: one :class:`FileRequestRecord` per request, appended on arrival and updated while
the body streams (``bytes_sent`` grows after every write, so a test can watch a download reach
half), ``completed`` once the whole intended body was written.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import ipaddress
import re
import socket
import struct
import termios
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from aiohttp import web

from crawlfleet.testsite.file_bodies import (
    BLOCK_BYTES,
    CONTENT_TYPES,
    EPOCH,
    content_type_of,
    file_body,
    file_etag,
    file_header,
    file_last_modified,
    if_range_matches,
    parse_range,
)
from crawlfleet.testsite.listeners import bind_hosts, netlocs, serve
from crawlfleet.testsite.threaded import BackgroundSite, LoopThread

__all__ = [
    "BLOCK_BYTES",
    "CONTENT_TYPES",
    "EPOCH",
    "KINDS",
    "FileKind",
    "FileRequestRecord",
    "FileServer",
    "FileSite",
    "FileSiteConfig",
    "PageLink",
    "content_type_of",
    "file_body",
    "file_etag",
    "file_header",
    "file_last_modified",
    "page_links",
    "parse_range",
]

FileKind = Literal[
    "ranges", "norange", "changing", "flaky", "empty_once", "html_error", "lengthless"
]
#: The hosts, in address order: kind ``KINDS[k]`` listens on ``base_address + k``.
KINDS: Final[tuple[FileKind, ...]] = (
    "ranges",
    "norange",
    "changing",
    "flaky",
    "empty_once",
    "html_error",
    "lengthless",
)
#: Kinds that answer a satisfiable ``Range`` (with a matching ``If-Range``) with 206.
_RANGE_KINDS: Final = frozenset({"ranges", "changing", "flaky", "empty_once"})

_Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
_HTML: Final = "text/html; charset=utf-8"

#: Smallest piece a throttled response writes (so a slow rate still paces smoothly).
_MIN_PACED_BYTES: Final = 4 * 1024
#: Pieces a second a throttled response aims at.
_PACED_PIECES_PER_SECOND: Final = 20
#: How long the flaky host waits for its half body to leave the socket before the reset.
_DRAIN_TIMEOUT_SECONDS: Final = 10.0
_MAX_SIZE: Final = 1 << 44
_FILE_PATH: Final = re.compile(r"/files/([A-Za-z0-9_-][A-Za-z0-9._-]*)")
_PAGE_PATH: Final = re.compile(r"/page/(\d{1,6})\.html")


@dataclass(frozen=True)
class FileSiteConfig:
    """The site's shape; every default is named here once."""

    #: Size of a file whose URL has no ``size`` query.
    default_size: int = 1 << 20
    #: Per-response rate cap in bytes/second; 0: none.
    bytes_per_second: int = 0
    #: ``/page/0.html`` … ``/page/<pages-1>.html`` exist, each linking the next.
    pages: int = 3

    def __post_init__(self) -> None:
        if not 0 <= self.default_size <= _MAX_SIZE:
            raise ValueError(f"default_size must be between 0 and {_MAX_SIZE}")
        if self.bytes_per_second < 0 or self.pages < 0:
            raise ValueError("bytes_per_second and pages must not be negative")


# ---------------------------------------------------------------------------- pages


@dataclass(frozen=True, slots=True)
class PageLink:
    """A link of a ``/page/<n>.html``: the element it is in and its root-relative path."""

    element: str
    path: str


def page_links(n: int, pages: int) -> tuple[PageLink, ...]:
    """What ``/page/<n>.html`` links, in document order (the next page last, if any)."""
    links = [
        PageLink("a", f"/files/report-{n}.pdf"),
        PageLink("a", f"/files/archive-{n}.zip"),
        PageLink("img", f"/files/photo-{n}.png"),
        PageLink("video", f"/files/poster-{n}.jpg"),
        PageLink("source", f"/files/clip-{n}.mp4"),
        PageLink("source", f"/files/clip-{n}.webm"),
    ]
    if n + 1 < pages:
        links.append(PageLink("a", f"/page/{n + 1}.html"))
    return tuple(links)


def _render_page(n: int, pages: int) -> bytes:
    nxt = f'<p><a href="/page/{n + 1}.html">Next page</a></p>\n' if n + 1 < pages else ""
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>Files page {n}</title></head><body>\n<h1>Files page {n}</h1>\n"
        f'<p><a href="/files/report-{n}.pdf">Report {n}</a> and '
        f'<a href="/files/archive-{n}.zip">its data</a>.</p>\n'
        f'<p><img src="/files/photo-{n}.png" alt="Photo {n}"></p>\n'
        f'<video controls poster="/files/poster-{n}.jpg">'
        f'<source src="/files/clip-{n}.mp4" type="video/mp4">'
        f'<source src="/files/clip-{n}.webm" type="video/webm"></video>\n'
        f"{nxt}</body></html>\n"
    ).encode()


def _error_page() -> bytes:
    return (
        b"<!DOCTYPE html>\n<html><head><title>Access denied</title></head><body>"
        b"<h1>Access denied</h1><p>This file is not available in your region.</p>"
        b"</body></html>\n"
    )


# ---------------------------------------------------------------------------- request log


@dataclass(slots=True)
class FileRequestRecord:
    """One request as the server saw it; ``bytes_sent`` and ``completed`` change while the
    body streams."""

    #: The host's kind (``"ranges"``, ``"norange"``, …).
    host: str
    #: Raw path plus query string, exactly as sent.
    path: str
    range_header: str | None
    if_range: str | None
    #: The status sent; ``None`` until the headers went out.
    status: int | None = None
    #: Body bytes handed to the connection so far (counted as each write starts; a client
    #: that died may not have read the last of them).
    bytes_sent: int = 0
    #: The whole intended body was written (a reset or a client that hung up: False).
    completed: bool = False
    #: ``host:port`` the request arrived on.
    netloc: str = ""
    method: str = "GET"
    #: The file version served (``changing`` bumps it per request); ``None`` for non-files.
    version: int | None = None
    #: ``time.monotonic()`` at arrival, and when the handler was done (``None`` until then).
    at: float = 0.0
    ended: float | None = None

    @property
    def url(self) -> str:
        return f"http://{self.netloc}{self.path}"


def _path_key(path: str) -> str:
    """``path`` (or an absolute URL) as a request-log key: path plus query."""
    if "://" in path:
        parts = urlsplit(path)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return path


class FileLog:
    """Thread-safe list of :class:`FileRequestRecord`: written on the site's loop, read by
    tests from their own threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[FileRequestRecord] = []

    def add(self, record: FileRequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def requests(self, kind: str | None = None) -> list[FileRequestRecord]:
        with self._lock:
            return [r for r in self._records if kind is None or r.host == kind]

    def bytes_sent(self, path: str, kind: str | None = None) -> int:
        """Body bytes sent for ``path`` (a path with or without its query, or a URL)."""
        key = _path_key(path)
        total = 0
        for record in self.requests(kind):
            if record.path == key or record.path.partition("?")[0] == key:
                total += record.bytes_sent
        return total

    def reset(self) -> None:
        with self._lock:
            self._records.clear()


# ---------------------------------------------------------------------------- server


@dataclass(frozen=True, slots=True)
class _Answer:
    """What a file request gets: status, headers, and the body slice ``[start, end)``."""

    status: int
    headers: dict[str, str]
    start: int = 0
    end: int = 0
    chunked: bool = False
    #: Body bytes after which the connection is reset (flaky's first response).
    reset_after: int | None = None


class FileServer:
    """The asyncio core: one low-level aiohttp server per kind, every request logged."""

    def __init__(
        self, config: FileSiteConfig | None = None, *, base_address: str = "127.0.24.1"
    ) -> None:
        self.config = config or FileSiteConfig()
        self.log = FileLog()
        self.bytes_per_second = self.config.bytes_per_second
        self._base = ipaddress.IPv4Address(base_address)
        if not (self._base.is_loopback and (self._base + len(KINDS) - 1).is_loopback):
            raise ValueError("the file site listens on loopback addresses only")
        self._netlocs: list[str] = []
        self._runners: list[web.ServerRunner] = []
        #: Requests per (kind, file name, size): decides first responses and versions.
        self._hits: Counter[tuple[str, str, int]] = Counter()
        self._page_cache: dict[int, bytes] = {}

    @property
    def netlocs(self) -> dict[FileKind, str]:
        return dict(zip(KINDS, self._netlocs, strict=True))

    def base(self, kind: FileKind) -> str:
        return f"http://{self._netlocs[KINDS.index(kind)]}"

    def version(self, kind: FileKind, name: str, size: int) -> int:
        """The version the last request of that file got (``changing``: one per request)."""
        if kind != "changing":
            return 0
        return max(self._hits[kind, name, size] - 1, 0)

    def reset(self) -> None:
        self.log.reset()
        self._hits.clear()

    async def start(self) -> None:
        if self._runners:
            raise RuntimeError("already started")
        socks = bind_hosts(self._base, len(KINDS))
        self._netlocs = netlocs(socks)
        servers = [web.Server(self._handler_for(kind), access_log=None) for kind in KINDS]
        self._runners = await serve(zip(servers, socks, strict=True))

    async def stop(self) -> None:
        runners, self._runners = self._runners, []
        await asyncio.gather(*(r.cleanup() for r in runners), return_exceptions=True)

    def _handler_for(self, kind: FileKind) -> _Handler:
        netloc = self._netlocs[KINDS.index(kind)]

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            record = FileRequestRecord(
                host=kind,
                path=request.raw_path,
                range_header=request.headers.get("Range"),
                if_range=request.headers.get("If-Range"),
                netloc=netloc,
                method=request.method,
                at=time.monotonic(),
            )
            self.log.add(record)
            try:
                return await self._respond(kind, request, record)
            finally:
                record.ended = time.monotonic()

        return handle

    async def _respond(
        self, kind: FileKind, request: web.BaseRequest, record: FileRequestRecord
    ) -> web.StreamResponse:
        path = request.path
        if path == "/robots.txt":
            return self._small(record, 200, b"User-agent: *\nDisallow:\n", "text/plain")
        page = _PAGE_PATH.fullmatch(path)
        if page is not None and int(page[1]) < self.config.pages:
            n = int(page[1])
            body = self._page_cache.setdefault(n, _render_page(n, self.config.pages))
            return self._small(record, 200, body, _HTML)
        match = _FILE_PATH.fullmatch(path)
        size_text = request.query.get("size")
        if match is None or (size_text is not None and not size_text.isdigit()):
            return self._small(record, 404, b"<h1>Not Found</h1>\n", _HTML)
        size = self.config.default_size if size_text is None else int(size_text)
        if size > _MAX_SIZE:
            return self._small(record, 404, b"<h1>Not Found</h1>\n", _HTML)
        name = match[1]
        answer = self._answer(kind, name, size, request.headers, record)
        if answer is None:
            return self._small(record, 200, _error_page(), _HTML)
        return await self._stream(request, record, name, size, answer)

    def _answer(
        self,
        kind: FileKind,
        name: str,
        size: int,
        headers: Mapping[str, str],
        record: FileRequestRecord,
    ) -> _Answer | None:
        """What this request of the file gets (``None``: the HTML error page)."""
        if kind == "html_error":
            return None
        key = (kind, name, size)
        first = self._hits[key] == 0
        self._hits[key] += 1
        version = self.version(kind, name, size)
        record.version = version
        etag, last_modified = file_etag(name, size, version), file_last_modified(version)
        out = {"Content-Type": content_type_of(name)}
        if kind == "empty_once" and first:
            return _Answer(200, out)
        out["ETag"] = etag
        out["Last-Modified"] = last_modified
        if kind == "lengthless":
            return _Answer(200, out, 0, size, chunked=True)
        answer = _Answer(200, out, 0, size)
        asked = headers.get("Range")
        if kind in _RANGE_KINDS:
            out["Accept-Ranges"] = "bytes"
            if_range = headers.get("If-Range")
            if asked is not None and (
                if_range is None or if_range_matches(if_range, etag, last_modified)
            ):
                wanted = parse_range(asked, size)
                if wanted == "unsatisfiable":
                    out["Content-Range"] = f"bytes */{size}"
                    return _Answer(416, out)
                if wanted is not None:
                    start, end = wanted
                    out["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
                    answer = _Answer(206, out, start, end)
        if kind == "flaky" and first:
            return _Answer(
                answer.status,
                out,
                answer.start,
                answer.end,
                reset_after=(answer.end - answer.start) // 2,
            )
        return answer

    def _small(
        self, record: FileRequestRecord, status: int, body: bytes, content_type: str
    ) -> web.Response:
        record.status = status
        record.bytes_sent = len(body)
        record.completed = True
        return web.Response(status=status, body=body, headers={"Content-Type": content_type})

    async def _stream(
        self,
        request: web.BaseRequest,
        record: FileRequestRecord,
        name: str,
        size: int,
        answer: _Answer,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=answer.status, headers=answer.headers)
        length = answer.end - answer.start
        if answer.chunked:
            resp.enable_chunked_encoding()
        else:
            resp.content_length = length
        record.status = answer.status
        try:
            await resp.prepare(request)
            if request.method == "HEAD" or length == 0:
                await resp.write_eof()
                record.completed = True
                return resp
            whole = answer.reset_after is None
            limit = length if answer.reset_after is None else answer.reset_after
            version = record.version or 0
            chunks = file_body(name, size, version, start=answer.start, end=answer.start + limit)
            await self._send(resp, record, chunks, limit, whole)
            if not whole:
                await _reset(request)
                return resp
            await resp.write_eof()
        except ConnectionError:  # the client hung up: its record is incomplete
            record.completed = False
        return resp

    async def _send(
        self,
        resp: web.StreamResponse,
        record: FileRequestRecord,
        chunks: Iterator[bytes],
        length: int,
        whole: bool,
    ) -> None:
        """Write ``chunks`` (``length`` bytes), paced by the current rate (read before every
        piece). The record counts a piece before it is written, and is ``completed`` before
        the last one when ``whole``: a client that has every byte finds the log up to date."""
        due = time.monotonic()
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                rate = self.bytes_per_second
                if not rate:
                    piece, view = view, view[len(view) :]
                else:
                    step = max(_MIN_PACED_BYTES, rate // _PACED_PIECES_PER_SECOND)
                    piece, view = view[:step], view[step:]
                    now = time.monotonic()
                    due = max(due, now)
                    if due > now:
                        await asyncio.sleep(due - now)
                    due += len(piece) / rate
                record.bytes_sent += len(piece)
                record.completed = whole and record.bytes_sent == length
                await resp.write(piece)


async def _reset(request: web.BaseRequest) -> None:
    """Reset the connection (RST, not FIN: an abortive close, SO_LINGER 0, as a dropped link or
    a killed proxy does) once what was written has reached the client: an abortive close drops
    whatever the kernel has not sent yet, so wait until the socket's send queue is empty
    (``SIOCOUTQ``: no byte unacknowledged), or the drain timeout passed."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    deadline = time.monotonic() + _DRAIN_TIMEOUT_SECONDS
    # Polled: neither asyncio nor the kernel signals "the peer acknowledged everything".
    while _unsent_bytes(transport, sock) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _unsent_bytes(transport: asyncio.BaseTransport, sock: socket.socket | None) -> int:
    """Bytes still in asyncio's buffer plus the kernel's unacknowledged send queue."""
    buffered = (
        transport.get_write_buffer_size() if isinstance(transport, asyncio.WriteTransport) else 0
    )
    if sock is None or sock.fileno() < 0:
        return buffered
    queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
    unacknowledged: int = struct.unpack("i", queued)[0]
    return buffered + unacknowledged


# ---------------------------------------------------------------------------- threaded wrapper


class FileSite(BackgroundSite):
    """A :class:`FileServer` on a background thread: what tests and benches use.

    ``with FileSite(FileSiteConfig(bytes_per_second=...)) as site: site.file_url("ranges",
    "clip.mp4", 1 << 20)``; :meth:`requests` is the log, :meth:`sha256` the expected digest.
    """

    def __init__(
        self, config: FileSiteConfig | None = None, *, base_address: str = "127.0.24.1"
    ) -> None:
        self.server = FileServer(config, base_address=base_address)
        self.config = self.server.config
        self._thread = LoopThread(self.server, name="crawlfleet-file-site")
        self._digests: dict[tuple[str, int, int], str] = {}
        self._digest_lock = threading.Lock()

    @property
    def hosts(self) -> dict[FileKind, str]:
        """Netloc of each kind's host."""
        return self.server.netlocs

    def url(self, kind: FileKind, path: str = "/") -> str:
        """Absolute URL of ``path`` on the ``kind`` host."""
        return self.server.base(kind) + path

    def file_url(self, kind: FileKind, name: str, size: int | None = None) -> str:
        """URL of the file ``name`` (with its extension) of ``size`` bytes (the config's
        default size when None) on the ``kind`` host."""
        query = "" if size is None else f"?size={size}"
        return self.url(kind, f"/files/{name}{query}")

    def page_url(self, kind: FileKind, n: int) -> str:
        return self.url(kind, f"/page/{n}.html")

    def throttle(self, bytes_per_second: int) -> None:
        """Cap every response at ``bytes_per_second`` from now on (0: no cap); responses
        already streaming follow at their next piece."""
        if bytes_per_second < 0:
            raise ValueError("bytes_per_second must not be negative")

        def apply() -> None:
            self.server.bytes_per_second = bytes_per_second

        self._thread.call(apply)

    def requests(self, kind: FileKind | None = None) -> list[FileRequestRecord]:
        """Every request (of one kind's host), in arrival order."""
        return self.server.log.requests(kind)

    def bytes_sent(self, path: str, kind: FileKind | None = None) -> int:
        """Body bytes sent for ``path`` (path with or without query, or a URL) so far."""
        return self.server.log.bytes_sent(path, kind)

    def version(self, kind: FileKind, name: str, size: int | None = None) -> int:
        """The version of the file the last request of it got (see ``changing``)."""
        resolved = self.config.default_size if size is None else size
        return self._thread.call(lambda: self.server.version(kind, name, resolved))

    def reset(self) -> None:
        """Clear the request log and every file's request count (so versions, first
        responses of ``flaky`` and ``empty_once``)."""
        self._thread.call(self.server.reset)

    def sha256(self, name: str, size: int | None = None, version: int = 0) -> str:
        """Hex sha256 of the file's bytes (streamed once, then cached)."""
        resolved = self.config.default_size if size is None else size
        key = (name, resolved, version)
        with self._digest_lock:
            cached = self._digests.get(key)
        if cached is not None:
            return cached
        digest = hashlib.sha256()
        for chunk in file_body(name, resolved, version):
            digest.update(chunk)
        value = digest.hexdigest()
        with self._digest_lock:
            self._digests[key] = value
        return value
