"""What a file's first bytes say it is, against what its response declared (pure).

Why: a CDN or a login wall answers 200 with an HTML page where a video should be, a truncated
upload ends after its header, a mislabelled type hides an archive; a download is verified
before it counts (issue 24), and the cheapest honest check is the format's magic bytes. The
nine families are the formats a crawl keeps most (ISO-BMFF video, WebM/Matroska, JPEG, PNG,
GIF, PDF, ZIP, gzip) plus HTML, the shape of an error page.

Why hand-written: measured against puremagic 2.2.0 and filetype 1.2.0 on the same headers
(docs/benchmarks.md, "File type sniffing"), a table of magic numbers is as accurate on these
families or more (filetype has no HTML, misses MP4 brands outside its list, and puremagic asks
for Python 3.12), and it costs about a microsecond a call instead of tens to hundreds; a
dependency would not earn its place for nine signatures.

``sniff`` reads only the first :data:`HEAD_BYTES`. ``family_of`` is what the response
*declared*: its content type, unless that says nothing about the bytes (missing, generic
``application/octet-stream``, a text type, or HTML for a URL whose extension names another
family: an error page served for ``clip.mp4``), then the URL's extension. ``check`` compares
the two (:class:`TypeVerdict`); ``min_bytes`` is the smallest body a family can be.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_MIN_BYTES",
    "FAMILIES",
    "HEAD_BYTES",
    "UNKNOWN_MIN_BYTES",
    "TypeVerdict",
    "check",
    "family_of",
    "min_bytes",
    "sniff",
]

#: The families sniffed; ``html`` only ever means "this is an error page, not the file".
FAMILIES: Final = ("mp4", "webm", "jpeg", "png", "gif", "pdf", "zip", "gzip", "html")
#: How much of a body ``sniff`` reads (the download keeps this much of its first bytes).
HEAD_BYTES: Final = 4096

#: The smallest body of each family that can be a real file: an empty or tiny 200 is a soft
#: block (``file_too_small``), not a file. Near the smallest valid file of the format, so a
#: real one is never refused: a PNG is 67 bytes at least, a GIF 26, an empty ZIP 22, an
#: empty gzip 18; video far less than a second of it.
DEFAULT_MIN_BYTES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "mp4": 1024,
        "webm": 1024,
        "jpeg": 125,
        "png": 67,
        "gif": 26,
        "pdf": 64,
        "zip": 22,
        "gzip": 18,
        "html": 1,
    }
)
#: Any other type: an empty body is always too small.
UNKNOWN_MIN_BYTES: Final = 1

#: Content types by family (lower case, no parameters).
_TYPE_FAMILIES: Final[Mapping[str, str]] = {
    "video/mp4": "mp4",
    "audio/mp4": "mp4",
    "application/mp4": "mp4",
    "video/x-m4v": "mp4",
    "audio/x-m4a": "mp4",
    "video/quicktime": "mp4",
    "video/3gpp": "mp4",
    "video/3gpp2": "mp4",
    "video/webm": "webm",
    "audio/webm": "webm",
    "video/x-matroska": "webm",
    "audio/x-matroska": "webm",
    "image/jpeg": "jpeg",
    "image/pjpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/png": "png",
    "image/x-png": "png",
    "image/gif": "gif",
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",
    "application/zip": "zip",
    "application/x-zip-compressed": "zip",
    "application/x-zip": "zip",
    "application/java-archive": "zip",
    "application/epub+zip": "zip",
    "application/gzip": "gzip",
    "application/x-gzip": "gzip",
    "application/x-gtar": "gzip",
    "text/html": "html",
    "application/xhtml+xml": "html",
}
#: Office Open XML and OpenDocument files are ZIP archives.
_ZIP_TYPE_PREFIXES: Final = (
    "application/vnd.openxmlformats-officedocument.",
    "application/vnd.oasis.opendocument.",
)
#: Types that say nothing about the bytes (servers send them for anything).
_GENERIC_TYPES: Final = frozenset(
    {
        "application/octet-stream",
        "binary/octet-stream",
        "application/binary",
        "application/unknown",
        "application/x-download",
        "application/download",
        "application/force-download",
    }
)
#: Types an error page comes as: they never vouch for a binary file's family.
_TEXT_TYPES: Final = frozenset({"application/json", "application/xml", "application/problem+json"})

_EXTENSION_FAMILIES: Final[Mapping[str, str]] = {
    "mp4": "mp4",
    "m4v": "mp4",
    "m4a": "mp4",
    "mov": "mp4",
    "3gp": "mp4",
    "webm": "webm",
    "mkv": "webm",
    "mka": "webm",
    "jpg": "jpeg",
    "jpeg": "jpeg",
    "jpe": "jpeg",
    "png": "png",
    "gif": "gif",
    "pdf": "pdf",
    "zip": "zip",
    "jar": "zip",
    "epub": "zip",
    "docx": "zip",
    "xlsx": "zip",
    "pptx": "zip",
    "odt": "zip",
    "gz": "gzip",
    "tgz": "gzip",
    "html": "html",
    "htm": "html",
}

#: ISO-BMFF boxes a file may start with: ``ftyp`` (MP4, M4V, 3GP, QuickTime with a type box)
#: or, in older QuickTime files, a movie or data box straight away.
_ISO_BOXES: Final = frozenset({b"ftyp", b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot"})
#: Magic at offset 0, longest first where one is a prefix of another.
_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"\x1a\x45\xdf\xa3", "webm"),
    (b"%PDF-", "pdf"),
    (b"PK\x03\x04", "zip"),
    (b"PK\x05\x06", "zip"),
    (b"PK\x07\x08", "zip"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x1f\x8b\x08", "gzip"),
)
#: Where a PDF header may start (PDF 32000 §7.5.2 readers accept it within the first KiB).
_PDF_WINDOW: Final = 1024
#: HTML as the WHATWG MIME Sniffing standard (§7.1) recognises it: after whitespace, one of
#: these tags (any case) ended by a space or ``>``; or a comment.
_HTML_START: Final = re.compile(
    rb"<(?:!doctype\s+html|html|head|script|iframe|h1|div|font|table|a|style|title|b|body|br|p)"
    rb"[\s>]|<!--",
    re.IGNORECASE,
)
_LEADING: Final = b"\xef\xbb\xbf\t\n\x0c\r "


@dataclass(frozen=True, slots=True)
class TypeVerdict:
    """Whether a body's first bytes agree with what its response declared, and why not."""

    ok: bool
    declared: str | None
    sniffed: str | None
    message: str


