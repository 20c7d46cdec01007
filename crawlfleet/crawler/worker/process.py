"""One crawlfleet worker process's parts: the one Redis client, the one HTTP client, and the loop.

:func:`run_worker` builds them from a job and the process's knobs and crawls until the job is
complete or the worker is stopped. ``crawlfleet worker`` (``crawlfleet/launch.py``) calls it for
a job without ``spec.crawler.scrapy``; an embedder calls it with values already resolved.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from typing import Final

from crawlfleet.config import WorkerConfig
from crawlfleet.crawler.fetching.fetch import Fetcher, FetchSettings
from crawlfleet.crawler.fetching.memory import ByteBudget, budget_bytes, cgroup_memory_limit
from crawlfleet.crawler.fetching.safety import AddressGuard
from crawlfleet.crawler.politeness.robots import RobotsPolicy, robots_fetch
from crawlfleet.crawler.worker.flow import WorkerOptions
from crawlfleet.crawler.worker.metrics import WorkerMetrics
from crawlfleet.crawler.worker.worker import Worker
from crawlfleet.crawljob import CrawlJob, read_seed_file
from crawlfleet.crawljob.proxy import checked_proxies
from crawlfleet.errors import ConfigError
from crawlfleet.frontier import Frontier, FrontierSettings
from crawlfleet.output.stores import checked_store, open_store

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
    guard: AddressGuard | None = None,
) -> int:
    """Crawl ``job`` as one worker until it is complete or stopped; returns the exit code.

    ``config`` is the process's knobs (output folder, metrics, drain budget). The two given
    apart are resolved values: the Redis URL (the config's may be unset) and the worker id.
    ``install_signal_handlers`` says that the worker owns this process (``crawlfleet
    worker``): SIGTERM and SIGINT then stop it gracefully, and the garbage collector is set
    for a long-lived crawl loop (see ``_settle_garbage_collector``). Embedders keep both.

    The output goes to ``config.destination`` (``--output``), else the spec's
    ``output.destination``, else the folder ``config.output_dir``; a destination it cannot
    write to is an :class:`~crawlfleet.errors.OutputError` before anything is claimed. A
    scheduled job's worker writes under ``runs/<run-id>/`` of it, the run the frontier began
    last (workers start after the run began, and are gone before the next one begins).
    ``guard`` is the address guard, the spec's (``allowPrivateNetworks``, the system's DNS)
    unless an embedder or a test gives its own.
    """
    spec = job.spec
    if spec.scope_unresolved:  # seedsFrom names a ConfigMap, and nobody read it for us
        raise ConfigError(
            "spec.seedsFrom.configMapKeyRef: a worker cannot read a ConfigMap; set"
            " scope.allowedDomains, or give the list as seedsFrom.file"
        )
    destination = config.destination or spec.output.destination or str(config.output_dir)
    store = await checked_store(spec, destination, config.output)
    memory = _memory_budget(config, spec.fetch.max_decompressed_bytes)
    if guard is None:
        guard = AddressGuard(allow_private=spec.scope.allow_private_networks)
    metrics = WorkerMetrics()
    fetcher = Fetcher(
        FetchSettings.from_spec(spec),
        guard=guard,
        proxies=checked_proxies(spec.proxy, os.environ),
        observe_proxies=metrics.observe_proxy,
    )
    frontier: Frontier | None = None
    try:
        frontier = await Frontier.connect(redis_url, FrontierSettings.from_spec(job.job_id, spec))
        run = await frontier.current_run() if spec.schedule is not None else None
        if run is not None and store is not None:
            # A scheduled job's run writes under runs/<run-id>/, manifest and all: the same
            # store as the one just checked, one prefix down.
            store = open_store(store.destination.for_run(run), spec.output.s3, config.output)
        if exit_when_done:
            # A worker on its own seeds its job (idempotent: the filter refuses repeats). A
            # fleet's workers (--keep-running) never do: the steering tick seeds, once, and
            # a worker restarted on an emptied Redis would start the crawl over unseen.
            await frontier.seed([*spec.seeds, *read_seed_file(spec, config.job_file or ".")])
        robots = RobotsPolicy.from_spec(frontier.robots, robots_fetch(fetcher), spec)
        worker = Worker(
            spec=spec,
            frontier=frontier,
            fetcher=fetcher,
            robots=robots,
            store=store,
            metrics=metrics,
            guard=guard,
            memory=memory,
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


def _memory_budget(config: WorkerConfig, max_body_bytes: int) -> ByteBudget:
    """The body budget under this worker's memory limit: the configured one, else the cgroup's
    (crawler/fetching/memory.py); a configured 0 turns it off."""
    limit = config.memory_limit_bytes
    if limit == 0:
        return ByteBudget(None)
    if limit is None:
        limit = cgroup_memory_limit()
    return ByteBudget(budget_bytes(limit, max_body_bytes=max_body_bytes))
