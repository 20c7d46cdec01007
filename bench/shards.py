"""Shards benchmark: a job's frontier on 2 partitions on 2 redis-servers against 1 on 1, one run.

    python -m bench.shards [--quick] [--json] [--nodes 1,2] [--clients N] [--rounds R]
    python -m bench.shards --quick --nodes 1,2,4,6 --rounds 1 --no-wait   # the sizing check

What a crawl asks of its frontier per page, with no fetching: claim the page, enqueue its
links, ack it. Client processes (``--clients``, each with a few concurrent loops, like
workers) claim batches, send each page's links (one new URL on a random host, so the queue
neither grows nor drains, and four navigation URLs the Bloom filter has seen) and ack, until
a deadline, through the job's frontier as a worker opens it (``Frontier.connect``: a
:class:`~crawlfleet.frontier.partitions.PartitionedFrontier` past one partition, which splits
each claim over the partitions and groups each enqueue and ack by partition, all at once).

Topology: N partitions on a loopback Redis Cluster of N masters
(crawlfleet/local/redis_cluster.py, plain redis-servers: bitmap Bloom), the job's name
chosen so each partition hashes to a node of its own (:func:`balanced_job`); 1 partition is
a cluster of one node, so both sides pay the cluster client. Each run starts a fresh cluster.

Measured per run, over a window after a warm-up: pages acked per second (Redis's own
``crawled`` counters), each server's CPU (``INFO cpu``: used_cpu_sys + used_cpu_user), the
clients' CPU, and the machine's busy share (``/proc/stat``), which together say where the
bottleneck is. Figures:

- ``two_shard_speedup``: the rate on 2 partitions / the rate on 1 (same clients);
- ``redis_cpu_per_page_us`` per partition count, and ``redis_cpu_per_page_ratio`` (2 vs 1,
  target ≤ 1.1): splitting a job must not make Redis work harder per page;
- ``redis_work_per_page_us`` and ``redis_work_per_page_ratio``: the same less each server's
  idle burn (cron, the cluster bus; sampled for 2 s before the clients start), a cost per
  node that a starved machine's low rates spread over few pages;
- ``pages_per_redis_core_second``: what one partition's Redis does with a whole core (the
  sizing figure of docs/scale.md), and ``two_shard_redis_bound_speedup`` = 2 / the CPU
  work ratio: the speedup when each server has a core of its own, which a machine whose cores
  the clients (and its other users) share cannot show in wall-clock rates;
- ``wait_ack_cost``: on a master with one replica (two redis-servers, REPLICAOF), the rate
  with ``frontier.waitReplicas: 1`` (the enqueue returns once its links are on the replica:
  crawlfleet/frontier/replicas.py) / the rate without, same pair, same clients;
- ``local_dedup_hit_rate``: bench/dedup.py's run of the navigation-heavy site (``--no-dedup``
  leaves it out).

Runs alternate (1, 2, 1, 2, ...) so drift on a shared machine hits both; the medians are kept.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from redis.crc import key_slot

from bench.dedup import measure as measure_dedup
from crawlfleet.frontier import (
    CanonicalURL,
    Frontier,
    FrontierSettings,
    JobKeys,
    Link,
    canonicalize,
)
from crawlfleet.local.redis_cluster import LocalRedisCluster, slot_ranges
from crawlfleet.local.redis_server import RedisServer
from tests.support.replicated import ReplicatedPair
from tests.support.specs import frontier_settings

HOSTS = 2000
QUEUED_PER_HOST = 8
NAV_URLS = 200
NEW_LINKS_PER_PAGE = 1
SEEN_LINKS_PER_PAGE = 4
BATCH = 50  # pages a loop claims at once (the facade splits it over the partitions)
LOOPS_PER_CLIENT = 4
IDLE_SAMPLE_SECONDS = 2.0
_SPEC = {
    "dedup": {"capacity": 2_000_000},
    "concurrency": {"perHost": 8, "hostDelaySeconds": 0.0},
    "lease": {"ttlSeconds": 300.0},
}


def host_url(host: int, path: str) -> CanonicalURL:
    return canonicalize(f"http://host{host}.bench/{path}")


@dataclass(frozen=True)
class RunSpec:
    """One measured run: the job's frontier, who drives it, for how long."""

    url: str  # a loopback cluster's (partitions on its nodes), or one Redis's
    job_id: str
    shards: int
    wait_replicas: int
    clients: int
    warmup_seconds: float
    measure_seconds: float
    batch: int = BATCH

    def settings(self) -> FrontierSettings:
        frontier = {"shards": self.shards, "waitReplicas": self.wait_replicas}
        return frontier_settings(self.job_id, {**_SPEC, "frontier": frontier})


