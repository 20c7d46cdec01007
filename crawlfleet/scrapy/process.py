"""A Scrapy worker process: the project loaded, Twisted's asyncio reactor, the crawl.

``crawlfleet worker`` (``crawlfleet/launch.py``) hands a job with ``spec.crawler.scrapy`` here
with the same resolved values it gives crawlfleet's own worker, so the argv, the worker id,
the heartbeats, the exit codes and the termination message are the same (exit 2 and
``<Reason>: <sentence>`` for a bad start: a project that does not import, a spider it lacks, a
conflicting setting, Scrapy not installed). Scrapy and Twisted are imported only here, after
any fork (the local runner's zygote forks workers with neither imported), and the reactor is
installed by this process, over a new asyncio loop, before anything else of Scrapy runs. Its
name resolution is the address guard's (``resolver.py``) before the crawl starts, so every
connection of the process goes to addresses the guard approved.
"""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Any, Final

from crawlfleet.errors import ConfigError

if TYPE_CHECKING:
    from scrapy.settings import Settings
    from scrapy.spiders import Spider

    from crawlfleet.config import WorkerConfig
    from crawlfleet.crawler.fetching.safety import AddressGuard
    from crawlfleet.crawljob import CrawlJob

__all__ = ["run_scrapy_worker"]

_REACTOR: Final = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"


def run_scrapy_worker(
    job: CrawlJob,
    *,
    redis_url: str,
    worker_id: str,
    config: WorkerConfig,
    exit_when_done: bool = True,
    install_signal_handlers: bool = False,
    guard: AddressGuard | None = None,
) -> int:
    """Crawl ``job``'s spider as one worker until the job is complete or stopped (exit code).

    The arguments are :func:`crawlfleet.crawler.worker.process.run_worker`'s (``guard``
    included: the spec's unless an embedder or a test gives its own); a bad start raises a
    :class:`~crawlfleet.errors.CrawlfleetError` (the caller exits 2 with it).
    """
    from crawlfleet.scrapy.project import load_project

    settings, spider_class = load_project(job.spec)
    from scrapy.utils.reactor import install_reactor

    install_reactor(_REACTOR)
    from twisted.internet import reactor as installed

    # Twisted's reactor module is typed as its interfaces, whose methods mypy cannot bind.
    reactor: Any = installed
    loop = asyncio.get_event_loop()
    finished: list[asyncio.Task[int]] = []

    def start() -> None:
        task = loop.create_task(
            _crawl(
                job,
                settings,
                spider_class,
                redis_url=redis_url,
                worker_id=worker_id,
                config=config,
                exit_when_done=exit_when_done,
                install_signal_handlers=install_signal_handlers,
                guard=guard,
            )
        )
        finished.append(task)
        task.add_done_callback(lambda _: reactor.stop())

    reactor.callWhenRunning(start)
    reactor.run(installSignalHandlers=False)
    return finished[0].result()


async def _crawl(
    job: CrawlJob,
    settings: Settings,
    spider_class: type[Spider],
    *,
    redis_url: str,
    worker_id: str,
    config: WorkerConfig,
    exit_when_done: bool,
    install_signal_handlers: bool,
    guard: AddressGuard | None,
) -> int:
    from scrapy.crawler import AsyncCrawlerRunner
    from twisted.internet import reactor

    from crawlfleet.crawler.fetching.fetch import Fetcher, FetchSettings
    from crawlfleet.crawler.fetching.safety import AddressGuard
    from crawlfleet.crawler.politeness.robots import RobotsPolicy, robots_fetch
    from crawlfleet.crawler.worker.flow import WorkerOptions
    from crawlfleet.crawler.worker.metrics import WorkerMetrics
    from crawlfleet.frontier import Frontier, FrontierSettings
    from crawlfleet.output.stores import checked_store
    from crawlfleet.scrapy.resolver import GuardNameResolver
    from crawlfleet.scrapy.runtime import Runtime

    spec = job.spec
    assert spec.scrapy is not None  # load_project checked it
    destination = config.destination or spec.output.destination or str(config.output_dir)
    store = await checked_store(spec, destination, config.output)
    metrics = WorkerMetrics()
    frontier = await Frontier.connect(redis_url, FrontierSettings.from_spec(job.job_id, spec))
    if guard is None:
        guard = AddressGuard(allow_private=spec.scope.allow_private_networks)
    # Before any request: Twisted then connects only where the guard's check allowed.
    names = GuardNameResolver(guard, asyncio.get_running_loop())
    names.install_on_reactor(reactor)
    # robots.txt is fetched by crawlfleet's fetcher into the job's shared cache, as by
    # crawlfleet's own worker: one fetch per origin serves the whole fleet.
    robots_fetcher = Fetcher(FetchSettings.from_spec(spec), guard=guard)
    try:
        runtime = Runtime(
            spec=spec,
            frontier=frontier,
            store=store,
            metrics=metrics,
            options=WorkerOptions.from_config(worker_id, config, exit_when_done=exit_when_done),
            guard=guard,
            names=names,
            robots=RobotsPolicy.from_spec(frontier.robots, robots_fetch(robots_fetcher), spec),
        )
        runner = AsyncCrawlerRunner(settings)
        crawler = runner.create_crawler(spider_class)
        crawler.crawlfleet_runtime = runtime  # type: ignore[attr-defined]
        if config.metrics_port:
            metrics.serve(config.metrics_port, config.metrics_host)
        if install_signal_handlers:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, runtime.request_stop)
        try:
            await runner.crawl(crawler, **spec.scrapy.args)
        except Exception as exc:
            if getattr(crawler, "spider", None) is None:  # the spider did not even start
                raise ConfigError(
                    f"spec.crawler.scrapy: the spider {spec.scrapy.spider!r} did not start"
                    f" (check crawler.scrapy.args): {type(exc).__name__}: {exc}"
                ) from exc
            raise
        finally:
            await runtime.aclose()
    finally:
        await robots_fetcher.aclose()
        await frontier.aclose()
    return 0
