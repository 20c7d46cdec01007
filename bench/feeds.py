"""Feed parsing: which parser the crawler reads RSS and Atom with, one run.

    python -m bench.feeds [--quick] [--json]

The two well-kept candidates (issue #23):

- ``lxml``: ``crawler/links/feeds.py``'s ``read_feed``, lxml's pull parser (already a
  dependency, through parsel and the sitemap reader) with entities off, the entry's link and
  dates kept and every element dropped as it is read;
- ``feedparser``: the universal feed parser (expat through ``xml.sax``, a normalising layer that
  sanitises every entry's HTML, resolves relative links and parses dates); installed for the
  benchmark only (``pip install feedparser``); reported as missing when it is not.

Each parses the same realistic feeds from bytes, as a worker holds them: RSS 2.0 and Atom 1.0
news feeds of 50 entries (what a news site serves) and 5,000 entries (an archive feed), each
entry with a title, a link, a guid, dates, categories and a ~600-byte HTML description or
summary. Interleaved rounds, best of each, in CPU time of this process (parsing is
single-threaded CPU work, and on a shared machine wall time measures the neighbours). Both
must find the same links (checked every round), so neither can win by reading less. Reported
per feed: CPU ms per parse for each and the ratio ``feedparser / lxml`` (how many times slower
the peer is); without ``--quick`` also the peak memory one 5,000-entry parse adds (tracemalloc,
so Python allocations: lxml's own C memory is not seen, which is why the reader's
drop-as-you-go is tested separately in tests/unit).
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import time
import tracemalloc
from collections.abc import Callable
from typing import Any
from xml.sax.saxutils import escape

from crawlfleet.crawler.links.feeds import DEFAULT_FEED_LIMITS, read_feed

SIZES = (50, 5_000)
FORMATS = ("rss", "atom")
_DESCRIPTION = escape(
    "<p>The council voted on Tuesday to <a href='/topics/transport'>extend the tram line</a>"
    " past the river, a plan first put forward in 2019. <strong>Construction</strong> is"
    " expected to begin next spring and to last three years; the cost, shared with the"
    " region, is put at 240 million. Residents near the new stops were asked for their views"
    " in a consultation that closes at the end of the month.</p><img src='/img/tram.jpg'"
    " alt='tram'/>"
)


def rss(entries: int) -> bytes:
    """An RSS 2.0 news feed as sites write them (atom:self, dc:creator, media, categories)."""
    items = "".join(
        f"<item><title>Council extends tram line, part {n}</title>"
        f"<link>https://news.example/2026/12/02/tram-line-{n}.html</link>"
        f'<guid isPermaLink="false">news.example-{n}</guid>'
        f"<pubDate>Wed, 02 Dec 2026 {n % 24:02}:{n % 60:02}:00 +0000</pubDate>"
        f"<dc:creator>Desk {n % 7}</dc:creator><category>City</category><category>Transport"
        f"</category><description>{_DESCRIPTION}</description>"
        f'<media:content url="https://news.example/img/{n}.jpg" medium="image"/></item>'
        for n in range(entries)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"'
        ' xmlns:atom="http://www.w3.org/2005/Atom" xmlns:dc="http://purl.org/dc/elements/1.1/"'
        ' xmlns:media="http://search.yahoo.com/mrss/"><channel><title>The News</title>'
        "<link>https://news.example/</link><description>Latest</description>"
        '<atom:link href="https://news.example/feed.xml" rel="self" type="application/rss+xml"/>'
        f"<lastBuildDate>Wed, 02 Dec 2026 08:00:00 +0000</lastBuildDate>{items}</channel></rss>"
    ).encode()


def atom(entries: int) -> bytes:
    """An Atom 1.0 feed with relative links under an ``xml:base``, as blogs write them."""
    items = "".join(
        f"<entry><title>Council extends tram line, part {n}</title>"
        f'<link rel="alternate" type="text/html" href="2026/12/02/tram-line-{n}.html"/>'
        f"<id>tag:news.example,2026:{n}</id><published>2026-12-02T{n % 24:02}:00:00Z</published>"
        f"<updated>2026-12-02T{n % 24:02}:{n % 60:02}:00Z</updated>"
        f"<author><name>Desk {n % 7}</name></author>"
        '<category term="city"/><category term="transport"/>'
        f'<summary type="html">{_DESCRIPTION}</summary></entry>'
        for n in range(entries)
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom"'
        ' xml:base="https://news.example/"><title>The News</title>'
        '<link rel="self" href="https://news.example/feed.atom"/><link href="/"/>'
        f"<id>tag:news.example,2026:feed</id><updated>2026-12-02T08:00:00Z</updated>{items}</feed>"
    ).encode()


def lxml_links(body: bytes) -> list[str]:
    return [entry.url for entry in read_feed(body, "https://news.example/feed").entries]


def feedparser_links(body: bytes) -> list[str]:
    parsed = importlib.import_module("feedparser").parse(body)
    return [entry.link for entry in parsed.entries]


def best_times(
    parsers: dict[str, Callable[[bytes], list[str]]], body: bytes, rounds: int
) -> dict[str, float]:
    """Best CPU seconds per parse of each, rounds interleaved; links checked to agree each
    round."""
    best = dict.fromkeys(parsers, float("inf"))
    for _ in range(rounds):
        found = {}
        for name, parse in parsers.items():
            started = time.process_time()
            found[name] = parse(body)
            best[name] = min(best[name], time.process_time() - started)
        first, *others = found.values()
        if any(links != first for links in others) or len(first) == 0:
            raise SystemExit(f"parsers disagree on the links: {[len(v) for v in found.values()]}")
    return best


def peak_bytes(parse: Callable[[bytes], list[str]], body: bytes) -> int:
    tracemalloc.start()
    try:
        parse(body)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.feeds")
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", action="store_true", help="print the results as JSON last")
    args = parser.parse_args()
    parsers: dict[str, Callable[[bytes], list[str]]] = {"lxml": lxml_links}
    try:
        importlib.import_module("feedparser")
        parsers["feedparser"] = feedparser_links
    except ImportError:
        print("feedparser is not installed (pip install feedparser): lxml alone")
    results: dict[str, Any] = {
        "python": platform.python_version(),
        "peers": sorted(parsers),
        "max_feed_bytes": DEFAULT_FEED_LIMITS.max_bytes,
        "feeds": {},
    }
    for entries in SIZES:
        rounds = (5 if args.quick else 15) if entries < 1000 else (1 if args.quick else 5)
        for kind in FORMATS:
            body = rss(entries) if kind == "rss" else atom(entries)
            times = best_times(parsers, body, rounds)
            figures: dict[str, Any] = {"bytes": len(body), "entries": entries}
            figures.update({f"{name}_ms": seconds * 1e3 for name, seconds in times.items()})
            if "feedparser" in times:
                figures["feedparser_over_lxml"] = times["feedparser"] / times["lxml"]
            if entries == max(SIZES) and not args.quick:  # tracemalloc slows feedparser 5x
                for name, parse in parsers.items():
                    figures[f"{name}_peak_python_kib"] = peak_bytes(parse, body) // 1024
            results["feeds"][f"{kind}_{entries}"] = figures
            line = ", ".join(f"{name} {seconds * 1e3:.2f} ms" for name, seconds in times.items())
            ratio = figures.get("feedparser_over_lxml")
            print(
                f"{kind} {entries:>5} entries ({len(body) / 1024:,.0f} KiB): {line}"
                + (f"; feedparser/lxml {ratio:.1f}x" if ratio else "")
            )
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
