"""Serve the test site in the foreground.

    python -m crawlfleet.testsite --hosts 4 --pages-per-host 5000


Why a CLI: a benchmark must not share a process (or a GIL) with the crawler it measures, so it
starts the site as a subprocess, reads the single JSON readiness line from stdout
(``{"hosts": [...], "seeds": [...], "pages": N, "out_of_scope_host": "..."}``) and sends
SIGTERM when done.  A one-line request summary goes to stderr on exit.

Request records are not kept by default (memory would grow with every request); counters and
per-host concurrency maxima are, and are reported in the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from crawlfleet.testsite.graph import SiteConfig
from crawlfleet.testsite.server import RequestRecord, SiteServer


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = SiteConfig()
    p = argparse.ArgumentParser(prog="python -m crawlfleet.testsite", description=__doc__)
    p.add_argument("--hosts", type=int, default=defaults.hosts)
    p.add_argument("--pages-per-host", type=int, default=defaults.pages_per_host)
    p.add_argument("--links-per-page", type=int, default=defaults.links_per_page)
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--cross-host-link-ratio", type=float, default=defaults.cross_host_link_ratio)
    p.add_argument(
        "--no-hostile",
        action="store_true",
        help="link only normal pages; robots.txt allows everything",
    )
    p.add_argument("--crawl-delay", type=float, default=None, help="Crawl-delay for host 1")
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every response")
    p.add_argument("--base-address", default="127.0.0.2", help="address of host 0")
    p.add_argument("--keep-records", action="store_true", help="keep every request record")
    p.add_argument(
        "--record-file",
        type=Path,
        help="on exit, write every request (url, status) as JSON lines here (keeps records)",
    )
    return p.parse_args(argv)


async def _serve(args: argparse.Namespace) -> int:
    config = SiteConfig(
        hosts=args.hosts,
        pages_per_host=args.pages_per_host,
        links_per_page=args.links_per_page,
        seed=args.seed,
        cross_host_link_ratio=args.cross_host_link_ratio,
        hostile=not args.no_hostile,
        crawl_delay_seconds=args.crawl_delay,
        latency_seconds=args.latency,
    )
    keep = args.keep_records or args.record_file is not None
    server = SiteServer(config, base_address=args.base_address, keep_records=keep)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        ready = {
            "hosts": server.hosts,
            "seeds": server.graph.seeds(),
            "pages": server.graph.page_count,
            "out_of_scope_host": server.out_of_scope_host,
        }
        print(json.dumps(ready), flush=True)
        await stop.wait()
    finally:
        await server.stop()
    log = server.log
    if args.record_file is not None:
        _write_records(args.record_file, log.all_requests())
    concurrency = {h: log.max_concurrency(h) for h in server.hosts}
    summary = {"requests": log.total(), "max_concurrency": concurrency}
    print(json.dumps(summary), file=sys.stderr, flush=True)
    return 0


def _write_records(path: Path, records: Sequence[RequestRecord]) -> None:
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps({"url": record.url, "status": record.status}) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(_serve(_parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
