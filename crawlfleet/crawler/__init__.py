"""The worker (DESIGN §4): fetch, retry and backoff, failure classes, robots.txt, links, scope,
output and metrics, steered by the frontier's leases.

``run_worker`` runs one worker in this process; the other names are the parts it is built
from, each built from the CrawlJob spec with ``from_spec``. The crawler depends on the frontier,
the output stores and the model; never on the fleet, on the Scrapy runtime built on it, on the
operator or on the local runner.

Its rooms (docs/architecture.md): ``fetching`` and ``links`` import no other room; ``politeness``
and ``files`` stand on ``fetching``, ``harvest`` on ``links``; the ``worker`` on them all.

* ``fetching``: one URL to one bounded response, safely; failure classes; the body budget;
* ``links``: a page's encoding and links, the job's scope, admission, sitemaps;
* ``politeness``: robots.txt and adaptive concurrency;
* ``files``: file downloads, streamed into resumable parts, verified, stored by content;
* ``harvest``: a page's content and items (declarative rules, user parsers);
* ``worker``: the loop, its process, its leases, the gate before a request, heartbeats,
  output sinks and metrics.
"""

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.fetch import Fetcher, FetchResult, FetchSettings
from crawlfleet.crawler.fetching.safety import AddressGuard
from crawlfleet.crawler.links.links import PageLinks, extract_links
from crawlfleet.crawler.links.scope import Scope, ScopeVerdict
from crawlfleet.crawler.politeness.robots import RobotsPolicy
from crawlfleet.crawler.worker.flow import WorkerOptions
from crawlfleet.crawler.worker.metrics import WorkerMetrics
from crawlfleet.crawler.worker.process import run_worker
from crawlfleet.crawler.worker.sinks import OutputSink, PageRecord
from crawlfleet.crawler.worker.worker import Worker

__all__ = [
    "AddressGuard",
    "FailureClass",
    "FetchResult",
    "FetchSettings",
    "Fetcher",
    "OutputSink",
    "PageLinks",
    "PageRecord",
    "RobotsPolicy",
    "Scope",
    "ScopeVerdict",
    "Worker",
    "WorkerMetrics",
    "WorkerOptions",
    "extract_links",
    "run_worker",
]
