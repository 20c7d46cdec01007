"""The feed reader: RSS 2.0, Atom 1.0 and RSS 1.0 entries with their dates, relative links,
its bounds; hostile XML costs one feed. And what makes a response a feed (``is_feed``)."""

from __future__ import annotations

import gzip
import subprocess
import sys

import pytest

from crawlfleet.crawler.links.feeds import (
    FEED_SNIFF_BYTES,
    MAX_FEED_BYTES,
    FeedEntry,
    FeedLimits,
    FeedRefused,
    is_feed,
    read_feed,
)
from crawlfleet.testsite.server import build_gzip_bomb

ATOM = 'xmlns="http://www.w3.org/2005/Atom"'


def rss(*items: str, channel: str = "") -> bytes:
    return (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"'
        ' xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f"<channel><title>The  News</title><link>https://a.test/</link>{channel}"
        f"{''.join(items)}</channel></rss>"
    ).encode()


def item(link: str | None = None, *fields: str) -> str:
    linked = f"<link>{link}</link>" if link is not None else ""
    return f"<item><title>t</title>{linked}{''.join(fields)}</item>"


def test_rss_items_give_their_links_and_dates_in_order() -> None:
    body = rss(
        item("https://a.test/a/1", "<pubDate>Tue, 01 Dec 2026 10:00:00 +0100</pubDate>"),
        item("https://a.test/a/2", "<pubDate>Wed, 02 Dec 2026 07:30:00 GMT</pubDate>"),
        item("https://a.test/a/3", "<dc:date>2026-12-02T08:00:00Z</dc:date>"),
        item("https://a.test/a/4", "<pubDate>last tuesday</pubDate>"),  # unreadable: dropped
        item("https://a.test/a/5?x=1&amp;y=2", "<atom:updated>2026-12-03</atom:updated>"),
        channel="<pubDate>Mon, 30 Nov 2026 10:00:00 GMT</pubDate>"  # the channel's, no entry's
        '<atom:link href="https://a.test/feed.xml" rel="self"/>',
    )

    feed = read_feed(body, "https://a.test/feed.xml")

    assert feed.format == "rss"
    assert feed.title == "The News"
    assert feed.entries == [
        FeedEntry("https://a.test/a/1", "2026-12-01T10:00:00+01:00", None),
        FeedEntry("https://a.test/a/2", "2026-12-02T07:30:00+00:00", None),
        FeedEntry("https://a.test/a/3", "2026-12-02T08:00:00Z", None),
        FeedEntry("https://a.test/a/4", None, None),
        FeedEntry("https://a.test/a/5?x=1&y=2", None, "2026-12-03"),
    ]
    assert feed.entries[4].lastmod == "2026-12-03"
    assert feed.over_cap == 0


def test_an_rss_item_without_a_link_falls_back_to_its_permalink_guid() -> None:
    body = rss(
        item(None, "<guid>https://a.test/by-guid</guid>"),
        item(None, '<guid isPermaLink="false">https://a.test/not-a-permalink</guid>'),
        item(None, "<guid>tag:a.test,2026:42</guid>"),  # a permalink that is no URL
        item(None, "<description>no link at all</description>"),
    )
    assert [entry.url for entry in read_feed(body).entries] == ["https://a.test/by-guid"]


def test_atom_entries_take_their_alternate_link_and_both_dates() -> None:
    body = (
        f"<feed {ATOM}><title>Blog</title><link href='https://b.test/'/>"
        "<updated>2026-12-02T09:00:00Z</updated>"
        "<entry><title>one</title><link rel='edit' href='https://b.test/edit/1'/>"
        "<link rel='alternate' type='text/html' href='https://b.test/posts/1'/>"
        "<link rel='alternate' type='text/plain' href='https://b.test/posts/1.txt'/>"
        "<published>2026-12-01T08:00:00Z</published><updated>2026-12-02T08:00:00.5+02:00</updated>"
        "<source><updated>1999-01-01</updated></source></entry>"
        "<entry><link href='https://b.test/posts/2'/><updated>2026-12-02</updated></entry>"
        "<entry><link rel='enclosure' href='https://b.test/audio.mp3'/></entry>"
        "</feed>"
    ).encode()

    feed = read_feed(body)

    assert (feed.format, feed.title) == ("atom", "Blog")
    assert feed.entries == [
        FeedEntry("https://b.test/posts/1", "2026-12-01T08:00:00Z", "2026-12-02T08:00:00.5+02:00"),
        FeedEntry("https://b.test/posts/2", None, "2026-12-02"),
    ]
    assert feed.entries[0].lastmod == "2026-12-02T08:00:00.5+02:00"


