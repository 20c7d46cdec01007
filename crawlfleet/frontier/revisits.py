"""Revisit state packed small: what the frontier keeps per tracked URL (docs/frontier.md).

A tracked URL at rest is one element of a list of its host's, a chunk ``rv:<k>:<host>`` of at
most 128 that ``rv-index`` scores by its earliest due time (lib.lua):
``<state><entry>\\t<validators>``. The state is ``>I4I3BB`` (due time in whole seconds,
interval in seconds up to 194 days, visits up to 255, depth up to 255: the scripts read and
write it with ``struct``), the entry the URL after its host (a scheme letter standing for
``https://<host>/``, then the rest of the path and the query). While the URL is queued or
leased, ``rv-states`` holds ``<state><validators>`` under its URL. The validators only this
module reads:

- one flags byte (:data:`_DIGEST` … :data:`_ETAG_WEAK`);
- the digest: 8 bytes when it is 16 lowercase hex digits (the worker's usual), a length
  byte and its bytes when it is another even number of them (a whole SHA-1's 40), else a
  length byte and its text. Not kept beside an ETag: the ETag changes whenever the body
  does (a weak one whenever it changes in meaning, RFC 9110 §8.8.1), and ``If-None-Match``
  compares ETags weakly anyway, so a 200 whose ETag equals the kept one is unchanged and one
  with another ETag is changed: the digest would say nothing more;
- Last-Modified: 4 bytes (seconds) when the header is an IMF-fixdate that formats back to
  the very same text, else a length byte and the text as received. Not kept beside an
  ETag: a server ignores ``If-Modified-Since`` in a request that has ``If-None-Match``
  (RFC 9110 §13.1.3), so it would never be read;
- the capture time (``captured_at``, whole seconds): 4 bytes;
- the ETag, to the end: its quoted value packed when it is lowercase hex groups joined by
  ``-`` (Apache, nginx, S3 MD5s: two digits a byte), the last group possibly base64 (the
  frameworks' ``W/"<size>-<27 base64 digits of a SHA-1>"``: three bytes per four digits,
  the group count's high bit set); else its text.

The server gets back exactly the text it sent, never a reconstruction: a value that would
not pack exactly is kept as text. An ETag whose kept form is longer than
:data:`MAX_ETAG_BYTES` is not kept at all (a hash of it could not be sent back), so that
URL's revisits ask without ``If-None-Match`` and the digest or Last-Modified decide.
"""

from __future__ import annotations

import base64
import re
import struct
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from typing import Final

from crawlfleet.frontier.models import RevisitState, Validators
from crawlfleet.urls import CanonicalURL

__all__ = [
    "MAX_ETAG_BYTES",
    "STATE_SIZE",
    "pack_validators",
    "read_state",
    "unpack_validators",
]

#: The state's fixed part, as the scripts pack it (``>I4I3BB``): due seconds, interval
#: seconds (3 bytes), visits, depth.
STATE_SIZE: Final = 9
_DUE = struct.Struct(">I")
#: The longest ETag kept, in its packed form: past it the URL is revisited without one.
MAX_ETAG_BYTES: Final = 48
#: Longest Last-Modified or digest kept as text (a length byte): past it, not kept.
_MAX_TEXT = 64

_DIGEST, _DIGEST_TEXT, _MODIFIED, _MODIFIED_TEXT, _ETAG, _ETAG_HEX, _ETAG_WEAK, _CAPTURED = (
    1 << bit for bit in range(8)
)
#: Both digest flags: a hex digest of another length, as a length byte and its bytes.
_DIGEST_HEX = _DIGEST | _DIGEST_TEXT
#: The ETag's group count's high bit: its last group is base64.
_B64_TAIL = 0x80
_HEX16 = re.compile(r"[0-9a-f]{16}")
_HEX_EVEN = re.compile(r"(?:[0-9a-f]{2}){1,64}")
_HEX = re.compile(r"[0-9a-f]{1,255}")
_B64 = re.compile(r"[A-Za-z0-9+/]{2,255}")
_QUOTED = re.compile(r'(W/)?"([^"]*)"')


def _text(value: str) -> bytes | None:
    raw = value.encode("utf-8", "surrogateescape")
    return bytes([len(raw)]) + raw if len(raw) <= _MAX_TEXT else None


