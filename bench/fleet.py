"""Fleet benchmark: `crawlfleet run` against scrapy-redis, two processes each, one run.

    python -m bench.fleet [--quick] [--json]

The test site's pages, rendered once and served by nginx (bench/static_site.py, which
falls back to the Python test site without nginx), recording every request in its access
log, are crawled to the end by:

- ``crawlfleet``: ``crawlfleet run --workers 2`` (private Redis, leases, Bloom, robots, JSONL);
- ``scrapy_redis``: two Scrapy processes sharing one Redis through scrapy-redis' scheduler
  and dupefilter (installed for the benchmark only: ``pip install scrapy-redis``), the same
  concurrency (16 per process, 8 per host), robots obeyed, a JSONL feed each.

Then each crawl again on a fresh site with one worker process killed (SIGKILL) halfway
through (half of the clean run's time), counting the reachable pages (the site graph's BFS
from the seeds) that the site's log never shows served, and those that no process wrote to
its output, and (crawlfleet) how soon after the kill the first of the killed worker's pages is
fetched again by the other one (``moves_again_after_kill_s``, from nginx's log times: the
requeue gave back its leases and their host slots). scrapy-redis pops a request without a
lease, so what the killed process held is gone, and its fingerprint in the dupefilter stops
anyone from queueing it again; what it had fetched but not yet written is gone too. nginx
answers in well under a millisecond, so a request is rarely still unanswered when the kill
lands: the output count shows more.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from bench.static_site import StaticSite
from crawlfleet.local.redis_server import RedisServer
from tests.support.processes import worker_pid

PER_PROCESS = 16
PER_HOST = 8
HOSTS = 2


#: One crawl of a site to its end, one process SIGKILLed ``kill_after`` seconds in (or none):
#: ``runner(setup, tmp, name, kill_after)`` -> wall-clock (started, ended).
Runner = Callable[[dict[str, Any], Path, str, float | None], tuple[float, float]]


def fleet_job(setup: dict[str, Any], name: str) -> dict[str, Any]:
    """The CrawlJob of a fleet bench: the whole site, no politeness delay, quick failover."""
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
            "dedup": {"capacity": 200_000},
            # perHost is fleet-wide here but per process in Scrapy: two processes of 8 per host
            # put 16 on a host, so the fleet gets 16 too.
            "concurrency": {
                "perWorker": PER_PROCESS,
                "perHost": 2 * PER_HOST,
                "hostDelaySeconds": 0,
            },
            "lease": {"ttlSeconds": 60, "heartbeatSeconds": 1, "deadAfterSeconds": 5},
        },
    }


def run_job(
    job: dict[str, Any],
    tmp: Path,
    name: str,
    kill_after: float | None,
    env: Mapping[str, str] | None = None,
) -> tuple[float, float]:
    """One ``crawlfleet run --workers 2`` of ``job`` to its end: wall-clock (started, ended)."""
    job_file = tmp / f"{name}.yaml"
    job_file.write_text(yaml.safe_dump(job))
    started = time.time()  # wall clock: nginx logs its times in it
    run = subprocess.Popen(
        [
            sys.executable, "-m", "crawlfleet", "--log-level", "warning", "run", str(job_file),
            "--workers", "2", "--out", str(tmp / name),
        ],
        stderr=subprocess.DEVNULL,
        env=None if env is None else {**os.environ, **env},
    )  # fmt: skip
    if kill_after is not None:
        time.sleep(kill_after)
        pid = worker_pid(job_file, "local-1")
        if pid is None:
            raise RuntimeError("no crawlfleet worker to kill")
        os.kill(pid, signal.SIGKILL)
        killed_at(tmp, name).write_text(repr(time.time()))
    if run.wait(600) != 0:
        raise RuntimeError(f"crawlfleet run exited with {run.returncode}")
    return started, time.time()


def killed_at(tmp: Path, name: str) -> Path:
    """Where a runner notes the wall-clock moment of its kill (crawlfleet's runners do)."""
    return tmp / f"{name}.killed-at"


def run_crawlfleet(
    setup: dict[str, Any], tmp: Path, name: str, kill_after: float | None
) -> tuple[float, float]:
    """One ``crawlfleet run`` (crawlfleet's own workers) to its end: wall-clock (started, ended)."""
    return run_job(fleet_job(setup, name), tmp, name, kill_after)


def spider_environment(setup: dict[str, Any], tmp: Path, name: str) -> dict[str, str]:
    """What bench/scrapy_spider.py reads from its environment: the site, and where its stats go."""
    seeds_file = tmp / f"{name}-setup.json"
    seeds_file.write_text(json.dumps({"seeds": setup["seeds"], "hosts": setup["hosts"]}))
    return {
        "BENCH_SEEDS_FILE": str(seeds_file),
        "BENCH_STATS_FILE": str(tmp / f"{name}-stats.json"),
    }


def run_scrapy_redis(
    setup: dict[str, Any], tmp: Path, name: str, kill_after: float | None
) -> tuple[float, float]:
    """Two Scrapy processes on one Redis, both to their end: wall-clock (started, ended)."""
    redis = RedisServer(tmp / f"{name}-redis").start()
    spider = Path(__file__).with_name("scrapy_spider.py")
    started = time.time()
    procs = []
    for n in range(2):
        env = {**os.environ, **spider_environment(setup, tmp, f"{name}-{n}")}
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "scrapy",
                    "runspider",
                    str(spider),
                    "-s",
                    "SCHEDULER=scrapy_redis.scheduler.Scheduler",
                    "-s",
                    "DUPEFILTER_CLASS=scrapy_redis.dupefilter.RFPDupeFilter",
                    "-s",
                    "SCHEDULER_PERSIST=True",
                    "-s",
                    f"REDIS_URL={redis.url}",
                    "-s",
                    f"CONCURRENT_REQUESTS={PER_PROCESS}",
                    "-s",
                    f"CONCURRENT_REQUESTS_PER_DOMAIN={PER_HOST}",
                    "-s",
                    "ROBOTSTXT_OBEY=True",
                    "-s",
                    "LOG_LEVEL=ERROR",
                    "-s",
                    "TELNETCONSOLE_ENABLED=False",
                    "-o",
                    str(tmp / f"{name}-items-{n}.jsonl:jsonl"),
                ],
                env=env,
            )
        )
        time.sleep(0.5)  # the second joins a crawl in progress, as a scaled-out fleet does
    if kill_after is not None:
        time.sleep(max(0.0, kill_after - (time.time() - started)))
        procs[0].send_signal(signal.SIGKILL)
    for proc in procs:
        proc.wait(600)
    ended = time.time()
    redis.stop()
    return started, ended


