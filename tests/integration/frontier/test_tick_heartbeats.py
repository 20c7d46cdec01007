"""A Redis outage longer than ``lease.deadAfterSeconds`` kills no live worker.

A worker cannot heartbeat into a Redis that does not answer: when Redis comes back every
heartbeat is older than the limit. The steering tick counts a heartbeat's age only from when
the frontier came back for it (``reachable_since``), so the workers get their next beat in;
without it the tick takes them for dead, kills them and requeues what they held (found by a
cluster chaos test: a shard stopped for 20 s, then 62 pages fetched twice). A real
redis-server; the heartbeat made stale by waiting past a short limit.
"""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from crawlfleet.fleet import FleetEvent, FleetView, steer
from crawlfleet.fleet.backend import Unit
from crawlfleet.fleet.policy import FleetMemory, FleetPolicy
from crawlfleet.frontier import Frontier
from tests.integration.frontier.conftest import TEST_JOB
from tests.support.specs import frontier_settings

#: Short enough to pass within the test; the outage it stands for is longer than it.
DEAD_AFTER_SECONDS = 0.2

POLICY = FleetPolicy(
    min_replicas=1,
    max_replicas=1,
    target_backlog_per_replica=100,
    scale_down_delay_seconds=60,
    dead_after_seconds=DEAD_AFTER_SECONDS,
    startup_grace_seconds=60,
    completion_grace_seconds=5,
    retry_lead_seconds=10,
    pinned_replicas=1,
)


class OneWorker:
    """A FleetBackend with one running worker, ``local-1``; what the tick did to it."""

    def __init__(self) -> None:
        self.started_at = time.time()
        self.replaced: list[str] = []
        self.events: list[FleetEvent] = []

    async def observe(self) -> FleetView:
        return FleetView((Unit("local-1", True, self.started_at),), 1, 1, "local-")

    async def scale(self, replicas: int) -> None:
        assert replicas == 1

    async def replace(self, unit: str) -> None:
        self.replaced.append(unit)

    async def forget(self, unit: str) -> None:
        raise AssertionError(f"the worker did not exit: {unit}")

    async def record(self, event: FleetEvent) -> None:
        self.events.append(event)


async def _tick(frontier: Frontier, fleet: OneWorker, reachable_since: float | None) -> None:
    now = time.time()
    done = await steer.tick(
        frontier, fleet, POLICY, FleetMemory(replicas=1), now=now, suspended=False,
        seeds=[], reachable_since=reachable_since,
    )  # fmt: skip
    assert done is not None


@pytest.mark.parametrize("backend", ["bitmap"], indirect=True)
async def test_a_heartbeat_missed_while_redis_was_away_kills_no_worker(
    redis_client: aioredis.Redis, job_id: str
) -> None:
    frontier = await Frontier.open(redis_client, frontier_settings(job_id, TEST_JOB))
    await frontier.seed(["http://a.example/1", "http://b.example/1"])
    await frontier.heartbeat("local-1", {})
    held = await frontier.claim("local-1", 2)
    assert len(held) == 2
    time.sleep(3 * DEAD_AFTER_SECONDS)  # stale on Redis's clock
    fleet = OneWorker()

    # Redis answers again now: the silence before does not count
    await _tick(frontier, fleet, reachable_since=time.time())
    assert fleet.replaced == []
    assert (await frontier.stats()).leased == 2
    # back a while ago, longer than the limit: the silence since is the worker's own
    await _tick(frontier, fleet, reachable_since=time.time() - 3 * DEAD_AFTER_SECONDS)
    assert fleet.replaced == ["local-1"]
    stats = await frontier.stats()
    assert stats.leased == 0
    assert stats.queued == 2
    assert [e.reason for e in fleet.events if e.reason == "WorkerReplaced"] == ["WorkerReplaced"]
