"""One file download: streamed into its part, resumed with ``Range``, verified at the end.

``fetch_file(fetcher, url, FileRequest(...))`` fetches a file with everything ``Fetcher.fetch``
does for a page (the address guard on the URL and every redirect hop, the caller's scope and
robots checks of each hop, request-layer retries with backoff, failure classes), through
``Fetcher.stream``, and differs where a file must:

* ``Accept-Encoding: identity``: bytes on the wire are the bytes stored, so a range means what
  it says;
* every request (the first, each retry, each redirect hop) asks for the rest of what the part
  holds (``Range`` + ``If-Range``, see :mod:`~crawlfleet.crawler.files.resume`), and a reset
  mid-body is retried from the last byte received: what came is checkpointed first;
* the answer decides: a matching 206 appends, a 416 confirming the total a complete part
  holds (a process that ended before it finished the part) reads nothing and verifies the part
  as it is, a 200 restarts the part with its body, a
  mismatched 206, a 416 or a changed validator restart it and ask again without a range: a
  file is never spliced from two versions, and every restart is counted by its reason; a 206
  that ends short of the total (a server that serves a range in pieces) is followed at once by
  a request for the rest;
* the body streams chunk by chunk into the part with an incremental sha256, computed in a
  thread a batch behind the bytes (``digest.BackgroundDigest``; on resume, the durable bytes
  are hashed first; a part that cannot read them back leaves ``sha256`` None and the worker
  hashes the finished object), checkpointed every ``part_size`` bytes and on stop
  (a part that can, a local one, makes the periodic checkpoint durable while the next bytes
  arrive: ``parts.PartSyncsBehind``; a stop, a retry and the end wait for it, so each ends
  with a durable checkpoint);
* no body cap but the rule's ``max_bytes`` (a larger ``Content-Length`` is refused before any
  byte is read) and no total deadline: the per-read timeout catches a stalled server;
* at the end: the size against the declared length (``file_size_mismatch``), the magic bytes
  against the declared type (``file_type_mismatch``, :mod:`~crawlfleet.crawler.files.sniff`),
  and the minimum size of the type (``file_too_small``). Bytes that failed verification are
  dropped from the part (its next attempt starts afresh); bytes cut short are kept.

The part's lifecycle is the caller's: it opens the part, and after the result finishes it
(success), discards it (a permanent failure) or closes it (anything else, a stop included).

**Memory**: a download holds one network piece (at most ``transport.STREAM_READ_BYTES``,
256 KiB: ``Fetcher.stream`` reads whatever aiohttp has buffered, up to that), its split at a
``part_size`` boundary (no more than the piece), the first 4 KiB of the file (for the type
check) and what its part buffers (a local part: two buffers of about ``parts.WRITE_BEHIND_BYTES``,
2 MiB, one filling while the other is written in a thread; its checkpoint's fsync, running
behind, holds no bytes; the digest's batches are the same chunks, not copies): under 5 MiB,
plus aiohttp's read buffer for the connection,
which its flow control bounds (it stops reading the socket past its high-water mark); never a
whole part, whatever the file's size (tests/integration/crawler/test_file_download.py and
tests/integration/local/test_files_memory.py measure it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.fetch import Fetcher, FetchResult, HopCheck
from crawlfleet.crawler.fetching.streaming import Consumed
from crawlfleet.crawler.files.digest import BackgroundDigest
from crawlfleet.crawler.files.parts import PartSyncsBehind, PartWriter, StoredFile
from crawlfleet.crawler.files.resume import (
    Append,
    Complete,
    Restart,
    RestartReason,
    Whole,
    adopt,
    if_range,
    judge,
)
from crawlfleet.crawler.files.resume import request_headers as range_headers
from crawlfleet.crawler.files.sniff import HEAD_BYTES, check
from crawlfleet.crawler.files.sniff import min_bytes as type_min_bytes

__all__ = [
    "MAX_PIECES_PER_ATTEMPT",
    "MAX_RESTARTS_PER_ATTEMPT",
    "FileLimits",
    "FileRequest",
    "FileResult",
    "HeadVerdict",
    "Throttle",
    "fetch_file",
    "verify_head",
]

#: Fresh requests without a range after a mismatched answer, per attempt: a server that answers
#: even those badly is failed (``protocol_error``), not asked forever.
MAX_RESTARTS_PER_ATTEMPT: Final = 3
#: Requests for the rest of a range a server sends in pieces, per attempt: enough for a file of
#: gigabytes in the pieces CDNs send, and a server that sends a byte at a time costs a bounded
#: number of requests before the attempt ends (``file_size_mismatch``, resumed next time).
MAX_PIECES_PER_ATTEMPT: Final = 1000
#: The most bytes a throttle lets through at once after a pause (as a share of a second).
_BURST_SECONDS: Final = 0.25
#: What a download accepts: any type (the rule and the verification judge it), no coding.
_FILE_REQUEST_HEADERS: Final = {"Accept": "*/*", "Accept-Encoding": "identity"}
_PARTIAL_CONTENT: Final = 206
_RANGE_NOT_SATISFIABLE: Final = 416


class Throttle:
    """A token bucket of bytes per second, shared by a worker's downloads; 0 = no cap.

    ``take(n)`` is awaited after ``n`` bytes arrived: it pays them from the bucket, and when the
    bucket is short it sleeps until the debt is repaid, so the average over all takers is the
    rate however many share it (each one's sleep covers the debt before it, too). The bucket
    starts empty and holds at most a quarter second of bytes, so a measured rate is the rate
    from the first byte and a pause buys only a short burst. TCP's flow control carries the
    pause back to the server.
    """

    def __init__(
        self,
        bytes_per_second: int,
        *,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if bytes_per_second < 0:
            raise ValueError(f"bytes_per_second must be 0 (no cap) or more, not {bytes_per_second}")
        self.bytes_per_second = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._burst = bytes_per_second * _BURST_SECONDS
        self._tokens = 0.0
        self._last: float | None = None

    def __repr__(self) -> str:
        return f"Throttle({self.bytes_per_second} bytes/s)"

    async def take(self, n: int) -> None:
        """Pay for ``n`` bytes; sleep while the bucket is in debt."""
        rate = self.bytes_per_second
        if rate <= 0 or n <= 0:
            return
        now = self._clock() if self._clock is not None else asyncio.get_running_loop().time()
        if self._last is not None:
            self._tokens = min(self._burst, self._tokens + (now - self._last) * rate)
        self._last = now
        self._tokens -= n
        if self._tokens < 0:
            await self._sleep(-self._tokens / rate)


class FileLimits(Protocol):
    """The bounds a download needs of its ``files`` rule (``crawler/files/rules.py``'s
    ``FileRule`` has them): at most ``max_bytes``; at least ``min_bytes``, or the type's
    minimum (``sniff.min_bytes``, from ``DEFAULT_MIN_BYTES``) when None."""

    @property
    def max_bytes(self) -> int: ...
    @property
    def min_bytes(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class FileRequest:
    """One download: its rule, its open part, how it is paced and stopped; :func:`fetch_file`
    carries it out (``fetch_file(fetcher, request.url, request, allow_url=..., check_hop=...,
    pace=...)`` -> :class:`FileResult`), see the module docstring."""

    url: str
    rule: FileLimits
    part: PartWriter
    #: Checkpoint every ``part_size`` bytes (``files.partSizeBytes``).
    part_size: int
    throttle: Throttle | None
    #: Set on SIGTERM: the download stops at its next chunk, checkpoints, returns ``stopped``.
    stop: asyncio.Event
    verify_type: bool = True
    #: Called with the bytes the part holds after each chunk (metrics, a stall watch).
    on_progress: Callable[[int], None] | None = None


@dataclass(slots=True)
class FileResult:
    """The outcome of :func:`fetch_file`: a complete, verified file in its part, or a failure.

    ``failure`` None and not ``stopped``: the part holds ``size`` bytes whose digest is
    ``sha256`` (None when the part could not hash its durable bytes: read the finished object
    back), ready to finish. ``status``, ``content_type``, ``headers``, ``redirects``,
    ``attempts``, ``wire_bytes`` and ``retry_after_seconds`` are the fetch's, as in
    ``FetchResult``; ``etag``, ``last_modified`` the validators of the bytes in the part;
    ``sniffed`` the family the magic bytes say (``sniff.py``), None when unknown or unread.
    """

    url: str
    final_url: str
    status: int | None
    content_type: str | None
    headers: dict[str, str]
    redirects: list[str]
    attempts: int
    size: int
    sha256: str | None
    sniffed: str | None
    etag: str | None
    last_modified: str | None
    #: Bytes the part held when this attempt began (0: from scratch).
    resumed_from: int
    #: The restart reasons of this attempt, in order (``resume.RESTART_REASONS``).
    restarts: list[str]
    wire_bytes: int
    elapsed_seconds: float
    fetched_at: float
    failure: FailureClass | None
    message: str
    retry_after_seconds: float | None
    #: The stop was set: the part is checkpointed; release the lease (never fail it).
    stopped: bool = False
    #: Set by the worker after ``part.finish``.
    stored: StoredFile | None = field(default=None)


async def fetch_file(
    fetcher: Fetcher,
    url: str,
    request: FileRequest,
    *,
    allow_url: Callable[[str], bool] | None = None,
    check_hop: HopCheck | None = None,
    pace: Callable[[str], Awaitable[None]] | None = None,
) -> FileResult:
    """Download ``url`` into ``request.part`` through ``fetcher.stream`` with the caller's
    checks (see the module docstring). Network failures and what verification finds come back
    as the result's ``failure``; a part that cannot be written raises
    :class:`~crawlfleet.errors.OutputUnavailable`."""
    started = time.monotonic()
    download = _Download(request)
    await download.begin()
    if request.stop.is_set():
        await download.checkpoint()
        return await download.result(None, time.monotonic() - started, stopped=True)
    fetched = await fetcher.stream(
        url, download, allow_url=allow_url, check_hop=check_hop, pace=pace
    )
    await download.checkpoint()  # what came is kept for the next attempt (if anything did)
    return await download.result(fetched, time.monotonic() - started, stopped=download.stopped)


@dataclass(frozen=True, slots=True)
class HeadVerdict:
    """What a complete body's first bytes and size say (:func:`verify_head`): ``failure``
    None when it may be stored, else ``file_type_mismatch`` or ``file_too_small`` with why;
    ``sniffed`` the family its magic bytes show (``sniff.py``), None when unknown or unread."""

    failure: FailureClass | None
    message: str
    sniffed: str | None


def verify_head(
    head: bytes | None,
    *,
    content_type: str | None,
    url: str,
    size: int,
    min_bytes: int | None,
    verify_type: bool,
) -> HeadVerdict:
    """The type and minimum checks of a complete body of ``size`` bytes whose first bytes are
    ``head`` (at least ``sniff.HEAD_BYTES`` of them, or all; None: not seen, the type is not
    checked), in docs/files.md's order: a recognisably other type (an HTML error page for a
    ``.mp4``), then the minimum (``min_bytes``, else the type's default), then bytes of no known
    type for a declared one. Used at the end of a download, and by the worker on the first
    bytes of a bucket's completed upload read back (a download resumed across processes)."""
    verdict = check(head, content_type, url) if head is not None else None
    sniffed = None if verdict is None else verdict.sniffed
    mismatch = verdict is not None and verify_type and not verdict.ok
    if mismatch and verdict is not None and verdict.sniffed is not None:
        return HeadVerdict(FailureClass.FILE_TYPE_MISMATCH, verdict.message, sniffed)
    family = None if verdict is None else verdict.declared or verdict.sniffed
    minimum = min_bytes if min_bytes is not None else type_min_bytes(family)
    if size < minimum:
        return HeadVerdict(
            FailureClass.FILE_TOO_SMALL,
            f"{size} bytes, below the minimum of {minimum}"
            f" for {family or 'a file of unknown type'}",
            sniffed,
        )
    if mismatch and verdict is not None:
        return HeadVerdict(FailureClass.FILE_TYPE_MISMATCH, verdict.message, sniffed)
    return HeadVerdict(None, "", sniffed)


class _Download:
    """The streamed body of one download (``fetching.streaming.StreamedBody``) and its tally."""

    def __init__(self, request: FileRequest) -> None:
        self.url = request.url
        self.request = request
        self.part = request.part
        self.resumed_from = request.part.state.offset
        #: Bytes the part holds, buffered ones included (what the next range starts at).
        self.held = self.resumed_from
        self.stopped = False
        self.restarts: list[RestartReason] = []
        self.sniffed: str | None = None
        self._pending = 0  # bytes written since the last checkpoint
        #: A local part makes its periodic checkpoints durable while the next bytes arrive.
        self._behind = request.part if isinstance(request.part, PartSyncsBehind) else None
        self._syncing = False  # a checkpoint made durable behind may still be in flight
        self._asked = 0  # the offset the current request asked a range from (0: none)
        self._fresh_requests = 0
        self._pieces = 0
        #: The sha256 of the bytes held, computed behind them in a thread (``digest.py``).
        self._digest: BackgroundDigest | None = BackgroundDigest()
        self._head = bytearray()

    async def begin(self) -> None:
        """Before the first request: hash what the part already holds (a part without a
        validator is restarted by :meth:`prepare` instead)."""
        if self.held <= 0 or if_range(self.part.state) is None:
            return
        try:
            async for chunk in self.part.durable_bytes():
                await self._hash(chunk)
        except NotImplementedError:
            self._digest = None  # the part's store hashes the finished object instead

    async def sha256(self) -> str | None:
        """The digest of the bytes held; None when the part's earlier bytes were never seen."""
        return None if self._digest is None else await self._digest.hexdigest()

    async def checkpoint(self) -> None:
        """Everything written is durable on return (a stop, a retry, the end)."""
        if self._pending or self._syncing:
            await self.part.checkpoint()
            self._pending = 0
            self._syncing = False

    async def _checkpoint_periodic(self) -> None:
        """A ``part_size`` boundary: durable behind where the part can, else at once."""
        if self._behind is None:
            await self.checkpoint()
            return
        await self._behind.checkpoint_behind()
        self._pending = 0
        self._syncing = True

    # -- the StreamedBody protocol ----------------------------------------------------------

    async def prepare(self) -> Mapping[str, str]:
        await self.checkpoint()  # a retry after a reset: what came is durable before we go on
        if self.held > 0 and if_range(self.part.state) is None:
            await self._restart("no_validator")  # cut short, and its response had no validator
        self._asked = self.held
        return {**_FILE_REQUEST_HEADERS, **range_headers(self.part.state, self.held)}

    def takes(self, status: int) -> bool:
        return 200 <= status < 300 or (status == _RANGE_NOT_SATISFIABLE and self._asked > 0)

    async def consume(
        self, status: int, headers: Mapping[str, str], chunks: AsyncIterator[bytes]
    ) -> Consumed:
        refused = await self._answer(status, headers)
        if refused is not None:
            return refused
        if status == _RANGE_NOT_SATISFIABLE:  # judged Complete: the part holds the file
            return await self._verify(status)
        started_at = self.held
        max_bytes = self.request.rule.max_bytes
        async for chunk in chunks:
            if self.held + len(chunk) > max_bytes:
                return Consumed(
                    FailureClass.FILE_TOO_LARGE, f"more than maxBytes {max_bytes} bytes sent"
                )
            await self._take(chunk)
            if self.request.stop.is_set():
                self.stopped = True
                return Consumed(message=f"stopped at byte {self.held}")
        total = self.part.state.total
        if status == _PARTIAL_CONTENT and total is not None and started_at < self.held < total:
            # A server that sends a range in pieces (some CDNs cap a 206): ask for the rest.
            self._pieces += 1
            if self._pieces < MAX_PIECES_PER_ATTEMPT:
                return Consumed(again=True)
        return await self._verify(status)

    async def _answer(self, status: int, headers: Mapping[str, str]) -> Consumed | None:
        """Judge a response before its body (``resume.judge``): restart the part when the
        answer says so, record what it says of the file; a ``Consumed`` to end with, or None to
        read its body."""
        state = self.part.state
        decision = judge(state, status, headers, self._asked)
        if isinstance(decision, Complete):
            return None
        if isinstance(decision, Restart):
            await self._restart(decision.reason)
            if self._fresh_requests >= MAX_RESTARTS_PER_ATTEMPT:
                return Consumed(
                    FailureClass.PROTOCOL_ERROR,
                    f"HTTP {status}: still no usable answer after {self._fresh_requests}"
                    f" requests from byte 0 (restarts: {', '.join(self.restarts)})",
                )
            self._fresh_requests += 1
            return Consumed(again=True)
        continuing = isinstance(decision, Append) and self.held > 0
        if isinstance(decision, Whole) and self.held > 0:  # the bytes held are another answer's
            await self._restart(decision.reason or "no_range")
        adopt(state, status, headers, continuing=continuing)
        max_bytes = self.request.rule.max_bytes
        if state.total is not None and state.total > max_bytes:
            return Consumed(
                FailureClass.FILE_TOO_LARGE,
                f"HTTP {status}: declares {state.total} bytes, over maxBytes {max_bytes}",
            )
        return None

    # -- the bytes ---------------------------------------------------------------------------

    async def _take(self, chunk: bytes) -> None:
        """Hash and write ``chunk``, checkpointing at each ``part_size`` boundary it crosses
        (a part's checkpoints then fall on exact multiples of it), then pay the throttle."""
        request = self.request
        rest = chunk
        while rest:
            room = request.part_size - self._pending
            piece, rest = rest[:room], rest[room:]
            await self._hash(piece)
            await self.part.write(piece)
            self.held += len(piece)
            self._pending += len(piece)
            if self._pending >= request.part_size:
                await self._checkpoint_periodic()
        if request.throttle is not None:
            await request.throttle.take(len(chunk))
        if request.on_progress is not None:
            request.on_progress(self.held)

    async def _hash(self, data: bytes) -> None:
        if self._digest is not None:
            await self._digest.update(data)
        if len(self._head) < HEAD_BYTES:
            self._head += data[: HEAD_BYTES - len(self._head)]

    async def _restart(self, reason: RestartReason) -> None:
        """The part goes back to byte 0; the hash starts afresh (and is known again). The
        body this attempt stores now builds on nothing: ``resumed_from`` is 0 again, so the
        record and the resumed-bytes counters do not claim bytes that were fetched again."""
        await self.part.restart()
        self.restarts.append(reason)
        self.held = self._pending = self._asked = self.resumed_from = 0
        self._syncing = False  # the part's restart waited for it
        self._digest = BackgroundDigest()
        self._head = bytearray()

    async def _verify(self, status: int) -> Consumed:
        """The body ended: size, type and minimum (see the module docstring). Bytes that fail
        are dropped from the part, except a body cut short (the next attempt resumes it)."""
        state = self.part.state
        size = self.held
        if state.total is not None and size != state.total:
            if size > state.total:
                await self._restart_silently()
            return Consumed(
                FailureClass.FILE_SIZE_MISMATCH,
                f"HTTP {status}: {size} bytes received of the {state.total} declared",
            )
        head = bytes(self._head) if self._digest is not None else None  # seen from byte 0
        verdict = verify_head(
            head,
            content_type=state.content_type,
            url=self.url,
            size=size,
            min_bytes=self.request.rule.min_bytes,
            verify_type=self.request.verify_type,
        )
        self.sniffed = verdict.sniffed
        if verdict.failure is not None:
            await self._restart_silently()  # an error page, a tiny body: never resumed
            return Consumed(verdict.failure, f"HTTP {status}: {verdict.message}")
        return Consumed()

    async def _restart_silently(self) -> None:
        """Drop bytes that failed verification; a failure, not a restart of the download."""
        if self.held > 0 or self.part.state.offset > 0:
            await self.part.restart()
        self.held = self._pending = 0

    # -- the result ----------------------------------------------------------------------------

    async def result(
        self, fetched: FetchResult | None, elapsed: float, *, stopped: bool
    ) -> FileResult:
        state = self.part.state
        failure = None if fetched is None else fetched.failure
        complete = fetched is not None and failure is None and not stopped
        sha256 = await self.sha256() if complete else None  # the digest's last batches
        return FileResult(
            url=self.url,
            final_url=self.url if fetched is None else fetched.final_url,
            status=None if fetched is None else fetched.status,
            # A complete file's type is its own (the part's), not a 206's or a 416's.
            content_type=(
                state.content_type if complete or fetched is None else fetched.content_type
            ),
            headers={} if fetched is None else fetched.headers,
            redirects=[] if fetched is None else fetched.redirects,
            attempts=0 if fetched is None else fetched.attempts,
            size=self.held,
            sha256=sha256,
            sniffed=self.sniffed,
            etag=state.etag,
            last_modified=state.last_modified,
            resumed_from=self.resumed_from,
            restarts=list(self.restarts),
            wire_bytes=0 if fetched is None else fetched.wire_bytes,
            elapsed_seconds=elapsed,
            fetched_at=time.time() if fetched is None else fetched.fetched_at,
            failure=None if stopped else failure,
            message="stopped before the first request" if fetched is None else fetched.message,
            retry_after_seconds=None if fetched is None else fetched.retry_after_seconds,
            stopped=stopped,
        )
