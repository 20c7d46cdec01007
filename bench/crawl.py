"""Crawl benchmark: one crawlfleet worker against Scrapy on the same site, same machine, one run.

    python -m bench.crawl [--quick] [--json]

Serves the test site's pages as static files with nginx (bench/static_site.py; the Python
test site when nginx is missing) and crawls it to the end with:

- ``crawlfleet``: one ``crawlfleet worker`` process, private redis-server, leases, Bloom
  dedup, robots, SSRF checks and JSONL output all on;
- ``scrapy``: Scrapy (installed for the benchmark only: ``pip install scrapy``) with the same
  concurrency (64 in all, 16 per host), robots obeyed, a JSONL feed of every page;
- ``two_workers``: two crawlfleet worker processes sharing the frontier;
- ``extract``: one crawlfleet worker with ``content: text`` and three CSS fields per page
  (``spec.extract``); ``extract_vs_plain_rate`` is its rate over the plain worker's (issue 15's
  target: at least 0.7), ``extract_ratio_vs_scrapy`` over Scrapy's with the same three
  selectors in its spider (target: at least 6);
- ``raw_loop``: a bare fetch + parse loop with the same HTTP client and link parser and a
  Python set for dedup, no Redis: the ceiling we measure the worker against.

``--memory-ab N`` measures only what the worker's memory budget (crawler/fetching/memory.py) costs:
N rounds, each one worker with the budget off (``CRAWLFLEET_MEMORY_LIMIT_BYTES=0``) and one
with the default, in alternating order, reporting the medians and their ratio. Peers in the
same run, so the machine's load moves both.

Rates are pages per second of wall time, process start-up included for both crawlers. CPU
time per page (user + system of the crawler's own processes, start-up included; the raw loop's
in-process) is reported beside them: on a shared machine wall rates swing with whatever else
runs, and CPU per page is the steadier figure to compare between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from httpx_aiohttp import AiohttpTransport

from bench.static_site import StaticSite
from crawlfleet.crawler.links.links import extract_links
from crawlfleet.crawljob import parse_crawljob
from crawlfleet.frontier import Frontier, FrontierSettings
from crawlfleet.local.redis_server import RedisServer

CONCURRENCY = 64
HOSTS = 4
PER_HOST = CONCURRENCY // HOSTS


#: What the ``extract`` crawl asks of every page besides the plain crawl's work.
EXTRACTION: dict[str, Any] = {
    "output": {"format": "jsonl", "content": "text"},
    "extract": [
        {
            "match": ".",
            "fields": {
                "title": {"css": "title::text"},
                "heading": {"css": "h1"},
                "first_link": {"css": "a::attr(href)"},
            },
        }
    ],
}


def job_document(
    name: str, setup: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "seeds": setup["seeds"],
            "scope": {
                "allowedDomains": setup["hosts"],
                "maxDepth": 1000,
                "allowPrivateNetworks": True,
            },
            "dedup": {"capacity": max(100_000, setup["pages"] * 4)},
            "concurrency": {"perWorker": CONCURRENCY, "perHost": PER_HOST, "hostDelaySeconds": 0},
            "output": {"format": "jsonl"},
            **(extra or {}),
        },
    }


def children_cpu_seconds() -> float:
    """User + system CPU of every child process this one has waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def crawlfleet_rate(
    setup: dict[str, Any],
    redis_url: str,
    workers: int,
    name: str,
    tmp: Path,
    extra: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[float, int, float]:
    """Pages/s of ``workers`` worker processes, pages crawled, and their CPU seconds;
    ``extra`` is added to the job's spec, ``env`` to the workers' environment."""
    document = job_document(name, setup, extra)
    job_file = tmp / f"{name}.yaml"
    job_file.write_text(yaml.safe_dump(document))
    out = tmp / name
    cpu_before = children_cpu_seconds()
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "crawlfleet",
                "--log-level",
                "warning",
                "worker",
                str(job_file),
                "--redis-url",
                redis_url,
                "--worker-id",
                f"{name}-{i}",
                "--out",
                str(out),
            ],
            env={**os.environ, **(env or {})},
        )
        for i in range(workers)
    ]
    for proc in procs:
        if proc.wait(600) != 0:
            raise RuntimeError(f"worker exited with {proc.returncode}")
    elapsed = time.perf_counter() - started
    cpu = children_cpu_seconds() - cpu_before
    job = parse_crawljob(document)
    frontier = await Frontier.connect(redis_url, FrontierSettings.from_spec(job.job_id, job.spec))
    stats = await frontier.stats()
    await frontier.aclose()
    if not stats.complete:
        raise RuntimeError(f"crawl {name} did not complete: {stats}")
    return stats.crawled / elapsed, stats.crawled, cpu


