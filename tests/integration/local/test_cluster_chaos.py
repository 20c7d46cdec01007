"""A local crawl on a real Redis Cluster while the cluster is broken under it.

Six redis-servers on loopback, three masters with a replica each (tests/support/redis_cluster.py),
a ``crawlfleet run`` of the test site pointed at them (``redis+cluster://``) with the job's
frontier in eight partitions spread over the three masters (``frontier.shards: 8``), and one
thing done mid-crawl: the master holding the job's home partition killed (its replica takes
over), the home's slot moved to another master (``redis-cli --cluster reshard``, or key by
key as a big job's slot moves), or a master stopped with its replica for twenty seconds (no
failover: its slots are served by nobody; one partition's frontier waits for it whole, eight
partitions' crawl goes on with the hosts of the other masters). Each time the crawl
completes with every page of the site, fetched again at most as often as pages were in
flight when it broke (an ack the dead master had not replicated is lost with it), and the
run says what it waited for. What happened is read from outside: the site's request log,
the run's output, its lines and events.jsonl.
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from redis.crc import key_slot

from crawlfleet.frontier import JobKeys
from crawlfleet.testsite import RequestRecord, SiteConfig, TestSite
from tests.support.cluster_runs import ClusterRun, Losses, start_run
from tests.support.redis_cluster import ClusterNode, RedisCluster, first_slots
from tests.support.runs import no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

#: The job's frontier partitions: more than the masters, as a cluster grows under them.
SHARDS = 8
#: How long the shard is down in the outage tests: longer than the workers' deadAfterSeconds
#: (cluster_runs.py: 10 s), so the outage outlasts what a worker's silence is allowed.
OUTAGE_SECONDS = 30.0
#: Masters in the fixture's cluster (``redis-cli --cluster create`` deals them the slots).
MASTERS = len(first_slots())


def _site() -> TestSite:
    """Hosts enough for every partition, pages enough that the crawl is well under way, not
    over, when the test breaks things."""
    return TestSite(SiteConfig(hosts=12, pages_per_host=25, hostile=False, latency_seconds=0.03))


def _slots(job_id: str, shards: int) -> list[int]:
    """The hash slot of each partition of the job, the home's first."""
    return [key_slot(JobKeys(job_id, partition=k).key("meta").encode()) for k in range(shards)]


def _job_name(prefix: str, shards: int, *, home_first_slot: bool = False) -> str:
    """A job name whose partitions are spread over every master (redis-cli deals the slots in
    equal runs); with ``home_first_slot``, its home partition on the first slot of a master's
    (redis-cli's reshard moves those)."""
    bounds = [*first_slots(), 16384]
    for index in itertools.count():
        name = f"{prefix}-{index}"
        slots = _slots(f"default.{name}", shards)
        masters = {next(m for m in range(MASTERS) if slot < bounds[m + 1]) for slot in slots}
        if home_first_slot and slots[0] not in first_slots():
            continue
        if len(masters) == min(shards, MASTERS):
            return name
    raise AssertionError("unreachable")


def _masters_of(run: ClusterRun) -> list[ClusterNode]:
    """The master serving each partition now, the home's first."""
    return [run.cluster.master_of(slot) for slot in _slots(run.job_id, run.shards)]


def _master_to_stop(run: ClusterRun, masters: list[ClusterNode]) -> ClusterNode:
    """Of the masters that do not hold the home, the one whose partitions hold the most of
    the site's hosts (they hash with their random ports: a master's two or three partitions
    held none of twelve in one CI run of eight)."""
    others = [master for master in masters if master is not masters[0]]

    def hosts_on(master: ClusterNode) -> int:
        return len(run.hosts_in({k for k, m in enumerate(masters) if m is master}))

    return max(sorted(others, key=lambda m: m.port), key=hosts_on)


