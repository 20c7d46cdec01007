"""Reading one RSS or Atom feed: the links of its entries with their dates, like a sitemap's.

A feed is a site's own list of what is new, so the crawl reads it as it reads a urlset: each
entry's link becomes a link to crawl (passing scope, robots and dedup like any other), and its
date rides with it to the page's record (``lastmod``). A feed is whatever a server sends, so
it is read as hostile input, within the bounds and with the parser that sitemaps use
(``crawler/links/xml_input.py``): anything wrong with it costs that one feed
(:class:`FeedRefused`), never the worker.

* **size**: at most :data:`MAX_FEED_BYTES` of XML after decompression, else ``feed_too_large``.
* **entries**: the first :data:`MAX_ENTRIES_PER_FEED` entries with a link; the rest are counted
  (``Feed.over_cap``) for the worker's dropped-link reasons.
* **entities**: a document whose DTD declares entities is refused, ``feed_invalid``, before any
  is expanded: no feed needs them, and a billion-laughs or XXE document is then one failed URL.
  Malformed XML, or a root that is none of ``rss``, ``feed`` or ``rdf:RDF``, is ``feed_invalid``.

The three formats, matched by local name (namespaces vary: RSS 2.0 has none, RSS 1.0 and Atom
have theirs, sites mix them):

* RSS 2.0 and 0.9x (``<rss><channel><item>``): the ``<link>``, else a ``<guid>`` that is a
  permalink (the default) and an http(s) URL; dates ``<pubDate>`` (RFC 822) or ``<dc:date>``
  as published, an ``<atom:updated>`` or ``<dcterms:modified>`` as updated.
* Atom 1.0 (``<feed><entry>``): the first ``<link>`` whose ``rel`` is ``alternate`` (or absent);
  ``<published>`` and ``<updated>`` (RFC 3339).
* RSS 1.0 (``<rdf:RDF><item>``): the ``<link>``; ``<dc:date>``.

Relative links resolve against ``xml:base`` (on the link, its entry or the root, as Atom
allows) and the feed's own URL. Dates are kept as W3C datetimes (what a sitemap's lastmod is):
as written when they have that shape, converted from RFC 822 otherwise, dropped (the entry
kept) when unreadable. A parse costs about what a sitemap's does, see ``bench/feeds.py`` for
why lxml's pull parser and not feedparser.
"""

from __future__ import annotations

import email.utils
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC
from typing import Final, Literal, NamedTuple
from urllib.parse import urljoin

from lxml import etree

from crawlfleet.crawler.links.xml_input import (
    MAX_DOCUMENT_URL_CHARS,
    W3C_DATETIME,
    DocumentRefused,
    DocumentTooLarge,
    MalformedDocument,
    local_name,
    parse_bounded,
)

__all__ = [
    "DEFAULT_FEED_LIMITS",
    "FEED_CONTENT_TYPES",
    "FEED_SNIFF_BYTES",
    "MAX_ENTRIES_PER_FEED",
    "MAX_FEED_BYTES",
    "Feed",
    "FeedEntry",
    "FeedLimits",
    "FeedRefused",
    "is_feed",
    "read_feed",
]

#: A feed lists what is new, not the site: the largest real ones (podcast archives, full-text
#: feeds) run to a few MB. Past this it is not a feed anyone meant to be read whole.
MAX_FEED_BYTES: Final = 10 * 1024 * 1024
#: Entries taken from one feed (a sitemap takes 50,000; a feed of more is an archive dump).
MAX_ENTRIES_PER_FEED: Final = 10_000
#: The content types that say "feed" by themselves.
FEED_CONTENT_TYPES: Final = frozenset(
    {"application/rss+xml", "application/atom+xml", "application/rdf+xml"}
)
#: Generic XML types, read as a feed when the root element is one (:func:`is_feed`).
_XML_CONTENT_TYPES: Final = frozenset({"text/xml", "application/xml"})
#: How much of a generic XML body is sniffed for its root element: room for the XML
#: declaration, a stylesheet instruction and a comment or two before it.
FEED_SNIFF_BYTES: Final = 1024
_FEED_ROOTS: Final = frozenset({"rss", "feed", "rdf:RDF", "RDF"})
_XML_BASE: Final = "{http://www.w3.org/XML/1998/namespace}base"
_MAX_TITLE_CHARS: Final = 500