def scrapy_rate(
    setup: dict[str, Any], tmp: Path, *, extract: bool = False
) -> tuple[float, int, float]:
    """Scrapy's pages/s, pages (robots.txt responses not counted) and CPU seconds; with
    ``extract``, its spider reads EXTRACTION's three fields from every page too."""
    seeds_file, stats_file = tmp / "scrapy-setup.json", tmp / "scrapy-stats.json"
    seeds_file.write_text(json.dumps(setup))
    env = {
        **os.environ,
        "BENCH_SEEDS_FILE": str(seeds_file),
        "BENCH_STATS_FILE": str(stats_file),
        "BENCH_EXTRACT": "1" if extract else "0",
    }
    spider = Path(__file__).with_name("scrapy_spider.py")
    cpu_before = children_cpu_seconds()
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable, "-m", "scrapy", "runspider", str(spider),
            "-s", f"CONCURRENT_REQUESTS={CONCURRENCY}",
            "-s", f"CONCURRENT_REQUESTS_PER_DOMAIN={PER_HOST}",
            "-s", "ROBOTSTXT_OBEY=True", "-s", "DOWNLOAD_DELAY=0", "-s", "LOG_LEVEL=WARNING",
            "-s", "TELNETCONSOLE_ENABLED=False", "-s", "DEPTH_LIMIT=0",
            "-o", str(tmp / "scrapy-items.jsonl:jsonl"),
        ],
        env=env,
        check=True,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    cpu = children_cpu_seconds() - cpu_before
    responses = int(json.loads(stats_file.read_text())["responses"]) - HOSTS  # robots.txt
    return responses / elapsed, responses, cpu


async def raw_loop_rate(setup: dict[str, Any]) -> tuple[float, int, float]:
    """Fetch + parse + set, 64 at a time: what the same transport and parser reach alone.

    Requests go to the transport as the worker's do (no AsyncClient.send layers).
    """
    transport = AiohttpTransport()
    seen: set[str] = set(setup["seeds"])
    queue: asyncio.Queue[str] = asyncio.Queue()
    for seed in setup["seeds"]:
        queue.put_nowait(seed)
    done = 0
    allowed = tuple(f"http://{h}/" for h in setup["hosts"])

    async def run() -> None:
        nonlocal done
        while True:
            url = await queue.get()
            try:
                response = await transport.handle_async_request(httpx.Request("GET", url))
                body = await response.aread()
                await response.aclose()
                done += 1
                for link in extract_links(body, url).links:
                    if link not in seen and link.startswith(allowed):
                        seen.add(link)
                        queue.put_nowait(link)
            finally:
                queue.task_done()

    cpu_before = time.process_time()
    started = time.perf_counter()
    tasks = [asyncio.create_task(run()) for _ in range(CONCURRENCY)]
    await queue.join()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    for task in tasks:
        task.cancel()
    await transport.aclose()
    return done / elapsed, done, cpu


def report(
    results: dict[str, Any], label: str, key: str, rate: float, pages: int, cpu: float
) -> None:
    """Print one crawler's line and keep its rate and CPU milliseconds per page."""
    cpu_ms = 1000 * cpu / pages if pages else float("nan")
    print(f"{label + ':':<24}{rate:8.0f} pages/s ({pages} pages, {cpu_ms:.2f} ms CPU/page)")
    results[f"{key}_pages_per_s"] = rate
    results[f"{key}_cpu_ms_per_page"] = cpu_ms


#: The worker's environment with its memory budget off, and with the default.
_BUDGETS: dict[str, dict[str, str]] = {
    "no_budget": {"CRAWLFLEET_MEMORY_LIMIT_BYTES": "0"},
    "budget": {},
}


