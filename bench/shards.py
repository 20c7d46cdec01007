"""Shards benchmark: a job's frontier on 2 partitions on 2 redis-servers against 1 on 1, one run.

    python -m bench.shards [--quick] [--json] [--nodes 1,2] [--clients N]

What a crawl asks of its frontier per page, with no fetching: claim the page, enqueue its
links, ack it. Client processes (``--clients``, each with a few concurrent loops, like
workers) claim batches, send each page's links (one new URL on a random host, so the queue
neither grows nor drains, and four navigation URLs the Bloom filter has seen) and ack, until
a deadline. The job's hosts are split over the partitions by ``crc32(host) % N`` (the
contract's ``partition_of``); a batch's claims, enqueues and acks go to each partition
concurrently, grouped by partition.

Topology: N plain redis-servers (bitmap Bloom), one partition each, each partition driven as a
:class:`~crawlfleet.frontier.Frontier` of its own on its own server (one client per server),
which is the Redis-side work a partitioned frontier does. Each run starts fresh servers.

Measured per run, over a window after a warm-up: pages acked per second (Redis's own
``crawled`` counters), each server's CPU (``INFO cpu``: used_cpu_sys + used_cpu_user), the
clients' CPU, and the machine's busy share (``/proc/stat``), which together say where the
bottleneck is. Figures:

- ``two_shard_speedup``: the rate on 2 partitions / the rate on 1 (same clients);
- ``redis_cpu_per_page_us`` per partition count, and ``redis_cpu_per_page_ratio`` (2 vs 1,
  target ≤ 1.1): splitting a job must not make Redis work harder per page;
- ``pages_per_redis_core_second``: what one partition's Redis does with a whole core (the
  sizing figure of docs/scale.md), and ``two_shard_redis_bound_speedup`` = 2 / the CPU
  ratio: the speedup when each server has a core of its own, which a machine whose cores
  the clients (and its other users) share cannot show in wall-clock rates;
- ``wait_ack_cost``: on a master with one replica, the rate with ``WAIT 1`` before each batch's
  ack (crawlfleet/frontier/replicas.py) / the rate without, same pair, same clients.

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
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from crawlfleet.frontier import CanonicalURL, Frontier, Lease, Link, canonicalize, host_of
from crawlfleet.frontier.connection import connect
from crawlfleet.frontier.replicas import wait_for_replicas
from crawlfleet.local.redis_server import RedisServer
from tests.support.replicated import ReplicatedPair
from tests.support.specs import frontier_settings

JOB_ID = "bench.shards"
HOSTS = 2000
QUEUED_PER_HOST = 8
NAV_URLS = 200
NEW_LINKS_PER_PAGE = 1
SEEN_LINKS_PER_PAGE = 4
BATCH = 50  # pages a loop claims at once (split over the partitions)
LOOPS_PER_CLIENT = 4
WAIT_TIMEOUT_MS = 2000
_SPEC = {
    "dedup": {"capacity": 2_000_000},
    "concurrency": {"perHost": 8, "hostDelaySeconds": 0.0},
    "lease": {"ttlSeconds": 300.0},
}


def partition_of(host: str, shards: int) -> int:
    """The contract's partition of a host (keys.partition_of once part `partitions` lands)."""
    return 0 if shards == 1 else zlib.crc32(host.encode()) % shards


def host_url(host: int, path: str) -> CanonicalURL:
    return canonicalize(f"http://host{host}.bench/{path}")


@dataclass(frozen=True)
class RunSpec:
    """One measured run: where the partitions are, who drives them, for how long."""

    urls: tuple[str, ...]  # one Redis URL per partition
    clients: int
    wait_replicas: int
    warmup_seconds: float
    measure_seconds: float


