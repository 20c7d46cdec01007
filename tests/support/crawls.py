"""Crawls a test starts as a user would: a CrawlJob file, worker processes, their outputs.

``make_crawl`` writes a job for the loopback test site (a spec small and quick enough for a
test, every section overridable); :class:`Crawl` starts ``crawlfleet worker`` processes on it
and reads back what they did: the output files, the dead letters, the frontier. Every process
started here is killed by the ``no_stray_workers`` fixture (tests/integration/crawler/conftest.py)
when a test ends, so a failing test leaves none behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from crawlfleet.crawljob import load_crawljob
from crawlfleet.frontier import Frontier, FrontierSettings, FrontierStats, canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import TestSite

__all__ = [
    "HOST_DELAY",
    "MAX_DEPTH",
    "PER_HOST",
    "PER_WORKER",
    "Crawl",
    "high_water_kib",
    "kill_stray_workers",
    "make_crawl",
    "requested_urls",
    "wait_all",
    "wait_with_peak_rss",
]

MAX_DEPTH = 4
PER_HOST = 2
HOST_DELAY = 0.02
PER_WORKER = 8

_started: list[subprocess.Popen[bytes]] = []


def kill_stray_workers() -> Iterator[None]:
    """A test that fails mid-crawl must not leave worker processes behind (a fixture body)."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@dataclass
class Crawl:
    name: str
    job_file: Path
    out: Path
    redis_url: str

    def start(
        self, worker: str, *extra: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with open(self.out / f"{worker}.log", "ab") as log:  # the child keeps its own copy
            proc = subprocess.Popen(
                [
                    sys.executable, "-m", "crawlfleet", "worker", str(self.job_file),
                    "--redis-url", self.redis_url, "--worker-id", worker,
                    "--out", str(self.out), *extra,
                ],
                stderr=log,
                env=None if env is None else {**os.environ, **env},
            )  # fmt: skip
        _started.append(proc)
        return proc

    def pages(self) -> list[dict[str, Any]]:
        records = []
        for path in sorted(self.out.glob("pages/*.jsonl")):
            records += [json.loads(line) for line in path.read_text().splitlines() if line]
        return records

    async def dead(self) -> dict[str, dict[str, Any]]:
        """The dead letters, from the frontier (the run writes them out at completion)."""
        frontier = await self.frontier()
        try:
            return {
                letter.url: {"failure_class": letter.failure_class, "message": letter.message}
                async for letter in frontier.dead_letters()
            }
        finally:
            await frontier.aclose()

    async def stats(self) -> FrontierStats:
        """The job's counters, read once (the frontier is closed again)."""
        frontier = await self.frontier()
        try:
            return await frontier.stats()
        finally:
            await frontier.aclose()

    async def frontier(self) -> Frontier:
        job = load_crawljob(self.job_file)
        return await Frontier.connect(
            self.redis_url, FrontierSettings.from_spec(job.job_id, job.spec)
        )


_counter = iter(range(10_000))


def make_crawl(
    site: TestSite, redis_server: RedisServer, tmp_path: Path, **spec_overrides: Any
) -> Crawl:
    name = f"crawl-{next(_counter)}"
    spec: dict[str, Any] = {
        "seeds": site.seeds,
        "scope": {
            "allowedDomains": site.hosts,
            "maxDepth": MAX_DEPTH,
            "allowPrivateNetworks": True,
        },
        "dedup": {"capacity": 100_000},
        "concurrency": {
            "perWorker": PER_WORKER,
            "perHost": PER_HOST,
            "hostDelaySeconds": HOST_DELAY,
        },
        "retry": {
            "requestAttempts": 3,
            "taskAttempts": 2,
            "backoffBaseSeconds": 0.05,
            "backoffFactor": 2.0,
            "backoffMaxSeconds": 1.5,
        },
        "lease": {"ttlSeconds": 4, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
        # Short-lived files: several per worker even in a crawl of seconds.
        "output": {"maxFileAgeSeconds": 1},
        "fetch": {
            "connectTimeoutSeconds": 1,
            "readTimeoutSeconds": 1,
            "totalTimeoutSeconds": 5,
            "maxBodyBytes": 1024 * 1024,
            "maxDecompressedBytes": 8 * 1024 * 1024,
        },
        "userAgent": "crawlfleet-test/1.0",
    }
    for key, value in spec_overrides.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    out = tmp_path / name
    out.mkdir()
    job_file = tmp_path / f"{name}.yaml"
    job_file.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "crawlfleet.io/v1alpha1",
                "kind": "CrawlJob",
                "metadata": {"name": name, "namespace": "default"},
                "spec": spec,
            }
        )
    )
    return Crawl(name, job_file, out, redis_server.url)


def wait_all(procs: list[subprocess.Popen[bytes]], timeout: float = 120) -> list[int]:
    deadline = time.monotonic() + timeout
    codes = []
    for proc in procs:
        codes.append(proc.wait(max(1.0, deadline - time.monotonic())))
    return codes


def requested_urls(site: TestSite, since: float) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for record in site.all_requests():
        if record.start >= since and not record.path.startswith("/robots.txt"):
            counts[canonicalize(record.url)] += 1
    return counts


def wait_with_peak_rss(proc: subprocess.Popen[bytes], timeout: float = 120) -> tuple[int, int]:
    """Wait for ``proc``; its exit code and its own peak RSS in KiB.

    Read from ``VmHWM`` in /proc while it runs, not from ``wait4``'s rusage: at exec Linux
    folds the high-water mark of the memory the child started with into ``ru_maxrss``, and a
    child forked (or vforked) from this test process starts with all of it -- late in a full
    suite that is 400 MB of pytest, reported as the worker's own peak. ``VmHWM`` belongs to
    the exec'd program's memory alone; sampled every 50 ms, and it only ever rises.
    """
    deadline = time.monotonic() + timeout
    peak = 0
    while True:
        peak = max(peak, high_water_kib(proc.pid))
        pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, peak
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker {proc.pid} still running after {timeout} s")
        time.sleep(0.05)


def high_water_kib(pid: int) -> int:
    """The process' peak resident set (VmHWM) in KiB; 0 once it has exited."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