async def memory_budget_ab(
    setup: dict[str, Any], redis_url: str, rounds: int, tmp: Path
) -> dict[str, Any]:
    """One worker with and without its memory budget, ``rounds`` times, order alternating."""
    rates: dict[str, list[float]] = {name: [] for name in _BUDGETS}
    cpu: dict[str, list[float]] = {name: [] for name in _BUDGETS}
    for round_ in range(rounds):
        order = list(_BUDGETS) if round_ % 2 == 0 else list(reversed(_BUDGETS))
        for name in order:
            rate, pages, seconds = await crawlfleet_rate(
                setup,
                redis_url,
                1,
                f"{name.replace('_', '-')}-{round_}",
                tmp,
                env=_BUDGETS[name],
            )
            rates[name].append(rate)
            cpu[name].append(1000 * seconds / pages)
            print(f"round {round_ + 1} {name + ':':<12}{rate:8.0f} pages/s, "
                  f"{cpu[name][-1]:.2f} ms CPU/page")  # fmt: skip
    medians = {name: statistics.median(values) for name, values in rates.items()}
    ratio = medians["budget"] / medians["no_budget"]
    print(f"median budget / no budget: {ratio:.3f} (target >= 0.95)")
    return {
        "memory_ab_rounds": rounds,
        "memory_ab_pages_per_s": rates,
        "memory_ab_cpu_ms_per_page": cpu,
        "memory_ab_ratio": ratio,
        "memory_ab_cpu_ratio": statistics.median(cpu["budget"])
        / statistics.median(cpu["no_budget"]),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller site; under 90 s")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument(
        "--memory-ab", type=int, default=0, metavar="N",
        help="only the memory budget's cost: N rounds of one worker without and with it",
    )  # fmt: skip
    args = parser.parse_args()
    pages_per_host = 1500 if args.quick else 5000
    if args.memory_ab:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            with StaticSite(HOSTS, pages_per_host, tmp / "site") as setup:
                with RedisServer(tmp / "redis") as redis:
                    results = await memory_budget_ab(setup, redis.url, args.memory_ab, tmp)
                results.update(pages=setup["pages"], quick=args.quick, site_server=setup["server"])
        if args.json:
            print(json.dumps(results, sort_keys=True))
        return
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with StaticSite(HOSTS, pages_per_host, tmp / "site") as setup:
            results: dict[str, Any] = {
                "pages": setup["pages"],
                "quick": args.quick,
                "site_server": setup["server"],
            }
            with RedisServer(tmp / "redis") as redis:
                one = await crawlfleet_rate(setup, redis.url, 1, "one", tmp)
                report(results, "crawlfleet, 1 worker", "crawlfleet", *one)
                report(results, "scrapy", "scrapy", *scrapy_rate(setup, tmp))
                two = await crawlfleet_rate(setup, redis.url, 2, "two", tmp)
                report(results, "crawlfleet, 2 workers", "two_workers", *two)
                extracting = await crawlfleet_rate(setup, redis.url, 1, "extract", tmp, EXTRACTION)
                report(results, "crawlfleet, extracting", "extract", *extracting)
                scrapy_extracting = scrapy_rate(setup, tmp, extract=True)
                report(results, "scrapy, extracting", "scrapy_extract", *scrapy_extracting)
            report(results, "raw fetch+parse loop", "raw_loop", *await raw_loop_rate(setup))
    results["ratio"] = results["crawlfleet_pages_per_s"] / results["scrapy_pages_per_s"]
    results["cpu_ratio"] = results["scrapy_cpu_ms_per_page"] / results["crawlfleet_cpu_ms_per_page"]
    results["extract_vs_plain_rate"] = (
        results["extract_pages_per_s"] / results["crawlfleet_pages_per_s"]
    )
    results["extract_ratio_vs_scrapy"] = (
        results["extract_pages_per_s"] / results["scrapy_extract_pages_per_s"]
    )
    results["python"] = platform.python_version()
    print(f"ratio crawlfleet/scrapy: {results['ratio']:.2f} (target ≥ 6.0)")
    print(f"CPU per page, scrapy/crawlfleet: {results['cpu_ratio']:.2f}")
    print(f"extract_vs_plain_rate: {results['extract_vs_plain_rate']:.2f} (target ≥ 0.7)")
    print(f"extract_ratio_vs_scrapy: {results['extract_ratio_vs_scrapy']:.2f} (target ≥ 6.0)")
    if args.json:
        print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main())
