"""The Scrapy side of bench/crawl.py: the spider a Scrapy user would write for the same crawl.

Run by ``scrapy runspider`` with settings on the command line; writes Scrapy's own stats
(responses received) to the JSON file named by the SEEDS_FILE's sibling STATS_FILE.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.http import Response

#: This module is also the settings module of a one-spider project (bench/scrapy.py names it
#: in crawler.scrapy.settingsModule): Scrapy takes a settings module's upper-case names.
SPIDER_MODULES = [__name__]


class SiteSpider(scrapy.Spider):  # type: ignore[misc]
    name = "bench"

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> SiteSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.closed_with_stats, signal=signals.spider_closed)
        return spider  # type: ignore[no-any-return]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with open(os.environ["BENCH_SEEDS_FILE"]) as f:
            setup = json.load(f)
        self.start_urls = setup["seeds"]
        self.allowed_domains = sorted({h.split(":")[0] for h in setup["hosts"]})
        self.stats_file = os.environ["BENCH_STATS_FILE"]
        # The same three fields as bench/crawl.py's EXTRACTION, as a Scrapy user writes them.
        self.extract = os.environ.get("BENCH_EXTRACT") == "1"

    def parse(self, response: Response) -> Iterator[Any]:
        item: dict[str, Any] = {
            "url": response.url,
            "status": response.status,
            "title": response.css("title::text").get(),
        }
        if self.extract:
            item["heading"] = " ".join("".join(response.css("h1 ::text").getall()).split())
            item["first_link"] = response.css("a::attr(href)").get()
        yield item
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)

    def closed_with_stats(self, spider: scrapy.Spider) -> None:
        stats = self.crawler.stats.get_stats()
        with open(self.stats_file, "w") as f:
            json.dump({"responses": stats.get("response_received_count", 0)}, f)
