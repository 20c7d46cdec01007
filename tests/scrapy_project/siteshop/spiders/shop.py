"""The shop's listing, then each product page: chained callbacks, meta and cb_kwargs.

``-a base=http://host:port`` is the test site's host 0; ``-a fail=<product id>`` makes that
product's callback raise ``ValueError`` (a callback that fails on every attempt);
``-a lambdas=1`` makes the listing also yield a request whose callback is a lambda (which no
scheduler that stores requests can carry).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response


class ShopSpider(scrapy.Spider):
    name = "shop"

    def __init__(self, base: str = "", fail: str = "", lambdas: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base = base.rstrip("/")
        self.fail = fail
        self.lambdas = bool(lambdas)

    async def start(self) -> AsyncIterator[Any]:
        yield scrapy.Request(f"{self.base}/shop/", callback=self.parse_listing)

    def parse_listing(self, response: Response) -> Iterator[Any]:
        for position, entry in enumerate(response.css("li.product")):
            href = entry.css("a::attr(href)").get()
            listed = entry.css("span.price::text").get()
            yield response.follow(
                href,
                callback=self.parse_product,
                meta={"listed_price": listed},
                cb_kwargs={"position": position},
                priority=position,
            )
        if self.lambdas:
            yield scrapy.Request(f"{self.base}/shop/?again", callback=lambda response: None)
        yield None  # some spiders do (a bare yield): Scrapy skips it

    def parse_product(self, response: Response, position: int) -> Iterator[dict[str, Any]]:
        if self.fail and response.url.endswith(f"/{self.fail}.html"):
            raise ValueError(f"product {self.fail} refuses to parse")
        yield {
            "url": response.url,
            "name": " ".join(response.css("h1.name ::text").getall()).strip(),
            "price": response.css("span.price::text").get(),
            "listed_price": response.meta["listed_price"],
            "sku": response.css("span.sku::text").get("").removeprefix("SKU: "),
            "tags": response.css("ul.tags li::text").getall(),
            "position": position,
        }
