"""Scrapy's scheduler contract, spoken to the frontier, and the dupefilter made inert.

``FrontierScheduler`` is the five methods of ``scrapy.core.scheduler.BaseScheduler``
(``from_crawler``, ``open``, ``close``, ``has_pending_requests``, ``enqueue_request``,
``next_request``) over the process's :class:`~crawlfleet.scrapy.runtime.Runtime`: the engine
stays Scrapy's. ``enqueue_request`` never says no at once: a request is admitted (or refused,
counted) by the frontier at the runtime's next flush, in one round trip with the others.
``has_pending_requests`` is true until the frontier says the job is complete, so the engine
never takes a momentarily empty local buffer for the end of the crawl (scrapy-redis' spiders
never close for that reason, or close too early).

``InertDupeFilter`` answers "not seen" to everything: a Scrapy dupefilter marks a request seen
before it is queued anywhere durable (scrapy-redis' fingerprint set loses the request of a
killed process for good), while the frontier's Bloom filter checks and queues in one script.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import BaseDupeFilter

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    from crawlfleet.scrapy.runtime import Runtime

__all__ = ["FrontierScheduler", "InertDupeFilter", "runtime_of"]


def runtime_of(crawler: Crawler) -> Runtime:
    """The runtime ``process.py`` attached to the crawler (settings are deep-copied)."""
    runtime: Runtime | None = getattr(crawler, "crawlfleet_runtime", None)
    if runtime is None:
        raise RuntimeError(
            "crawlfleet.scrapy components run only under crawlfleet's runtime"
            " (crawlfleet worker / crawlfleet run with spec.crawler.scrapy)"
        )
    return runtime


class FrontierScheduler(BaseScheduler):
    """See the module docstring."""

    def __init__(self, crawler: Crawler, runtime: Runtime) -> None:
        self.crawler = crawler
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, runtime_of(crawler))

    def open(self, spider: Spider) -> None:
        self.runtime.open(self.crawler, spider)

    def close(self, reason: str) -> None:
        return None  # the runtime is closed by process.py once the crawl has returned

    def has_pending_requests(self) -> bool:
        return not self.runtime.finished

    def enqueue_request(self, request: Request) -> bool:
        return self.runtime.enqueue(request)

    def next_request(self) -> Request | None:
        return self.runtime.next_request()

    def __len__(self) -> int:
        return self.runtime.buffered()


class InertDupeFilter(BaseDupeFilter):
    """Nothing is seen here: dedup is the frontier's, atomic with queueing."""
