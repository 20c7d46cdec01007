"""Unit tests for crawlfleet.crawler.links.links: resolution, filtering, nofollow and hostile
input."""

from __future__ import annotations

import html as html_lib
import random
from urllib.parse import urljoin, urlsplit

import pytest

from crawlfleet.crawler.links.links import (
    MAX_FEED_LINKS_PER_PAGE,
    PARSER_NAME,
    PageLinks,
    _clean_base,
    _split_clean,
    extract_links,
)

PAGE = "https://example.com/dir/page.html?q=1"


def anchors(*hrefs: str, extra: str = "") -> str:
    """A page whose body holds one <a> per href, attribute-escaped."""
    body = "".join(f'<a href="{html_lib.escape(href)}">x</a>' for href in hrefs)
    return f"<html><head>{extra}</head><body>{body}</body></html>"


def links_of(*hrefs: str, page_url: str = PAGE, extra: str = "") -> list[str]:
    return extract_links(anchors(*hrefs, extra=extra), page_url).links


def test_parser_is_lexbor() -> None:
    assert PARSER_NAME == "lexbor"


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("other.html", "https://example.com/dir/other.html"),
        ("sub/x?y=2", "https://example.com/dir/sub/x?y=2"),
        ("/root", "https://example.com/root"),
        ("?page=2", "https://example.com/dir/page.html?page=2"),
        ("../up.html", "https://example.com/up.html"),
        ("./same.html", "https://example.com/dir/same.html"),
        ("/a/./b/../c", "https://example.com/a/c"),
        ("//cdn.example.org/lib.js", "https://cdn.example.org/lib.js"),
        ("http://other.example/x", "http://other.example/x"),
        ("HTTPS://Other.Example/X", "https://Other.Example/X"),
        ("https:rel", "https://example.com/dir/rel"),
        ("  spaced.html \n", "https://example.com/dir/spaced.html"),
        ("page.html#section", "https://example.com/dir/page.html"),
        ("https://x.example/a?b=c#frag", "https://x.example/a?b=c"),
        ("http://[2001:db8::1]:8080/v6", "http://[2001:db8::1]:8080/v6"),
        ("http://[::1]/", "http://[::1]/"),
        ("a//b", "https://example.com/dir/a//b"),  # RFC 3986 keeps empty segments
        ("li\tne\nbreak.html", "https://example.com/dir/linebreak.html"),
        ("/caf\u00e9 menu", "https://example.com/caf%C3%A9%20menu"),
        ("http://b\u00fccher.example/", "http://xn--bcher-kva.example/"),
        # IDNA 2008 (the model's and the scope's spelling), not Python's IDNA 2003 codec
        ("http://fa\u00df.de/stra\u00dfe", "http://xn--fa-hia.de/stra%C3%9Fe"),
        ("http://u:p@B\u00fccher.example:8080/", "http://u:p@xn--bcher-kva.example:8080/"),
    ],
)
def test_resolves_hrefs(href: str, expected: str) -> None:
    assert links_of(href) == [expected]


@pytest.mark.parametrize(
    "href",
    [
        "",
        "   ",
        "#",
        "#top",
        "javascript:void(0)",
        "JavaScript:alert(1)",
        " javascript:x",
        "mailto:someone@example.com",
        "tel:+123",
        "data:text/html,<b>hi</b>",
        "ftp://files.example/x",
        "file:///etc/passwd",
        "about:blank",
        "http://[::1",
        "http://[not-an-ip]/",
        "http://host:99999/",
        "http://host:port/",
        "http:///no-host",
        "http://user@/no-host",
        "//",
        "///x",
        "localhost:8080",
        "http://exa mple.com/",
        "http://%41.example/",
        "http://a<b.example/",
    ],
)
def test_skips_unfetchable_hrefs(href: str) -> None:
    assert links_of(href) == []


