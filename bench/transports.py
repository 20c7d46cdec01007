"""Transport benchmark: which httpx transport the request layer (crawler/fetching/fetch.py) runs on.

    python -m bench.transports [--quick] [--json] [--pages N] [--rounds R]

Starts the test site in a subprocess (``python -m crawlfleet.testsite --hosts 2 --pages-per-
host 3000 --no-hostile``: a separate process, so the server does not share our GIL) and fetches
the same N normal pages with 64 concurrent tasks through each candidate, printing pages/s:

- ``httpx``: httpx's default transport (httpcore over anyio);
- ``httpx-aiohttp``: httpx's API over ``httpx_aiohttp.AiohttpTransport`` and an
  ``aiohttp.ClientSession``;
- ``fetcher``: our ``Fetcher`` end to end (the chosen transport plus the guard's resolver,
  streaming, bounded decoding and classification), to show what the request layer itself costs;
- ``aiohttp (reference)``: bare aiohttp without httpx, the ceiling; not a candidate, since the
  request layer keeps httpx's API.

Every candidate reads each body completely and checks its status, so none can win by skipping
work. Rounds alternate between candidates so that a noisy moment hurts all of them alike; the
best round of each is reported. ``--quick`` finishes in well under 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from crawlfleet.crawler.fetching.fetch import Fetcher, FetchSettings
from crawlfleet.testsite.graph import page_path
from tests.support.specs import job_spec

CONCURRENCY = 64
MAX_CONNECTIONS = 100
PAGES_PER_HOST = 3000
HOSTS = 2

FetchOne = Callable[[str], Awaitable[int]]


@asynccontextmanager
async def httpx_default() -> AsyncIterator[FetchOne]:
    limits = httpx.Limits(
        max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS
    )
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:

        async def fetch(url: str) -> int:
            response = await client.get(url)
            return len(response.content) if response.status_code == 200 else -1

        yield fetch


@asynccontextmanager
async def httpx_aiohttp() -> AsyncIterator[FetchOne]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS))
    transport = AiohttpTransport(client=session)
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:

        async def fetch(url: str) -> int:
            response = await client.get(url)
            return len(response.content) if response.status_code == 200 else -1

        yield fetch


@asynccontextmanager
async def fetcher() -> AsyncIterator[FetchOne]:
    # The Fetcher's pool has no cap of its own: the CONCURRENCY tasks bound its connections.
    spec = job_spec({"userAgent": "crawlfleet-bench", "scope": {"allowPrivateNetworks": True}})
    settings = FetchSettings.from_spec(spec)
    crawler = Fetcher(settings)
    try:

        async def fetch(url: str) -> int:
            result = await crawler.fetch(url)
            return len(result.body) if result.failure is None else -1

        yield fetch
    finally:
        await crawler.aclose()


@asynccontextmanager
async def aiohttp_reference() -> AsyncIterator[FetchOne]:
    connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def fetch(url: str) -> int:
            async with session.get(url) as response:
                body = await response.read()
                return len(body) if response.status == 200 else -1

        yield fetch


CANDIDATES: dict[str, Callable[[], Any]] = {
    "httpx": httpx_default,
    "httpx-aiohttp": httpx_aiohttp,
    "fetcher": fetcher,
    "aiohttp (reference)": aiohttp_reference,
}
#: The ones the request layer may choose between (the others are context).
CHOICES = ("httpx", "httpx-aiohttp")


async def run_round(fetch: FetchOne, urls: list[str]) -> float:
    """Fetch every URL with CONCURRENCY workers; pages/s. Raises if any page failed."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)
    failures = 0

    async def worker() -> None:
        nonlocal failures
        while True:
            try:
                url = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if await fetch(url) <= 0:
                failures += 1

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(CONCURRENCY):
            group.create_task(worker())
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"{failures} of {len(urls)} pages failed")
    return len(urls) / elapsed


async def bench(urls: list[str], rounds: int) -> dict[str, float]:
    best: dict[str, float] = dict.fromkeys(CANDIDATES, 0.0)
    for round_number in range(rounds):
        for name, factory in CANDIDATES.items():
            async with factory() as fetch:
                await run_round(fetch, urls[: CONCURRENCY * 2])  # warm the pool and caches
                rate = await run_round(fetch, urls)
            best[name] = max(best[name], rate)
            print(f"  round {round_number + 1}  {name:<22} {rate:>9,.0f} pages/s", flush=True)
    return best


def start_site(pages_per_host: int) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    command = [
        sys.executable,
        "-m",
        "crawlfleet.testsite",
        "--hosts",
        str(HOSTS),
        "--pages-per-host",
        str(pages_per_host),
        "--no-hostile",
    ]
    site = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert site.stdout is not None
    line = site.stdout.readline()
    if not line:
        site.kill()
        raise RuntimeError("the test site exited before it was ready")
    return site, json.loads(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller run; under 30 s")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--pages", type=int, default=None, help="pages per round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per candidate")
    args = parser.parse_args()
    pages = args.pages or (2000 if args.quick else HOSTS * PAGES_PER_HOST)
    rounds = args.rounds or (2 if args.quick else 3)

    site, ready = start_site(PAGES_PER_HOST)
    try:
        hosts: list[str] = ready["hosts"]
        every = [f"http://{host}{page_path(i)}" for i in range(PAGES_PER_HOST) for host in hosts]
        urls = (every * (pages // len(every) + 1))[:pages]
        print(f"{pages} pages x {rounds} rounds, concurrency {CONCURRENCY}, {hosts}", flush=True)
        best = asyncio.run(bench(urls, rounds))
    finally:
        site.terminate()
        site.wait(timeout=15)

    print("best of rounds:")
    for name, rate in best.items():
        print(f"  {name:<22} {rate:>9,.0f} pages/s")
    winner = max(CHOICES, key=best.__getitem__)
    print(f"fastest candidate: {winner}")
    if args.json:
        summary = {
            "pages": pages,
            "rounds": rounds,
            "concurrency": CONCURRENCY,
            "python": platform.python_version(),
            "pages_per_second": {name: round(rate, 1) for name, rate in best.items()},
            "fastest": winner,
        }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
