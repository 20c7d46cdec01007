"""A frontier client run as its own process by the multi-process tests.

Modes:
- ``add``: add_if_new over a URL file in batches; writes the URLs it was told were new.
- ``claim``: claim → "fetch" (a short sleep) → ack or fail, until the job completes; writes
  one JSON line per claim and per outcome, flushed at once, so a SIGKILL loses nothing that
  happened before it. The outcome of a URL is a pure function of (url, attempt), so the test
  can predict the final state.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import zlib
from pathlib import Path
from typing import Any

from crawlfleet.frontier import Failure, Frontier
from tests.support.specs import frontier_settings

#: The claimers' fetch budget (their "fetches" are sleeps of ``--fetch-seconds``).
FETCH_BUDGET_SECONDS = 1.0


def fetch_budget(seconds: float) -> dict[str, float]:
    """The spec's fetch section whose total timeout (the frontier's fetch budget) is ``seconds``."""
    return {
        "connectTimeoutSeconds": seconds,
        "readTimeoutSeconds": seconds,
        "totalTimeoutSeconds": seconds,
    }


def fetch_deadline(lease_id: str) -> float:
    """A lease token's fetch deadline (server time, seconds): "<n>\t<owner>\t@<ms>\t..."."""
    return int(lease_id.split("\t")[2][1:]) / 1000.0


def planned_outcome(url: str, attempt: int) -> str:
    """'ack', 'retry' or 'permanent' for this attempt of this URL."""
    h = zlib.crc32(url.encode())
    if h % 50 == 0:
        return "permanent"
    if h % 25 == 3:
        return "retry"  # fails every time: dead after taskAttempts
    if h % 10 == 1 and attempt < 2:
        return "retry"  # heals on the third attempt
    return "ack"


async def run_add(args: argparse.Namespace, frontier: Frontier, out: Any) -> None:
    urls = Path(args.urls).read_text().split()
    for start in range(0, len(urls), args.batch):
        batch = urls[start : start + args.batch]
        new = await frontier.add_if_new(batch)
        out.write("".join(url + "\n" for url, is_new in zip(batch, new, strict=True) if is_new))


async def run_claim(args: argparse.Namespace, frontier: Frontier, out: Any) -> None:
    def emit(record: dict[str, Any]) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()

    idle_since: float | None = None
    batches = 0
    loop = asyncio.get_running_loop()
    while True:
        leases = await frontier.claim(args.worker, args.batch)
        if not leases:
            if await frontier.is_complete():
                return
            idle_since = idle_since or loop.time()
            if loop.time() - idle_since > 30:
                return
            await asyncio.sleep(0.003)
            continue
        idle_since = None
        batches += 1
        emit(
            {
                "kind": "claim",
                "worker": args.worker,
                "leases": [[x.lease_id, x.url, x.attempts, x.claimed_at] for x in leases],
            }
        )
        hang = batches == args.hang_after_batches
        if hang:
            emit({"kind": "hanging", "worker": args.worker})
        await asyncio.sleep(args.hang_seconds if hang else args.fetch_seconds)
        acks, fails = [], []
        for lease in leases:
            fate = planned_outcome(lease.url, lease.attempts)
            if fate == "ack":
                acks.append(lease)
            else:
                fails.append(
                    Failure(lease.lease_id, "test_" + fate, f"planned {fate}", fate == "retry")
                )
        if acks:
            result = await frontier.ack(args.worker, [x.lease_id for x in acks])
            emit(
                {
                    "kind": "ack",
                    "worker": args.worker,
                    "at": result.at,
                    "leases": [[x.lease_id, x.url, ok] for x, ok in zip(acks, result, strict=True)],
                }
            )
        if fails:
            outcome = await frontier.fail(args.worker, fails)
            emit(
                {
                    "kind": "fail",
                    "worker": args.worker,
                    "at": outcome.at,
                    "leases": [
                        [f.lease_id, int(code)] for f, code in zip(fails, outcome, strict=True)
                    ],
                }
            )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["add", "claim"])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--worker", default="w")
    parser.add_argument("--urls")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--per-host", type=int, default=2)
    parser.add_argument("--host-delay", type=float, default=0.0)
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    parser.add_argument("--task-attempts", type=int, default=3)
    parser.add_argument("--fetch-seconds", type=float, default=0.02)
    parser.add_argument("--hang-after-batches", type=int, default=0)
    parser.add_argument("--hang-seconds", type=float, default=3.0)
    # How long after a claim a worker may send requests (the fetch's total timeout): a dead
    # claimer's host slots stay counted that long.
    parser.add_argument("--fetch-budget", type=float, default=FETCH_BUDGET_SECONDS)
    args = parser.parse_args()
    lease_ttl = args.lease_ttl
    settings = frontier_settings(
        args.job,
        {
            "dedup": {"capacity": args.capacity},
            "concurrency": {"perHost": args.per_host, "hostDelaySeconds": args.host_delay},
            "lease": {"ttlSeconds": lease_ttl, "heartbeatSeconds": min(5.0, lease_ttl / 2)},
            "retry": {"taskAttempts": args.task_attempts},
            "fetch": fetch_budget(args.fetch_budget),
        },
    )
    frontier = await Frontier.connect(args.redis_url, settings)
    with open(args.out, "a") as out:
        if args.mode == "add":
            await run_add(args, frontier, out)
        else:
            await run_claim(args, frontier, out)
    await frontier.aclose()


if __name__ == "__main__":
    asyncio.run(main())