Format = Literal["rss", "atom", "rdf"]
_FORMATS: Final[dict[str, Format]] = {"rss": "rss", "feed": "atom", "RDF": "rdf"}


@dataclass(frozen=True, slots=True)
class FeedLimits:
    """The bounds one feed is read within (the defaults above; tests pass smaller ones)."""

    max_bytes: int = MAX_FEED_BYTES
    max_entries: int = MAX_ENTRIES_PER_FEED


DEFAULT_FEED_LIMITS: Final = FeedLimits()


class FeedRefused(DocumentRefused):
    """A feed that is not read (``feed_too_large`` or ``feed_invalid``)."""

    def __init__(
        self, failure_class: Literal["feed_too_large", "feed_invalid"], message: str
    ) -> None:
        super().__init__(failure_class, message)


class FeedEntry(NamedTuple):
    """One entry: its absolute link and dates (W3C datetimes, None when absent or unreadable)."""

    url: str
    published: str | None = None
    updated: str | None = None

    @property
    def lastmod(self) -> str | None:
        """The date a page record carries, as a sitemap's lastmod: the last change known."""
        return self.updated or self.published


@dataclass(slots=True)
class Feed:
    """What one feed lists, in document order."""

    format: Format
    entries: list[FeedEntry] = field(default_factory=list)
    #: The feed's own title (the channel's), for its page record.
    title: str | None = None
    #: Entries past the bound, not taken.
    over_cap: int = 0


def is_feed(content_type: str | None, head: bytes) -> bool:
    """Whether a response is a feed: its content type says so, or it is generic XML whose
    root element is ``rss``, ``feed`` or ``rdf:RDF`` within its first :data:`FEED_SNIFF_BYTES`.

    Only ASCII-compatible encodings are sniffed (a UTF-16 feed served as generic XML is not
    recognised; one served as a feed type is).
    """
    if not content_type:
        return False
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type in FEED_CONTENT_TYPES:
        return True
    if media_type not in _XML_CONTENT_TYPES:
        return False
    return _root_name(head[:FEED_SNIFF_BYTES]) in _FEED_ROOTS


def _root_name(head: bytes) -> str | None:
    """The qualified name of the first element in ``head``, skipping the XML declaration,
    processing instructions, comments and a DOCTYPE (None if none starts there)."""
    at = 3 if head.startswith(b"\xef\xbb\xbf") else 0
    while True:
        at = head.find(b"<", at)
        if at < 0 or at + 1 >= len(head):
            return None
        if head.startswith(b"<?", at):
            at = head.find(b"?>", at)
        elif head.startswith(b"<!--", at):
            at = head.find(b"-->", at)
        elif head.startswith(b"<!", at):
            close, subset = head.find(b">", at), head.find(b"[", at)
            at = head.find(b"]>", subset) if 0 <= subset < close else close
        else:
            end = at + 1
            while end < len(head) and head[end : end + 1] not in b" \t\r\n/>":
                end += 1
            return head[at + 1 : end].decode("ascii", "replace")
        if at < 0:
            return None


def read_feed(body: bytes, base_url: str = "", limits: FeedLimits = DEFAULT_FEED_LIMITS) -> Feed:
    """The entries of one feed (gzip'd or not), their links resolved against ``base_url`` (the
    feed's URL) and ``xml:base``; :class:`FeedRefused` if it is over ``limits.max_bytes`` or is
    not a well-formed RSS or Atom feed."""
    reader = _Reader(limits, base_url)
    try:
        root = parse_bounded(body, limits.max_bytes, reader.read)
    except DocumentTooLarge as exc:
        raise FeedRefused("feed_too_large", f"feed {exc}") from None
    except MalformedDocument as exc:
        raise FeedRefused("feed_invalid", str(exc)) from None
    return reader.close(root)