class SplitFrontiers:
    """The job's partitions as one frontier: claim, enqueue and ack grouped by partition and
    sent concurrently, as a partitioned frontier does."""

    def __init__(self, partitions: Sequence[Frontier], wait_replicas: int) -> None:
        self.partitions = partitions
        self.wait_replicas = wait_replicas
        self._start = 0

    async def claim(self, worker: str, count: int) -> list[tuple[int, Lease]]:
        n = len(self.partitions)
        self._start = (self._start + 1) % n
        shares = [count // n + (1 if (i - self._start) % n < count % n else 0) for i in range(n)]
        got = await asyncio.gather(
            *(p.claim(worker, share) for p, share in zip(self.partitions, shares, strict=True))
        )
        return [(k, lease) for k, leases in enumerate(got) for lease in leases]

    async def enqueue(self, links: Sequence[Link]) -> None:
        n = len(self.partitions)
        groups: list[list[Link]] = [[] for _ in range(n)]
        for link in links:
            groups[partition_of(host_of(link.url), n)].append(link)
        touched = [k for k in range(n) if groups[k]]
        await asyncio.gather(*(self.partitions[k].enqueue(groups[k]) for k in touched))
        if self.wait_replicas:
            await asyncio.gather(
                *(
                    wait_for_replicas(
                        self.partitions[k].client,
                        self.partitions[k].keys.key("meta"),
                        self.wait_replicas,
                        WAIT_TIMEOUT_MS,
                    )
                    for k in touched
                )
            )

    async def ack(self, worker: str, leases: Sequence[tuple[int, Lease]]) -> None:
        groups: list[list[str]] = [[] for _ in self.partitions]
        for k, lease in leases:
            groups[k].append(lease.lease_id)
        await asyncio.gather(
            *(self.partitions[k].ack(worker, ids) for k, ids in enumerate(groups) if ids)
        )


async def _drive(client_index: int, spec: RunSpec, start_at: float) -> dict[str, float]:
    """One client process's loops, until the run's deadline; its CPU and pages in the window."""
    frontiers = [await Frontier.connect(url, frontier_settings(JOB_ID, _SPEC)) for url in spec.urls]
    job = SplitFrontiers(frontiers, spec.wait_replicas)
    nav = [Link(host_url(i % HOSTS, f"nav/{i}"), 1, "") for i in range(NAV_URLS)]
    window_start = start_at + spec.warmup_seconds
    stop_at = window_start + spec.measure_seconds
    pages = 0
    serial = 0

    async def loop(index: int) -> None:
        nonlocal pages, serial
        worker = f"bench-{client_index}-{index}"
        while time.time() < stop_at:
            leases = await job.claim(worker, BATCH)
            if not leases:
                await asyncio.sleep(0.001)
                continue
            links: list[Link] = []
            for _, lease in leases:
                serial += 1
                links.append(
                    Link(
                        host_url(
                            hash((client_index, serial)) % HOSTS, f"p/{client_index}/{serial}"
                        ),
                        1,
                        lease.url,
                    )
                )
                links += (nav[(serial + j * 37) % NAV_URLS] for j in range(SEEN_LINKS_PER_PAGE))
            await job.enqueue(links)
            await job.ack(worker, leases)
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
        for frontier in frontiers:
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


async def _prefill(urls: Sequence[str]) -> None:
    """Open each partition and queue its hosts' URLs and the navigation URLs (seen later)."""
    n = len(urls)
    for k, url in enumerate(urls):
        frontier = await Frontier.connect(url, frontier_settings(JOB_ID, _SPEC))
        try:
            mine = [h for h in range(HOSTS) if partition_of(f"host{h}.bench", n) == k]
            links = [
                Link(host_url(h, f"q/{i}"), 1, "") for i in range(QUEUED_PER_HOST) for h in mine
            ]
            links += (
                Link(host_url(i % HOSTS, f"nav/{i}"), 1, "")
                for i in range(NAV_URLS)
                if partition_of(f"host{i % HOSTS}.bench", n) == k
            )
            for i in range(0, len(links), 5000):
                await frontier.enqueue(links[i : i + 5000])
        finally:
            await frontier.aclose()


async def _server_sample(urls: Sequence[str]) -> tuple[list[float], list[int]]:
    """Each server's CPU seconds so far and each partition's acked pages."""
    cpu, crawled = [], []
    for url in urls:
        client = connect(url)
        try:
            info = await client.info("cpu")
            cpu.append(float(info["used_cpu_sys"]) + float(info["used_cpu_user"]))
            frontier = await Frontier.open(client, frontier_settings(JOB_ID, _SPEC))
            crawled.append((await frontier.stats()).crawled)
        finally:
            await client.aclose()
    return cpu, crawled


def _machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat's first line."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def measure(spec: RunSpec) -> dict[str, Any]:
    """Run the clients against prefilled partitions; the window's figures."""
    asyncio.run(_prefill(spec.urls))
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
        time.sleep(max(0.0, start_at + spec.warmup_seconds - time.time()))
        cpu0, crawled0 = asyncio.run(_server_sample(spec.urls))
        busy0, total0 = _machine_busy()
        began = time.perf_counter()
        time.sleep(max(0.0, start_at + spec.warmup_seconds + spec.measure_seconds - time.time()))
        cpu1, crawled1 = asyncio.run(_server_sample(spec.urls))
        busy1, total1 = _machine_busy()
        seconds = time.perf_counter() - began
        windows = [results.get(timeout=120) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    pages = sum(crawled1) - sum(crawled0)
    redis_cpu = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    client_cpu = sum(w["cpu_seconds"] for w in windows)
    return {
        "partitions": len(spec.urls),
        "clients": spec.clients,
        "wait_replicas": spec.wait_replicas,
        "pages_per_s": pages / seconds,
        "pages": pages,
        "redis_cpu_per_page_us": sum(redis_cpu) / pages * 1e6,
        "client_cpu_per_page_us": client_cpu / pages * 1e6,
        # each server's share of one core over the window (1.0: that Redis is saturated)
        "redis_core_share": [round(c / seconds, 3) for c in redis_cpu],
        "clients_cores": round(client_cpu / seconds, 3),
        "machine_busy_share": round((busy1 - busy0) / (total1 - total0), 3),
    }


def _servers(tmp: Path, count: int) -> list[RedisServer]:
    return [RedisServer(tmp / f"redis-{i}").start() for i in range(count)]


def _stop(servers: Sequence[RedisServer]) -> None:
    for server in servers:
        server.stop()


def _print_run(label: str, run: dict[str, Any]) -> None:
    print(
        f"  {label:<24} {run['pages_per_s']:>9,.0f} pages/s  Redis "
        f"{run['redis_cpu_per_page_us']:5.1f} µs/page ({run['redis_core_share']} core), "
        f"clients {run['client_cpu_per_page_us']:5.1f} µs/page ({run['clients_cores']} cores), "
        f"machine busy {run['machine_busy_share']:.0%}"
    )


def bench_partitions(
    tmp: Path, nodes: Sequence[int], clients: int, rounds: int, warmup: float, window: float
) -> dict[int, list[dict[str, Any]]]:
    print(f"claim+enqueue+ack, {clients} client processes x {LOOPS_PER_CLIENT} loops:")
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in nodes}
    for round_ in range(rounds):
        for n in nodes:
            servers = _servers(tmp / f"r{round_}-n{n}", n)
            try:
                spec = RunSpec(tuple(s.url for s in servers), clients, 0, warmup, window)
                run = measure(spec)
            finally:
                _stop(servers)
            runs[n].append(run)
            _print_run(f"{n} partition(s), round {round_ + 1}", run)
    return runs


def bench_wait(
    tmp: Path, clients: int, rounds: int, warmup: float, window: float
) -> dict[str, list[dict[str, Any]]]:
    print("one partition on a master with one replica, ack after WAIT 1 vs plain ack:")
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "wait": []}
    for round_ in range(rounds):
        for way, replicas in (("plain", 0), ("wait", 1)):
            with ReplicatedPair(tmp / f"pair-{round_}-{way}") as pair:
                run = measure(RunSpec((pair.url,), clients, replicas, warmup, window))
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
        out[f"client_cpu_per_page_us_{n}"] = median(runs, "client_cpu_per_page_us")
    if 1 in partitions:
        out["pages_per_redis_core_second"] = 1e6 / out["redis_cpu_per_page_us_1"]
        for n in partitions:
            if n > 1:
                speedup = out[f"pages_per_s_{n}"] / out["pages_per_s_1"]
                cpu = out[f"redis_cpu_per_page_us_{n}"] / out["redis_cpu_per_page_us_1"]
                key = "two_shard" if n == 2 else f"{n}_shard"
                out[f"{key}_speedup"] = speedup
                out[f"redis_cpu_per_page_ratio{'' if n == 2 else f'_{n}'}"] = cpu
                # n servers each given a core of their own: a bound, not a measurement
                out[f"{key}_redis_bound_speedup"] = n / cpu
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
    args = parser.parse_args(argv)
    nodes = [int(x) for x in args.nodes.split(",")]
    rounds, warmup, window = (2, 2.0, 6.0) if args.quick else (3, 3.0, 15.0)
    started = time.perf_counter()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
        partitions = bench_partitions(Path(tmp), nodes, args.clients, rounds, warmup, window)
        waits = (
            None if args.no_wait else bench_wait(Path(tmp), args.clients, rounds, warmup, window)
        )
    results = summarize(partitions, waits)
    results["runs"] = {
        **{f"partitions_{n}": runs for n, runs in partitions.items()},
        **({f"wait_{way}": runs for way, runs in waits.items()} if waits else {}),
    }
    results["setup"] = {
        "clients": args.clients,
        "loops_per_client": LOOPS_PER_CLIENT,
        "batch": BATCH,
        "hosts": HOSTS,
        "links_per_page": {"new": NEW_LINKS_PER_PAGE, "seen": SEEN_LINKS_PER_PAGE},
        "topology": "plain redis-servers, one Frontier per partition on its own server",
        "quick": args.quick,
    }
    results["machine"] = {
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "python": platform.python_version(),
    }
    results["elapsed_s"] = time.perf_counter() - started
    line = [
        f"{k} {results[k]:.2f}" for k in sorted(results) if k.endswith(("speedup", "ratio", "cost"))
    ]
    print("ratios: " + ", ".join(line))
    if args.json:
        print(json.dumps(results, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
