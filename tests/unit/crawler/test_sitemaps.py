"""The sitemap reader: urlsets and indexes, gzip, its bounds; hostile XML costs one sitemap."""

from __future__ import annotations

import gzip
import resource
import subprocess
import sys
import time
import zlib

import pytest

from crawlfleet.crawler.links.sitemaps import (
    MAX_SITEMAP_BYTES,
    SitemapLimits,
    SitemapRefused,
    read_sitemap,
)
from crawlfleet.testsite.server import build_gzip_bomb

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*entries: str, namespace: str = NS) -> bytes:
    return f'<?xml version="1.0"?><urlset {namespace}>{"".join(entries)}</urlset>'.encode()


def url(loc: str, lastmod: str | None = None, extra: str = "") -> str:
    mod = f"<lastmod>{lastmod}</lastmod>" if lastmod is not None else ""
    return f"<url><loc>{loc}</loc>{mod}{extra}</url>"


def test_a_urlset_gives_its_pages_and_their_lastmods_in_order() -> None:
    body = urlset(
        url(" https://a.test/x \n", "2026-01-15"),
        url("https://a.test/y", "2026-02-01T10:30:00+00:00", "<priority>0.5</priority>"),
        url("https://a.test/z"),
        url("https://a.test/q?a=1&amp;b=2", "yesterday"),  # not a W3C datetime: dropped
    )

    sitemap = read_sitemap(body)

    assert sitemap.kind == "urlset"
    assert sitemap.urls == [
        "https://a.test/x",
        "https://a.test/y",
        "https://a.test/z",
        "https://a.test/q?a=1&b=2",
    ]
    assert sitemap.lastmods == ["2026-01-15", "2026-02-01T10:30:00+00:00", None, None]
    assert sitemap.over_cap == 0


def test_an_index_gives_its_sitemaps() -> None:
    body = (
        f"<sitemapindex {NS}><sitemap><loc>https://a.test/s1.xml.gz</loc>"
        "<lastmod>2026-01-01</lastmod></sitemap>"
        "<sitemap><loc>https://a.test/s2.xml</loc></sitemap></sitemapindex>"
    ).encode()

    sitemap = read_sitemap(body)

    assert sitemap.kind == "sitemapindex"
    assert sitemap.urls == ["https://a.test/s1.xml.gz", "https://a.test/s2.xml"]


@pytest.mark.parametrize(
    "namespace", [NS, "", 'xmlns="http://www.google.com/schemas/sitemap/0.84"']
)
def test_elements_are_matched_by_local_name(namespace: str) -> None:
    assert read_sitemap(urlset(url("https://a.test/x"), namespace=namespace)).urls == [
        "https://a.test/x"
    ]


def test_a_gzip_sitemap_is_read_whatever_its_content_type_said() -> None:
    body = gzip.compress(urlset(url("https://a.test/x", "2026-01-15")))
    sitemap = read_sitemap(body)
    assert (sitemap.urls, sitemap.lastmods) == (["https://a.test/x"], ["2026-01-15"])


def test_entries_past_the_bound_are_counted_not_taken() -> None:
    body = urlset(*(url(f"https://a.test/{i}") for i in range(7)), "<url><loc></loc></url>")
    sitemap = read_sitemap(body, SitemapLimits(max_urls=5))
    assert sitemap.urls == [f"https://a.test/{i}" for i in range(5)]
    assert sitemap.over_cap == 2  # the entry without a <loc> offered nothing to count

    index = (
        f"<sitemapindex {NS}>"
        + "".join(f"<sitemap><loc>https://a.test/s{i}</loc></sitemap>" for i in range(4))
        + "</sitemapindex>"
    ).encode()
    capped = read_sitemap(index, SitemapLimits(max_sitemaps=3))
    assert (len(capped.urls), capped.over_cap) == (3, 1)


def test_a_document_over_the_size_bound_is_refused_plain_or_gzip() -> None:
    body = urlset(*(url(f"https://a.test/{i}") for i in range(100)))
    limits = SitemapLimits(max_bytes=len(body) - 1)
    for document in (body, gzip.compress(body)):
        with pytest.raises(SitemapRefused) as refused:
            read_sitemap(document, limits)
        assert refused.value.failure_class == "sitemap_too_large"
        assert str(len(body) - 1) in refused.value.message
    assert len(read_sitemap(body, SitemapLimits(max_bytes=len(body))).urls) == 100


def test_a_gzip_bomb_stops_at_the_bound_without_inflating_it() -> None:
    bomb = build_gzip_bomb(1 << 30)  # 1 GiB of zeros in about 1 MiB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(SitemapRefused) as refused:
        read_sitemap(bomb)
    # Zeros are not XML, but the size is counted before anything is parsed.
    assert refused.value.failure_class == "sitemap_too_large"
    assert time.monotonic() - started < 30
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < MAX_SITEMAP_BYTES // 1024