def balanced_job(nodes: int) -> str:
    """A job id whose ``nodes`` partitions hash to ``nodes`` different nodes of a loopback
    cluster (slots split evenly, as crawlfleet.local.redis_cluster does): what a cluster's
    operator gets by moving slots, found here by trying names."""
    ranges = slot_ranges(nodes)
    for number in range(100_000):
        job_id = f"bench.shards-{number}"
        owners = set()
        for k in range(nodes):
            slot = key_slot(JobKeys(job_id, k).key("meta").encode())
            owners.add(next(i for i, (low, high) in enumerate(ranges) if low <= slot <= high))
        if len(owners) == nodes:
            return job_id
    raise RuntimeError(f"no job id spreads {nodes} partitions over {nodes} nodes")


def page_links(client_index: int, serial: int, parent: str, nav: Sequence[Link]) -> list[Link]:
    """A page's links as the frontier gets them: one new URL on a random host, and
    navigation URLs it has seen."""
    new = host_url(hash((client_index, serial)) % HOSTS, f"p/{client_index}/{serial}")
    seen = (nav[(serial + j * 37) % NAV_URLS] for j in range(SEEN_LINKS_PER_PAGE))
    return [Link(new, 1, parent), *seen]


def nav_links() -> list[Link]:
    return [Link(host_url(i % HOSTS, f"nav/{i}"), 1, "") for i in range(NAV_URLS)]


async def _drive(client_index: int, spec: RunSpec, start_at: float) -> dict[str, float]:
    """One client process's loops, until the run's deadline; its CPU and pages in the window."""
    frontier = await Frontier.connect(spec.url, spec.settings())
    nav = nav_links()
    window_start = start_at + spec.warmup_seconds
    stop_at = window_start + spec.measure_seconds
    pages = 0
    serial = 0

    async def loop(index: int) -> None:
        nonlocal pages, serial
        worker = f"bench-{client_index}-{index}"
        while time.time() < stop_at:
            leases = await frontier.claim(worker, spec.batch)
            if not leases:
                await asyncio.sleep(0.001)
                continue
            links: list[Link] = []
            for lease in leases:
                serial += 1
                links += page_links(client_index, serial, lease.url, nav)
            await frontier.enqueue(links)  # waits for the replicas when the job asks
            await frontier.ack(worker, [lease.lease_id for lease in leases])
            pages += len(leases)

    async def sample() -> dict[str, float]:
        await asyncio.sleep(max(0.0, window_start - time.time()))
        cpu, done = time.process_time(), pages
        await asyncio.sleep(max(0.0, stop_at - time.time()))
        return {"cpu_seconds": time.process_time() - cpu, "pages": pages - done}

    try:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        loops = asyncio.gather(*(loop(i) for i in range(LOOPS_PER_CLIENT)))
        window, _ = await asyncio.gather(sample(), loops)
        return window
    finally:
        await frontier.aclose()


def _client_main(
    client_index: int,
    spec: RunSpec,
    barrier: Barrier,
    starts: multiprocessing.Queue[float],
    results: multiprocessing.Queue[dict[str, float]],
) -> None:
    barrier.wait()  # every client imported and ready: the parent names the start
    start_at = starts.get()
    window = asyncio.run(_drive(client_index, spec, start_at))
    results.put(window)


