"""Assemble one worker process: the one Redis client, the one HTTP client, and the loop."""

from __future__ import annotations

import asyncio
import gc
import signal
from typing import Final

from crawlfleet.config import WorkerConfig
from crawlfleet.crawler.fetch import Fetcher, FetchSettings
from crawlfleet.crawler.metrics import WorkerMetrics
from crawlfleet.crawler.robots import RobotsPolicy
from crawlfleet.crawler.safety import AddressGuard
from crawlfleet.crawler.sinks import OutputWriter
from crawlfleet.crawler.worker import Worker, WorkerOptions
from crawlfleet.crawljob import CrawlJob
from crawlfleet.frontier import Frontier, FrontierSettings

__all__ = ["run_worker"]

#: Net new container objects between young-generation collections (CPython's default: 700).
GC_YOUNG_THRESHOLD: Final = 10_000


def _settle_garbage_collector() -> None:
    """Stop the cyclic GC from rescanning start-up objects and from firing on every page.

    Everything imported and built before the loop (pydantic schemas, aiohttp, redis, the
    clients) lives as long as the process, yet each full collection walked all of it. A
    page's work allocates a few hundred objects that die within milliseconds, yet the default
    threshold collected the young generation many times a second. Frozen start-up objects
    and a ``GC_YOUNG_THRESHOLD`` young generation leave the collector almost nothing to do
    (docs/benchmarks.md has the figures). Cyclic garbage waits for at most that many
    allocations: a few megabytes.
    """
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


async def run_worker(
    job: CrawlJob,
    *,
    redis_url: str,
    worker_id: str,
    config: WorkerConfig,
    exit_when_done: bool = True,
    install_signal_handlers: bool = False,
) -> int:
    """Crawl ``job`` as one worker until it is complete or stopped; returns the exit code.

    ``config`` is the process's knobs (output folder, metrics, drain budget). The two given
    apart are resolved values: the Redis URL (the config's may be unset) and the worker id.
    ``install_signal_handlers`` says that the worker owns this process (``crawlfleet
    worker``): SIGTERM and SIGINT then stop it gracefully, and the garbage collector is set
    for a long-lived crawl loop (see ``_settle_garbage_collector``). Embedders keep both.
    """
    spec = job.spec
    guard = AddressGuard(allow_private=spec.scope.allow_private_networks)
    fetcher = Fetcher(FetchSettings.from_spec(spec), guard=guard)
    metrics = WorkerMetrics()
    frontier: Frontier | None = None
    try:
        frontier = await Frontier.connect(redis_url, FrontierSettings.from_spec(job.job_id, spec))
        await frontier.seed(list(spec.seeds))  # idempotent: the filter refuses repeats

        async def fetch_robots(url: str) -> tuple[int | None, bytes]:
            result = await fetcher.fetch(url)
            return result.status, result.body

        robots = RobotsPolicy.from_spec(frontier.robots, fetch_robots, spec)
        writer = OutputWriter.from_spec(config.output_dir, worker_id, spec.output)
        worker = Worker(
            spec=spec,
            frontier=frontier,
            fetcher=fetcher,
            robots=robots,
            writer=writer,
            metrics=metrics,
            guard=guard,
            options=WorkerOptions.from_config(worker_id, config, exit_when_done=exit_when_done),
        )
        if config.metrics_port:
            metrics.serve(config.metrics_port, config.metrics_host)
        if install_signal_handlers:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, worker.request_stop)
            _settle_garbage_collector()
        return await worker.run()
    finally:
        await fetcher.aclose()
        if frontier is not None:
            await frontier.aclose()