@pytest.mark.parametrize(
    ("base", "page_url", "href", "expected"),
    [
        ("https://static.example/base/", PAGE, "x.html", "https://static.example/base/x.html"),
        ("/other/", PAGE, "x.html", "https://example.com/other/x.html"),
        ("sub/", PAGE, "x.html", "https://example.com/dir/sub/x.html"),
        ("javascript:alert(1)", PAGE, "x.html", "https://example.com/dir/x.html"),
        ("http://[::1", PAGE, "x.html", "https://example.com/dir/x.html"),
        ("", PAGE, "x.html", "https://example.com/dir/x.html"),
        ("http://[2001:db8::5]:81/a/", PAGE, "b", "http://[2001:db8::5]:81/a/b"),
    ],
)
def test_base_href(base: str, page_url: str, href: str, expected: str) -> None:
    extra = f'<base href="{html_lib.escape(base)}">'
    assert links_of(href, page_url=page_url, extra=extra) == [expected]


def test_first_base_wins_even_after_links() -> None:
    page = '<a href="x">1</a><base href="https://one.example/"><base href="https://two.example/">'
    assert extract_links(page, PAGE).links == ["https://one.example/x"]


def test_area_links_and_document_order() -> None:
    page = '<a href="/1">1</a><map><area href="/2"></map><a href="/3">3</a>'
    assert extract_links(page, PAGE).links == [
        "https://example.com/1",
        "https://example.com/2",
        "https://example.com/3",
    ]


def test_dedupes_in_first_seen_order() -> None:
    hrefs = ["/b", "/a", "/b", "https://example.com/a", "/a#frag", "/c", "./c", "/b"]
    assert links_of(*hrefs) == [
        "https://example.com/b",
        "https://example.com/a",
        "https://example.com/c",
        "https://example.com/dir/c",
    ]


@pytest.mark.parametrize(
    ("rel", "respect", "followed"),
    [
        ("nofollow", True, False),
        ("NoFollow", True, False),
        ("noopener nofollow ugc", True, False),
        ("nofollow", False, True),
        ("noopener", True, True),
        ("nofollowme", True, True),
        ("", True, True),
    ],
)
def test_rel_nofollow(rel: str, respect: bool, followed: bool) -> None:
    page = f'<a rel="{rel}" href="/skip">s</a><a href="/keep">k</a>'
    links = extract_links(page, PAGE, respect_nofollow=respect).links
    assert ("https://example.com/skip" in links) is followed
    assert "https://example.com/keep" in links


def test_nofollow_then_followed_duplicate_is_kept() -> None:
    page = '<a rel="nofollow" href="/x">1</a><a href="/x">2</a>'
    assert extract_links(page, PAGE).links == ["https://example.com/x"]


@pytest.mark.parametrize(
    ("meta", "respect", "has_links"),
    [
        ('<meta name="robots" content="nofollow">', True, False),
        ('<meta name="ROBOTS" content="NoIndex, NoFollow">', True, False),
        ('<meta name="robots" content="none">', True, False),
        ('<meta name="robots" content="nofollow">', False, True),
        ('<meta name="robots" content="noindex">', True, True),
        ('<meta name="robots" content="index, follow">', True, True),
        ('<meta name="googlebot" content="nofollow">', True, True),
        ('<meta name="description" content="nofollow">', True, True),
    ],
)
def test_meta_robots(meta: str, respect: bool, has_links: bool) -> None:
    result = extract_links(anchors("/a", extra=meta), PAGE, respect_nofollow=respect)
    assert bool(result.links) is has_links


@pytest.mark.parametrize(
    ("head", "title"),
    [
        ("<title>  Hello \n  world </title>", "Hello world"),
        ("<title></title>", None),
        ("<title>   </title>", None),
        ("", None),
        ("<title>A &amp; B</title>", "A & B"),
    ],
)
def test_title(head: str, title: str | None) -> None:
    assert extract_links(f"<html><head>{head}</head></html>", PAGE).title == title


