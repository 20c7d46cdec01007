"""What a user's selector can cost a worker, and what the bounded harvest makes of it; one run.

    python -m bench.extract_bounds [--quick] [--json]

Issue 21: an ``extract`` XPath with an EXSLT ``re:test(., '^(a+)+$')`` stopped a worker's
heartbeats for about 36 s, and the harvest ran batches of up to 1 MiB of HTML on the event loop.
This measures, in one process:

* ``regex``: ``re:test(., '^(a+)+$')`` on n a's and a b, with lxml's own EXSLT functions
  (Python's ``re``, what parsel gives) for growing n, and with crawlfleet's (RE2,
  ``crawlfleet/xpath_regexp.py``) for n = 30 and 100,000;
* ``worst``: the slowest selectors we could think of on a 1 MiB page of product rows (about
  32,000 elements; 256 KiB with ``--quick``), and a cubic one on a page of 400 empty elements: a
  selector's cost has no bound but the page's nodes to a power;
* ``gil``: whether lxml lets other threads run while it evaluates: ticks of an asyncio loop
  (one ``sleep(0.001)`` each) while a thread evaluates a slow selector, against the ticks the
  same loop makes alone over the same time;
* ``harvest``: CPU milliseconds a page for a batch of shop pages harvested (three CSS fields
  and ``content: text``) on the loop (``harvest_batch``, the worker before issue 21) and in the
  bounded harvest (``harvest_batch_bounded``: a thread the loop first waits for, blocked),
  while the loop also serves a socket ping-pong, as a worker's loop serves its fetches.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from lxml import etree

from crawlfleet.crawler.harvest.harvest import Harvester, HarvestInput
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.selection import compile_selector
from crawlfleet.testsite import shop

BACKTRACKING = "count(//code[re:test(., '^(a+)+$')])"
WORST = (
    "//*[count(following::*) > 0]",
    "//*[count(//*) > 0]",
    "//*[string-length(string(/)) > 0]",
    "count(//*//*//*)",
)
CUBIC_ELEMENTS = 400
CUBIC = "count(//*[count(//*[count(//*) > 0]) > 0])"
#: Fields of bench.crawl's extracting job.
FIELDS = {
    "title": {"css": "title::text"},
    "heading": {"css": "h1"},
    "first_link": {"css": "a::attr(href)"},
}


def rows_page(target_bytes: int) -> str:
    rows, size, index = [], 0, 0
    while size < target_bytes:
        row = (
            f'<div class="item"><a href="/p/{index}.html">Product {index}</a>'
            f'<span class="price">{index}.99</span></div>\n'
        )
        rows.append(row)
        size += len(row)
        index += 1
    return f"<html><head><title>rows</title></head><body>{''.join(rows)}</body></html>"


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def regex(quick: bool) -> dict[str, Any]:
    """Seconds of re:test(., '^(a+)+$') on n a's and a b: lxml's Python re, then RE2."""
    lxml_re = etree.XPath(BACKTRACKING, namespaces={"re": "http://exslt.org/regular-expressions"})
    ours = compile_selector("xpath", BACKTRACKING)
    results: dict[str, Any] = {"python_re_seconds": {}, "re2_seconds": {}}
    for n in range(16, 21 if quick else 25, 2):
        page = etree.HTML(f"<code>{'a' * n}b</code>")
        results["python_re_seconds"][n] = round(timed(lambda: lxml_re(page)), 4)  # noqa: B023
    for n in (30, 100_000):
        page = etree.HTML(f"<code>{'a' * n}b</code>")
        results["re2_seconds"][n] = round(timed(lambda: ours(page)), 6)  # noqa: B023
    return results


def worst(quick: bool) -> dict[str, Any]:
    html = rows_page((256 if quick else 1024) << 10)
    root = etree.HTML(html)
    results: dict[str, Any] = {
        "page_bytes": len(html),
        "elements": int(compile_selector("xpath", "count(//*)")(root)),  # type: ignore[call-overload]
        "seconds": {},
    }
    for query in WORST:
        compiled = compile_selector("xpath", query)
        results["seconds"][query] = round(timed(lambda: compiled(root)), 3)  # noqa: B023
    small = etree.HTML("<html><body>" + "<i></i>" * CUBIC_ELEMENTS + "</body></html>")
    compiled = compile_selector("xpath", CUBIC)
    results[f"cubic_{CUBIC_ELEMENTS}_elements_seconds"] = round(timed(lambda: compiled(small)), 3)
    return results


async def _ticks(seconds: float) -> int:
    ticks, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        await asyncio.sleep(0.001)
        ticks += 1
    return ticks


def gil(quick: bool) -> dict[str, Any]:
    root = etree.HTML(rows_page((128 if quick else 256) << 10))
    query = compile_selector("xpath", WORST[0])
    evaluating = threading.Thread(target=query, args=(root,))
    started = time.perf_counter()
    evaluating.start()

    async def while_evaluating() -> int:
        ticks = 0
        while evaluating.is_alive():
            await asyncio.sleep(0.001)
            ticks += 1
        return ticks

    ticks = asyncio.run(while_evaluating())
    seconds = time.perf_counter() - started
    alone = asyncio.run(_ticks(seconds))
    return {"evaluation_seconds": round(seconds, 3), "loop_ticks": ticks, "idle_ticks": alone}


async def _ping_pong(stop: asyncio.Event) -> int:
    """A loop busy with syscalls, as a worker's is with its fetches: one byte back and forth."""
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    loop = asyncio.get_running_loop()
    rounds = 0
    try:
        while not stop.is_set():
            await loop.sock_sendall(left, b"x")
            await loop.sock_recv(right, 1)
            rounds += 1
            await asyncio.sleep(0)  # both calls return at once when they can: let others run
    finally:
        left.close()
        right.close()
    return rounds


async def _harvest_rate(harvester: Harvester, bounded: bool, batches: int) -> float:
    pages = [
        HarvestInput(shop.render_product(product), "text/html", f"http://shop.test{product.path}")
        for product in shop.PRODUCTS
    ] * 8
    stop = asyncio.Event()
    busy = asyncio.create_task(_ping_pong(stop))
    started = time.process_time()
    for _ in range(batches):
        if bounded:
            await harvester.harvest_batch_bounded(pages)
        else:
            harvester.harvest_batch(pages)
        await asyncio.sleep(0.002)  # the loop's own work between flushes
    cpu = time.process_time() - started
    stop.set()
    await busy
    return cpu / (batches * len(pages)) * 1000


def harvest(quick: bool) -> dict[str, Any]:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": ["http://shop.test/"],
            "output": {"content": "text"},
            "extract": [{"match": ".", "fields": FIELDS}],
        }
    )
    harvester = Harvester.from_spec(spec)
    assert harvester is not None
    batches = 20 if quick else 60
    on_loop, bounded = [], []
    try:
        for _ in range(3):  # interleaved rounds; the best of each
            on_loop.append(asyncio.run(_harvest_rate(harvester, False, batches)))
            bounded.append(asyncio.run(_harvest_rate(harvester, True, batches)))
    finally:
        harvester.close()
    return {
        "on_loop_cpu_ms_per_page": round(min(on_loop), 4),
        "bounded_cpu_ms_per_page": round(min(bounded), 4),
        "bounded_vs_on_loop": round(min(bounded) / min(on_loop), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller pages; about a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    results = {}
    for name, measure in (("regex", regex), ("worst", worst), ("gil", gil), ("harvest", harvest)):
        results[name] = measure(args.quick)
        print(f"{name}: {results[name]}", flush=True)
    if args.json:
        print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