async def _prefill(spec: RunSpec) -> None:
    """Create the job's frontier and queue every host's URLs and the navigation URLs."""
    frontier = await Frontier.connect(spec.url, spec.settings())
    try:
        links = [
            Link(host_url(h, f"q/{i}"), 1, "") for i in range(QUEUED_PER_HOST) for h in range(HOSTS)
        ]
        links += nav_links()
        for i in range(0, len(links), 5000):
            await frontier.enqueue(links[i : i + 5000])
        # Load the claim and ack scripts on every node now: a fresh node answers NOSCRIPT,
        # and redis-py's cluster client then sends SCRIPT LOAD to every node at once, which
        # from sixteen loops at the start overflows its per-node pool (MaxConnectionsError:
        # the cluster client's pools do not wait for a free connection).
        leases = await frontier.claim("bench-warmup", 1)
        await frontier.ack("bench-warmup", [lease.lease_id for lease in leases])
    finally:
        await frontier.aclose()


def _redis_cpu_seconds(server: RedisServer) -> float:
    text = server.call("INFO", "cpu")
    assert isinstance(text, str)
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return float(fields["used_cpu_sys"]) + float(fields["used_cpu_user"])


@dataclass(frozen=True)
class Sample:
    """One look at the run: when, pages acked, each server's CPU, the machine's jiffies."""

    at: float
    crawled: int
    redis_cpu: list[float]
    busy: float
    total: float


async def _observe(
    spec: RunSpec, servers: Sequence[RedisServer], start_at: float
) -> tuple[Sample, Sample]:
    """The window's two samples, each taken in a few milliseconds: the frontier is opened
    before the window (opening a partitioned one takes a while on a loaded machine, and a
    slow first look would stretch the pages over a shorter measured time)."""
    frontier = await Frontier.connect(spec.url, spec.settings())

    async def sample() -> Sample:
        crawled = (await frontier.stats()).crawled
        cpu = [_redis_cpu_seconds(server) for server in servers]
        busy, total = _machine_busy()
        return Sample(time.perf_counter(), crawled, cpu, busy, total)

    try:
        window_start = start_at + spec.warmup_seconds
        await asyncio.sleep(max(0.0, window_start - time.time()))
        first = await sample()
        await asyncio.sleep(max(0.0, window_start + spec.measure_seconds - time.time()))
        return first, await sample()
    finally:
        await frontier.aclose()