def _under_way(run: ClusterRun) -> int:
    """Once a third of the site is fetched: the leases in flight."""
    run.wait_requested(len(run.site.expected_pages()) // 3)
    return run.leased()


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
    # and no worker died of it, nor was taken for dead for the heartbeats it could not send
    lost = [e for e in run.events() if e["kind"] in ("LeasesRequeued", "WorkerReplaced")]
    assert lost == [], lost


def test_the_home_partitions_master_killed_mid_crawl_loses_no_page(
    private_redis_cluster: RedisCluster, tmp_path: Path
) -> None:
    cluster = private_redis_cluster
    with _site() as site:
        run = start_run(site, cluster, tmp_path, _job_name("failover", SHARDS), shards=SHARDS)
        in_flight = _under_way(run)
        home_slot = _slots(run.job_id, SHARDS)[0]
        old = cluster.kill_master(home_slot)
        new = cluster.promoted(home_slot, old)
        summary = run.finish()
        losses = run.losses()
    print(f"failover: in flight {in_flight}, {losses.figures}")
    assert new is not old
    assert old not in _masters_of(run)  # every partition it held is on its replica now
    # an ack the dead master had not replicated is lost with it: those pages come again
    _every_page(run, summary, losses, repeats_at_most=in_flight)
    _said_it_waited(run)


@pytest.mark.parametrize("how", ["redis-cli", "key-by-key"])
def test_the_home_partitions_slot_moved_mid_crawl_loses_no_page(
    private_redis_cluster: RedisCluster, tmp_path: Path, how: str
) -> None:
    """``redis-cli --cluster reshard`` moves a partition's few dozen keys in a blink; a job
    with thousands of hosts' queues keeps its slot half moved for seconds, during which
    every script of the partition is refused (TRYAGAIN: some of its keys here, some there)
    and single-key commands are redirected (ASK): the key-by-key move holds that state."""
    cluster = private_redis_cluster
    name = _job_name(f"move-{how}", SHARDS, home_first_slot=True)
    with _site() as site:
        run = start_run(site, cluster, tmp_path, name, shards=SHARDS)
        _under_way(run)
        home_slot = _slots(run.job_id, SHARDS)[0]
        source = cluster.master_of(home_slot)
        target = next(node for node in cluster.masters() if node is not source)
        keys = int(source.cli("cluster", "countkeysinslot", str(home_slot)))
        before = len(run.requested())
        started = time.monotonic()
        if how == "redis-cli":
            cluster.reshard(home_slot, target)
        else:
            cluster.move_slot(home_slot, target, pause_seconds=0.1)
        moved_seconds = time.monotonic() - started
        after = len(run.requested())
        summary = run.finish()
        losses = run.losses()
    print(f"{how}: {keys} keys in {moved_seconds:.2f} s, pages {before}->{after}, {losses.figures}")
    assert cluster.master_of(home_slot) is target
    # the move began mid-crawl (the other partitions' hosts may be crawled to their end
    # while the home's slot is half moved: only the home's scripts are refused)
    assert before < len(site.expected_pages()), "the crawl was over before the slot moved"
    # every key moved whole, every script ran on one node: nothing to do twice
    _every_page(run, summary, losses, repeats_at_most=0)
    if how == "key-by-key":  # seconds half moved: whoever was refused waited, and said so
        _said_the_slot_moved(run)


def _said_the_slot_moved(run: ClusterRun) -> None:
    """Some of the home's scripts were refused while its slot was half moved: the workers
    refused said why (a warning, no error) and went on; the steering loop, if a read of its
    was refused too (its reads are mostly single keys, which redirect), said it waited and
    that Redis answered again, each time once."""
    logs = run.worker_logs()
    assert "a slot moving between masters" in logs + run.stderr, logs[-3000:]
    errors = [line for line in logs.splitlines() if '"level": "error"' in line]
    assert errors == [], errors[:3]
    said = [event["kind"] for event in run.events() if event["kind"].startswith("Redis")]
    assert said == ["RedisUnavailable", "RedisAvailable"] * (len(said) // 2), said
    if said:
        assert "a slot moving between masters" in run.stderr, run.stderr[-3000:]
    lost = [e for e in run.events() if e["kind"] in ("LeasesRequeued", "WorkerReplaced")]
    assert lost == [], lost


def _host(url: str) -> str:
    return urlsplit(url).netloc


def _requests_while_down(
    site: TestSite, hosts: set[str], down_at: float, up_at: float
) -> list[RequestRecord]:
    """Requests to ``hosts`` that began while the shard was down (a second's grace for the
    fetches already under way when it stopped)."""
    return [
        record
        for record in site.all_requests()
        if record.host in hosts
        and down_at + 1 <= record.start <= up_at
        and record.path != "/robots.txt"
    ]


def _reachable_elsewhere(site: TestSite, hosts: set[str], until: float) -> set[str]:
    """The pages of ``hosts`` a crawl could reach by ``until`` without the other hosts'
    partitions: linked from a page fetched by then, or through pages of ``hosts`` from one
    (a page of the stopped hosts that nothing else links is no page the outage may crawl)."""
    graph = site.graph
    ref_of = {graph.page_url(ref): ref for ref in graph.expected_refs()}
    fetched = {f"http://{r.host}{r.path}" for r in site.all_requests() if r.start <= until}
    frontier = [ref for url, ref in ref_of.items() if url in fetched]
    reached = {seed for seed in graph.seeds() if _host(seed) in hosts}
    frontier += [ref_of[seed] for seed in reached]
    while frontier:
        ref = frontier.pop()
        for target in (*graph.links(ref), *graph.navigation(ref[0])):
            url = graph.page_url(target)
            if _host(url) in hosts and url not in reached:
                reached.add(url)
                frontier.append(target)
    return reached


def _said_which_partitions_waited(run: ClusterRun, partitions: set[int]) -> None:
    """The run named the partitions that did not answer (PartitionUnavailable, not Redis as a
    whole), once, and said when they answered again; the workers spooled the links bound for
    them and replayed every one; no worker died of it or was taken for dead."""
    said = [e for e in run.events() if e["kind"] in ("PartitionUnavailable", "RedisAvailable")]
    assert [e["kind"] for e in said] == ["PartitionUnavailable", "RedisAvailable"], said
    message = said[0]["message"]
    named = {int(k) for k in re.findall(r"(\d+) \([^)]*#\d+\)", message)}
    assert named == partitions, message
    assert "the workers go on crawling the other partitions' hosts" in message, message
    assert "frontier partition" in run.stderr, run.stderr[-3000:]
    logs = run.worker_logs()
    spooled = sum(int(n) for n in re.findall(r"(\d+) link\(s\) spooled", logs))
    replayed = sum(int(n) for n in re.findall(r"replayed (\d+) spooled link", logs))
    assert spooled > 0, "no link was spooled for the partitions that were down"
    assert replayed == spooled, (spooled, replayed)
    errors = [line for line in logs.splitlines() if '"level": "error"' in line]
    assert errors == [], errors[:3]
    lost = [e for e in run.events() if e["kind"] in ("LeasesRequeued", "WorkerReplaced")]
    assert lost == [], lost


@pytest.mark.parametrize("shards", [1, SHARDS])
def test_a_shard_stopped_for_thirty_seconds_is_waited_for(
    private_redis_cluster: RedisCluster, tmp_path: Path, shards: int
) -> None:
    """One partition: the job's only master stopped, nothing is claimed until it is back.
    Eight: a master holding some partitions (not the home, whose heartbeats and output
    ledger every worker needs) stopped, and the hosts of the partitions on the other masters
    are crawled meanwhile, to the end of the outage: the links bound for the stopped ones
    wait in the workers' spools (their pages held), and are replayed once it is back."""
    cluster = private_redis_cluster
    with _site() as site:
        run = start_run(site, cluster, tmp_path, _job_name("outage", shards), shards=shards)
        masters = _masters_of(run)
        down = masters[0] if shards == 1 else _master_to_stop(run, masters)
        down_partitions = {k for k, master in enumerate(masters) if master is down}
        stopped_hosts = run.hosts_in(down_partitions)
        other_hosts = set(site.hosts) - stopped_hosts
        assert stopped_hosts, "no host lives on the master the test stops"
        in_flight = _under_way(run)
        stopped = cluster.stop_shard(_slots(run.job_id, shards)[min(down_partitions)])
        down_at = time.monotonic()
        time.sleep(OUTAGE_SECONDS)
        assert run.process.poll() is None, "the run gave up while the shard was down"
        up_at = time.monotonic()
        cluster.restart(stopped)
        summary = run.finish()
        losses = run.losses()
        there = _requests_while_down(site, stopped_hosts, down_at, up_at)
        elsewhere = _requests_while_down(site, other_hosts, down_at, up_at)
        expected_elsewhere = _reachable_elsewhere(site, other_hosts, up_at)
        done_elsewhere = {
            f"http://{r.host}{r.path}"
            for r in site.all_requests()
            if r.host in other_hosts and r.start <= up_at and r.path != "/robots.txt"
        }
    late = [r for r in elsewhere if r.start >= up_at - OUTAGE_SECONDS / 3]
    print(
        f"outage of {len(down_partitions)} of {shards} partitions: in flight {in_flight},"
        f" requests while down: {len(there)} there, {len(elsewhere)} elsewhere"
        f" ({len(late)} in its last third), {losses.figures}"
    )
    # its data kept (SHUTDOWN syncs the AOF), no worker taken for dead for the heartbeats it
    # could not send: nothing is fetched again
    _every_page(run, summary, losses, repeats_at_most=0)
    assert there == []  # nothing claimed from partitions nobody served
    if shards == 1:
        _said_it_waited(run)
        return
    # the other masters' hosts are crawled to the end of the outage, not until the pages
    # whose links could not be written fill the workers' buffers
    missed = expected_elsewhere - done_elsewhere
    assert late or not missed, (len(elsewhere), sorted(missed))
    _said_which_partitions_waited(run, down_partitions)


def test_a_full_link_spool_stops_claims_and_loses_nothing(
    private_redis_cluster: RedisCluster, tmp_path: Path
) -> None:
    """The workers' link spools bounded to a few links: a master holding some partitions
    stopped, the spools fill, the workers stop claiming and the run says so (a second
    PartitionUnavailable, naming the full spools); once it is back every page is crawled
    once, none lost."""
    cluster = private_redis_cluster
    with _site() as site:
        run = start_run(
            site,
            cluster,
            tmp_path,
            _job_name("spool", SHARDS),
            shards=SHARDS,
            env={"CRAWLFLEET_LINK_SPOOL_BYTES": "600"},
        )
        masters = _masters_of(run)
        down = _master_to_stop(run, masters)
        down_partitions = {k for k, master in enumerate(masters) if master is down}
        _under_way(run)
        stopped = cluster.stop_shard(_slots(run.job_id, SHARDS)[min(down_partitions)])
        time.sleep(OUTAGE_SECONDS / 2)
        assert run.process.poll() is None, "the run gave up while the shard was down"
        cluster.restart(stopped)
        summary = run.finish()
        losses = run.losses()
    _every_page(run, summary, losses, repeats_at_most=0)
    said = [e["message"] for e in run.events() if e["kind"] == "PartitionUnavailable"]
    assert any("full link spool and stopped claiming" in m for m in said), said
    assert "link spool full" in run.worker_logs()