class _Reader:
    """Keeps the entries of the elements the parser hands it and drops every element once it
    is read: memory follows the entry being read, whatever else the document holds."""

    def __init__(self, limits: FeedLimits, base_url: str) -> None:
        self._limits = limits
        self._base_url = base_url
        self._checked_dtd = False
        self._entries: list[FeedEntry] = []
        self._seen = 0
        self._title: str | None = None
        # The entry being read.
        self._link: str | None = None
        self._guid: str | None = None
        self._published: str | None = None
        self._updated: str | None = None

    def close(self, root: etree._Element) -> Feed:
        self._refuse_entities(root)
        name = local_name(root.tag)
        if name not in _FORMATS:
            raise FeedRefused(
                "feed_invalid", f"root element {name[:80]!r} is none of rss, feed, rdf:RDF"
            )
        return Feed(_FORMATS[name], self._entries, self._title, self._seen - len(self._entries))

    def _refuse_entities(self, element: etree._Element) -> None:
        """Refuse a document whose DTD declares entities (once, at the first element read:
        the DTD comes before the root, and nothing was expanded by then or after)."""
        if self._checked_dtd:
            return
        self._checked_dtd = True
        dtd = element.getroottree().docinfo.internalDTD
        if dtd is not None and any(True for _ in dtd.iterentities()):
            raise FeedRefused("feed_invalid", "the document declares entities (not expanded)")

    def read(self, elements: Iterator[etree._Element]) -> None:
        for element in elements:
            self._refuse_entities(element)
            parent = element.getparent()
            if parent is None:
                continue  # the root stays: close() reads its name
            name = local_name(element.tag)
            within = local_name(parent.tag)
            if within in ("item", "entry"):
                self._read_entry_field(name, element)
            elif name in ("item", "entry"):
                self._end_entry(element)
            elif name == "title" and self._title is None and within in ("channel", "feed"):
                self._title = " ".join((element.text or "").split())[:_MAX_TITLE_CHARS] or None
            parent.remove(element)

    def _read_entry_field(self, name: str, element: etree._Element) -> None:
        if name == "link":
            href = element.get("href")
            if href is None:  # RSS: the link is the text
                if self._link is None:
                    self._link = self._resolve(element.text, element)
            elif self._link is None and element.get("rel", "alternate") == "alternate":
                self._link = self._resolve(href, element)
        elif name == "guid":
            if element.get("isPermaLink", "true") == "true":
                self._guid = self._resolve(element.text, element)
        elif name in ("pubDate", "published", "date", "issued"):
            self._published = self._published or _w3c_datetime(element.text)
        elif name in ("updated", "modified"):
            self._updated = self._updated or _w3c_datetime(element.text)

    def _end_entry(self, element: etree._Element) -> None:
        link = self._link or (
            self._guid if self._guid and self._guid.startswith(("http:", "https:")) else None
        )
        if link is not None:
            self._seen += 1
            if self._seen <= self._limits.max_entries:
                self._entries.append(FeedEntry(link, self._published, self._updated))
        self._link = self._guid = self._published = self._updated = None

    def _resolve(self, href: str | None, element: etree._Element) -> str | None:
        """``href`` made absolute against the ``xml:base`` of its element and ancestors and
        the feed's URL; None when empty or absurdly long."""
        href = (href or "").strip()
        if not href or len(href) > MAX_DOCUMENT_URL_CHARS:
            return None
        bases: list[str] = []
        node: etree._Element | None = element
        while node is not None:
            base = node.get(_XML_BASE)
            if base:
                bases.append(base.strip())
            node = node.getparent()
        url = self._base_url
        for base in reversed(bases):
            url = _join(url, base)
        return _join(url, href)


def _join(base: str, href: str) -> str:
    try:
        return urljoin(base, href) if base else href
    except ValueError:  # an unparsable base ('http://[::1'): the href as written
        return href


def _w3c_datetime(text: str | None) -> str | None:
    """A date as a W3C datetime: as written when it is one (Atom's, a ``dc:date``), converted
    from RFC 822 (RSS's ``pubDate``); None when it is neither."""
    text = (text or "").strip()
    if not text or len(text) > 64:
        return None
    if W3C_DATETIME.fullmatch(text):
        return text
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:  # '-0000': UTC, origin unknown (RFC 5322)
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()