def test_bytes_and_str_agree() -> None:
    page = anchors("/a", "b", "https://x.example/\u00e9", extra="<title>T\u00e9</title>")
    from_str = extract_links(page, PAGE)
    from_bytes = extract_links(page.encode("utf-8"), PAGE)
    assert from_str == from_bytes
    assert from_str.title == "T\u00e9"
    assert from_str.links[-1] == "https://x.example/%C3%A9"


def test_result_is_frozen_value() -> None:
    result = extract_links(anchors("/a"), PAGE)
    assert result == PageLinks(title=None, links=["https://example.com/a"])
    with pytest.raises(AttributeError):
        result.title = "changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    "page",
    [
        b"",
        "",
        b"\x00\x01\x02\xff\xfe\xfd" * 1000,
        b"<a href='/x",
        b"<a href=/x><a href",
        b'<<<<>>>><a href="/ok">',
        "<a href='\ud800/x'>",
        b"<html><body><div><div><div><a href=/deep>" + b"<div>" * 5000,
        b"\xef\xbb\xbf<a href=/bom>",
        b"<a href=\x00/nul\x00>",
        b"<svg><a href='/svg'/></svg><math><a href=/m></math>",
    ],
)
def test_garbage_never_raises(page: bytes | str) -> None:
    result = extract_links(page, PAGE)
    assert isinstance(result, PageLinks)
    assert all(link.startswith(("http://", "https://")) for link in result.links)


def test_random_junk_never_raises() -> None:
    rng = random.Random(20240611)
    fragments = [b"<a href=", b"'", b'"', b">", b"<base href=", b"http://", b"[::1", b"#", b"\x00"]
    for _ in range(300):
        junk = b"".join(
            rng.choice(fragments) if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 20))
            for _ in range(rng.randint(0, 60))
        )
        for link in extract_links(junk, PAGE).links:
            parts = urlsplit(link)
            assert parts.scheme in ("http", "https")
            assert parts.hostname


def test_huge_attribute_values_are_survived() -> None:
    huge = "a" * 1_000_000
    page = f'<a href="/{huge}">x</a><a class="{huge}" href="/ok">y</a>'
    assert extract_links(page, PAGE).links == ["https://example.com/ok"]


def test_garbage_page_url_keeps_only_absolute_links() -> None:
    assert links_of("/rel", "https://ok.example/", page_url="not a url") == ["https://ok.example/"]
    assert links_of("/rel", "https://ok.example/", page_url="http://[::1") == [
        "https://ok.example/"
    ]


BASES = [
    "https://example.com/dir/page.html?q=1",
    "https://example.com/dir/page.html;p?q=2",
    "http://example.com/a/b/c/d.html",
    "https://example.com",
    "http://example.com:8080/a/b/",
    "http://[2001:db8::1]/x/y",
    "https://example.com/a/./b/c",
]
HREFS = [
    "x",
    "x/y?z=1",
    "/abs",
    "/abs?x=1",
    "?only=query",
    "../up",
    "./here",
    "./",
    "./?q=1",
    "./x/../y",
    "./../up",
    "./a/./b",
    "x/../y",
    "//other.example/p",
    "https://other.example/p?q",
    "http:rel",
    "x:y",
    "a.b+c-d:opaque",
    "1x:y",
    "x?y:z",
    "x/y:z",
    ";params",
    "..",
    ".",
    "../",
    "../?q",
    "../..",
    "../../up",
    "../../../../../up",
    "../a/b?c=1",
    "../a/b?c=/./d",
    "../.hidden",
    "../x/../y",
    "../x/./y",
]


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("href", HREFS)
def test_agrees_with_urljoin(base: str, href: str) -> None:
    """The fast resolver must give what urljoin gives (for paths without empty segments)."""
    reference = urljoin(base, href).partition("#")[0]
    parts = urlsplit(reference)
    expected = [reference] if parts.scheme in ("http", "https") and parts.hostname else []
    assert links_of(href, page_url=base) == expected