def _pack_digest(digest: str) -> tuple[int, bytes]:
    if _HEX16.fullmatch(digest):
        return _DIGEST, bytes.fromhex(digest)
    if _HEX_EVEN.fullmatch(digest):
        return _DIGEST_HEX, bytes([len(digest) // 2]) + bytes.fromhex(digest)
    text = _text(digest)
    return (_DIGEST_TEXT, text) if text is not None else (0, b"")


def _pack_modified(value: str) -> tuple[int, bytes]:
    try:
        when = parsedate_to_datetime(value)
        exact = when.tzinfo is not None and format_datetime(when, usegmt=True) == value
        seconds = int(when.timestamp())
    except (TypeError, ValueError, OverflowError):
        exact, seconds = False, -1
    if exact and 0 <= seconds < 1 << 32:
        return _MODIFIED, _DUE.pack(seconds)
    text = _text(value)
    return (_MODIFIED_TEXT, text) if text is not None else (0, b"")


def _b64_bytes(digits: str) -> bytes | None:
    """Base64 digits as bytes, when they come back as the very same digits (no stray bits)."""
    raw = base64.b64decode(digits + "=" * (-len(digits) % 4))
    return raw if base64.b64encode(raw).decode().rstrip("=") == digits else None


def _pack_etag(value: str) -> tuple[int, bytes]:
    """Quoted hex groups (the last one possibly base64): a group count, a digit count per
    group, the hex digits two a byte, then the base64 group's bytes; else the text."""
    text = value.encode("utf-8", "surrogateescape")
    quoted = _QUOTED.fullmatch(value)
    groups = quoted[2].split("-") if quoted else []
    tail = b""
    if len(groups) > 1 and not _HEX.fullmatch(groups[-1]) and _B64.fullmatch(groups[-1]):
        tail = _b64_bytes(groups[-1]) or b""
    hexes = groups[:-1] if tail else groups
    if not quoted or len(groups) > 15 or not all(_HEX.fullmatch(g) for g in hexes):
        return (_ETAG, text) if len(text) <= MAX_ETAG_BYTES else (0, b"")
    digits = "".join(hexes)
    packed = (
        bytes([len(groups) | (_B64_TAIL if tail else 0), *(len(group) for group in groups)])
        + bytes.fromhex(digits + "0" * (len(digits) % 2))
        + tail
    )
    if len(packed) > MAX_ETAG_BYTES:
        return 0, b""
    return _ETAG | _ETAG_HEX | (_ETAG_WEAK if quoted[1] else 0), packed


def _unpack_etag(flags: int, blob: bytes) -> str:
    if not flags & _ETAG_HEX:
        return blob.decode("utf-8", "surrogateescape")
    count = blob[0] & ~_B64_TAIL
    sizes = list(blob[1 : 1 + count])
    b64_size = sizes.pop() if blob[0] & _B64_TAIL else 0
    digit_count = sum(sizes)
    body_at = 1 + count
    tail_at = body_at + (digit_count + 1) // 2
    digits = blob[body_at:tail_at].hex()
    groups, start = [], 0
    for size in sizes:
        groups.append(digits[start : start + size])
        start += size
    if b64_size:
        groups.append(base64.b64encode(blob[tail_at:]).decode()[:b64_size])
    return ('W/"' if flags & _ETAG_WEAK else '"') + "-".join(groups) + '"'


def pack_validators(validators: Validators) -> bytes:
    """The validators' kept form (see the module's docstring); b"\\x00" when none is kept."""
    flags, etag = _pack_etag(validators.etag) if validators.etag else (0, b"")
    parts = []
    for value, pack in (
        (None if flags else validators.digest, _pack_digest),
        (None if flags else validators.last_modified, _pack_modified),
    ):
        if value:
            flag, part = pack(value)
            flags |= flag
            parts.append(part)
    captured = validators.captured_at
    if captured is not None and 0 <= captured < 1 << 32:
        flags |= _CAPTURED
        parts.append(_DUE.pack(captured))
    return bytes([flags]) + b"".join(parts) + etag


def _unpack_text(blob: bytes, at: int) -> tuple[str, int]:
    size = blob[at]
    return blob[at + 1 : at + 1 + size].decode("utf-8", "surrogateescape"), at + 1 + size


def unpack_validators(blob: bytes) -> Validators:
    """The inverse of :func:`pack_validators`: the very texts the server sent."""
    if not blob:
        return Validators()
    flags, at = blob[0], 1
    digest = modified = etag = None
    captured = None
    if flags & _DIGEST_HEX == _DIGEST_HEX:
        size = blob[at]
        digest, at = blob[at + 1 : at + 1 + size].hex(), at + 1 + size
    elif flags & _DIGEST:
        digest, at = blob[at : at + 8].hex(), at + 8
    elif flags & _DIGEST_TEXT:
        digest, at = _unpack_text(blob, at)
    if flags & _MODIFIED:
        (seconds,) = _DUE.unpack_from(blob, at)
        modified = format_datetime(datetime.fromtimestamp(seconds, UTC), usegmt=True)
        at += 4
    elif flags & _MODIFIED_TEXT:
        modified, at = _unpack_text(blob, at)
    if flags & _CAPTURED:
        (captured,) = _DUE.unpack_from(blob, at)
        at += 4
    if flags & _ETAG:
        etag = _unpack_etag(flags, blob[at:])
    return Validators(etag=etag, last_modified=modified, digest=digest, captured_at=captured)


def read_state(url: CanonicalURL, value: bytes) -> RevisitState:
    """A tracked URL's state from its ``rv-states`` value: the state, then the validators."""
    (due,) = _DUE.unpack_from(value)
    interval = int.from_bytes(value[_DUE.size : _DUE.size + 3], "big")
    visits = value[_DUE.size + 3]
    validators = unpack_validators(value[STATE_SIZE:])
    return RevisitState(url, float(interval), validators, float(due), visits)