def _machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat's first line."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def measure(spec: RunSpec, servers: Sequence[RedisServer]) -> dict[str, Any]:
    """Run the clients against the prefilled frontier; the window's figures (``servers``:
    the Redis processes whose CPU counts)."""
    asyncio.run(_prefill(spec))
    # What the servers burn with no client (cron, a cluster's gossip): a cost per node, not
    # per page, which a starved machine's low rates would otherwise spread over the pages.
    idle0 = [_redis_cpu_seconds(server) for server in servers]
    time.sleep(IDLE_SAMPLE_SECONDS)
    idle = [
        (_redis_cpu_seconds(server) - a) / IDLE_SAMPLE_SECONDS
        for server, a in zip(servers, idle0, strict=True)
    ]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(spec.clients + 1)
    starts: multiprocessing.Queue[float] = context.Queue()
    results: multiprocessing.Queue[dict[str, float]] = context.Queue()
    processes = [
        context.Process(target=_client_main, args=(i, spec, barrier, starts, results), daemon=True)
        for i in range(spec.clients)
    ]
    for process in processes:
        process.start()
    try:
        barrier.wait(timeout=120)
        start_at = time.time() + 0.2
        for _ in processes:
            starts.put(start_at)
        first, last = asyncio.run(_observe(spec, servers, start_at))
        windows = [results.get(timeout=120) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    seconds = last.at - first.at
    pages = last.crawled - first.crawled
    redis_cpu = [b - a for a, b in zip(first.redis_cpu, last.redis_cpu, strict=True)]
    client_cpu = sum(w["cpu_seconds"] for w in windows)
    return {
        "partitions": spec.shards,
        "batch": spec.batch,
        "clients": spec.clients,
        "wait_replicas": spec.wait_replicas,
        "pages_per_s": pages / seconds,
        "pages": pages,
        "redis_cpu_per_page_us": sum(redis_cpu) / pages * 1e6,
        # the same, less each server's idle burn over the window
        "redis_work_per_page_us": (sum(redis_cpu) - sum(idle) * seconds) / pages * 1e6,
        "redis_idle_core_share": [round(x, 4) for x in idle],
        "client_cpu_per_page_us": client_cpu / pages * 1e6,
        # each server's share of one core over the window (1.0: that Redis is saturated)
        "redis_core_share": [round(c / seconds, 3) for c in redis_cpu],
        # the clients' own windows are measure_seconds long, by their clocks
        "clients_cores": round(client_cpu / spec.measure_seconds, 3),
        "machine_busy_share": round((last.busy - first.busy) / (last.total - first.total), 3),
    }


def _print_run(label: str, run: dict[str, Any]) -> None:
    print(
        f"  {label:<24} {run['pages_per_s']:>9,.0f} pages/s  Redis "
        f"{run['redis_cpu_per_page_us']:5.1f} µs/page ({run['redis_core_share']} core; "
        f"{run['redis_work_per_page_us']:5.1f} over idle {run['redis_idle_core_share']}), "
        f"clients {run['client_cpu_per_page_us']:5.1f} µs/page ({run['clients_cores']} cores), "
        f"machine busy {run['machine_busy_share']:.0%}"
    )


def bench_partitions(
    tmp: Path,
    nodes: Sequence[int],
    clients: int,
    rounds: int,
    warmup: float,
    window: float,
    batch: int = BATCH,
) -> dict[int, list[dict[str, Any]]]:
    """N partitions on a loopback cluster of N nodes, for each N, alternating."""
    print(
        f"claim+enqueue+ack, {clients} client processes x {LOOPS_PER_CLIENT} loops, "
        f"claims of {batch}:"
    )
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in nodes}
    jobs = {n: balanced_job(n) for n in nodes}
    for round_ in range(rounds):
        for n in nodes:
            with LocalRedisCluster(tmp / f"r{round_}-n{n}", n, appendonly=False) as cluster:
                spec = RunSpec(cluster.url, jobs[n], n, 0, clients, warmup, window, batch)
                run = measure(spec, cluster.nodes)
            runs[n].append(run)
            _print_run(f"{n} partition(s), round {round_ + 1}", run)
    return runs


def bench_wait(
    tmp: Path, clients: int, rounds: int, warmup: float, window: float
) -> dict[str, list[dict[str, Any]]]:
    """One partition on a master with a replica: frontier.waitReplicas 1 against 0."""
    print("one partition on a master with one replica, ack after WAIT 1 vs plain ack:")
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "wait": []}
    for round_ in range(rounds):
        for way, replicas in (("plain", 0), ("wait", 1)):
            with ReplicatedPair(tmp / f"pair-{round_}-{way}") as pair:
                spec = RunSpec(pair.url, "bench.shards", 1, replicas, clients, warmup, window)
                run = measure(spec, [pair.master])
            runs[way].append(run)
            _print_run(f"{way}, round {round_ + 1}", run)
    return runs


