"""The steering tick reads the file counters once per tick for a job with spec.files, and
nothing more for any other job: its Redis commands, counted by a real redis-server."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

import redis.asyncio as aioredis

from crawlfleet.fleet import FleetEvent, FleetView, steer
from crawlfleet.fleet.policy import FleetMemory, FleetPolicy
from crawlfleet.frontier import FileStats, Frontier
from tests.integration.frontier.conftest import TEST_JOB
from tests.support.specs import frontier_settings

POLICY = FleetPolicy(
    min_replicas=0,
    max_replicas=4,
    target_backlog_per_replica=100,
    scale_down_delay_seconds=60,
    dead_after_seconds=20,
    startup_grace_seconds=60,
    completion_grace_seconds=5,
    retry_lead_seconds=10,
    pinned_replicas=None,
)


class QuietFleet:
    """A FleetBackend whose workers never start: the tick's reads and decisions are what
    is measured, and a worker would add Redis commands of its own."""

    def __init__(self) -> None:
        self.replicas = 0
        self.events: list[FleetEvent] = []

    async def observe(self) -> FleetView:
        return FleetView((), self.replicas, 0, "quiet-")

    async def scale(self, replicas: int) -> None:
        self.replicas = replicas

    async def replace(self, unit: str) -> None:
        raise AssertionError(f"no unit to replace: {unit}")

    async def forget(self, unit: str) -> None:
        raise AssertionError(f"no unit to forget: {unit}")

    async def record(self, event: FleetEvent) -> None:
        self.events.append(event)


async def test_a_tick_reads_the_file_counters_only_for_a_job_with_files(
    private_client: aioredis.Redis, job_id: str
) -> None:
    frontier = await Frontier.open(private_client, frontier_settings(job_id, TEST_JOB))
    fleet = QuietFleet()
    await frontier.count_files(stored=2, bytes=2048, duplicates=1)

    async def one_tick(policy: FleetPolicy, memory: FleetMemory) -> tuple[Counter[str], steer.Tick]:
        await private_client.config_resetstat()
        done = await steer.tick(
            frontier, fleet, policy, memory, now=time.time(), suspended=False,
            seeds=["http://a.example/"],
        )  # fmt: skip
        assert done is not None
        info = await private_client.info("commandstats")
        calls = Counter(
            {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in info.items()}
        )
        del calls["config|resetstat"]
        return calls, done

    _, first = await one_tick(POLICY, FleetMemory())  # seeds the job, scales up
    memory = first.memory
    without, plain = await one_tick(POLICY, memory)
    with_files, files = await one_tick(dataclasses.replace(POLICY, files=True), memory)
    assert plain.files is None
    assert files.files == FileStats(stored=2, bytes=2048, duplicates=1)
    # One pipeline more: the two counter reads and the epoch; the rest is the same tick.
    assert with_files - without == Counter({"hmget": 2, "hget": 1})
    assert without - with_files == Counter()
