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
import redis
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
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


def _interrupted_run(site: TestSite, tmp_path: Path, **spec: object) -> tuple[Path, Path]:
    """A run of the job stopped (Ctrl-C) mid-crawl: its job file and output folder."""
    job = _job(site, "lost")
    job["spec"].update(spec)  # type: ignore[union-attr]
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(job))
    out = tmp_path / "out"
    first = crawlfleet("run", str(job_file), "--out", str(out), cwd=tmp_path)
    _wait_served(site, 30)
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=90)
    assert first.returncode == 130, err[-3000:]
    return job_file, out


def test_a_resumed_run_on_a_redis_that_lost_its_data_fails_and_says_so(tmp_path: Path) -> None:
    config = SiteConfig(hosts=2, pages_per_host=150, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        job_file, out = _interrupted_run(site, tmp_path)
        served_before = len(_served(site))
        for aof in (out / "redis").rglob("appendonly*"):  # the Redis comes back empty
            if aof.is_file():
                aof.unlink()
        again = crawlfleet("run", str(job_file), "--out", str(out), "--resume", cwd=tmp_path)
        _, err = again.communicate(timeout=120)
        assert again.returncode == 3, err[-3000:]
        assert "frontier lost" in err
        assert "redis.onLoss: Reseed" in err  # how to start it over
        assert "Traceback" not in err
        assert len(_served(site)) == served_before  # nothing crawled on the empty frontier
    state = json.loads((out / "state.json").read_text())
    assert state["phase"] == "Failed"
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events].count("FrontierLost") == 1
    assert [e["kind"] for e in events].count("Seeded") == 1


def test_with_reseed_the_lost_frontier_is_started_over_with_a_line_that_says_so(
    tmp_path: Path,
) -> None:
    config = SiteConfig(hosts=2, pages_per_host=100, hostile=False, latency_seconds=0.02)
    with TestSite(config) as site:
        job_file, out = _interrupted_run(site, tmp_path, redis={"onLoss": "Reseed"})
        for aof in (out / "redis").rglob("appendonly*"):
            if aof.is_file():
                aof.unlink()
        again = crawlfleet(
            "run", str(job_file), "--out", str(out), "--resume", "--json", cwd=tmp_path
        )
        stdout, err = again.communicate(timeout=180)
        assert again.returncode == 0, err[-3000:]
        assert "re-seeded" in err
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert summary["crawled"] == len(site.expected_pages())  # all of it, crawled again
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events].count("FrontierReseeded") == 1


def test_an_evicting_redis_is_refused_before_anything_starts(tmp_path: Path) -> None:
    config = SiteConfig(hosts=1, pages_per_host=10, hostile=False)
    with TestSite(config) as site, RedisServer(tmp_path / "redis") as server:
        client = redis.Redis.from_url(server.url)
        client.config_set("maxmemory", 64 * 1024 * 1024)
        client.config_set("maxmemory-policy", "allkeys-lru")
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(_job(site, "evicting")))
        run = crawlfleet(
            "run", str(job_file), "--out", str(tmp_path / "out"), "--redis-url", server.url,
            cwd=tmp_path,
        )  # fmt: skip
        _, err = run.communicate(timeout=60)
        assert run.returncode != 0
        assert "maxmemory-policy" in err
        assert "allkeys-lru" in err
        assert "Traceback" not in err
        assert not _served(site)
        assert client.keys("cf:*") == []