def _media_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    media = content_type.partition(";")[0].strip().lower()
    return media or None


def _family_of_type(media: str | None) -> str | None:
    if media is None:
        return None
    if media.startswith(_ZIP_TYPE_PREFIXES):
        return "zip"
    return _TYPE_FAMILIES.get(media)


def _family_of_url(url: str) -> str | None:
    name = urlsplit(url).path.rpartition("/")[2]
    if "." not in name:
        return None
    return _EXTENSION_FAMILIES.get(name.rpartition(".")[2].lower())


def _vouches_for_nothing(media: str | None) -> bool:
    """The type says nothing about a binary file's bytes (the URL's extension then does)."""
    return (
        media is None
        or media in _GENERIC_TYPES
        or media in _TEXT_TYPES
        or media.startswith("text/")
    )


def family_of(content_type: str | None, url: str) -> str | None:
    """The family the response declared: by its content type, unless that type vouches for
    nothing (missing, generic, text, or HTML while the URL's extension names another family),
    then by the URL's extension; ``None``: not a family this module knows."""
    media = _media_type(content_type)
    by_type = _family_of_type(media)
    if by_type is not None and by_type != "html":
        return by_type
    by_url = _family_of_url(url)
    if by_url is not None and (by_type == "html" or _vouches_for_nothing(media)):
        return by_url
    return by_type


def sniff(head: bytes) -> str | None:
    """The family the first bytes of a body show (only :data:`HEAD_BYTES` are read);
    ``None``: none of :data:`FAMILIES`."""
    head = head[:HEAD_BYTES]
    if len(head) >= 8 and head[4:8] in _ISO_BOXES:
        box_size = int.from_bytes(head[:4], "big")
        if box_size in (0, 1) or box_size >= 8:
            return "mp4"
    for magic, family in _MAGIC:
        if head.startswith(magic):
            return family
    stripped = head.lstrip(_LEADING)
    if _HTML_START.match(stripped):
        return "html"
    if b"%PDF-" in head[:_PDF_WINDOW]:
        return "pdf"
    return None


def min_bytes(family: str | None) -> int:
    """The smallest body a file of ``family`` can be (:data:`DEFAULT_MIN_BYTES`)."""
    if family is None:
        return UNKNOWN_MIN_BYTES
    return DEFAULT_MIN_BYTES.get(family, UNKNOWN_MIN_BYTES)


def check(head: bytes, content_type: str | None, url: str) -> TypeVerdict:
    """Whether ``head`` (a body's first bytes) agrees with the declared type.

    Agrees when the declared family is the sniffed one; when a generic type was declared and
    the body is not HTML; when nothing known was declared; or when HTML was declared and the
    body shows no other family (HTML has no magic to be sure of).
    """
    media = _media_type(content_type)
    declared = family_of(content_type, url)
    sniffed = sniff(head)
    shown = sniffed or "no known type"
    if declared is not None and sniffed == declared:
        return TypeVerdict(True, declared, sniffed, f"{declared} as declared")
    if media in _GENERIC_TYPES:
        if sniffed == "html":
            return TypeVerdict(False, declared, sniffed, f"an HTML page served as {media}")
        return TypeVerdict(True, declared, sniffed, f"{shown} served as {media}")
    if declared is None:
        return TypeVerdict(True, declared, sniffed, f"{shown}; nothing known declared")
    if declared == "html" and sniffed is None:
        return TypeVerdict(True, declared, sniffed, "html declared, no other type shown")
    return TypeVerdict(
        False, declared, sniffed, f"declared {declared} ({media or 'no type'}), content is {shown}"
    )
