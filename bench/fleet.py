"""Fleet benchmark: `crawlfleet run` against scrapy-redis, two processes each, one run.

    python -m bench.fleet [--quick] [--json]

The loopback test site (its own process, recording every request to a file it writes on
exit) is crawled to the end by:

- ``crawlfleet``: ``crawlfleet run --workers 2`` (private Redis, leases, Bloom, robots, JSONL);
- ``scrapy_redis``: two Scrapy processes sharing one Redis through scrapy-redis' scheduler
  and dupefilter (installed for the benchmark only: ``pip install scrapy-redis``), the same
  concurrency (16 per process, 8 per host), robots obeyed, a JSONL feed each.

Then each crawl again on a fresh site with one worker process killed (SIGKILL) halfway
through (half of the clean run's time):
reachable pages never crawled are counted from the site's own log. scrapy-redis pops a
request without a lease, so what the killed process held is gone, and its fingerprint in
the dupefilter stops anyone from queueing it again.
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
from pathlib import Path
from typing import Any

import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from tests.support.processes import worker_pid

PER_PROCESS = 16
PER_HOST = 8
HOSTS = 2


class Site:
    """The test site in its own process; what it served is read back when it stops."""

    def __init__(self, pages_per_host: int, record_file: Path) -> None:
        self.record_file = record_file
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "crawlfleet.testsite", "--hosts", str(HOSTS),
                "--pages-per-host", str(pages_per_host), "--no-hostile",
                "--record-file", str(record_file),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        ready = json.loads(self.process.stdout.readline())
        self.hosts: list[str] = ready["hosts"]
        self.seeds: list[str] = ready["seeds"]
        self.pages: int = ready["pages"]

    def stop(self) -> set[tuple[int, str]]:
        """Stop serving; the pages served with 200, as (host index, path): ports differ per run."""
        self.process.terminate()
        self.process.wait(30)
        index = {
            canonicalize(f"http://{host}/").split("/")[2]: i for i, host in enumerate(self.hosts)
        }
        served = set()
        for line in self.record_file.read_text().splitlines():
            record = json.loads(line)
            if record["status"] == 200 and not record["url"].endswith("/robots.txt"):
                url = canonicalize(record["url"])
                netloc, _, path = url.split("://", 1)[1].partition("/")
                served.add((index[netloc], "/" + path))
        return served


def run_crawlfleet(site: Site, tmp: Path, name: str, kill_after: float | None) -> float:
    job = {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "seeds": site.seeds,
            "scope": {"allowedDomains": site.hosts, "maxDepth": 1000, "allowPrivateNetworks": True},
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
    job_file = tmp / f"{name}.yaml"
    job_file.write_text(yaml.safe_dump(job))
    started = time.perf_counter()
    run = subprocess.Popen(
        [
            sys.executable, "-m", "crawlfleet", "--log-level", "warning", "run", str(job_file),
            "--workers", "2", "--out", str(tmp / name),
        ],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    if kill_after is not None:
        time.sleep(kill_after)
        pid = worker_pid(job_file, "local-1")
        if pid is None:
            raise RuntimeError("no crawlfleet worker to kill")
        os.kill(pid, signal.SIGKILL)
    if run.wait(600) != 0:
        raise RuntimeError(f"crawlfleet run exited with {run.returncode}")
    return time.perf_counter() - started


def run_scrapy_redis(site: Site, tmp: Path, name: str, kill_after: float | None) -> float:
    redis = RedisServer(tmp / f"{name}-redis").start()
    setup = tmp / f"{name}-setup.json"
    setup.write_text(json.dumps({"seeds": site.seeds, "hosts": site.hosts}))
    spider = Path(__file__).with_name("scrapy_spider.py")
    started = time.perf_counter()
    procs = []
    for n in range(2):
        env = {
            **os.environ,
            "BENCH_SEEDS_FILE": str(setup),
            "BENCH_STATS_FILE": str(tmp / f"{name}-stats-{n}.json"),
        }
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
        time.sleep(max(0.0, kill_after - (time.perf_counter() - started)))
        procs[0].send_signal(signal.SIGKILL)
    for proc in procs:
        proc.wait(600)
    elapsed = time.perf_counter() - started
    redis.stop()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller site; under 3 minutes")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    pages_per_host = 2000 if args.quick else 6000
    results: dict[str, Any] = {"quick": args.quick, "python": platform.python_version()}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for label, runner in (("crawlfleet", run_crawlfleet), ("scrapy_redis", run_scrapy_redis)):
            site = Site(pages_per_host, tmp / f"{label}-clean.requests")
            try:
                elapsed = runner(site, tmp, f"{label}-clean", None)
            finally:
                served = site.stop()
            results[f"{label}_pages_per_s"] = len(served) / elapsed
            results[f"{label}_pages"] = len(served)
            rate = len(served) / elapsed
            print(f"{label}: {len(served)} pages in {elapsed:.1f} s = {rate:.0f} pages/s")
            site = Site(pages_per_host, tmp / f"{label}-killed.requests")
            try:
                runner(site, tmp, f"{label}-killed", elapsed / 2)
            finally:
                served_after_kill = site.stop()
            lost = len(served - served_after_kill)  # the clean run reached every page
            results[f"{label}_lost_after_kill"] = lost
            print(f"{label}: one process killed halfway: {lost} reachable pages never crawled")
    results["ratio"] = results["crawlfleet_pages_per_s"] / results["scrapy_redis_pages_per_s"]
    print(f"ratio crawlfleet/scrapy-redis: {results['ratio']:.2f} (target ≥ 6)")
    if args.json:
        print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
