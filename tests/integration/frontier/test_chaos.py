"""Eight processes work one frontier while workers die: nothing is lost or done twice.

The claimers (tests/support/frontier_actor.py) log every claim and outcome with the server's
timestamps; the assertions below read only those logs and Redis.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.frontier import Link, canonicalize, host_of
from tests.integration.frontier.conftest import OpenFrontier
from tests.support.frontier_actor import (
    FETCH_BUDGET_SECONDS,
    fetch_budget,
    fetch_deadline,
    planned_outcome,
)

pytestmark = pytest.mark.slow

HOSTS = 25
PER_HOST_URLS = 800  # 20,000 URLs
PER_HOST = 2
HOST_DELAY = 0.005
TASK_ATTEMPTS = 3


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by SIGKILL
            break
    return records


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.001)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("backend", ["bitmap"], indirect=True)
async def test_claimers_killed_mid_batch_lose_nothing(
    open_frontier: OpenFrontier, redis_url: str, job_id: str, tmp_path: Path
) -> None:
    frontier = await open_frontier(
        concurrency={"perHost": PER_HOST, "hostDelaySeconds": HOST_DELAY},
        retry={"taskAttempts": TASK_ATTEMPTS},
        lease={"ttlSeconds": 60},
        fetch=fetch_budget(FETCH_BUDGET_SECONDS),
    )
    urls = [
        canonicalize(f"http://10.1.0.{h}:8{h:03d}/page/{i}")
        for h in range(HOSTS)
        for i in range(PER_HOST_URLS)
    ]
    for start in range(0, len(urls), 5000):
        await frontier.enqueue([Link(u, 1, "") for u in urls[start : start + 5000]])
    await frontier.seed(["http://10.1.0.0:8000/page/0"])  # already queued: marks seeded only

    def start(worker: str, *extra: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.frontier_actor",
                "claim",
                "--redis-url",
                redis_url,
                "--job",
                job_id,
                "--worker",
                worker,
                "--out",
                str(tmp_path / f"{worker}.jsonl"),
                "--batch",
                "40",
                "--per-host",
                str(PER_HOST),
                "--host-delay",
                str(HOST_DELAY),
                "--task-attempts",
                str(TASK_ATTEMPTS),
                "--lease-ttl",
                "60",
                "--fetch-seconds",
                "0.02",
                *extra,
            ]
        )

    procs = {f"w{i}": start(f"w{i}") for i in range(6)}
    procs["victim"] = start("victim")
    procs["zombie"] = start("zombie", "--hang-after-batches", "3", "--hang-seconds", "4")

    # Kill the victim while it holds leases: right after it logged a claim, before its ack.
    def victim_holds_leases() -> bool:
        log = read_log(tmp_path / "victim.jsonl")
        return len(log) > 6 and log[-1]["kind"] == "claim"

    wait_for(victim_holds_leases, 60, "the victim to hold leases")
    procs["victim"].send_signal(signal.SIGKILL)
    procs["victim"].wait()
    wait_for(
        lambda: any(r["kind"] == "hanging" for r in read_log(tmp_path / "zombie.jsonl")),
        60,
        "the zombie to hang",
    )
    # Requeue as the operator would for dead pods, while the others are frozen mid-flight;
    # the script returns its server time, which ends those leases in the intervals below.
    others = [p for name, p in procs.items() if name not in ("victim", "zombie")]
    for proc in others:
        os.kill(proc.pid, signal.SIGSTOP)
    victim_back = await frontier.requeue_owner("victim")
    zombie_back = await frontier.requeue_owner("zombie")
    requeued = victim_back.total + zombie_back.total
    for proc in others:
        os.kill(proc.pid, signal.SIGCONT)
    assert requeued > 0
    procs["victim2"] = start("victim2")

    for name, proc in procs.items():
        if name != "victim":
            assert proc.wait(240) == 0, name

    # -- the final state ------------------------------------------------------------------
    stats = await frontier.stats()
    dead = {d.url: d async for d in frontier.dead_letters()}
    records = [r for p in tmp_path.glob("*.jsonl") for r in read_log(p)]
    acked: dict[str, int] = defaultdict(int)
    for record in records:
        if record["kind"] == "ack":
            for _, url, ok in record["leases"]:
                if ok:
                    acked[url] += 1
    assert stats.complete
    assert not [u for u, n in acked.items() if n > 1], "a URL was acked twice"
    assert set(acked).isdisjoint(dead), "a URL both acked and dead-lettered"
    assert set(acked) | set(dead) == set(urls), "a URL was lost"
    assert stats.crawled == len(acked)
    assert stats.dead == len(dead)
    # The zombie woke up after its leases were requeued: every one of its acks was refused.
    zombie_log = read_log(tmp_path / "zombie.jsonl")
    hang_index = next(i for i, r in enumerate(zombie_log) if r["kind"] == "hanging")
    hung_claim = zombie_log[hang_index - 1]
    after_hang = [r for r in zombie_log[hang_index + 1 :] if r["kind"] in ("ack", "fail")][:2]
    hung_ids = {lease[0] for lease in hung_claim["leases"]}
    outcomes = {
        lease[0]: lease[-1]
        for record in after_hang
        for lease in record["leases"]
        if lease[0] in hung_ids
    }
    assert set(outcomes) == hung_ids, "the zombie should have tried to complete every lease"
    assert all(code in (False, 0) for code in outcomes.values()), (
        "a fenced-out worker completed a lease"
    )
    # Dead letters carry their class: planned permanent failures, retries past the limit,
    # and the victim/zombie leases only if they were already at their last attempt.
    for url, letter in dead.items():
        assert letter.failure_class in ("test_permanent", "test_retry", "worker_lost"), letter
        if letter.failure_class == "test_permanent":
            assert planned_outcome(url, letter.attempts - 1) == "permanent"

    # -- politeness, from the claimers' server timestamps ----------------------------------
    end_of: dict[str, float] = {}
    for record in records:
        if record["kind"] in ("ack", "fail"):
            for lease in record["leases"]:
                end_of.setdefault(lease[0], record["at"])
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for record in records:
        if record["kind"] == "claim":
            for lease_id, url, _, claimed_at in record["leases"]:
                # Only the victim's never ended. A requeued lease's request may still run at
                # the site until its fetch deadline: its host slot stays counted that long.
                end = end_of.get(lease_id) or max(victim_back.at, fetch_deadline(lease_id))
                if record["worker"] == "zombie" and lease_id in hung_ids:
                    end = max(zombie_back.at, fetch_deadline(lease_id))
                intervals[host_of(canonicalize(url))].append((claimed_at, end))
    assert len(intervals) == HOSTS
    for host, spans in intervals.items():
        starts = sorted(start for start, _ in spans)
        gaps_ms = [round((b - a) * 1000) for a, b in itertools.pairwise(starts)]
        assert min(gaps_ms) >= HOST_DELAY * 1000, (host, min(gaps_ms))  # server time is in ms
        events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
        live = peak = 0
        for _, delta in events:  # at equal times, ends (-1) sort before starts
            live += delta
            peak = max(peak, live)
        assert peak <= PER_HOST, (host, peak)
