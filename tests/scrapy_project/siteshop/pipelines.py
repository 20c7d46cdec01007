"""An item pipeline: prices as numbers, and a mark that the item went through it."""

from __future__ import annotations

from typing import Any


class PricePipeline:
    def process_item(self, item: dict[str, Any]) -> dict[str, Any]:
        price = item.get("price")
        if isinstance(price, str):
            item["price"] = float(price.strip().lstrip("€"))
        item["pipeline"] = "price"
        return item
