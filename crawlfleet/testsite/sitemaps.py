"""Host 0's sitemaps: robots.txt names an index that lists two gzip'd sitemaps, one oversized.

``/sitemaps/index.xml`` (named by host 0's ``Sitemap:`` line) lists
``/sitemaps/pages.xml.gz``, whose urlset holds :data:`LISTED_PAGES` (pages served on host 0
that no page links, so a sitemap is the only way to them, most with a ``<lastmod>``), a page
of the out-of-scope host, a Disallowed ``/private/`` page (when the site is hostile) and host
0's home page (found by links as well: dedup), and ``/sitemaps/oversized.xml.gz``, which
inflates past the crawler's :data:`~crawlfleet.crawler.links.sitemaps.MAX_SITEMAP_BYTES` (a few
hundred KiB on the wire) and lists pages that must never be fetched, and
``/sitemaps/nested/1.xml``, the first of an endless chain of indexes (``nested/<n>.xml`` lists
``nested/<n+1>.xml``) that only a bound on index depth ends. Host 0 has no ``/sitemap.xml``: a
crawler's guess of it gets a 404.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from typing import Final
from xml.sax.saxutils import escape

from crawlfleet.crawler.links.sitemaps import MAX_SITEMAP_BYTES

__all__ = [
    "INDEX_PATH",
    "LISTED_PAGES",
    "NESTED_PREFIX",
    "OVERSIZED_LISTED_PREFIX",
    "OVERSIZED_PATH",
    "PAGES_PATH",
    "ListedPage",
    "nested_path",
    "render_index",
    "render_nested",
    "render_oversized",
    "render_pages",
]

INDEX_PATH: Final = "/sitemaps/index.xml"
PAGES_PATH: Final = "/sitemaps/pages.xml.gz"
OVERSIZED_PATH: Final = "/sitemaps/oversized.xml.gz"
#: Pages of the oversized sitemap start with this path: a crawler that fetched one read it.
OVERSIZED_LISTED_PREFIX: Final = "/listed/oversized/"
#: The endless chain of indexes: ``<prefix><n>.xml``.
NESTED_PREFIX: Final = "/sitemaps/nested/"
#: The Disallowed page the good sitemap lists (hostile robots.txt forbids ``/private/``).
PRIVATE_LISTED_PATH: Final = "/private/listed"

_NAMESPACE: Final = "http://www.sitemaps.org/schemas/sitemap/0.9"


@dataclass(frozen=True, slots=True)
class ListedPage:
    path: str
    lastmod: str | None


LISTED_PAGES: Final = (
    ListedPage("/listed/0.html", "2026-01-15"),
    ListedPage("/listed/1.html", "2026-02-01T10:30:00+00:00"),
    ListedPage("/listed/2.html", None),
    ListedPage("/listed/3.html", "2025-12"),
)


def _entry(tag: str, loc: str, lastmod: str | None = None) -> str:
    mod = f"<lastmod>{lastmod}</lastmod>" if lastmod is not None else ""
    return f"<{tag}><loc>{escape(loc)}</loc>{mod}</{tag}>"


def nested_path(level: int) -> str:
    """The path of the chain's index ``level`` (1, 2, ...)."""
    return f"{NESTED_PREFIX}{level}.xml"


def _index(base: str, paths: tuple[str, ...]) -> bytes:
    entries = "".join(_entry("sitemap", base + path) for path in paths)
    xml = f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex xmlns="{_NAMESPACE}">{entries}'
    return (xml + "</sitemapindex>").encode()


def render_index(base: str) -> bytes:
    """The sitemap index (plain XML); ``base`` is host 0's ``http://netloc``."""
    return _index(base, (PAGES_PATH, OVERSIZED_PATH, nested_path(1)))


def render_nested(base: str, level: int) -> bytes:
    """Index ``level`` of the endless chain: it lists index ``level + 1`` and nothing else."""
    return _index(base, (nested_path(level + 1),))


def render_pages(base: str, out_of_scope_base: str) -> bytes:
    """The good sitemap, gzip'd: the listed pages and a few URLs the crawl must filter."""
    entries = [_entry("url", base + page.path, page.lastmod) for page in LISTED_PAGES]
    entries += [
        _entry("url", out_of_scope_base + "/listed/elsewhere.html", "2026-03-01"),
        _entry("url", base + PRIVATE_LISTED_PATH, "2026-03-02"),
        _entry("url", base + "/"),
    ]
    xml = f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{_NAMESPACE}">'
    return gzip.compress((xml + "".join(entries) + "</urlset>").encode(), mtime=0)


def render_oversized(base: str) -> bytes:
    """A well-formed urlset one MiB past the bound, gzip'd as it is built (never held whole)."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{_NAMESPACE}">'.encode()
    block = "".join(
        _entry("url", f"{base}{OVERSIZED_LISTED_PREFIX}{i}.html") for i in range(100)
    ).encode()
    parts = [compressor.compress(head)]
    written = len(head)
    while written <= MAX_SITEMAP_BYTES + 1024 * 1024:
        parts.append(compressor.compress(block))
        written += len(block)
    parts.append(compressor.compress(b"</urlset>"))
    parts.append(compressor.flush())
    return b"".join(parts)