def test_remembered_absolute_links_are_still_checked_per_scheme_and_host() -> None:
    for _ in range(2):  # the second round is answered from the cache
        assert links_of("HTTP://a.test/x", "http://a.test:99999/x", "//b.test/y") == [
            "http://a.test/x",
            "https://b.test/y",
        ]


def test_a_base_splits_as_urlsplit_splits_it() -> None:
    rng = random.Random(5)
    pieces = ["http://", "https://", "HTTP://", "a.test", ":8080", ":99999", "[::1]", "[::1",
              "/", "/d", "?q=/x", "#f/g", "\t", " ", "é", "\\", "@", "u:p@", ".."]  # fmt: skip
    for _ in range(5000):
        url = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 7)))
        assert _clean_base(url) == _split_clean(url), url


def test_a_page_gives_at_most_max_links_and_counts_the_rest() -> None:
    html = "".join(f'<a href="/p{i}">{i}</a>' for i in range(1000)).encode()
    page = extract_links(html, "http://a.test/", max_links=10)
    assert page.links == [f"http://a.test/p{i}" for i in range(10)]
    assert page.over_cap == 990  # every anchor past the cap is counted, none resolved
    assert extract_links(html, "http://a.test/", max_links=1000).over_cap == 0


def test_nofollow_links_are_counted() -> None:
    html = b'<a href="/a" rel="nofollow">a</a><a href="/b">b</a><a href="/c" rel="nofollow">'
    page = extract_links(html, "http://a.test/")
    assert (page.links, page.nofollow) == (["http://a.test/b"], 2)
    meta = b'<meta name="robots" content="nofollow">' + html
    assert extract_links(meta, "http://a.test/").nofollow == 3


def test_a_query_is_encoded_in_the_page_encoding_and_a_path_in_utf8() -> None:
    html = '<a href="/ü?q=ü">x</a><a href="http://a.test/ä?q=ä">y</a>'
    assert extract_links(html, "http://a.test/", encoding="cp1252").links == [
        "http://a.test/%C3%BC?q=%FC",
        "http://a.test/%C3%A4?q=%E4",
    ]
    assert extract_links(html, "http://a.test/").links == [
        "http://a.test/%C3%BC?q=%C3%BC",
        "http://a.test/%C3%A4?q=%C3%A4",
    ]


FEED_HEAD = (
    '<link rel="alternate" type="application/rss+xml" title="News" href="/feed.xml">'
    '<link rel="Alternate" type="application/atom+xml; charset=utf-8" href="atom.xml">'
    '<link rel="alternate" type="text/html" hreflang="fr" href="/fr/">'  # a translation
    '<link rel="stylesheet" type="text/css" href="/s.css">'
    '<link rel="alternate" type="application/rss+xml">'  # no href
)


def test_feeds_a_page_announces_come_first_and_are_counted() -> None:
    page = extract_links(anchors("/a", "/feed.xml", extra=FEED_HEAD), PAGE, max_links=1)
    assert page.links == [
        "https://example.com/feed.xml",
        "https://example.com/dir/atom.xml",
        "https://example.com/a",
    ]
    assert (page.feeds, page.over_cap) == (2, 1)  # outside the anchors' cap; /feed.xml once


def test_feed_links_past_their_bound_and_nofollow_ones_are_counted() -> None:
    many = "".join(
        f'<link rel="alternate" type="application/rss+xml" href="/f{n}.xml">'
        for n in range(MAX_FEED_LINKS_PER_PAGE + 3)
    )
    page = extract_links(anchors(extra=many), PAGE)
    assert (len(page.links), page.feeds, page.over_cap) == (MAX_FEED_LINKS_PER_PAGE,) * 2 + (3,)
    hidden = '<link rel="alternate nofollow" type="application/rss+xml" href="/f.xml">'
    page = extract_links(anchors(extra=hidden), PAGE)
    assert (page.links, page.feeds, page.nofollow) == ([], 0, 1)
    robots = '<meta name="robots" content="nofollow">' + FEED_HEAD
    assert extract_links(anchors("/a", extra=robots), PAGE).nofollow == 3
