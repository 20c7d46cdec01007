"""The steering contract, once, against both backends: ``crawlfleet run`` and the operator.

Each test runs twice, on the local process backend and on the real control plane (the
operator in its own process, pods run by the kubelet double), through the one harness in
tests/e2e/fleets.py. The site counts every fetch server-side, so "no duplicate fetch" is the
site's word, not the crawler's; the frontier is read straight from the test's Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from crawlfleet.config import DrainConfig
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.fleet import unit_of
from crawlfleet.frontier import Frontier as FrontierAPI
from crawlfleet.frontier import FrontierSettings, FrontierStats, canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.fleets import (
    ClusterFleet,
    Fleet,
    Frontier,
    LocalFleet,
    fetches,
    job_spec,
    wait_for,
    wait_phase,
    wait_workers,
)
from tests.e2e.operator_support import HUNG_WORKER_FETCH, install_crd

pytestmark = pytest.mark.slow

FleetOf = Callable[[str, TestSite], Fleet]


@pytest.fixture(params=["local", "cluster"])
def fleet_of(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FleetOf]:
    """Makes a job's fleet on the backend of this run, with a Redis of the test's own."""
    made: list[LocalFleet | ClusterFleet] = []
    with RedisServer(tmp_path / "redis") as server:

        def make(name: str, site: TestSite) -> Fleet:
            fleet: LocalFleet | ClusterFleet
            if request.param == "local":
                fleet = LocalFleet(name, site, server.url, tmp_path)
            else:
                cluster = request.getfixturevalue("cluster")
                kubelet = request.getfixturevalue("kubelet")
                _install_crd_once(cluster)
                namespace = request.getfixturevalue("namespace")
                fleet = ClusterFleet(name, site, server.url, tmp_path, cluster, namespace, kubelet)
            made.append(fleet)
            return fleet

        try:
            yield make
        finally:
            for fleet in made:
                fleet.close()


_crd_installed: set[int] = set()


def _install_crd_once(cluster: object) -> None:
    if id(cluster) not in _crd_installed:
        install_crd(cluster)  # type: ignore[arg-type]
        _crd_installed.add(id(cluster))


def slow_site(hosts: int = 2, pages_per_host: int = 100, latency: float = 0.3) -> TestSite:
    """Slow enough that the crawl is still under way when the test acts on it."""
    config = SiteConfig(
        hosts=hosts, pages_per_host=pages_per_host, hostile=False, latency_seconds=latency
    )
    return TestSite(config)


def scales(fleet: Fleet) -> list[tuple[int, int]]:
    """(from, to) of every Scaled event, oldest first ("workers 0 -> 3: ...")."""
    found = []
    for event in fleet.events("Scaled"):
        numbers = event.message.split(":", 1)[0].split()
        found.append((int(numbers[1]), int(numbers[3])))
    return found


def frontier(fleet: Fleet) -> Frontier:
    assert isinstance(fleet, LocalFleet | ClusterFleet)
    return Frontier(fleet.redis_url, fleet.job_id)


def assert_each_page_fetched_once(fleet: Fleet) -> None:
    expected = {canonicalize(u) for u in fleet.site.expected_pages()}
    served = fetches(fleet.site)
    assert set(served) == expected
    twice = {url: n for url, n in served.items() if n > 1}
    assert not twice, f"fetched more than once: {twice}"


def crawled(fleet: Fleet, pages: int) -> None:
    wait_for(
        lambda: frontier(fleet).stats().get("crawled", 0) >= pages,
        fleet,
        f"{pages} pages crawled",
        timeout=90,
    )


def test_scale_up_to_the_backlog_at_once(fleet_of: FleetOf) -> None:
    with slow_site(pages_per_host=60, latency=0.2) as site:
        fleet = fleet_of("up", site)
        fleet.start(
            seeds=sorted(site.expected_pages()),
            workers={"maxReplicas": 3, "targetBacklogPerReplica": 20, "scaleDownDelaySeconds": 60},
        )
        wait_workers(fleet, 3)
        assert scales(fleet)[0] == (0, 3)  # 120 queued / 20 per worker, capped at 3
        wait_phase(fleet, "Succeeded")
        assert scales(fleet)[-1] == (3, 0)  # and to zero when done
        assert_each_page_fetched_once(fleet)


def test_scale_down_drains_without_a_requeue_or_a_second_fetch(fleet_of: FleetOf) -> None:
    """Workers told to stop mid-crawl finish what they hold: nothing is fetched twice."""
    with slow_site(hosts=3, pages_per_host=100, latency=0.3) as site:
        fleet = fleet_of("drain", site)
        fleet.start(
            seeds=sorted(site.expected_pages()),
            concurrency={"perWorker": 4, "perHost": 4, "hostDelaySeconds": 0},
            workers={"maxReplicas": 3, "targetBacklogPerReplica": 40, "scaleDownDelaySeconds": 1},
        )
        wait_phase(fleet, "Succeeded", timeout=180)
        downs = [(before, to) for before, to in scales(fleet) if 0 < to < before]
        assert downs, scales(fleet)  # scaled down while the crawl ran, leases in flight
        assert fleet.events("LeasesRequeued") == []
        assert frontier(fleet).stats().get("requeued", 0) == 0
        assert_each_page_fetched_once(fleet)


def test_a_hung_worker_is_replaced_and_its_leases_requeued(fleet_of: FleetOf) -> None:
    with slow_site() as site:
        fleet = fleet_of("hung", site)
        # Leases live five minutes: only a stale heartbeat can explain a requeue in seconds.
        fleet.start(
            lease={"ttlSeconds": 300, "deadAfterSeconds": 3},
            workers={"minReplicas": 2, "maxReplicas": 2},
            fetch=HUNG_WORKER_FETCH,  # its slots held seconds, not a minute, once hung
        )
        wait_workers(fleet, 2)
        crawled(fleet, 10)

        def busy() -> tuple[str, int] | None:
            owners = {unit_of(owner) for owner in frontier(fleet).lease_owners()}
            return next(((u, pid) for u, pid in fleet.workers().items() if u in owners), None)

        unit, pid = wait_for(busy, fleet, "a worker holding leases")
        os.kill(pid, signal.SIGSTOP)  # alive, holding leases, silent
        stopped_at = time.monotonic()
        try:
            wait_for(
                lambda: any(unit in e.message for e in fleet.events("WorkerReplaced")),
                fleet,
                "the hung worker replaced",
                timeout=30,
            )
            # deadAfterSeconds after its last heartbeat (sent at most heartbeatSeconds before
            # it froze), long before the ttl.
            assert 3 - 0.5 <= time.monotonic() - stopped_at < 20
            # Recorded in the same tick, but a cluster's Events are posted from kopf's queue:
            # the second may land a moment after the first.
            wait_for(
                lambda: any(unit in e.message for e in fleet.events("LeasesRequeued")),
                fleet,
                "the hung worker's leases requeued",
                timeout=30,
            )
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        wait_workers(fleet, 2)  # the fleet's count is back
        wait_phase(fleet, "Succeeded", timeout=180)
        assert set(fetches(site)) == {canonicalize(u) for u in site.expected_pages()}


def test_an_expired_lease_is_requeued_by_the_tick(fleet_of: FleetOf) -> None:
    """A lease whose owner the fleet never knew comes back when its ttl runs out."""
    with slow_site(pages_per_host=10, latency=0.0) as site:
        fleet = fleet_of("expired", site)
        # Suspended: no worker runs, so only the tick can return the lease.
        spec = {"suspend": True, "lease": {"ttlSeconds": 2, "deadAfterSeconds": 1.5}}
        fleet.start(**spec)
        wait_phase(fleet, "Suspended", timeout=60)
        settings = FrontierSettings.from_spec(
            fleet.job_id, CrawlJobSpec.from_mapping(job_spec(site, **spec))
        )

        async def ghost_claims() -> str:
            api = await FrontierAPI.connect(fleet_redis_url(fleet), settings)
            try:
                await api.seed(list(site.seeds))
                (lease,) = await api.claim("ghost-1", 1)
                return lease.url
            finally:
                await api.aclose()

        url = asyncio.run(ghost_claims())
        assert frontier(fleet).lease_owners() == ["ghost-1"]
        wait_for(lambda: fleet.events("LeasesExpired"), fleet, "LeasesExpired", timeout=30)
        assert "1 expired lease(s) requeued" in fleet.events("LeasesExpired")[0].message
        assert frontier(fleet).lease_owners() == []
        fleet.suspend(False)
        wait_phase(fleet, "Succeeded")
        assert fetches(site)[canonicalize(url)] == 1  # the ghost never fetched it; a worker did


def fleet_redis_url(fleet: Fleet) -> str:
    assert isinstance(fleet, LocalFleet | ClusterFleet)
    return fleet.redis_url


def test_pinned_replicas_hold_and_follow_the_pin(fleet_of: FleetOf) -> None:
    with slow_site(hosts=3, pages_per_host=100) as site:
        fleet = fleet_of("pinned", site)
        # The backlog would ask for 3 (maxReplicas); the pin says 2.
        fleet.start(
            seeds=sorted(site.expected_pages()),
            workers={
                "autoscale": "external",
                "replicas": 2,
                "maxReplicas": 3,
                "targetBacklogPerReplica": 10,
            },
        )
        wait_workers(fleet, 2)
        time.sleep(3)
        assert len(fleet.workers()) == 2
        assert {to for _, to in scales(fleet)} == {2}
        fleet.set_replicas(3)
        wait_workers(fleet, 3, timeout=60)
        fleet.set_replicas(1)
        wait_workers(fleet, 1, timeout=60)
        if isinstance(fleet, ClusterFleet):  # what kubectl scale and an HPA read
            scale = client.CustomObjectsApi(fleet.cluster.api).get_namespaced_custom_object_scale(
                "crawlfleet.io", "v1alpha1", fleet.namespace, "crawljobs", fleet.name
            )
            assert scale["spec"]["replicas"] == 1
            assert "crawlfleet.io/job=pinned" in scale["status"]["selector"]
        wait_phase(fleet, "Succeeded", timeout=240)
        assert fleet.events("LeasesRequeued") == []  # the pin's scale-down drained too
        assert_each_page_fetched_once(fleet)


def test_suspend_drains_keeps_the_frontier_and_resume_finishes(fleet_of: FleetOf) -> None:
    with slow_site() as site:
        fleet = fleet_of("pause", site)
        fleet.start()
        crawled(fleet, 10)
        fleet.suspend(True)
        wait_phase(fleet, "Suspended", timeout=30)
        wait_for(lambda: not fleet.workers(), fleet, "the workers gone", timeout=60)
        stats = frontier(fleet).stats()
        assert stats.get("queued", 0) + stats.get("delayed", 0) > 0  # kept, not dropped
        time.sleep(2)
        assert not fleet.workers()  # and it stays at zero
        fleet.suspend(False)
        wait_phase(fleet, "Succeeded", timeout=180)
        assert fleet.events("LeasesRequeued") == []  # suspending drained, it did not requeue
        assert_each_page_fetched_once(fleet)


def test_only_delayed_retries_left_with_min_replicas_zero_still_completes(
    fleet_of: FleetOf, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry due later is demand: a fleet scaled to zero comes back for it."""
    monkeypatch.setenv("CRAWLFLEET_RETRY_LEAD_SECONDS", "1.5")  # the runner or operator reads it
    with TestSite(SiteConfig(hosts=1, pages_per_host=5, hostile=False)) as site:
        flaky = site.url(0, "/flaky/7")  # 500 twice, then a page
        fleet = fleet_of("retries", site)
        fleet.start(
            seeds=[flaky],
            scope={"maxDepth": 0},
            robots={"obey": False},
            # Each failure waits 6 s (±30 %) in the delayed set; the fleet shrinks after 1 s.
            retry={
                "requestAttempts": 1,
                "taskAttempts": 5,
                "backoffBaseSeconds": 6,
                "backoffFactor": 1,
                "backoffMaxSeconds": 6,
            },
            workers={"minReplicas": 0, "maxReplicas": 1, "scaleDownDelaySeconds": 1},
        )
        wait_phase(fleet, "Succeeded", timeout=120)
        assert fetches(site)[canonicalize(flaky)] == 3
        moves = scales(fleet)
        to_zero = moves.index((1, 0))
        assert (0, 1) in moves[to_zero:], moves  # at zero with a retry waiting, and back


