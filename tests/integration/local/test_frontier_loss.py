"""`crawlfleet run` when its Redis dies: restarted on its append-only file, or lost and said so.

Real processes: the run's private redis-server is killed with SIGKILL, as the kernel's OOM
killer would; the test site's request log says what was fetched.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.processes import redis_server_pid
from tests.support.runs import crawlfleet, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]


def _job(site: TestSite, name: str) -> dict[str, object]:
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": name},
        "spec": {
            "seeds": site.seeds,
            "scope": {"allowedDomains": site.hosts, "maxDepth": 10, "allowPrivateNetworks": True},
            "concurrency": {"perWorker": 4, "perHost": 2, "hostDelaySeconds": 0},
            # Leases that come back soon: what the last second of the AOF forgot is re-leased.
            "lease": {"ttlSeconds": 5, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
            "retry": {"backoffBaseSeconds": 0.05, "backoffMaxSeconds": 0.5},
        },
    }


def _served(site: TestSite) -> set[str]:
    return {
        canonicalize(r.url)
        for r in site.all_requests()
        if r.status == 200 and r.path != "/robots.txt"
    }


def _wait_served(site: TestSite, pages: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(_served(site)) < pages:
        assert time.monotonic() < deadline, "the crawl did not get going"
        time.sleep(0.05)


def test_a_killed_private_redis_is_restarted_on_its_aof_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    config = SiteConfig(hosts=2, pages_per_host=150, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(_job(site, "aof")))
        out = tmp_path / "out"
        run = crawlfleet("run", str(job_file), "--out", str(out), "--json", cwd=tmp_path)
        _wait_served(site, 60)
        pid = redis_server_pid((out / "redis").resolve())
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        stdout, err = run.communicate(timeout=240)
        assert run.returncode == 0, err[-3000:]
        assert "restarting it on its append-only file" in err
        assert redis_server_pid((out / "redis").resolve()) is None  # stopped with the run

    expected = {canonicalize(url) for url in site.expected_pages()}
    assert _served(site) == expected  # every page, fetched after the restart if need be
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["crawled"] == len(expected)
    # Counters consistent: every URL admitted is accounted for, none counted twice.
    assert summary["seen"] == summary["crawled"] + summary["dead_lettered"]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events].count("Seeded") == 1
