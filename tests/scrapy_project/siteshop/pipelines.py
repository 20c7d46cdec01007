"""Item pipelines: prices as numbers with a mark that the item went through, and a slow one.

``SITESHOP_PIPELINE_DELAY`` (seconds, default 0) makes every item wait in ``SlowPipeline``:
a page's response and its callback are long done while its items are still in the pipelines,
which is when an early ack would lose them. ``SITESHOP_PIPELINE_DELAY_REVERSED`` (seconds)
delays an item with a ``position`` by that over 1 + its position: a page's later items
leave the pipelines first. ``SITESHOP_PIPELINE_FAIL_SKU`` makes ``PricePipeline`` raise for
the item with that SKU.
"""

from __future__ import annotations

import asyncio
from typing import Any

from scrapy.crawler import Crawler


class PricePipeline:
    def __init__(self, fail_sku: str = "") -> None:
        self.fail_sku = fail_sku

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PricePipeline:
        return cls(crawler.settings.get("SITESHOP_PIPELINE_FAIL_SKU", ""))

    def process_item(self, item: dict[str, Any]) -> dict[str, Any]:
        if self.fail_sku and item.get("sku") == self.fail_sku:
            raise RuntimeError(f"no price for {self.fail_sku}")
        price = item.get("price")
        if isinstance(price, str):
            item["price"] = float(price.strip().lstrip("€"))
        item["pipeline"] = "price"
        return item


class SlowPipeline:
    def __init__(self, delay_seconds: float, reversed_seconds: float) -> None:
        self.delay_seconds = delay_seconds
        self.reversed_seconds = reversed_seconds

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SlowPipeline:
        settings = crawler.settings
        return cls(
            settings.getfloat("SITESHOP_PIPELINE_DELAY", 0.0),
            settings.getfloat("SITESHOP_PIPELINE_DELAY_REVERSED", 0.0),
        )

    async def process_item(self, item: dict[str, Any]) -> dict[str, Any]:
        delay = self.delay_seconds
        if self.reversed_seconds and isinstance(item.get("position"), int):
            delay += self.reversed_seconds / (1 + item["position"])
        if delay:
            await asyncio.sleep(delay)
        return item
