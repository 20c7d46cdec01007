"""Assemble one worker process: the one Redis client, the one HTTP client, and the loop."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from crawlfleet.crawler.fetch import Fetcher, FetchSettings
from crawlfleet.crawler.metrics import WorkerMetrics
from crawlfleet.crawler.robots import RobotsPolicy
from crawlfleet.crawler.safety import AddressGuard
from crawlfleet.crawler.sinks import OutputWriter
from crawlfleet.crawler.worker import Worker, WorkerOptions
from crawlfleet.crawljob import CrawlJob
from crawlfleet.frontier import Frontier, FrontierSettings, connect

__all__ = ["run_worker"]


async def run_worker(
    job: CrawlJob,
    *,
    redis_url: str,
    worker_id: str,
    output_dir: Path,
    metrics_port: int = 0,
    metrics_host: str = "0.0.0.0",
    grace_seconds: float = 25.0,
    exit_when_done: bool = True,
    install_signal_handlers: bool = False,
) -> int:
    spec = job.spec
    client = connect(redis_url)
    guard = AddressGuard(allow_private=spec.scope.allow_private_networks)
    fetcher = Fetcher(FetchSettings.from_spec(spec), guard=guard)
    metrics = WorkerMetrics()
    try:
        frontier = await Frontier.open(client, FrontierSettings.from_spec(job.job_id, spec))
        await frontier.seed(list(spec.seeds))  # idempotent: the filter refuses repeats

        async def fetch_robots(url: str) -> tuple[int | None, bytes]:
            result = await fetcher.fetch(url)
            return result.status, result.body

        robots = RobotsPolicy(
            client,
            frontier.keys,
            fetch_robots,
            user_agent=spec.user_agent,
            obey=spec.robots.obey,
        )
        writer = OutputWriter(
            output_dir,
            worker_id,
            format=spec.output.format,
            max_file_bytes=spec.output.max_file_bytes,
        )
        worker = Worker(
            spec=spec,
            frontier=frontier,
            fetcher=fetcher,
            robots=robots,
            writer=writer,
            metrics=metrics,
            guard=guard,
            options=WorkerOptions(
                worker_id=worker_id,
                grace_seconds=grace_seconds,
                exit_when_done=exit_when_done,
            ),
        )
        if metrics_port:
            metrics.serve(metrics_port, metrics_host)
        if install_signal_handlers:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, worker.request_stop)
        return await worker.run()
    finally:
        await fetcher.aclose()
        await client.aclose()
