"""The test site's page graph with a CrawlSpider: rules follow the normal pages.

``-a start=<url>,<url>`` are the hosts' roots (the test site's seeds); ``-a follow=all`` follows
every link of a page, not only the normal pages', with no ``allowed_domains`` of its own (a
user's spider that meets what the job's robots.txt handling and address guard refuse);
``-a files=1`` gives each item the page's ``<a class="file">`` links as ``file_urls``, for
Scrapy's FilesPipeline (downloads of no lease, asked of the guard all the same); ``-a
proxy=<url>`` sends the start requests through that proxy (``meta["proxy"]``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

from scrapy.http import Request, Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class GraphSpider(CrawlSpider):
    name = "graph"
    rules = (Rule(LinkExtractor(allow=(r"/d\d+/p\d+\.html",)), callback="parse_page", follow=True),)

    def __init__(
        self,
        start: str = "",
        follow: str = "pages",
        files: str = "",
        proxy: str = "",
        **kwargs: Any,
    ) -> None:
        self.files = bool(files)
        self.proxy = proxy
        if follow == "all":
            self.rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)
        self.start_urls = [url for url in start.split(",") if url]
        if follow != "all":  # else the job's scope alone decides
            self.allowed_domains = sorted({urlsplit(url).hostname or "" for url in self.start_urls})
        super().__init__(**kwargs)

    async def start(self) -> AsyncIterator[Request]:
        meta = {"proxy": self.proxy} if self.proxy else {}
        for url in self.start_urls:
            yield Request(url, dont_filter=True, meta=meta)

    def parse_start_url(self, response: Response) -> Iterator[dict[str, Any]]:
        return self.parse_page(response)

    def parse_page(self, response: Response) -> Iterator[dict[str, Any]]:
        item: dict[str, Any] = {"url": response.url, "title": response.css("title::text").get()}
        if self.files:
            item["file_urls"] = [
                response.urljoin(href) for href in response.css("a.file::attr(href)").getall()
            ]
        yield item
