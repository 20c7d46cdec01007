"""A worker SIGKILLed while it holds hundreds of leases: the crawl moves on at once.

Its process is gone, so none of its requests is on the wire: the runner requeues its leases
and the frontier gives their host slots back in the same script (no slot held until a fetch
deadline, no lease left to expire). Proved by the frontier's own accounting, read whole at
every sample (tests/support/slots.py): no slot is ever held, and every host's in-flight count
equals the leases that exist -- not by a wall-clock bound on the run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
import redis
import yaml

from crawlfleet.crawler.worker.leases import Stage
from crawlfleet.crawljob import load_crawljob
from crawlfleet.frontier import JobKeys, canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.processes import worker_pid
from tests.support.runs import crawlfleet, job_for_site, no_stray_runs  # noqa: F401 (a fixture)
from tests.support.slots import SlotAccount, read_slots

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

KILLS = 3


class _Watch(threading.Thread):
    """Reads the frontier's slot accounting every few milliseconds until stopped."""

    def __init__(self, client: redis.Redis, job_id: str) -> None:
        super().__init__(daemon=True)
        self.client, self.job_id = client, job_id
        self.samples = 0
        self.bad: list[SlotAccount] = []
        self.held: list[SlotAccount] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            account = read_slots(self.client, self.job_id)
            self.samples += 1
            if account.wrong:
                self.bad.append(account)
            if account.held:
                self.held.append(account)
            time.sleep(0.005)


def _holding_most(client: redis.Redis, job_id: str, job_file: Path) -> int | None:
    """The pid of the worker whose last heartbeat holds the most leases (at least 50)."""
    beats = client.hgetall(JobKeys(job_id).key("workers"))
    held = {
        worker.decode(): sum(json.loads(payload).get(f"leases_{stage}", 0) for stage in Stage)
        for worker, payload in beats.items()
    }
    for worker, count in sorted(held.items(), key=lambda item: -item[1]):
        if count >= 50 and (pid := worker_pid(job_file, worker)) is not None:
            return pid
    return None


def test_killed_workers_leases_come_back_with_their_slots_at_once(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    # One host, perHost 4, 10 ms a page: a worker holds hundreds of leases whose pages wait
    # for their output file (maxFileAgeSeconds) when it is killed.
    config = SiteConfig(hosts=1, pages_per_host=900, hostile=False, latency_seconds=0.01)
    rng = random.Random(21)
    with TestSite(config) as site:
        job = job_for_site(
            site, "killreq", concurrency={"perWorker": 16, "perHost": 4, "hostDelaySeconds": 0}
        )
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        job_id = load_crawljob(job_file).job_id
        client = redis.Redis.from_url(redis_server.url)
        watch = _Watch(client, job_id)
        run = crawlfleet(
            "run", str(job_file), "--out", str(tmp_path / "out"), "--workers", "2", "--json",
            "--redis-url", redis_server.url, cwd=tmp_path,
        )  # fmt: skip
        watch.start()
        kills = 0
        deadline = time.monotonic() + 120
        next_kill = time.monotonic() + rng.uniform(1.0, 2.0)
        try:
            while run.poll() is None and kills < KILLS and time.monotonic() < deadline:
                time.sleep(0.02)
                if time.monotonic() < next_kill:
                    continue
                victim = _holding_most(client, job_id, job_file)
                if victim is None:
                    continue
                os.kill(victim, signal.SIGKILL)
                kills += 1
                next_kill = time.monotonic() + rng.uniform(0.8, 2.0)
            stdout, err = run.communicate(timeout=180)
        finally:
            watch.stop.set()
            watch.join()
            client.close()
        assert run.returncode == 0, err[-3000:]
        assert watch.samples > 100
        assert watch.bad == [], watch.bad[:3]
        assert watch.held == [], watch.held[:3]
        assert kills == KILLS, "the crawl ended before the kills"
        events = [
            json.loads(line)
            for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()
        ]
        requeued = [e for e in events if e["kind"] == "LeasesRequeued"]
        assert {e["why"] for e in requeued} == {"exited"}
        assert len(requeued) == KILLS
        assert max(e["requeued"] for e in requeued) >= 100  # hundreds of leases at a kill
        summary = json.loads(stdout.strip().splitlines()[-1])
        expected = {canonicalize(u) for u in site.expected_pages()}
        assert summary["crawled"] == len(expected)  # every page once in the frontier's count
        assert summary["dead_lettered"] == 0
        records = {
            json.loads(line)["url"]
            for path in (tmp_path / "out").glob("pages/*.jsonl")
            for line in path.read_text().splitlines()
        }
        assert {canonicalize(url) for url in records} == expected
