"""Hung workers: a host never sees more than perHost requests from the fleet at once.

A worker that stops (SIGSTOP: a hung event loop, a partitioned node) keeps its connections open,
and the site keeps serving its requests (as an origin behind a proxy does; this site serves an
abandoned request to its end and counts concurrency per host on its side). The runner finds it
by its stale heartbeat, kills it and requeues its leases; since it may still have been talking to
the site, the frontier keeps the slots of its unfinished fetches counted until their fetch
deadline, so the replacements wait for them. (A worker whose process is known to have ended --
exited, SIGKILLed, its pod gone -- has no connection left: its slots come back at once, see
test_kill_requeue.py.)
"""

from __future__ import annotations

import contextlib
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
#: Every response takes this long, and the site finishes it even after its client stopped:
#: longer than the runner takes to find a stopped worker dead (DEAD_AFTER_SECONDS), so the
#: replacements' claims would overlap the stopped worker's requests without the held slots.
LATENCY_SECONDS = 1.5
DEAD_AFTER_SECONDS = 0.6
#: The fetch budget: a lease's requests end by its claim plus this.
FETCH_BUDGET_SECONDS = 2.5
STOP_ROUNDS = 2


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
        lease={"ttlSeconds": 60, "heartbeatSeconds": 0.2, "deadAfterSeconds": DEAD_AFTER_SECONDS},
    )


def _workers(job_file: Path) -> list[int]:
    return [pid for n in range(1, 40) if (pid := worker_pid(job_file, f"local-{n}")) is not None]


def test_hung_workers_never_push_a_host_past_per_host(tmp_path: Path) -> None:
    config = SiteConfig(
        hosts=2,
        pages_per_host=8,
        hostile=False,
        seed=1,
        latency_seconds=LATENCY_SECONDS,
        finish_abandoned_requests=True,
    )
    with TestSite(config) as site:
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(_job(site)))
        proc = crawlfleet(
            "run", str(job_file), "--out", str(tmp_path / "out"), "--workers", "3", "--json",
            cwd=tmp_path,
        )  # fmt: skip
        stops = 0
        deadline = time.monotonic() + 90
        while proc.poll() is None and stops < STOP_ROUNDS and time.monotonic() < deadline:
            time.sleep(0.02)
            busy = sum(site.log.in_flight(host) for host in site.hosts)
            pages = sum(1 for r in site.all_requests() if r.path != "/robots.txt")
            if busy < PER_HOST or pages < 3 * (stops + 1):
                continue
            # Every worker at once, mid-fetch: their requests run on at the site while the
            # runner finds them dead, kills them, requeues their leases and starts others.
            for pid in _workers(job_file):
                with contextlib.suppress(ProcessLookupError):  # it just exited
                    os.kill(pid, signal.SIGSTOP)
            stops += 1
        stdout, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        assert stops == STOP_ROUNDS, "the crawl ended before the stops"
        for host in site.hosts:
            assert site.log.max_concurrency(host) <= PER_HOST, host
        summary = json.loads(stdout.strip().splitlines()[-1])
        expected = {canonicalize(u) for u in site.expected_pages()}
        assert summary["crawled"] == len(expected)  # nothing lost
        fetched = Counter(
            canonicalize(r.url) for r in site.all_requests() if r.path != "/robots.txt"
        )
        assert set(fetched) == expected
        lines = (tmp_path / "out" / "events.jsonl").read_text().splitlines()
        events = [json.loads(line) for line in lines]
        # Found dead by their heartbeats (not by an exit), so their slots were held.
        assert any(e["kind"] == "LeasesRequeued" and e["why"] == "stale_heartbeat" for e in events)
