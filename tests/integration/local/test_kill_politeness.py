"""Workers SIGKILLed during slow fetches: the site never sees more than perHost at once.

The site serves a request to its end even after its client is gone (as an origin behind a
proxy does), and counts concurrency per host on its side. A killed worker's requests are
therefore still running there when the runner requeues its leases at once; the frontier keeps
their host slots counted until their fetch deadline, so the replacements wait for them.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.processes import worker_pid
from tests.support.runs import crawlfleet, job_for_site, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

PER_HOST = 2
#: Every response takes this long, and the site finishes it even after a kill.
LATENCY_SECONDS = 0.6
#: The fetch budget: a lease's requests end by its claim plus this.
FETCH_BUDGET_SECONDS = 2.0
KILL_ROUNDS = 3


def _job(site: TestSite) -> dict[str, object]:
    return job_for_site(
        site,
        "polite",
        concurrency={"perWorker": 4, "perHost": PER_HOST, "hostDelaySeconds": 0},
        fetch={
            "connectTimeoutSeconds": 1,
            "readTimeoutSeconds": FETCH_BUDGET_SECONDS,
            "totalTimeoutSeconds": FETCH_BUDGET_SECONDS,
        },
    )


def _workers(job_file: Path) -> list[int]:
    return [pid for n in range(1, 40) if (pid := worker_pid(job_file, f"local-{n}")) is not None]


@pytest.mark.parametrize("run", range(2))
def test_killed_workers_never_push_a_host_past_per_host(tmp_path: Path, run: int) -> None:
    config = SiteConfig(
        hosts=2,
        pages_per_host=30,
        hostile=False,
        seed=1 + run,
        latency_seconds=LATENCY_SECONDS,
        finish_abandoned_requests=True,
    )
    with TestSite(config) as site:
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(_job(site)))
        started = time.monotonic()
        proc = crawlfleet(
            "run", str(job_file), "--out", str(tmp_path / "out"), "--workers", "3", "--json",
            cwd=tmp_path,
        )  # fmt: skip
        kills = 0
        deadline = time.monotonic() + 90
        while proc.poll() is None and kills < KILL_ROUNDS and time.monotonic() < deadline:
            time.sleep(0.02)
            busy = sum(site.log.in_flight(host) for host in site.hosts)
            pages = sum(1 for r in site.all_requests() if r.path != "/robots.txt")
            if busy <= PER_HOST or pages < 6 * (kills + 1):
                continue
            # Every worker at once, mid-fetch: their requests run on at the site while the
            # runner requeues their leases and starts replacements in milliseconds.
            for pid in _workers(job_file):
                os.kill(pid, signal.SIGKILL)
            kills += 1
        stdout, err = proc.communicate(timeout=180)
        elapsed = time.monotonic() - started
        assert proc.returncode == 0, err[-3000:]
        assert kills == KILL_ROUNDS, "the crawl ended before the kills"
        for host in site.hosts:
            assert site.log.max_concurrency(host) <= PER_HOST, (host, run)
        summary = json.loads(stdout.strip().splitlines()[-1])
        expected = {canonicalize(u) for u in site.expected_pages()}
        assert summary["crawled"] == len(expected)  # nothing lost
        fetched = Counter(
            canonicalize(r.url) for r in site.all_requests() if r.path != "/robots.txt"
        )
        assert set(fetched) == expected
        # Held slots cost at most a fetch budget per kill, not a lease ttl (60 s).
        assert elapsed < 60, elapsed
