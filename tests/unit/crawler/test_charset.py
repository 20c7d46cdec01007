"""A page's encoding for its links: BOM, then header, then <meta>; UTF-8 stays bytes."""

from __future__ import annotations

import pytest

from crawlfleet.crawler.links.charset import decode_html
from crawlfleet.crawler.links.links import extract_links

PAGE = (
    '<html><head>{meta}<title>日本語</title></head><body><a href="/検索?q=東京">x</a></body></html>'
)


def test_utf8_pages_stay_bytes() -> None:
    body = PAGE.format(meta="").encode()
    assert decode_html(body, "text/html; charset=utf-8") == (body, "utf-8")
    assert decode_html(body, "text/html") == (body, "utf-8")  # nothing declared: UTF-8
    assert decode_html(body, None) == (body, "utf-8")


@pytest.mark.parametrize(
    ("content_type", "meta"),
    [
        ("text/html; charset=Shift_JIS", ""),
        ("text/html", '<meta charset="shift_jis">'),
        ("text/html", '<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">'),
    ],
    ids=["header", "meta-charset", "meta-http-equiv"],
)
def test_a_shift_jis_page_is_decoded_and_its_links_read_right(content_type: str, meta: str) -> None:
    body = PAGE.format(meta=meta).encode("shift_jis")
    html, encoding = decode_html(body, content_type)
    assert encoding == "cp932"  # the WHATWG name browsers read shift_jis by
    assert isinstance(html, str)
    page = extract_links(html, "http://a.test/", encoding=encoding)
    assert page.title == "日本語"
    # the path as UTF-8, the query in the page's encoding, as a browser sends them
    assert page.links == ["http://a.test/%E6%A4%9C%E7%B4%A2?q=%93%8C%8B%9E"]


def test_the_header_wins_over_meta_and_a_bom_over_both() -> None:
    body = PAGE.format(meta='<meta charset="utf-8">').encode("shift_jis")
    assert decode_html(body, "text/html; charset=shift_jis")[1] == "cp932"
    utf16 = "\ufeff" + PAGE.format(meta="")
    html, encoding = decode_html(utf16.encode("utf-16-le"), "text/html; charset=shift_jis")
    assert encoding == "utf-16-le"
    assert "日本語" in html


def test_undecodable_bytes_never_raise() -> None:
    html, encoding = decode_html(b"<a href='/\xff\xfe\x00'>x</a>", "text/html; charset=shift_jis")
    assert isinstance(html, str)
    assert encoding == "cp932"