def test_rss_1_0_items_are_read_in_their_namespace() -> None:
    body = (
        b'<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
        b' xmlns="http://purl.org/rss/1.0/" xmlns:dc="http://purl.org/dc/elements/1.1/">'
        b'<channel rdf:about="https://c.test/"><title>C</title><link>https://c.test/</link>'
        b"</channel>"
        b'<item rdf:about="https://c.test/1"><title>1</title><link>https://c.test/1</link>'
        b"<dc:date>2026-12-01T10:00+01:00</dc:date></item>"
        b'<item rdf:about="https://c.test/2"><link>https://c.test/2</link></item>'
        b"</rdf:RDF>"
    )
    feed = read_feed(body)
    assert (feed.format, feed.title) == ("rdf", "C")
    assert feed.entries == [
        FeedEntry("https://c.test/1", "2026-12-01T10:00+01:00"),
        FeedEntry("https://c.test/2"),
    ]


def test_relative_links_resolve_against_xml_base_then_the_feed_url() -> None:
    body = (
        f"<feed {ATOM} xml:base='https://cdn.test/blog/'>"
        "<entry><link href='posts/1'/></entry>"
        "<entry xml:base='archive/'><link href='2'/></entry>"
        "<entry><link xml:base='https://other.test/x/' href='3'/></entry>"
        "<entry><link href='/root'/></entry>"
        "</feed>"
    ).encode()
    assert [entry.url for entry in read_feed(body, "https://b.test/feed.atom").entries] == [
        "https://cdn.test/blog/posts/1",
        "https://cdn.test/blog/archive/2",
        "https://other.test/x/3",
        "https://cdn.test/root",
    ]
    plain = rss(item("../a/1"), item("/a/2"), item("https://elsewhere.test/3"))
    assert [entry.url for entry in read_feed(plain, "https://a.test/feeds/all.xml").entries] == [
        "https://a.test/a/1",
        "https://a.test/a/2",
        "https://elsewhere.test/3",
    ]


def test_entries_past_the_cap_are_counted_not_taken() -> None:
    body = rss(*(item(f"https://a.test/a/{n}") for n in range(7)), item(None))
    feed = read_feed(body, limits=FeedLimits(max_entries=5))
    assert [entry.url for entry in feed.entries] == [f"https://a.test/a/{n}" for n in range(5)]
    assert feed.over_cap == 2  # the item without a link is no entry


def test_a_gzipped_feed_is_read() -> None:
    body = gzip.compress(rss(item("https://a.test/a/1")))
    assert read_feed(body).entries == [FeedEntry("https://a.test/a/1")]


def test_a_feed_over_its_byte_bound_is_refused_whole() -> None:
    body = rss(*(item(f"https://a.test/a/{n}") for n in range(200)))
    with pytest.raises(FeedRefused) as refused:
        read_feed(body, limits=FeedLimits(max_bytes=len(body) - 1))
    assert refused.value.failure_class == "feed_too_large"
    assert read_feed(body, limits=FeedLimits(max_bytes=len(body))).over_cap == 0


