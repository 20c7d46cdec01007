"""Reading one sitemap document (``scope.sitemaps``): a ``<urlset>`` or a ``<sitemapindex>``.

A sitemap is whatever a server sends, so it is read as hostile input: its cost is bounded and
anything wrong with it costs that one sitemap (:class:`SitemapRefused`), never the worker.

* **gzip**, the **XML** parser (no DTD, no entity substituted, no network) and the steps the
  body is fed in are ``crawler/links/xml_input.py``'s, shared with the feed reader. Elements
  are dropped as soon as they are read, so memory follows one entry, not the document.
* **size**: at most :data:`MAX_SITEMAP_BYTES` of XML after decompression (the sitemaps
  protocol's own limit); a larger document is refused whole, ``sitemap_too_large``: the URLs
  read before the bound would be an arbitrary prefix of the site, and a refusal says so.
  Malformed XML, or a root that is neither ``urlset`` nor ``sitemapindex``, is
  ``sitemap_invalid``.
* **entries**: the first :data:`MAX_URLS_PER_SITEMAP` ``<url>`` entries of a urlset, the first
  :data:`MAX_SITEMAPS_PER_INDEX` ``<sitemap>`` entries of an index; the rest are counted
  (``Sitemap.over_cap``) for the worker's dropped-link reasons. Elements are matched by local
  name: sites use the protocol's namespace, an old one, or none.

``lastmod`` is kept as the site wrote it when it has the shape of a W3C datetime (what the
protocol asks); any other value is dropped and the URL kept. The worker runs :func:`read_sitemap`
in a thread: a 50 MB document is seconds of parsing the event loop must not wait for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final, Literal

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
    "DEFAULT_SITEMAP_LIMITS",
    "MAX_SITEMAPS_PER_INDEX",
    "MAX_SITEMAP_BYTES",
    "MAX_SITEMAP_INDEX_DEPTH",
    "MAX_URLS_PER_SITEMAP",
    "Sitemap",
    "SitemapLimits",
    "SitemapRefused",
    "read_sitemap",
]

#: The sitemaps protocol's limits on one file: 50 MB of XML (uncompressed) and 50,000 URLs.
MAX_SITEMAP_BYTES: Final = 50 * 1024 * 1024
MAX_URLS_PER_SITEMAP: Final = 50_000
#: Sitemaps taken from one index, and from one robots.txt's ``Sitemap:`` lines: with the depth
#: bound it caps the documents one host can make the crawl fetch.
MAX_SITEMAPS_PER_INDEX: Final = 1_000
#: Indexes followed below the sitemaps a site names: the protocol allows none (an index lists
#: sitemaps only); sites nest one more level in practice. Deeper ones are not fetched.
MAX_SITEMAP_INDEX_DEPTH: Final = 2


@dataclass(frozen=True, slots=True)
class SitemapLimits:
    """The bounds one document is read within (the defaults above; tests pass smaller ones)."""

    max_bytes: int = MAX_SITEMAP_BYTES
    max_urls: int = MAX_URLS_PER_SITEMAP
    max_sitemaps: int = MAX_SITEMAPS_PER_INDEX
    max_index_depth: int = MAX_SITEMAP_INDEX_DEPTH


DEFAULT_SITEMAP_LIMITS: Final = SitemapLimits()


class SitemapRefused(DocumentRefused):
    """A sitemap that is not read (``sitemap_too_large`` or ``sitemap_invalid``)."""

    def __init__(
        self, failure_class: Literal["sitemap_too_large", "sitemap_invalid"], message: str
    ) -> None:
        super().__init__(failure_class, message)


@dataclass(slots=True)
class Sitemap:
    """What one document lists: page URLs (a urlset) or sitemap URLs (an index).

    ``lastmods[i]`` belongs to ``urls[i]`` (None: none, or not a W3C datetime).
    """

    kind: Literal["urlset", "sitemapindex"]
    urls: list[str] = field(default_factory=list)
    lastmods: list[str | None] = field(default_factory=list)
    #: Entries past the bound of their kind, not taken.
    over_cap: int = 0


def read_sitemap(body: bytes, limits: SitemapLimits = DEFAULT_SITEMAP_LIMITS) -> Sitemap:
    """The entries of one sitemap document (gzip'd or not); :class:`SitemapRefused` if it is
    over ``limits.max_bytes`` or is not a well-formed sitemap."""
    reader = _Reader(limits)
    try:
        root = parse_bounded(body, limits.max_bytes, reader.read)
    except DocumentTooLarge as exc:
        raise SitemapRefused("sitemap_too_large", f"sitemap {exc}") from None
    except MalformedDocument as exc:
        raise SitemapRefused("sitemap_invalid", str(exc)) from None
    return reader.close(root)


class _Reader:
    """Keeps the entries of the elements the parser hands it and drops every element once it
    is read: memory follows the entry being read, whatever else the document holds."""

    def __init__(self, limits: SitemapLimits) -> None:
        self._limits = limits
        self._urls: list[str] = []
        self._lastmods: list[str | None] = []
        # Which kind of entry each kept URL came from ("url" or "sitemap").
        self._kinds: list[str] = []
        self._entries = {"url": 0, "sitemap": 0}
        self._loc: str | None = None
        self._lastmod: str | None = None

    def close(self, root: etree._Element) -> Sitemap:
        kind = local_name(root.tag)
        if kind not in ("urlset", "sitemapindex"):
            raise SitemapRefused(
                "sitemap_invalid", f"root element {kind[:80]!r} is neither urlset nor sitemapindex"
            )
        entry = "url" if kind == "urlset" else "sitemap"
        cap = self._limits.max_urls if kind == "urlset" else self._limits.max_sitemaps
        # Both kinds of entry were collected in document order; a document of one kind holding
        # the other's entries is odd but not worth a refusal: only its own kind counts.
        wanted = [i for i, name in enumerate(self._kinds) if name == entry]
        urls = [self._urls[i] for i in wanted[:cap]]
        lastmods = [self._lastmods[i] for i in wanted[:cap]]
        over_cap = self._entries[entry] - len(urls)
        return Sitemap("urlset" if kind == "urlset" else "sitemapindex", urls, lastmods, over_cap)

    def read(self, elements: Iterator[etree._Element]) -> None:
        for element in elements:
            name = local_name(element.tag)
            if name == "loc":
                text = (element.text or "").strip()
                self._loc = text if 0 < len(text) <= MAX_DOCUMENT_URL_CHARS else None
            elif name == "lastmod":
                text = (element.text or "").strip()
                self._lastmod = text if W3C_DATETIME.fullmatch(text) else None
            elif name in ("url", "sitemap"):
                cap = self._limits.max_urls if name == "url" else self._limits.max_sitemaps
                if self._loc is not None:  # an entry without a usable <loc> offers nothing
                    self._entries[name] += 1
                if self._loc is not None and self._entries[name] <= cap:
                    self._urls.append(self._loc)
                    self._lastmods.append(self._lastmod)
                    self._kinds.append(name)
                self._loc = self._lastmod = None
            parent = element.getparent()
            if parent is not None:  # the root stays: close() reads its name
                parent.remove(element)
