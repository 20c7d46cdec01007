"""The worker (DESIGN §4): fetch, retry and backoff, failure classes, robots.txt, links, scope,
output and metrics, steered by the frontier's leases.

``run_worker`` runs one worker in this process; the other names are the parts it is built
from, each built from the CrawlJob spec with ``from_spec``. The crawler depends on the frontier
and the model, never on the operator or the local runner.
"""

from crawlfleet.crawler.failures import FailureClass
from crawlfleet.crawler.fetch import Fetcher, FetchResult, FetchSettings
from crawlfleet.crawler.links import PageLinks, extract_links
from crawlfleet.crawler.metrics import WorkerMetrics
from crawlfleet.crawler.process import run_worker
from crawlfleet.crawler.robots import RobotsPolicy
from crawlfleet.crawler.safety import AddressGuard
from crawlfleet.crawler.scope import Scope, ScopeVerdict
from crawlfleet.crawler.sinks import OutputSink, PageRecord
from crawlfleet.crawler.worker import Worker, WorkerOptions

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
