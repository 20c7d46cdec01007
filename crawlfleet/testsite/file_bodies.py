"""The bytes of the file test site's files: a pure function of (name, size, version).

Why apart from the server (crawlfleet/testsite/files.py): the tests and benches that check a
download compare it with these bytes, digests and validators without a running site, and the
generator is the one part whose speed matters (it must outrun any client on loopback).

A file is the extension's magic header (an ``ftyp`` box then an ``mdat`` header for ``.mp4``,
an EBML header with DocType ``webm`` then a Segment for ``.webm``, ``%PDF-``, PNG with its
IHDR, JFIF, GIF89a, a ZIP local header, a gzip header; nothing for other extensions), then
pseudo-random bytes generated in 64 KiB blocks, each a 16-byte stamp keyed by the file and the
block's index followed by a rotation of one precomputed random block: a copy per block instead
of a random-number generator per byte, so one core makes gigabytes a second, any offset can
start a range, and no file is ever held in memory. Ranges are read as RFC 9110 §14.1.2 says.
"""

from __future__ import annotations

import hashlib
import random
import re
import struct
import zlib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from typing import Final, Literal

__all__ = [
    "BLOCK_BYTES",
    "CHUNK_BYTES",
    "CONTENT_TYPES",
    "EPOCH",
    "content_type_of",
    "file_body",
    "file_etag",
    "file_header",
    "file_last_modified",
    "if_range_matches",
    "parse_range",
]

#: Content type by extension; an extension not listed is served as octet-stream, no header.
CONTENT_TYPES: Final[Mapping[str, str]] = {
    "mp4": "video/mp4",
    "m4v": "video/x-m4v",
    "webm": "video/webm",
    "pdf": "application/pdf",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "zip": "application/zip",
    "gz": "application/gzip",
    "bin": "application/octet-stream",
}
_OCTET_STREAM: Final = "application/octet-stream"

#: Bytes per generated block (a stamp and a rotation of the pattern).
BLOCK_BYTES: Final = 64 * 1024
_STAMP_BYTES: Final = 16
#: Bytes per chunk ``file_body`` yields unless told: big enough that a write's cost vanishes.
CHUNK_BYTES: Final = 1 << 20
#: Twice one random block: any rotation is one slice (a memcpy), never a concatenation.
_PATTERN: Final = random.Random(24).randbytes(BLOCK_BYTES) * 2
#: What version 0's Last-Modified is; each later version is an hour newer.
EPOCH: Final = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
_RANGE: Final = re.compile(r"bytes=(\d*)-(\d*)")


def _extension(name: str) -> str:
    return name.rpartition(".")[2].lower() if "." in name else ""


def content_type_of(name: str) -> str:
    """The content type the site serves ``name`` as (by its extension)."""
    return CONTENT_TYPES.get(_extension(name), _OCTET_STREAM)


def _png_header() -> bytes:
    ihdr = struct.pack(">IIBBBBB", 1024, 768, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", len(ihdr))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
    )


def _mp4_header(size: int) -> bytes:
    ftyp = b"ftyp" + b"isom" + struct.pack(">I", 0x200) + b"isomiso2avc1mp41"
    ftyp = struct.pack(">I", 4 + len(ftyp)) + ftyp
    rest = size - len(ftyp)
    if rest < 1 << 32:
        return ftyp + struct.pack(">I", max(rest, 8)) + b"mdat"
    return ftyp + struct.pack(">I", 1) + b"mdat" + struct.pack(">Q", rest)