def test_a_gzip_bomb_stops_at_the_bound() -> None:
    # well-formed as far as it goes (64 MiB of blanks inside <rss>), so only the bound stops it
    bomb = gzip.compress(b"<rss><channel>" + b" " * (64 * 1024 * 1024), compresslevel=1)
    assert len(bomb) < 1024 * 1024
    with pytest.raises(FeedRefused) as refused:
        read_feed(bomb, limits=FeedLimits(max_bytes=1024 * 1024))
    assert refused.value.failure_class == "feed_too_large"
    # Zeros are no XML at all, but past the bound that is not looked at: it is counted first.
    with pytest.raises(FeedRefused) as zeros:
        read_feed(build_gzip_bomb(64 * 1024 * 1024))
    assert zeros.value.failure_class == "feed_too_large"
    with pytest.raises(FeedRefused) as zeros:
        read_feed(build_gzip_bomb(MAX_FEED_BYTES // 2))
    assert zeros.value.failure_class == "feed_invalid"


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">'
        for i in range(1, 10)
    )
    + "]><rss><channel><item><link>https://a.test/&lol9;</link></item></channel></rss>"
)
XXE = (
    '<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY e SYSTEM "file:///etc/hostname">]>'
    "<rss><channel><item><link>https://a.test/&e;</link></item></channel></rss>"
)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(BILLION_LAUGHS.encode(), id="billion-laughs"),
        pytest.param(XXE.encode(), id="external-entity"),
        pytest.param(b"<rss><channel><item><link>https://a.test/x", id="truncated"),
        pytest.param(b"<html><body>not a feed</body></html>", id="html"),
        pytest.param(b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>', id="urlset"),
        pytest.param(b"\x00\xff binary junk", id="junk"),
        pytest.param(b"", id="empty"),
        pytest.param(gzip.compress(rss(item("https://a.test/x")))[:-12], id="truncated-gzip"),
        pytest.param(b"<rss>" + b"<a>" * 100_000 + b"</a>" * 100_000 + b"</rss>", id="deep"),
    ],
)
def test_hostile_or_malformed_xml_is_refused_as_one_feed(body: bytes) -> None:
    with pytest.raises(FeedRefused) as refused:
        read_feed(body)
    assert refused.value.failure_class == "feed_invalid"
    assert refused.value.message


def test_entities_are_refused_before_anything_is_expanded_or_read() -> None:
    with pytest.raises(FeedRefused, match="declares entities") as refused:
        read_feed(XXE.encode())
    assert "/etc" not in refused.value.message
    # The billion laughs would be 10**9 'lol's; the refusal comes from the declaration alone.
    with pytest.raises(FeedRefused, match=r"declares entities|not well-formed"):
        read_feed(BILLION_LAUGHS.encode())


@pytest.mark.parametrize(
    ("content_type", "head", "expected"),
    [
        ("application/rss+xml", b"", True),
        ("Application/Atom+XML; charset=utf-8", b"<feed/>", True),
        ("application/rdf+xml", b"<rdf:RDF/>", True),
        ("text/xml; charset=utf-8", b'<?xml version="1.0"?>\n<rss version="2.0">', True),
        ("application/xml", b'\xef\xbb\xbf<feed xmlns="http://www.w3.org/2005/Atom">', True),
        ("application/xml", b"<rdf:RDF xmlns:rdf='x'>", True),
        (
            "text/xml",
            b'<?xml version="1.0"?><?xml-stylesheet href="s.xsl"?><!-- <urlset> -->'
            b'<!DOCTYPE rss [<!ENTITY a "<b>">]><rss>',
            True,
        ),
        ("application/xml", b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">', False),
        ("text/xml", b"<!-- an unclosed comment <rss>", False),
        ("text/html", b"<rss>", False),  # HTML is HTML, whatever it starts with
        (None, b"<rss>", False),
        ("application/xml", b" " * FEED_SNIFF_BYTES + b"<rss>", False),  # only the first bytes
    ],
)
def test_a_response_is_a_feed_by_its_type_or_its_root(
    content_type: str | None, head: bytes, expected: bool
) -> None:
    assert is_feed(content_type, head) is expected


_FEED_PEAK_PROBE = """
import re
from crawlfleet.crawler.links.feeds import read_feed

junk = b"<category>x</category>" * 200_000
body = b"<rss><channel><item><link>https://a.test/x</link>" + junk + b"</item></channel></rss>"
def high_water_kib():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+)", status.read())[1])

before = high_water_kib()
assert [entry.url for entry in read_feed(body).entries] == ["https://a.test/x"]
print(high_water_kib() - before)
"""


def test_memory_follows_one_element_however_many_an_entry_holds() -> None:
    """200,000 elements in one item (4.4 MB of XML) are ~46 MB as a tree: each is dropped once
    read, so the peak follows the parser's 1 MiB steps. Measured in a child of its own (VmHWM:
    its peak alone)."""
    grown_kib = int(
        subprocess.run(
            [sys.executable, "-c", _FEED_PEAK_PROBE], capture_output=True, text=True, check=True
        ).stdout
    )
    assert grown_kib < 25 * 1024
