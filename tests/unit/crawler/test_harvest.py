"""Page content (output.content) and the batch harvest: charsets, visible text, cuts, failures."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from crawlfleet.crawler.harvest.harvest import Harvest, Harvester, HarvestInput, visible_text
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
    from crawlfleet.crawler.links.charset import decode_html
    from crawlfleet.crawler.links.links import extract_links

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


#: A query whose cost grows with the page's nodes squared: about a second on SLOW_PAGE here.
QUADRATIC = {"match": "/slow", "fields": {"n": {"xpath": "count(//*[count(following::*) > -1])"}}}
SLOW_PAGE = HarvestInput(b"<i></i>" * 12_000, "text/html", "http://legacy.test/slow")
FAST_PAGE = HarvestInput(b"<i></i>" * 10, "text/html", "http://legacy.test/slow/fast")


async def harvest_while_ticking(
    rules: Harvester, pages: list[HarvestInput]
) -> tuple[list[Harvest], int]:
    """The bounded harvest of ``pages``, and how often the event loop ran another task meanwhile."""
    ticks = 0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    ticks = 0  # from here on, only what ran while the harvest did
    try:
        harvests = await rules.harvest_batch_bounded(pages)
    finally:
        done.set()
        await ticker
    return harvests, ticks


async def test_a_bounded_batch_gives_what_the_plain_one_gives() -> None:
    rules = harvester(
        output={"format": "jsonl", "content": "text"},
        extract=[{"match": ".", "fields": {"p": {"xpath": "//p[re:test(., .)]"}}}],
    )
    pages = [
        HarvestInput(b"<p>fine</p>", "text/html", URL),
        HarvestInput(b"<p>(unclosed</p>", "text/html", URL),
        HarvestInput(shop.render_product(shop.PRODUCTS[0]), "text/html", URL),
    ]
    try:
        assert await rules.harvest_batch_bounded(pages) == rules.harvest_batch(pages)
    finally:
        rules.close()


async def test_a_page_whose_extraction_overruns_fails_alone_while_the_loop_runs() -> None:
    # A bound past the loop's blocked wait (50 ms), so the loop has time to run other tasks.
    rules = harvester(extract=[QUADRATIC], parserTimeoutSeconds=0.2)
    assert rules.harvest(FAST_PAGE).items[0].fields == {"n": "12"}  # html, body and ten i
    try:
        (fast, slow, after), ticks = await harvest_while_ticking(
            rules, [FAST_PAGE, SLOW_PAGE, FAST_PAGE]
        )
    finally:
        rules.close()

    assert slow == Harvest(error="extraction took longer than 0.2 s")
    assert fast.error is None
    assert after == fast  # the rest of the batch, in a new thread
    assert ticks > 10  # the loop ran other tasks while lxml evaluated: heartbeats would too


async def test_extraction_waits_for_no_thread_past_the_bound_beyond_two() -> None:
    blocked = _BlockingExtractor()
    rules = Harvester("none", 1 << 20, blocked, extract_timeout_seconds=0.01)  # type: ignore[arg-type]
    page = HarvestInput(b"<p>x</p>", "text/html", URL)
    try:
        for _ in range(2):  # each overruns; its thread stays inside the extractor
            (overran,), _ = await harvest_while_ticking(rules, [page])
            assert overran.error == "extraction took longer than 0.01 s"
        (refused,), _ = await harvest_while_ticking(rules, [page])
        assert refused.error == (
            "extraction not started: 2 earlier pages' extraction"
            " still running past the 0.01 s bound"
        )
        assert blocked.calls == 2
    finally:
        blocked.release.set()
        rules.close()


class _BlockingExtractor:
    """Test double: an Extractor whose every query runs until the test releases it, as a
    pathological XPath would for hours (a real one would keep this machine's cores busy)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def applies_to(self, url: str) -> bool:
        return True

    def extract(self, html: str, url: str) -> list[object]:
        self.calls += 1
        self.release.wait()
        return []
