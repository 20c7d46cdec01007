"""Bounded bodies: a response body streamed, capped on the wire and after decoding.

A hostile server must not be able to make a worker hold more than it allows: ``max_body_bytes``
of wire bytes (a larger ``Content-Length`` is refused before reading) and
``max_decompressed_bytes`` of decoded bytes. gzip and deflate are decoded here with
``decompressobj(...).decompress(data, max_length)``, so a gzip bomb never inflates past the cap
plus one byte, whatever one network chunk holds (httpx's own decoder inflates a whole chunk at
once). Brotli and zstd are not advertised: neither ``brotli`` nor ``zstandard`` is installed,
and before adding one its decoder must be bounded the same way (brotli ≥ 1.2's
``output_buffer_limit``). Non-2xx bodies are read up to :data:`ERROR_BODY_MAX_BYTES` (so a
small error page keeps the connection reusable) and discarded.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Final, Protocol

import httpx

from crawlfleet.crawler.failures import FailureClass
from crawlfleet.errors import FetchError

__all__ = ["ACCEPT_ENCODING", "ERROR_BODY_MAX_BYTES", "BodyLimits", "discard_body", "read_body"]

#: Non-2xx bodies are read up to this much (to keep the connection reusable), then dropped.
ERROR_BODY_MAX_BYTES: Final = 64 * 1024
#: Only codings this module decodes itself, with a bound (see the module docstring on br).
ACCEPT_ENCODING: Final = "gzip, deflate"

_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
#: More stacked codings than this is not a real server.
_MAX_CODINGS: Final = 2


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
    response: httpx.Response, headers: dict[str, str], limits: BodyLimits, count: WireCount
) -> bytes:
    """The decoded body, or FetchError when it breaks a cap or cannot be decoded."""
    max_body_bytes = limits.max_body_bytes
    max_decompressed_bytes = limits.max_decompressed_bytes
    declared = _content_length(headers.get("content-length"))
    if declared is not None and declared > max_body_bytes:
        raise FetchError(
            FailureClass.BODY_TOO_LARGE,
            f"Content-Length {declared} exceeds max_body_bytes {max_body_bytes}",
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
            count.wire_bytes += len(chunk)
            if received > max_body_bytes:
                raise FetchError(
                    FailureClass.BODY_TOO_LARGE,
                    f"body exceeds max_body_bytes {max_body_bytes}",
                )
            piece = decoder.decode(chunk, max_decompressed_bytes - decoded)
            decoded += len(piece)
            pieces.append(piece)
            if decoded > max_decompressed_bytes:
                raise FetchError(
                    FailureClass.DECOMPRESSION_BOMB
                    if decoder.encoded
                    else FailureClass.BODY_TOO_LARGE,
                    f"{received} bytes received decode to more than max_decompressed_bytes"
                    f" {max_decompressed_bytes}",
                )
    return b"".join(pieces)


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
