"""Hostile XML documents the crawl reads (sitemaps, feeds): the parts their readers share.

A sitemap or a feed is whatever a server sends, so both readers bound what one document may
cost and refuse it whole (a :class:`DocumentRefused` carrying a failure class) rather than
ever failing the worker:

* **gzip** (recognised by its magic bytes; a ``Content-Encoding`` was already undone by the
  fetcher) is inflated in steps of :data:`INFLATE_STEP_BYTES`, so a gzip bomb stops one step
  past the reader's byte bound instead of filling memory; a plain body is fed in steps too
  (libxml2 refuses a single feed larger than its buffer limit, 10 MB).
* **size first**: a document over the bound is refused before any of it is parsed (a plain
  body by its length; a gzip'd one by a first inflate that only counts, ~0.5 GB/s here), so
  it costs the worker a fraction of a second rather than the seconds of parsing ~50 MiB of
  XML in a thread that shares the interpreter with the worker's heartbeat.
* **XML** is parsed with lxml's pull parser built by :func:`parse_bounded`: no DTD
  loaded, no entity substituted (an entity-expansion bomb expands to nothing, an external
  entity is never fetched), no network, libxml2's default limits on depth and text size
  (``huge_tree`` off), comments and processing instructions dropped.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator
from typing import Final

from lxml import etree

__all__ = [
    "INFLATE_STEP_BYTES",
    "MAX_DOCUMENT_URL_CHARS",
    "W3C_DATETIME",
    "DocumentRefused",
    "DocumentTooLarge",
    "MalformedDocument",
    "local_name",
    "parse_bounded",
]

_GZIP_MAGIC: Final = b"\x1f\x8b"
# Compressed bytes fed to zlib at a time.
_COMPRESSED_STEP_BYTES: Final = 64 * 1024
#: The most XML one step may hand the parser (inflated, or a slice of a plain body).
INFLATE_STEP_BYTES: Final = 1024 * 1024
#: W3C datetime (a sitemap's lastmod; Atom's RFC 3339 dates are one): YYYY, YYYY-MM,
#: YYYY-MM-DD, with a time and zone.
W3C_DATETIME: Final = re.compile(
    r"\d{4}(?:-\d{2}(?:-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?"
    r"(?:Z|[+-]\d{2}:\d{2})?)?)?)?"
)
#: A listed URL longer than this is junk, not an entry.
MAX_DOCUMENT_URL_CHARS: Final = 8192


class DocumentRefused(ValueError):
    """A document that is not read: ``failure_class`` says why, the message what was found.

    Raised by the pure readers (``SitemapRefused``, ``FeedRefused``); the worker turns it into
    the document's failure (a dead letter).
    """

    def __init__(self, failure_class: str, message: str) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.message = message


class MalformedDocument(ValueError):
    """The body is not well-formed XML or not a readable gzip stream (each reader maps this and
    :class:`DocumentTooLarge` to its own failure classes)."""


class DocumentTooLarge(ValueError):
    """More XML than the reader's bound, after decompression."""


def parse_bounded(
    body: bytes, max_bytes: int, read: Callable[[Iterator[etree._Element]], None]
) -> etree._Element:
    """Parse ``body`` (gzip'd or not) step by step, handing ``read`` the elements whose end
    each step reached (it may drop them: memory then follows one entry); returns the root.

    Raises :class:`DocumentTooLarge` past ``max_bytes`` of XML, :class:`MalformedDocument`
    when it is not well-formed; whatever ``read`` raises goes through.
    """
    _refuse_if_too_large(body, max_bytes)
    parser = _hardened_pull_parser()
    # Counted again while parsing: a gzip stream the first count could not read to its end
    # is inflated here as far as it goes, still within the bound.
    count = _XmlBytes(max_bytes)

    def feed(data: bytes) -> None:
        if not data:
            return
        count(data)
        parser.feed(data)
        read(element for _, element in parser.read_events())

    try:
        _feed_in_steps(body, feed)
        root: etree._Element = parser.close()
    except etree.LxmlError as exc:
        raise MalformedDocument(f"not well-formed XML: {exc}"[:500]) from None
    read(element for _, element in parser.read_events())
    return root


def _hardened_pull_parser() -> etree.XMLPullParser:
    """A pull parser reporting element ends that never expands or fetches anything."""
    return etree.XMLPullParser(
        events=("end",),
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


def _refuse_if_too_large(body: bytes, max_bytes: int) -> None:
    """Raise :class:`DocumentTooLarge` when ``body`` holds more than ``max_bytes`` of XML.

    A gzip stream is inflated and counted, never kept; one that cannot be read is left to the
    parsing pass, which says what is wrong with it.
    """
    count = _XmlBytes(max_bytes)
    if not body.startswith(_GZIP_MAGIC):
        count(body)
        return
    try:
        _feed_in_steps(body, count)
    except MalformedDocument:
        return


class _XmlBytes:
    """Counts the XML a document has given so far; :class:`DocumentTooLarge` past the bound."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.seen = 0

    def __call__(self, data: bytes) -> None:
        self.seen += len(data)
        if self.seen > self.max_bytes:
            raise DocumentTooLarge(f"over {self.max_bytes} bytes of XML (after decompression)")


def _feed_in_steps(body: bytes, feed: Callable[[bytes], None]) -> None:
    """Hand ``feed`` the XML of ``body`` (gzip'd or not) in bounded steps; ``feed`` counts the
    bytes and raises past its bound. Raises :class:`MalformedDocument` for a broken gzip."""
    if not body.startswith(_GZIP_MAGIC):
        for start in range(0, len(body), INFLATE_STEP_BYTES):
            feed(body[start : start + INFLATE_STEP_BYTES])
        return
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        for start in range(0, len(body), _COMPRESSED_STEP_BYTES):
            data = body[start : start + _COMPRESSED_STEP_BYTES]
            while data and not inflater.eof:
                feed(inflater.decompress(data, INFLATE_STEP_BYTES))
                data = inflater.unconsumed_tail
            if inflater.eof:
                break
        if not inflater.eof:
            feed(inflater.flush())
            raise MalformedDocument("the gzip stream is truncated")
    except zlib.error as exc:
        raise MalformedDocument(f"not a readable gzip stream: {exc}") from None


def local_name(tag: object) -> str:
    """An element's name without its namespace ('' for comments and the like)."""
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""