def test_a_well_formed_sitemap_inflating_past_the_bound_is_too_large() -> None:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    entry = url("https://a.test/x").encode()
    parts = [compressor.compress(b"<urlset>")]
    parts += [compressor.compress(entry * 1000) for _ in range(64)]
    parts += [compressor.compress(b"</urlset>"), compressor.flush()]
    with pytest.raises(SitemapRefused) as refused:
        read_sitemap(b"".join(parts), SitemapLimits(max_bytes=1024 * 1024))
    assert refused.value.failure_class == "sitemap_too_large"


def test_a_document_over_the_bound_is_refused_before_any_of_it_is_parsed() -> None:
    """Refused by its size whatever it holds: the parse of an oversized document (seconds of
    the worker's interpreter for ~50 MiB of XML) is never started."""
    not_xml = b"<<not xml at all" + b" " * (1024 * 1024)
    limits = SitemapLimits(max_bytes=1024 * 1024)
    for document in (not_xml, gzip.compress(not_xml)):
        with pytest.raises(SitemapRefused) as refused:
            read_sitemap(document, limits)
        assert refused.value.failure_class == "sitemap_too_large"
    # Within the bound, the same bytes are what they are: not a sitemap.
    with pytest.raises(SitemapRefused) as refused:
        read_sitemap(gzip.compress(not_xml), SitemapLimits(max_bytes=len(not_xml)))
    assert refused.value.failure_class == "sitemap_invalid"


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">'
        for i in range(1, 10)
    )
    + "]><urlset><url><loc>https://a.test/&lol9;</loc></url></urlset>"
)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(BILLION_LAUGHS.encode(), "sitemap_invalid", id="billion-laughs"),
        pytest.param(b"<urlset><url><loc>https://a.test/x", "sitemap_invalid", id="truncated"),
        pytest.param(b"<html><body>not a sitemap</body></html>", "sitemap_invalid", id="html"),
        pytest.param(b"\x00\xff binary junk", "sitemap_invalid", id="junk"),
        pytest.param(b"", "sitemap_invalid", id="empty"),
        pytest.param(
            gzip.compress(urlset(url("https://a.test/x")))[:-12],
            "sitemap_invalid",
            id="truncated-gzip",
        ),
        pytest.param(b"\x1f\x8b\x08\x00garbage", "sitemap_invalid", id="bad-gzip"),
        pytest.param(b"<a>" * 100_000 + b"</a>" * 100_000, "sitemap_invalid", id="deep-nesting"),
    ],
)
def test_hostile_or_malformed_xml_is_refused_as_one_sitemap(body: bytes, reason: str) -> None:
    started = time.monotonic()
    with pytest.raises(SitemapRefused) as refused:
        read_sitemap(body)
    assert refused.value.failure_class == reason
    assert refused.value.message
    assert time.monotonic() - started < 10


def test_external_entities_are_never_read() -> None:
    body = (
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/hostname">]>'
        b"<urlset><url><loc>&e;</loc></url><url><loc>https://a.test/x</loc></url></urlset>"
    )
    sitemap = read_sitemap(body)
    assert sitemap.urls == ["https://a.test/x"]  # the entity stood for nothing: no <loc>


_PEAK_PROBE = """
import re, sys
from crawlfleet.crawler.links.sitemaps import read_sitemap

def high_water_kib():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+)", status.read())[1])

junk = b"<x/>" * 1_000_000
body = b"<urlset><url><loc>https://a.test/x</loc>" + junk + b"</url>" + junk + b"</urlset>"
before = high_water_kib()
assert read_sitemap(body).urls == ["https://a.test/x"]
print(high_water_kib() - before)
"""


def test_memory_follows_one_entry_however_many_elements_the_document_holds() -> None:
    """Two million empty elements (8 MB of XML) would be ~250 MB as a tree: each element is
    dropped once read. Measured in a child of its own (VmHWM: its peak alone)."""
    grown_kib = int(
        subprocess.run(
            [sys.executable, "-c", _PEAK_PROBE], capture_output=True, text=True, check=True
        ).stdout
    )
    assert grown_kib < 100 * 1024


def test_a_plain_document_larger_than_libxml2s_buffer_is_read_in_steps() -> None:
    entries = [url(f"https://a.test/page/{i:07}.html", "2026-01-15") for i in range(140_000)]
    body = urlset(*entries)
    assert 10 * 1024 * 1024 < len(body) < MAX_SITEMAP_BYTES  # one feed of it would be refused
    sitemap = read_sitemap(body)
    assert (len(sitemap.urls), sitemap.over_cap) == (50_000, 90_000)
    assert sitemap.urls[-1] == "https://a.test/page/0049999.html"
