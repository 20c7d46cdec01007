"""The two middlewares that tell the runtime what became of each lease.

``LeaseSpiderMiddleware`` (order 51, just spider-side of HttpErrorMiddleware): a response's
arrival (its host slot is free), every output of its callback (counted, so the lease waits for
each request to reach the scheduler and each item to leave the pipelines), the end of the
output, and the HttpError of a response the spider does not handle (the lease fails with the
status's class; HttpErrorMiddleware then swallows it as it always does). A callback's request
loses the lease key it may have copied from ``response.meta`` and gets its parent's instead:
a retry or redirect keeps its lease, a callback's request is a new task. ``process_start``
yields ``spec.seeds`` (to the spider's default callback) before the spider's own start, and
tells the runtime when the start is exhausted.

``LeaseDownloaderMiddleware`` (order 1, nearest the engine): before each download, the address
guard and robots.txt as every worker asks them (``crawlfleet.crawler.worker.gate``: a refusal is an
IgnoreRequest and fails the lease with its class -- ``forbidden_address``, ``bad_scheme``,
``invalid_url`` for a URL the guard cannot judge, ``robots_disallowed``, ``robots_unavailable``
-- and a host whose robots.txt cannot be read yet defers the lease); every request is asked,
a lease's or not (a pipeline's download), and the connection then goes only to addresses the
guard approved (``resolver.py``); and the exceptions the retries gave up on (the lease fails
with crawlfleet's failure class).

Signals: ``item_scraped``/``item_dropped``/``item_error`` settle one item each (Scrapy sends
them after the last pipeline, awaiting the handlers), ``request_scheduled`` one request each
(sent before the scheduler is asked, and also when a handler of it drops the request, as
Scrapy's OffsiteMiddleware does), ``spider_error`` fails the lease of a callback that raised
(at once or mid-way through its output).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError

from crawlfleet.scrapy.payload import LEASE_KEY, PARENT_KEY
from crawlfleet.scrapy.scheduler import runtime_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure

    from crawlfleet.scrapy.runtime import Runtime

__all__ = ["LeaseDownloaderMiddleware", "LeaseSpiderMiddleware"]


def _lease_of(response: Response | Failure | None) -> object:
    if response is None:
        return None
    request = getattr(response, "request", None)
    meta = getattr(request, "meta", None)
    return meta.get(LEASE_KEY) if meta is not None else None


class LeaseSpiderMiddleware:
    """See the module docstring."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        middleware = cls(runtime_of(crawler))
        crawler.signals.connect(middleware._item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(middleware._item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(middleware._item_error, signal=signals.item_error)
        crawler.signals.connect(middleware._spider_error, signal=signals.spider_error)
        crawler.signals.connect(middleware._request_scheduled, signal=signals.request_scheduled)
        return middleware

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        for seed in self.runtime.spec.seeds:
            yield Request(seed)
        async for item_or_request in start:
            yield item_or_request
        self.runtime.start_finished()

    def process_spider_input(self, response: Response) -> None:
        self.runtime.on_response(response.meta.get(LEASE_KEY), response)

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        lease_id = response.meta.get(LEASE_KEY)
        runtime = self.runtime
        async for output in result:
            if isinstance(output, Request):
                output.meta.pop(LEASE_KEY, None)
                if lease_id is not None:
                    output.meta[PARENT_KEY] = lease_id
                runtime.count_output(lease_id, None)
            elif output is not None:  # the scraper skips a None: nothing would settle it
                runtime.count_output(lease_id, output)
            yield output
        runtime.on_exhausted(lease_id)

    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        if isinstance(exception, HttpError):
            self.runtime.on_http_error(response.meta.get(LEASE_KEY), response.status)

    def _request_scheduled(self, request: Request, **_: Any) -> None:
        self.runtime.on_request_scheduled(request)

    def _item_scraped(self, item: Any, response: Response | None, **_: Any) -> None:
        self.runtime.on_item(_lease_of(response), item, passed=True)

    def _item_dropped(self, item: Any, response: Response | None, **_: Any) -> None:
        self.runtime.on_item(_lease_of(response), item, passed=False)

    def _item_error(self, failure: Failure, response: Response | None, **_: Any) -> None:
        self.runtime.on_item_error(_lease_of(response), failure.value)

    def _spider_error(
        self, failure: Failure, response: Response | Failure | None, **_: Any
    ) -> None:
        # An errback's failure carries its request as the response does (call_spider_async).
        self.runtime.on_callback_error(_lease_of(response), failure.value)


class LeaseDownloaderMiddleware:
    """See the module docstring."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(runtime_of(crawler))

    async def process_request(self, request: Request) -> None:
        refused = await self.runtime.before_request(request)
        if refused is not None:
            raise IgnoreRequest(refused)

    def process_exception(self, request: Request, exception: Exception) -> None:
        self.runtime.on_download_error(request.meta.get(LEASE_KEY), exception, request.url)
