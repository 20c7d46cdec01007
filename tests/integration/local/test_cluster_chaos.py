"""A local crawl on a real Redis Cluster while the cluster is broken under it.

Six redis-servers on loopback, three masters with a replica each (tests/support/redis_cluster.py),
a ``crawlfleet run`` of the test site pointed at them (``redis+cluster://``), and one thing done
to the master that holds the job's slot mid-crawl: killed (its replica takes over), its slot
moved to another master with ``redis-cli --cluster reshard``, or stopped with its replica for
twenty seconds (no failover: the slot is served by nobody). Each time the crawl completes with
every page of the site, fetched again at most as often as pages were in flight when it broke
(an ack the dead master had not replicated is lost with it), and the run says what it waited
for. What happened is read from outside: the site's request log, the run's output and lines.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from crawlfleet.frontier import JobKeys
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.cluster_runs import ClusterRun, Losses, start_run
from tests.support.redis_cluster import RedisCluster, first_slots
from tests.support.runs import no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

#: How long the shard is down in the outage test: longer than the workers' deadAfterSeconds
#: (cluster_runs.py: 10 s), so the outage outlasts what a worker's silence is allowed.
OUTAGE_SECONDS = 20.0


def _site() -> TestSite:
    """Enough pages that the crawl is well under way, not over, when the test breaks things."""
    return TestSite(SiteConfig(hosts=4, pages_per_host=60, hostile=False, latency_seconds=0.03))


def _under_way(run: ClusterRun) -> tuple[int, int]:
    """Once a third of the site is fetched: the leases in flight, and the job's slot."""
    run.wait_requested(len(run.site.expected_pages()) // 3)
    return run.leased(), run.cluster.slot(JobKeys(run.job_id).key("meta"))


def _every_page(
    run: ClusterRun, summary: dict[str, Any], losses: Losses, *, repeats_at_most: int
) -> None:
    """The run completed with every page of the site, in the output too, none dead; fetched
    and written again at most ``repeats_at_most`` times."""
    assert summary["crawled"] == len(run.site.expected_pages()), summary
    assert summary["dead_lettered"] == 0, summary
    assert losses.lost == frozenset()
    assert losses.repeats <= repeats_at_most, losses.figures
    assert losses.written_twice <= repeats_at_most, losses.figures


def _said_it_waited(run: ClusterRun) -> None:
    """The run said Redis was unavailable, that it waited, and that Redis answered again: on
    its terminal and in events.jsonl, each outage once; its workers logged it as an outage
    (a warning a try), not as an error with a traceback."""
    waited = run.stderr.find("Redis unavailable (")
    assert waited >= 0, run.stderr[-3000:]
    assert "; waiting for it" in run.stderr[waited:], run.stderr[-3000:]
    assert "Redis answers again" in run.stderr[waited:], run.stderr[-3000:]
    said = [event["kind"] for event in run.events() if event["kind"].startswith("Redis")]
    assert said, run.events()
    assert said == ["RedisUnavailable", "RedisAvailable"] * (len(said) // 2), said
    errors = [line for line in run.worker_logs().splitlines() if '"level": "error"' in line]
    assert errors == [], errors[:3]


def _name_on_first_slot(prefix: str) -> str:
    """A job name whose slot is the first of a master's (redis-cli's reshard moves those)."""
    for index in itertools.count():
        name = f"{prefix}-{index}"
        if key_slot(JobKeys(f"default.{name}").key("meta").encode()) in first_slots():
            return name
    raise AssertionError("unreachable")


def test_a_master_killed_mid_crawl_loses_no_page(
    private_redis_cluster: RedisCluster, tmp_path: Path
) -> None:
    cluster = private_redis_cluster
    with _site() as site:
        run = start_run(site, cluster, tmp_path, "failover")
        in_flight, slot = _under_way(run)
        old = cluster.kill_master(slot)
        new = cluster.promoted(slot, old)
        summary = run.finish()
        losses = run.losses()
    print(f"failover: in flight {in_flight}, {losses.figures}")
    assert new is not old
    # an ack the dead master had not replicated is lost with it: those pages come again
    _every_page(run, summary, losses, repeats_at_most=in_flight)
    _said_it_waited(run)


@pytest.mark.parametrize("how", ["redis-cli", "key-by-key"])
def test_the_jobs_slot_moved_mid_crawl_loses_no_page(
    private_redis_cluster: RedisCluster, tmp_path: Path, how: str
) -> None:
    """``redis-cli --cluster reshard`` moves this job's few dozen keys in a blink; a job
    with thousands of hosts' queues keeps its slot half moved for seconds, during which
    every script of the job is refused (TRYAGAIN: some of its keys here, some there) and
    single-key commands are redirected (ASK): the key-by-key move holds that state."""
    cluster = private_redis_cluster
    with _site() as site:
        run = start_run(site, cluster, tmp_path, _name_on_first_slot(f"move-{how}"))
        _, slot = _under_way(run)
        source = cluster.master_of(slot)
        target = next(node for node in cluster.masters() if node is not source)
        keys = int(source.cli("cluster", "countkeysinslot", str(slot)))
        before = len(run.requested())
        started = time.monotonic()
        if how == "redis-cli":
            cluster.reshard(slot, target)
        else:
            cluster.move_slot(slot, target, pause_seconds=0.1)
        moved_seconds = time.monotonic() - started
        after = len(run.requested())
        summary = run.finish()
        losses = run.losses()
    print(f"{how}: {keys} keys in {moved_seconds:.2f} s, pages {before}->{after}, {losses.figures}")
    assert cluster.master_of(slot) is target
    assert after < len(site.expected_pages()), "the crawl was over before the slot moved"
    # every key moved whole, every script ran on one node: nothing to do twice
    _every_page(run, summary, losses, repeats_at_most=0)
    if how == "key-by-key":  # seconds half moved: the run waited, and said so
        _said_it_waited(run)
        assert "a slot moving between masters" in run.stderr, run.stderr[-3000:]


def test_a_shard_stopped_for_twenty_seconds_is_waited_for(
    private_redis_cluster: RedisCluster, tmp_path: Path
) -> None:
    cluster = private_redis_cluster
    with _site() as site:
        run = start_run(site, cluster, tmp_path, "outage")
        in_flight, slot = _under_way(run)
        stopped = cluster.stop_shard(slot)
        down_at = time.monotonic()
        time.sleep(OUTAGE_SECONDS)
        assert run.process.poll() is None, "the run gave up while the shard was down"
        up_at = time.monotonic()
        cluster.restart(stopped)
        summary = run.finish()
        losses = run.losses()
        during = [r for r in site.all_requests() if down_at + 1 <= r.start <= up_at]
    print(f"outage: in flight {in_flight}, {len(during)} requests while down, {losses.figures}")
    # shorter than the leases' ttl, its data kept (SHUTDOWN syncs the AOF), no worker taken
    # for dead for the heartbeats it could not send: nothing is fetched again
    _every_page(run, summary, losses, repeats_at_most=0)
    # one partition: nothing is claimed while its shard is down (a second's grace for the
    # fetches already under way)
    assert during == []
    _said_it_waited(run)