#: EBML header (version 1, DocType "webm", DocTypeVersion 4) then a Segment of unknown size.
_WEBM_HEADER: Final = bytes.fromhex(
    "1a45dfa39f4286810142f7810142f2810442f381084282847765626d428781044285810218538067"
    "01ffffffffffffff"
)
_STATIC_HEADERS: Final[Mapping[str, bytes]] = {
    "webm": _WEBM_HEADER,
    "pdf": b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n",
    "png": _png_header(),
    "jpg": bytes.fromhex("ffd8ffe000104a46494600010101004800480000"),
    "jpeg": bytes.fromhex("ffd8ffe000104a46494600010101004800480000"),
    "gif": b"GIF89a" + struct.pack("<HHBBB", 640, 480, 0xF7, 0, 0),
    "zip": b"PK\x03\x04" + struct.pack("<HHHHHIIIHH", 20, 0, 0, 0, 0, 0, 0, 0, 8, 0) + b"data.bin",
    "gz": bytes.fromhex("1f8b0800000000000003"),
}


def file_header(name: str, size: int) -> bytes:
    """The magic header a file of this name and size starts with (cut to ``size``)."""
    ext = _extension(name)
    header = _mp4_header(size) if ext in ("mp4", "m4v") else _STATIC_HEADERS.get(ext, b"")
    return header[:size]


def _seed(name: str, size: int, version: int) -> bytes:
    return hashlib.sha256(f"{name}\0{size}\0{version}".encode()).digest()


def _block(seed: bytes, index: int) -> bytes:
    stamp = hashlib.blake2b(index.to_bytes(8, "big"), key=seed, digest_size=_STAMP_BYTES).digest()
    turn = int.from_bytes(stamp[:4], "big") % BLOCK_BYTES
    return stamp + _PATTERN[turn : turn + BLOCK_BYTES - _STAMP_BYTES]


def file_body(
    name: str,
    size: int,
    version: int = 0,
    *,
    start: int = 0,
    end: int | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[bytes]:
    """The bytes ``[start, end)`` of the file, in chunks of about ``chunk_bytes`` (whole
    blocks, except at the ends). Only one chunk exists at a time."""
    stop = size if end is None else min(end, size)
    if not 0 <= start <= stop:
        raise ValueError(f"bad range {start}..{stop} of {size} bytes")
    seed = _seed(name, size, version)
    header = file_header(name, size)
    blocks_per_chunk = max(1, chunk_bytes // BLOCK_BYTES)
    index = start // BLOCK_BYTES
    position = start
    while position < stop:
        pieces: list[bytes] = []
        for _ in range(blocks_per_chunk):
            if position >= stop:
                break
            block_start = index * BLOCK_BYTES
            block = _block(seed, index)
            if index == 0 and header:
                block = header + block[len(header) :]
            piece = block[position - block_start : min(stop - block_start, BLOCK_BYTES)]
            pieces.append(piece)
            position += len(piece)
            index += 1
        yield b"".join(pieces)


def file_etag(name: str, size: int, version: int = 0) -> str:
    """The strong ETag of that version of the file."""
    return '"' + _seed(name, size, version).hex()[:24] + '"'


def file_last_modified(version: int = 0) -> str:
    """The ``Last-Modified`` of a file's ``version`` (an HTTP date)."""
    return format_datetime(EPOCH + timedelta(hours=version), usegmt=True)


def parse_range(header: str, size: int) -> tuple[int, int] | Literal["unsatisfiable"] | None:
    """``[start, end)`` of a single byte range (RFC 9110 §14.1.2), ``None`` when the header is
    not one satisfiable-or-not single range (the server then ignores it and sends 200), or
    ``"unsatisfiable"`` (416) when its first byte is at or past ``size``."""
    match = _RANGE.fullmatch(header.strip().replace(" ", ""))
    if match is None:
        return None
    first, last = match.groups()
    if not first:
        if not last:
            return None
        suffix = int(last)
        if suffix == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - suffix), size
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        return "unsatisfiable"
    end = size if not last else min(int(last) + 1, size)
    return start, end


def if_range_matches(if_range: str, etag: str, last_modified: str) -> bool:
    """RFC 9110 §13.1.5: an entity tag must match strongly, a date exactly."""
    value = if_range.strip()
    if value.startswith(('"', "W/")):
        return not value.startswith("W/") and value == etag
    try:
        return parsedate_to_datetime(value) == parsedate_to_datetime(last_modified)
    except (TypeError, ValueError):
        return False
