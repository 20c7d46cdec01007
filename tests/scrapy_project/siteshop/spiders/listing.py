"""The shop's listing alone: one item per listed product, all from one page.

``-a base=http://host:port`` is the test site's host 0.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response


class ListingSpider(scrapy.Spider):
    name = "listing"

    def __init__(self, base: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base = base.rstrip("/")

    async def start(self) -> AsyncIterator[Any]:
        yield scrapy.Request(f"{self.base}/shop/")

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        for position, entry in enumerate(response.css("li.product")):
            yield {"name": entry.css("a::text").get(), "position": position}
