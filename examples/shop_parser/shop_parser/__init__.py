"""An example user parser (spec.parser: "shop_parser:parse") for the test site's shop.

It yields the same items as the declarative rules of examples/shop-extract.yaml, and the links
to follow; docs/extract.md shows how to ship it in a worker image.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from crawlfleet.parsing import Page

_PRICE = re.compile(r"[0-9]+\.[0-9]+")


def _text(nodes: list[str]) -> str:
    return " ".join("".join(nodes).split())


def parse(page: Page) -> Iterator[dict[str, object] | str]:
    """Products on a product page, one item per product on a listing, and every link."""
    selector = page.selector
    if "/shop/product/" in page.url:
        price = _PRICE.search(selector.css("span.price::text").get() or "")
        yield {
            "name": _text(selector.css("h1.name ::text").getall()),
            "price": price.group(0) if price else None,
            "sku": selector.xpath("//div[has-class('product')]/@data-sku").get(),
            "tags": selector.css("ul.tags li::text").getall(),
        }
    elif page.url.endswith("/shop/"):
        for product in selector.css("li.product"):
            yield {"name": product.css("a::text").get(), "link": product.css("a::attr(href)").get()}
    yield from selector.css("a::attr(href)").getall()
