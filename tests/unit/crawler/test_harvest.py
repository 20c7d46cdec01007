"""Page content (output.content) and the batch harvest: charsets, visible text, cuts, failures."""

from __future__ import annotations

from typing import Any

import pytest

from crawlfleet.crawler.harvest import Harvest, Harvester, HarvestInput, visible_text
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.testsite import hostile, shop

URL = "http://legacy.test/page"


def harvester(**spec: Any) -> Harvester:
    built = Harvester.from_spec(CrawlJobSpec.from_mapping({"seeds": [URL], **spec}))
    assert built is not None
    return built


def harvest(body: bytes, content_type: str | None, **output: Any) -> Harvest:
    return harvester(output=output).harvest(HarvestInput(body, content_type, URL))


LEGACY_PAGES = {
    "shift_jis in the header": (
        hostile.render_sjis_page(declare_in_meta=False),
        "text/html; charset=Shift_JIS",
        hostile.SJIS_TITLE,
        hostile.SJIS_TEXT,
    ),
    "shift_jis in a meta": (
        hostile.render_sjis_page(declare_in_meta=True),
        "text/html",
        hostile.SJIS_TITLE,
        hostile.SJIS_TEXT,
    ),
    "windows-1251 in the header": (
        hostile.render_cp1251_page(declare_in_meta=False),
        "text/html; charset=windows-1251",
        hostile.CP1251_TITLE,
        hostile.CP1251_TEXT,
    ),
    "windows-1251 in an http-equiv meta": (
        hostile.render_cp1251_page(declare_in_meta=True),
        "text/html",
        hostile.CP1251_TITLE,
        hostile.CP1251_TEXT,
    ),
}


@pytest.mark.parametrize(
    ("body", "content_type", "title", "text"), LEGACY_PAGES.values(), ids=list(LEGACY_PAGES)
)
def test_legacy_charsets_decode_right_as_html_and_as_text(
    body: bytes, content_type: str, title: str, text: str
) -> None:
    as_html = harvest(body, content_type, content="html")
    assert as_html.content is not None
    assert f"<title>{title}</title>" in as_html.content
    assert text in as_html.content
    assert "\ufffd" not in as_html.content

    as_text = harvest(body, content_type, content="text")
    assert as_text.content is not None
    assert text in as_text.content
    assert "<" not in as_text.content
    assert "не видно" not in as_text.content  # a script's text is no visible text
    assert not as_html.content_truncated
    assert not as_text.content_truncated


def test_visible_text_leaves_out_scripts_styles_and_markup() -> None:
    product = shop.PRODUCTS[0]
    text = visible_text(shop.render_product(product).decode())
    assert (
        text
        == f"{product.name} Price: €{product.price} SKU: {product.sku} kitchen tea All products"
    )
    assert "never visible" not in text
    assert visible_text("") == ""


def test_content_over_the_bound_is_cut_at_a_character_and_flagged() -> None:
    body = ("<p>" + "ж" * 1500 + "</p>").encode()  # 3000 bytes of text in UTF-8
    cut = harvest(body, "text/html; charset=utf-8", content="text", maxContentBytes=1025)
    assert cut.content == "ж" * 512  # 1024 bytes: the 513th character would need 2 more
    assert cut.content_truncated

    whole = harvest(body, "text/html; charset=utf-8", content="text", maxContentBytes=3000)
    assert whole.content == "ж" * 1500
    assert not whole.content_truncated


def test_nothing_asked_no_harvester() -> None:
    assert Harvester.from_spec(CrawlJobSpec.from_mapping({"seeds": [URL]})) is None


def test_rules_alone_want_only_the_pages_they_match() -> None:
    rules = harvester(extract=[{"match": "/product/", "fields": {"t": {"css": "title::text"}}}])
    assert rules.wants("http://legacy.test/product/1")
    assert not rules.wants(URL)
    assert harvester(output={"content": "text"}).wants(URL)


def test_a_failing_page_fails_alone_in_its_batch() -> None:
    rules = harvester(extract=[{"match": ".", "fields": {"p": {"xpath": "//p[re:test(., .)]"}}}])
    good = HarvestInput(b"<div>fine</div>", "text/html", URL)
    bad = HarvestInput(b"<p>(unclosed</p>", "text/html", URL)  # its text is the pattern

    first, second, third = rules.harvest_batch([good, bad, good])

    assert first.error is None
    assert first.items[0].fields == {"p": None}
    assert second.error is not None
    assert second.error.startswith("extract[0]: ")
    assert second.items == ()
    assert third == first


def test_the_link_reader_makes_the_same_text_from_its_own_parse() -> None:
    """The worker asks the link reader for the visible text (one lexbor parse for both): it
    must be the text the harvester would make, legacy charsets and link-less pages included."""
    from crawlfleet.crawler.charset import decode_html
    from crawlfleet.crawler.links import extract_links

    nofollow = b'<head><meta name="robots" content="nofollow"></head><body>Hi <a href="/a">A'
    pages = [(shop.render_product(product), "text/html") for product in shop.PRODUCTS]
    pages += [(shop.render_listing(), None), (nofollow, None), (b"", None)]
    pages += [(b"<p>no body tag <script>x()</script></p>", "text/html")]
    pages += [(body, content_type) for body, content_type, _, _ in LEGACY_PAGES.values()]
    text_harvester = harvester(output={"format": "jsonl", "content": "text"})
    for body, content_type in pages:
        html, encoding = decode_html(body, content_type)
        read = extract_links(html, URL, max_links=1, encoding=encoding, text=True)
        made = text_harvester.harvest(HarvestInput(body, content_type, URL)).content
        assert read.text == made, body
        assert extract_links(html, URL, encoding=encoding).text is None  # only when asked
    given = HarvestInput(b"<body>ignored</body>", "text/html", URL, text="read before")
    assert text_harvester.harvest(given).content == "read before"  # not parsed a second time


def test_a_small_batch_is_harvested_on_the_loop_and_a_big_one_or_a_parser_in_a_thread() -> None:
    from crawlfleet.crawler.worker import harvest_on_loop

    rules = harvester(output={"format": "jsonl", "content": "text"})
    small = [HarvestInput(b"<p>x</p>" * 1000, "text/html", URL) for _ in range(100)]
    assert harvest_on_loop(small, rules)  # 800 kB in all
    huge = [*small, HarvestInput(b"<p>x</p>" * 100_000, "text/html", URL)]
    assert not harvest_on_loop(huge, rules)  # 1.6 MB: parsing it would hold the loop
    with_parser = Harvester("text", 1 << 20, None, parser=_NeverCalledParser())  # type: ignore[arg-type]
    assert not harvest_on_loop(small[:1], with_parser)  # waits on its process: never the loop


class _NeverCalledParser:
    """Test double: stands for a ParserHost; only its presence matters here."""

    reference = "test:double"