def median(runs: Sequence[dict[str, Any]], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def summarize(
    partitions: dict[int, list[dict[str, Any]]], waits: dict[str, list[dict[str, Any]]] | None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n, runs in partitions.items():
        out[f"pages_per_s_{n}"] = median(runs, "pages_per_s")
        out[f"redis_cpu_per_page_us_{n}"] = median(runs, "redis_cpu_per_page_us")
        out[f"redis_work_per_page_us_{n}"] = median(runs, "redis_work_per_page_us")
        out[f"client_cpu_per_page_us_{n}"] = median(runs, "client_cpu_per_page_us")
    if 1 in partitions:
        out["pages_per_redis_core_second"] = 1e6 / out["redis_work_per_page_us_1"]
        for n in partitions:
            if n > 1:
                speedup = out[f"pages_per_s_{n}"] / out["pages_per_s_1"]
                cpu = out[f"redis_cpu_per_page_us_{n}"] / out["redis_cpu_per_page_us_1"]
                key = "two_shard" if n == 2 else f"{n}_shard"
                out[f"{key}_speedup"] = speedup
                out[f"redis_cpu_per_page_ratio{'' if n == 2 else f'_{n}'}"] = cpu
                work = out[f"redis_work_per_page_us_{n}"] / out["redis_work_per_page_us_1"]
                out[f"redis_work_per_page_ratio{'' if n == 2 else f'_{n}'}"] = work
                # n servers each given a core of their own: a bound, not a measurement
                out[f"{key}_redis_bound_speedup"] = n / work
    if waits:
        out["wait_pages_per_s"] = median(waits["wait"], "pages_per_s")
        out["plain_pages_per_s"] = median(waits["plain"], "pages_per_s")
        out["wait_ack_cost"] = out["wait_pages_per_s"] / out["plain_pages_per_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shards", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 6 s windows")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--nodes", default="1,2", help="partition counts (one server each)")
    parser.add_argument("--clients", type=int, default=4, help="client processes per run")
    parser.add_argument("--no-wait", action="store_true", help="skip the WAIT cost runs")
    parser.add_argument("--rounds", type=int, help="rounds of each run (2 quick, else 3)")
    parser.add_argument("--no-dedup", action="store_true", help="skip bench.dedup's run")
    parser.add_argument("--batch", type=int, default=BATCH, help="pages a loop claims at once")
    args = parser.parse_args(argv)
    nodes = [int(x) for x in args.nodes.split(",")]
    rounds, warmup, window = (2, 2.0, 6.0) if args.quick else (3, 3.0, 15.0)
    rounds = args.rounds or rounds
    started = time.perf_counter()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
        partitions = bench_partitions(
            Path(tmp), nodes, args.clients, rounds, warmup, window, args.batch
        )
        waits = (
            None if args.no_wait else bench_wait(Path(tmp), args.clients, rounds, warmup, window)
        )
    results = summarize(partitions, waits)
    if not args.no_dedup:
        print("the workers' local layer of dedup (bench.dedup, navigation-heavy site):")
        dedup = measure_dedup(quick=args.quick)
        print(f"  local_dedup_hit_rate {dedup['local_dedup_hit_rate']}")
        results["local_dedup_hit_rate"] = dedup["local_dedup_hit_rate"]
        results["dedup"] = dedup
    results["runs"] = {
        **{f"partitions_{n}": runs for n, runs in partitions.items()},
        **({f"wait_{way}": runs for way, runs in waits.items()} if waits else {}),
    }
    results["setup"] = {
        "clients": args.clients,
        "loops_per_client": LOOPS_PER_CLIENT,
        "batch": args.batch,
        "hosts": HOSTS,
        "links_per_page": {"new": NEW_LINKS_PER_PAGE, "seen": SEEN_LINKS_PER_PAGE},
        "topology": "N partitions (PartitionedFrontier) on a loopback cluster of N masters",
        "quick": args.quick,
    }
    results["machine"] = {
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "python": platform.python_version(),
    }
    results["elapsed_s"] = time.perf_counter() - started
    ends = ("speedup", "ratio", "cost", "hit_rate")
    line = [f"{k} {results[k]:.2f}" for k in sorted(results) if k.endswith(ends)]
    print("ratios: " + ", ".join(line))
    if args.json:
        print(json.dumps(results, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