def test_a_controller_restart_requeues_nothing_healthy(fleet_of: FleetOf) -> None:
    with slow_site() as site:
        fleet = fleet_of("restart", site)
        fleet.start(workers={"minReplicas": 2, "maxReplicas": 2})
        before = wait_workers(fleet, 2)
        crawled(fleet, 20)
        fleet.restart_controller()
        after = wait_workers(fleet, 2)
        if isinstance(fleet, ClusterFleet):
            assert after == before  # the same pods, the same processes: left alone
        else:
            assert not set(after) & set(before)  # a resumed run never reuses a worker id
        wait_phase(fleet, "Succeeded", timeout=180)
        assert fleet.events("LeasesRequeued") == []
        assert frontier(fleet).stats().get("requeued", 0) == 0
        assert len(fleet.events("Seeded")) == 1
        assert_each_page_fetched_once(fleet)


def test_a_worker_stopped_mid_fetch_releases_its_lease_within_the_grace(
    fleet_of: FleetOf, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM (a pod deleted, a process stopped) during an 8 s fetch, with a 1 s grace."""
    monkeypatch.setenv("CRAWLFLEET_GRACE_SECONDS", "1")
    budget = DrainConfig(grace_seconds=1).budget_seconds  # the pod's termination grace
    with TestSite(SiteConfig(hosts=1, pages_per_host=3, hostile=False, slow_seconds=8)) as site:
        slow = site.url(0, "/slow")
        fleet = fleet_of("sigterm", site)
        fleet.start(seeds=[slow], scope={"maxDepth": 0}, robots={"obey": False})

        def fetching() -> str | None:
            owners = frontier(fleet).lease_owners()
            units = {unit_of(owner) for owner in owners}
            return next((u for u in fleet.workers() if u in units), None)

        unit = wait_for(fetching, fleet, "a worker fetching the slow page", timeout=60)
        stopped_at = time.monotonic()
        fleet.stop_worker(unit)
        wait_for(lambda: fleet.worker_gone(unit), fleet, "the worker gone", timeout=budget + 5)
        assert time.monotonic() - stopped_at < budget  # inside its grace: never killed
        assert not [o for o in frontier(fleet).lease_owners() if unit_of(o) == unit]
        wait_phase(fleet, "Succeeded", timeout=120)
        stats = frontier(fleet).stats()
        assert stats.get("released", 0) >= 1  # given back, not failed: no attempt counted
        assert stats.get("dead", 0) == 0
        complete = [r for r in site.log.all_requests() if r.path == "/slow" and r.status == 200]
        assert len(complete) == 1  # released, then crawled by another worker, once


# -- the frontier's durability, memory and Bloom filter, on both backends -------------------------


def test_a_flushed_frontier_fails_the_job_and_is_never_reseeded_silently(
    fleet_of: FleetOf,
) -> None:
    with slow_site() as site:
        fleet = fleet_of("flushed", site)
        fleet.start()
        crawled(fleet, 10)
        frontier(fleet).redis.flushall()  # a Redis restarted empty, say
        wait_phase(fleet, "Failed", timeout=60)
        (lost,) = fleet.events("FrontierLost")
        assert "redis.onLoss: Fail" in lost.message
        time.sleep(3)
        assert len(fleet.events("Seeded")) == 1  # the seeds were never queued again
        assert fleet.phase() == "Failed"
        assert frontier(fleet).stats().get("crawled", 0) == 0  # nobody crawls on


def test_a_flushed_frontier_is_reseeded_when_the_job_asks_and_says_so(fleet_of: FleetOf) -> None:
    with slow_site() as site:
        fleet = fleet_of("reseeded", site)
        fleet.start(redis={"onLoss": "Reseed"})
        crawled(fleet, 10)
        frontier(fleet).redis.flushall()
        wait_phase(fleet, "Succeeded", timeout=240)
        assert fleet.events("FrontierLost") or fleet.events("FrontierReseeded")
        (reseeded,) = fleet.events("FrontierReseeded")
        assert "redis.onLoss: Reseed" in reseeded.message
        assert len(fleet.events("Seeded")) == 2  # once at the start, once after the loss
        assert set(fetches(site)) == {canonicalize(u) for u in site.expected_pages()}


def test_a_bloom_filter_past_its_capacity_grows_warns_and_skips_nothing(
    fleet_of: FleetOf,
) -> None:
    config = SiteConfig(hosts=5, pages_per_host=1000, hostile=False, latency_seconds=0.0)
    with TestSite(config) as site:
        fleet = fleet_of("grows", site)
        # A rate this low keeps the chance that any of the 5,000 URLs is taken for seen
        # (and never crawled) far below one in a thousand, every layer included.
        fleet.start(
            dedup={"capacity": 1000, "errorRate": 1e-7},
            concurrency={"perWorker": 16, "perHost": 8, "hostDelaySeconds": 0},
            workers={"maxReplicas": 2, "targetBacklogPerReplica": 500},
        )
        wait_phase(fleet, "Succeeded", timeout=240)
        (warning,) = fleet.events("BloomNearlyFull")
        assert "dedup.capacity 1000" in warning.message
        assert set(fetches(site)) == {canonicalize(u) for u in site.expected_pages()}
        settings = FrontierSettings.from_spec(
            fleet.job_id,
            CrawlJobSpec.from_mapping(job_spec(site, dedup={"capacity": 1000, "errorRate": 1e-7})),
        )

        async def read_stats() -> FrontierStats:
            api = await FrontierAPI.connect(fleet_redis_url(fleet), settings)
            try:
                return await api.stats()
            finally:
                await api.aclose()

        stats = asyncio.run(read_stats())
        assert stats.crawled == 5000
        assert stats.bloom_layers > 1  # it grew past the capacity it was sized for
        assert stats.bloom_false_positive_rate <= 1e-7


def test_a_small_redis_slows_the_crawl_down_instead_of_running_out_of_memory(
    fleet_of: FleetOf,
) -> None:
    """A bounded 50,000-page crawl in a Redis too small for its frontier, with noeviction."""
    config = SiteConfig(hosts=10, pages_per_host=5000, hostile=False, latency_seconds=0.0)
    with TestSite(config) as site:
        fleet = fleet_of("squeezed", site)
        redis_client = frontier(fleet).redis
        redis_client.config_set("maxmemory", SMALL_REDIS_BYTES)
        redis_client.config_set("maxmemory-policy", "noeviction")
        fleet.start(
            dedup={"capacity": 100_000},
            concurrency={"perWorker": 32, "perHost": 8, "hostDelaySeconds": 0},
            workers={"maxReplicas": 2, "targetBacklogPerReplica": 1000},
        )
        wait_phase(fleet, "Succeeded", timeout=420)
        pressure = fleet.events("FrontierMemoryPressure")
        assert any("-> HIGH" in event.message for event in pressure), pressure
        assert "-> NONE" in pressure[-1].message  # released once the queues drained
        logs = fleet.worker_logs()
        assert logs  # the workers did log: their silence means something
        for sign in ("OOM", "maxmemory", "FrontierFull", "Traceback"):
            assert sign not in logs, sign
        stats = frontier(fleet).stats()
        assert stats.get("over_budget", 0) > 0  # links were held back, not lost to an error
        assert stats.get("crawled", 0) > 10_000
        if isinstance(fleet, ClusterFleet):  # the metric the dashboard and the alert read
            assert fleet.operator is not None
            _, metrics = fleet.operator.get("/metrics")
            labels = f'crawljob="squeezed",namespace="{fleet.namespace}"'
            series = f"crawlfleet_frontier_memory_max_bytes{{{labels}}}"
            (value,) = [
                line.split()[-1] for line in metrics.splitlines() if line.startswith(series)
            ]
            assert float(value) == SMALL_REDIS_BYTES


#: Room for the Bloom filter and a few thousand queued URLs, not for 50,000 pages' links
#: (at 56 bytes per queued URL, 7 MiB held them all: no pressure, nothing to test).
SMALL_REDIS_BYTES = 4 * 1024 * 1024
