"""Declarative extraction (crawler/harvest/extract.py) on the test shop's pages: exactly their
fields."""

from __future__ import annotations

from typing import Any

import pytest

from crawlfleet.crawler.harvest.extract import ExtractionError, Extractor, Item
from crawlfleet.crawler.harvest.harvest import decoded_html
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.testsite import shop

SITE = "http://shop.test"

PRODUCT_RULE: dict[str, Any] = {
    "match": r"/shop/product/\d+\.html$",
    "fields": {
        "name": {"css": "h1.name"},
        "price": {"css": "span.price::text", "re": r"([0-9]+\.[0-9]+)"},
        "sku": {"xpath": "//div[has-class('product')]/@data-sku"},
        "tags": {"css": "ul.tags li::text", "all": True},
        "canonical": {"css": "link[rel=canonical]", "attr": "href"},
        "missing": {"css": "span.nothing-here"},
    },
}
LISTING_RULE: dict[str, Any] = {
    "match": r"/shop/$",
    "each": {"css": "li.product"},
    "fields": {
        "name": {"css": "a::text"},
        "link": {"xpath": "./a", "attr": "href"},
        "price": {"xpath": "./span[@class='price']", "re": r"[0-9.]+"},
    },
}


def extractor(*rules: dict[str, Any]) -> Extractor:
    spec = CrawlJobSpec.from_mapping({"seeds": [f"{SITE}/"], "extract": list(rules)})
    built = Extractor.from_rules(spec.extract)
    assert built is not None
    return built


def items_of(rules: Extractor, body: bytes, path: str) -> list[Item]:
    return rules.extract(decoded_html(body, "text/html"), SITE + path)


@pytest.mark.parametrize("product", shop.PRODUCTS, ids=lambda product: product.sku)
def test_a_product_page_gives_exactly_its_fields(product: shop.Product) -> None:
    rules = extractor(PRODUCT_RULE, LISTING_RULE)

    (item,) = items_of(rules, shop.render_product(product), product.path)

    assert item == Item(
        source=0,
        position=0,
        fields={
            "name": product.name,  # the <em> inside is text too, whitespace collapsed
            "price": product.price,
            "sku": product.sku,
            "tags": list(product.tags),
            "canonical": product.path,
            "missing": None,
        },
    )


def test_a_listing_gives_one_item_per_each_node_in_order() -> None:
    rules = extractor(PRODUCT_RULE, LISTING_RULE)

    items = items_of(rules, shop.render_listing(), shop.LISTING_PATH)

    assert items == [
        Item(1, position, {"name": p.name, "link": p.path, "price": p.price})
        for position, p in enumerate(shop.PRODUCTS)
    ]


def test_pages_no_rule_matches_are_not_even_parsed() -> None:
    rules = extractor(PRODUCT_RULE)
    assert not rules.applies_to(f"{SITE}/shop/")
    assert rules.applies_to(f"{SITE}/shop/product/3.html")
    # Not HTML at all: a page that matches nothing is never handed to the parser.
    assert rules.extract("\x00\x01 not a page", f"{SITE}/elsewhere") == []


def test_every_matching_rule_yields_with_its_own_index() -> None:
    anything = {"match": "/shop/", "fields": {"title": {"css": "title::text"}}}
    rules = extractor(PRODUCT_RULE, anything)
    product = shop.PRODUCTS[0]

    items = items_of(rules, shop.render_product(product), product.path)

    assert [item.source for item in items] == [0, 1]
    assert items[1].fields == {"title": f"{product.name} | Test shop"}


def test_all_without_values_is_an_empty_list_and_a_first_value_none() -> None:
    rules = extractor(
        {
            "match": ".",
            "fields": {"every": {"css": "q", "all": True}, "first": {"xpath": "//q/text()"}},
        }
    )
    (item,) = rules.extract("<p>nothing</p>", f"{SITE}/")
    assert item.fields == {"every": [], "first": None}


def test_xpath_numbers_and_booleans_read_as_xpath_writes_them() -> None:
    rules = extractor(
        {
            "match": ".",
            "fields": {
                "count": {"xpath": "count(//li)"},
                "half": {"xpath": "count(//li) div 2"},
                "any": {"xpath": "boolean(//li)"},
            },
        }
    )
    (item,) = rules.extract("<ul><li>a</li><li>b</li><li>c</li></ul>", f"{SITE}/")
    assert item.fields == {"count": "3", "half": "1.5", "any": "true"}


def test_a_pattern_taken_from_the_page_that_re2_refuses_is_an_extraction_error() -> None:
    # Valid for the model (the pattern is no literal it could compile): the page's own text is
    # the pattern, and a look-ahead there fails that page with RE2's reason.
    rules = extractor({"match": ".", "fields": {"bad": {"xpath": "//p[re:test(., text())]"}}})
    assert rules.extract("<p>a paragraph</p>", f"{SITE}/")[0].fields == {"bad": "a paragraph"}
    with pytest.raises(ExtractionError) as refused:
        rules.extract("<p>(?=x)</p>", f"{SITE}/")
    assert str(refused.value) == (
        "extract[0]: re:test(): '(?=x)' is not a valid RE2 pattern: invalid perl operator: (?="
    )


def test_no_rules_no_extractor() -> None:
    assert Extractor.from_rules(()) is None
