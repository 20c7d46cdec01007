"""Every host's feeds (``SiteConfig.feeds``): an RSS 2.0 and an Atom 1.0 feed, announced by
``<link rel="alternate">`` in every normal page's head.

``/feeds/rss.xml`` is served as ``text/xml`` (a crawler must sniff its ``<rss>`` root, as many
real feeds are served) and lists :data:`RSS_ONLY` pages with absolute links and RFC 822
``pubDate``s; ``/feeds/atom.xml`` is served as ``application/atom+xml`` and lists
:data:`ATOM_ONLY` pages with links relative to its ``xml:base``, ``published`` and ``updated``
dates. No page links any of them: the feeds are the only way to them. Both also list the
host's home page (found by links too: dedup) and a page of the out-of-scope host (dropped by
scope, never fetched). ``/feeds/entities.xml``, linked from nowhere, is a billion-laughs
RSS document with an external entity too: a crawler given it must refuse it unexpanded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "ATOM_CONTENT_TYPE",
    "ATOM_ONLY",
    "ATOM_PATH",
    "FEED_HEAD_LINKS",
    "HOSTILE_PATH",
    "NEWS_PREFIX",
    "RSS_CONTENT_TYPE",
    "RSS_ONLY",
    "RSS_PATH",
    "FeedPage",
    "render_atom",
    "render_hostile",
    "render_rss",
]

RSS_PATH: Final = "/feeds/rss.xml"
ATOM_PATH: Final = "/feeds/atom.xml"
HOSTILE_PATH: Final = "/feeds/entities.xml"
RSS_CONTENT_TYPE: Final = "text/xml; charset=utf-8"
ATOM_CONTENT_TYPE: Final = "application/atom+xml"
#: Feed-only pages live under this path on every host.
NEWS_PREFIX: Final = "/news/"
#: What every normal page's head announces.
FEED_HEAD_LINKS: Final = (
    f'<link rel="alternate" type="application/rss+xml" title="News" href="{RSS_PATH}">\n'
    f'<link rel="alternate" type="application/atom+xml" title="News" href="{ATOM_PATH}">\n'
)


@dataclass(frozen=True, slots=True)
class FeedPage:
    """A page one feed lists, with the date its entry gives (what its record's lastmod is)."""

    path: str
    lastmod: str


RSS_ONLY: Final = tuple(
    FeedPage(f"{NEWS_PREFIX}rss-{n}.html", f"2026-12-01T{n:02}:00:00+00:00") for n in range(4)
)
ATOM_ONLY: Final = tuple(
    FeedPage(f"{NEWS_PREFIX}atom-{n}.html", f"2026-12-02T{n:02}:30:00Z") for n in range(3)
)
_RSS_DATES: Final = tuple(f"Tue, 01 Dec 2026 {n:02}:00:00 GMT" for n in range(len(RSS_ONLY)))


def render_rss(base: str, elsewhere: str) -> bytes:
    """The RSS feed of the host at ``base`` (``http://host:port``); ``elsewhere`` is the
    out-of-scope host's base."""
    items = "".join(
        f"<item><title>News {page.path}</title><link>{base}{page.path}</link>"
        f"<guid>{base}{page.path}</guid><pubDate>{date}</pubDate>"
        "<description>&lt;p&gt;Only in the feed.&lt;/p&gt;</description></item>"
        for page, date in zip(RSS_ONLY, _RSS_DATES, strict=True)
    )
    items += f"<item><title>Home</title><link>{base}/</link></item>"
    items += f"<item><title>Away</title><link>{elsewhere}/news/away.html</link></item>"
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel>'
        f"<title>Site news</title><link>{base}/</link><description>New pages</description>"
        f"{items}</channel></rss>"
    ).encode()


def render_atom(base: str, elsewhere: str) -> bytes:
    """The Atom feed of the host at ``base``, its entries relative to its ``xml:base``."""
    entries = "".join(
        f"<entry><title>News {page.path}</title><id>{base}{page.path}</id>"
        f'<link rel="alternate" type="text/html" href="{page.path.removeprefix(NEWS_PREFIX)}"/>'
        f"<published>2026-12-02T00:00:00Z</published><updated>{page.lastmod}</updated></entry>"
        for page in ATOM_ONLY
    )
    entries += f'<entry><title>Home</title><id>{base}/</id><link href="/"/></entry>'
    entries += f'<entry><title>Away</title><id>x</id><link href="{elsewhere}/news/a"/></entry>'
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<feed xmlns="http://www.w3.org/2005/Atom" xml:base="{base}{NEWS_PREFIX}">'
        f'<title>Site news</title><id>{base}/</id><link rel="self" href="{ATOM_PATH}"/>'
        f"<updated>2026-12-02T09:00:00Z</updated>{entries}</feed>"
    ).encode()


def render_hostile() -> bytes:
    """An RSS document whose ten nested entities would expand to 10**9 'lol's, and whose
    other entity names a local file."""
    levels = "".join(f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, 10))
    return (
        '<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY lol0 "lol">'
        f'{levels}<!ENTITY local SYSTEM "file:///etc/hostname">]>'
        "<rss><channel><item><link>/news/&lol9;</link></item>"
        "<item><link>/news/&local;</link></item></channel></rss>"
    ).encode()
