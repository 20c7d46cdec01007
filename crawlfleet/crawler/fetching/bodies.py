"""Bounded bodies: a response body streamed, capped on the wire and after decoding.

A hostile server must not be able to make a worker hold more than it allows: ``max_body_bytes``
of wire bytes (a larger ``Content-Length`` is refused before reading) and
``max_decompressed_bytes`` of decoded bytes. Every coding we advertise (gzip, deflate, br,
zstd) is decoded here by a stage that is *pulled* a piece of at most 1 MiB at a time, whatever
one network chunk holds (httpx's own decoders inflate a whole chunk at once, and 64 KiB of a
gzip bomb inflate to 64 MiB): zlib's ``decompress(data, max_length)``, brotli's (≥ 1.2)
``process(data, output_buffer_limit=…)`` and zstd's ``decompress(data, max_length)``
(``compression.zstd``, from ``backports.zstd`` before Python 3.14), whose window is held to
RFC 9659's 8 MiB so a frame cannot make the decoder allocate more. Non-2xx bodies are read up
to :data:`ERROR_BODY_MAX_BYTES` (so a small error page keeps the connection reusable) and
discarded.

Each piece is charged to the caller's :class:`~crawlfleet.crawler.fetching.memory.Reservation`
before the next one is decoded: a body that would overrun the worker's budget waits for room (see
crawler/fetching/memory.py), holding no more than it was granted, and what a failed read had taken
is given back.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Final, Protocol

import brotli
import httpx

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.memory import Reservation
from crawlfleet.errors import FetchError

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

__all__ = ["ACCEPT_ENCODING", "ERROR_BODY_MAX_BYTES", "BodyLimits", "discard_body", "read_body"]

#: Non-2xx bodies are read up to this much (to keep the connection reusable), then dropped.
ERROR_BODY_MAX_BYTES: Final = 64 * 1024
#: Only codings this module decodes itself, with a bound (see the module docstring).
ACCEPT_ENCODING: Final = "gzip, deflate, br, zstd"

_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
#: More stacked codings than this is not a real server.
_MAX_CODINGS: Final = 2
#: RFC 9659: a zstd content coding needs at most an 8 MiB window (2**23).
_ZSTD_WINDOW_LOG_MAX: Final = 23
#: Decoded bytes produced (and charged to the memory budget) at a time.
_PIECE_BYTES: Final = 1024 * 1024


class WireCount(Protocol):
    """Where the body bytes received are counted, even when reading stops at a cap."""

    wire_bytes: int


class BodyLimits(Protocol):
    """The two caps of a body (``FetchSettings`` has them)."""

    @property
    def max_body_bytes(self) -> int: ...
    @property
    def max_decompressed_bytes(self) -> int: ...


async def read_body(
    response: httpx.Response,
    headers: dict[str, str],
    limits: BodyLimits,
    count: WireCount,
    reservation: Reservation | None = None,
) -> bytes:
    """The decoded body, or FetchError when it breaks a cap or cannot be decoded.

    With a ``reservation``, the decoded bytes are charged to it as they come (waiting for room
    when the worker's budget is spent); on failure what this read charged is given back.
    """
    if reservation is None:
        return await _read_body(response, headers, limits, count, None)
    charged_before = reservation.held
    try:
        return await _read_body(response, headers, limits, count, reservation)
    except BaseException:
        reservation.shrink_to(charged_before)
        raise


async def _read_body(
    response: httpx.Response,
    headers: dict[str, str],
    limits: BodyLimits,
    count: WireCount,
    reservation: Reservation | None,
) -> bytes:
    max_body_bytes = limits.max_body_bytes
    max_decompressed_bytes = limits.max_decompressed_bytes
    declared = _content_length(headers.get("content-length"))
    if declared is not None and declared > max_body_bytes:
        raise FetchError(
            FailureClass.BODY_TOO_LARGE,
            f"Content-Length {declared} exceeds max_body_bytes {max_body_bytes}",
        )
    decoder = _ContentDecoder.for_header(headers.get("content-encoding"))
    # One piece (most pages) is returned as it came; more grow one bytearray. A list of
    # 64 KiB pieces joined at the end cost twice the body in RSS: the freed pieces stay in
    # the allocator's heap while the joined copy is mapped anew. A large bytearray grows by
    # mremap, without a copy, and its one copy into bytes at the end is freed at once.
    first: bytes = b""
    body: bytearray | None = None
    decoded = 0
    received = 0
    async with _RawChunks(response) as chunks:
        async for chunk in chunks:
            received += len(chunk)
            count.wire_bytes += len(chunk)
            if received > max_body_bytes:
                raise FetchError(
                    FailureClass.BODY_TOO_LARGE,
                    f"body exceeds max_body_bytes {max_body_bytes}",
                )
            decoder.feed(chunk)
            # A piece at a time, each charged before the next is decoded: a bomb's one wire
            # chunk (64 KiB can inflate to 64 MiB) is held back by the budget, not decoded
            # whole first.
            while piece := decoder.read(min(_PIECE_BYTES, max_decompressed_bytes + 1 - decoded)):
                decoded += len(piece)
                if decoded > max_decompressed_bytes:
                    raise FetchError(
                        FailureClass.DECOMPRESSION_BOMB
                        if decoder.encoded
                        else FailureClass.BODY_TOO_LARGE,
                        f"{received} bytes received decode to more than max_decompressed_bytes"
                        f" {max_decompressed_bytes}",
                    )
                if reservation is not None and not reservation.try_grow(len(piece)):
                    await reservation.grow(len(piece))
                if body is not None:
                    body += piece
                elif first:
                    body = bytearray(first)
                    body += piece
                    first = b""
                else:
                    first = piece
    return first if body is None else bytes(body)


async def discard_body(response: httpx.Response, count: WireCount) -> None:
    """Read a little of an error body, so a small one leaves the connection reusable."""
    received = 0
    async with _RawChunks(response) as chunks:
        async for chunk in chunks:
            received += len(chunk)
            count.wire_bytes += len(chunk)
            if received >= ERROR_BODY_MAX_BYTES:
                break  # closing the response drops the connection and the rest


class _ZlibStage:
    """Incremental gzip or deflate decoding, pulled a bounded piece at a time.

    ``feed`` hands it wire bytes; ``read(limit)`` returns at most ``limit`` decoded bytes, b""
    once it needs more input. Concatenated gzip members are decoded in turn; bytes after the end
    of the (last) stream are ignored, as browsers do. ``deflate`` is tried as zlib-wrapped first,
    then raw (servers send both), however the first bytes are split into chunks.
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
        self._input = b""

    def feed(self, data: bytes) -> None:
        self._input = self._input + data if self._input else data

    def read(self, limit: int) -> bytes:
        while self._input and not self._done:
            data = self._input
            try:
                piece = self._inflater.decompress(data, limit)
            except zlib.error:
                if self._may_be_raw:
                    self._may_be_raw = False
                    self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                    self._input, self._header = self._header + data, b""
                    continue
                if self._finished_members:
                    self._done = True  # garbage after a complete gzip member
                    break
                raise
            if self._may_be_raw:
                self._header += data[: len(data) - len(self._inflater.unconsumed_tail)]
                if len(self._header) >= 2:  # zlib checks its header on the second byte
                    self._may_be_raw, self._header = False, b""
            if self._inflater.eof:
                self._finished_members += 1
                self._input = self._inflater.unused_data
                if self._gzip:  # another member may follow, in this chunk or the next one
                    self._inflater = zlib.decompressobj(_GZIP_WBITS)
                else:
                    self._done = True
            else:
                self._input = self._inflater.unconsumed_tail
            if piece:
                return piece
        return b""


class _BrotliStage:
    """Incremental brotli decoding with the contract of :class:`_ZlibStage`.

    brotli ≥ 1.2 stops growing its output at ``output_buffer_limit``; output it still holds is
    drained with empty input before new input is given, as its API asks.
    """

    def __init__(self) -> None:
        self._decoder = brotli.Decompressor()
        self._input = b""

    def feed(self, data: bytes) -> None:
        self._input = self._input + data if self._input else data

    def read(self, limit: int) -> bytes:
        decoder = self._decoder
        try:
            while True:
                if decoder.is_finished():
                    self._input = b""  # bytes after the end of the stream: ignored
                    return b""
                if not decoder.can_accept_more_data():
                    piece = decoder.process(b"", output_buffer_limit=limit)
                elif self._input:
                    data, self._input = self._input, b""
                    piece = decoder.process(data, output_buffer_limit=limit)
                else:
                    return b""
                if piece:
                    return bytes(piece)
        except brotli.error as error:
            raise FetchError(FailureClass.PROTOCOL_ERROR, f"undecodable br body: {error}") from None


class _ZstdStage:
    """Incremental zstd decoding with the contract of :class:`_ZlibStage`; frames that follow
    one another (as a streaming server may send them) are decoded in turn."""

    def __init__(self) -> None:
        self._decoder = self._new_decoder()
        self._input = b""

    @staticmethod
    def _new_decoder() -> zstd.ZstdDecompressor:
        return zstd.ZstdDecompressor(
            options={zstd.DecompressionParameter.window_log_max: _ZSTD_WINDOW_LOG_MAX}
        )

    def feed(self, data: bytes) -> None:
        self._input = self._input + data if self._input else data

    def read(self, limit: int) -> bytes:
        try:
            while True:
                decoder = self._decoder
                if decoder.eof:
                    self._input = decoder.unused_data + self._input
                    if not self._input:
                        return b""
                    self._decoder = decoder = self._new_decoder()
                if decoder.needs_input:
                    if not self._input:
                        return b""
                    data, self._input = self._input, b""
                else:
                    data = b""  # output is still held from the last input: drain it first
                piece = decoder.decompress(data, limit)
                if piece:
                    return piece
        except zstd.ZstdError as error:
            raise FetchError(
                FailureClass.PROTOCOL_ERROR, f"undecodable zstd body: {error}"
            ) from None


_Stage = _ZlibStage | _BrotliStage | _ZstdStage


class _ContentDecoder:
    """The ``Content-Encoding`` chain of one response, undone in reverse order.

    Pulled from the end: a read asks the last stage, which is fed from the one before it, a
    bounded piece at a time, so no stage ever holds more than a piece of what it decoded.
    """

    def __init__(self, stages: list[_Stage]) -> None:
        self._stages = stages
        self._identity = b""

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
        stages: list[_Stage] = []
        for coding in reversed(codings):
            if coding in ("gzip", "x-gzip"):
                stages.append(_ZlibStage("gzip"))
            elif coding == "deflate":
                stages.append(_ZlibStage("deflate"))
            elif coding == "br":
                stages.append(_BrotliStage())
            elif coding == "zstd":
                stages.append(_ZstdStage())
            else:
                raise FetchError(
                    FailureClass.PROTOCOL_ERROR,
                    f"unsupported Content-Encoding {coding!r} (we accept {ACCEPT_ENCODING})",
                )
        return cls(stages)

    def feed(self, data: bytes) -> None:
        """Wire bytes, for the first stage (or as they are, without a coding)."""
        if self._stages:
            self._stages[0].feed(data)
        else:
            self._identity = self._identity + data if self._identity else data

    def read(self, limit: int) -> bytes:
        """At most ``limit`` decoded bytes; b"" when the stages need more wire bytes."""
        stages = self._stages
        if not stages:
            piece, self._identity = self._identity[:limit], self._identity[limit:]
            return piece
        return self._read_stage(len(stages) - 1, limit)

    def _read_stage(self, index: int, limit: int) -> bytes:
        stage = self._stages[index]
        while True:
            piece = stage.read(limit)
            if piece or index == 0:
                return piece
            upstream = self._read_stage(index - 1, _PIECE_BYTES)
            if not upstream:
                return b""
            stage.feed(upstream)


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