def stored_urls(tmp: Path, name: str) -> Iterator[str]:
    """URLs of the pages one crawl wrote out (crawlfleet's pages/*.jsonl, the Scrapy feeds).

    The site's log shows what was requested; a page a killed process fetched but never wrote
    is served yet lost to the user, and only the output shows that.
    """
    for path in [*(tmp / name).glob("pages/*.jsonl"), *tmp.glob(f"{name}-items-*.jsonl")]:
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # the last line of a file cut short by SIGKILL
                continue
            if record.get("status") == 200:
                yield str(record["url"])


def bench_arguments(description: str) -> argparse.Namespace:
    """The command line every fleet bench takes: --quick, --json, --pages-per-host."""
    parser = argparse.ArgumentParser(description=description.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller site; under 3 minutes")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--pages-per-host", type=int, help="another site size, for experiments")
    return parser.parse_args()


def compare(
    runners: Mapping[str, Runner], args: argparse.Namespace, *, target: float
) -> dict[str, Any]:
    """Each runner clean and with a kill, on a fresh site each time; ``ratio`` is the first
    runner's pages/s over the second's. Prints as it goes, and the JSON object with --json."""
    # 2,500 pages per host, not 2,000: the fixed start-up (~1-2 s of imports on this machine)
    # would otherwise be a third of crawlfleet's quick run; docs/benchmarks.md gives both.
    pages_per_host = args.pages_per_host or (2500 if args.quick else 6000)
    results: dict[str, Any] = {"quick": args.quick, "python": platform.python_version()}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for label, runner in runners.items():
            site = StaticSite(HOSTS, pages_per_host, tmp / f"{label}-clean", record_requests=True)
            with site as setup:
                started, ended = runner(setup, tmp, f"{label}-clean", None)
            elapsed = ended - started
            reachable = site.reachable()
            served = site.served() & reachable
            rate = len(served) / elapsed
            results["site_server"] = setup["server"]
            results[f"{label}_pages_per_s"] = rate
            results[f"{label}_pages"] = len(served)
            results[f"{label}_missed_clean"] = len(reachable - served)
            print(f"{label}: {len(served)} pages in {elapsed:.1f} s = {rate:.0f} pages/s")
            span = site.served_span()
            if span is not None:  # nginx's log has times: start-up, crawl and tail apart
                first, last = span
                results[f"{label}_startup_s"] = first - started
                results[f"{label}_crawl_pages_per_s"] = len(served) / max(1e-3, last - first)
                results[f"{label}_tail_s"] = ended - last
                print(
                    f"{label}:   start-up {first - started:.2f} s, crawl "
                    f"{results[f'{label}_crawl_pages_per_s']:.0f} pages/s between the first "
                    f"and the last page served, tail {ended - last:.2f} s"
                )
            site = StaticSite(HOSTS, pages_per_host, tmp / f"{label}-killed", record_requests=True)
            with site as setup:
                runner(setup, tmp, f"{label}-killed", elapsed / 2)
            lost = len(site.reachable() - site.served())
            stored = {site.page_of(url) for url in stored_urls(tmp, f"{label}-killed")}
            unstored = len(site.reachable() - stored)
            results[f"{label}_lost_after_kill"] = lost
            results[f"{label}_unstored_after_kill"] = unstored
            noted = killed_at(tmp, f"{label}-killed")
            if noted.exists():  # a runner that requeues: how soon its pages are fetched again
                kill = float(noted.read_text())
                refetch = site.first_refetch_after(kill)
                if refetch is not None:
                    results[f"{label}_moves_again_after_kill_s"] = refetch - kill
                    print(
                        f"{label}:   the first of the killed worker's pages fetched again "
                        f"{refetch - kill:.2f} s after the kill"
                    )
            print(
                f"{label}: one process killed halfway: {lost} reachable pages never requested, "
                f"{unstored} never written to the output"
            )
    ours, theirs = runners
    results["ratio"] = results[f"{ours}_pages_per_s"] / results[f"{theirs}_pages_per_s"]
    print(f"ratio {ours}/{theirs}: {results['ratio']:.2f} (target ≥ {target:g})")
    if f"{ours}_crawl_pages_per_s" in results and f"{theirs}_crawl_pages_per_s" in results:
        results["crawl_ratio"] = (
            results[f"{ours}_crawl_pages_per_s"] / results[f"{theirs}_crawl_pages_per_s"]
        )
        print(f"  the same between first and last page served: {results['crawl_ratio']:.2f}")
    if args.json:
        print(json.dumps(results, sort_keys=True))
    return results


def main() -> None:
    args = bench_arguments(__doc__)
    compare({"crawlfleet": run_crawlfleet, "scrapy_redis": run_scrapy_redis}, args, target=6)


if __name__ == "__main__":
    main()
