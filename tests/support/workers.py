"""A crawl worker built in the test's own process, as ``crawlfleet worker`` builds one.

For tests that watch a worker from inside (its counters, its lease book, a frontier subclass
that looks at each ack) rather than through a child process (``tests/support/crawls.py``):
real redis-server, a real fetcher, the job's output folder.
"""

from __future__ import annotations

from pathlib import Path

from crawlfleet.config import WorkerConfig
from crawlfleet.crawler.fetching.fetch import Fetcher, FetchSettings
from crawlfleet.crawler.politeness.robots import RobotsPolicy, robots_fetch
from crawlfleet.crawler.worker.flow import WorkerOptions
from crawlfleet.crawler.worker.metrics import WorkerMetrics
from crawlfleet.crawler.worker.worker import Worker
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.frontier import Frontier, FrontierSettings
from crawlfleet.output.stores import checked_store

__all__ = ["in_process_worker"]


async def in_process_worker(
    spec: CrawlJobSpec,
    redis_url: str,
    job_id: str,
    out: Path,
    *,
    frontier_class: type[Frontier] = Frontier,
    exit_when_done: bool = False,
    destination: str | None = None,
    worker_id: str = "w1",
) -> tuple[Worker, Fetcher, Frontier]:
    """A worker of ``spec`` writing to ``destination`` (default the folder ``out``, also its
    spool), its seeds queued; the caller runs it and closes the fetcher and the frontier."""
    config = WorkerConfig(output_dir=out)
    store = await checked_store(spec, destination or str(out), config.output)
    fetcher = Fetcher(FetchSettings.from_spec(spec))
    frontier = await frontier_class.connect(redis_url, FrontierSettings.from_spec(job_id, spec))
    await frontier.seed(spec.seeds)
    worker = Worker(
        spec=spec,
        frontier=frontier,
        fetcher=fetcher,
        robots=RobotsPolicy.from_spec(frontier.robots, robots_fetch(fetcher), spec),
        store=store,
        metrics=WorkerMetrics(),
        options=WorkerOptions.from_config(worker_id, config, exit_when_done=exit_when_done),
    )
    return worker, fetcher, frontier
