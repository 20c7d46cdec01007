"""Serve the test site in the foreground.

    python -m crawlfleet.testsite --hosts 4 --pages-per-host 5000


Why a CLI: a benchmark must not share a process (or a GIL) with the crawler it measures, so it
starts the site as a subprocess, reads the single JSON readiness line from stdout
(``{"hosts": [...], "seeds": [...], "pages": N, "out_of_scope_host": "..."}``) and sends
SIGTERM when done.  A one-line request summary goes to stderr on exit.

Request records are not kept by default (memory would grow with every request); counters and
per-host concurrency maxima are, and are reported in the summary.

``--news`` serves the news site instead (:mod:`crawlfleet.testsite.news`: listings and feeds
that gain an article per host every ``--publish-interval`` seconds, on the wall clock from
start-up); its readiness line is ``{"hosts": [...], "seeds": [...], "feeds": [...]}``, and
``--record-file`` then gets every request with its site time and whether it was conditional.

``--files`` serves the file site (:mod:`crawlfleet.testsite.files`: large generated files from
hosts that honour ``Range``, ignore it, change files, reset mid-body…), ``--bytes-per-second``
capping each response; its readiness line is ``{"hosts": {kind: netloc}, "bases": {kind:
"http://…"}}``, and ``--record-file`` gets every request with its ``Range``, status and bytes
sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from crawlfleet.testsite.files import FileServer, FileSiteConfig
from crawlfleet.testsite.graph import SiteConfig
from crawlfleet.testsite.news import NewsConfig, NewsServer
from crawlfleet.testsite.server import SiteServer
from crawlfleet.testsite.threaded import Startable

_SITE_BASE_ADDRESS = "127.0.0.2"


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
    p.add_argument(
        "--navigation-links",
        type=int,
        default=defaults.navigation_links,
        help="every page links the same N pages of its host (a site menu)",
    )
    p.add_argument("--crawl-delay", type=float, default=None, help="Crawl-delay for host 1")
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every response")
    p.add_argument(
        "--base-address",
        default=_SITE_BASE_ADDRESS,
        help="address of host 0 (the file site's default: 127.0.24.1)",
    )
    p.add_argument("--keep-records", action="store_true", help="keep every request record")
    p.add_argument("--news", action="store_true", help="serve the news site instead")
    p.add_argument(
        "--publish-interval",
        type=int,
        default=NewsConfig().publish_interval_seconds,
        help="news site: seconds between two articles of one host",
    )
    p.add_argument("--files", action="store_true", help="serve the file site instead")
    p.add_argument(
        "--bytes-per-second",
        type=int,
        default=FileSiteConfig().bytes_per_second,
        help="file site: rate cap of each response (0: none)",
    )
    p.add_argument(
        "--record-file",
        type=Path,
        help="on exit, write every request (url, status) as JSON lines here (keeps records)",
    )
    return p.parse_args(argv)


async def _until_signalled(server: Startable, ready: Callable[[], Mapping[str, object]]) -> None:
    """Start ``server``, print its readiness line, serve until SIGTERM or SIGINT, stop it."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        print(json.dumps(ready()), flush=True)
        await stop.wait()
    finally:
        await server.stop()


async def _serve_news(args: argparse.Namespace) -> int:
    config = NewsConfig(
        hosts=args.hosts, publish_interval_seconds=args.publish_interval, seed=args.seed
    )
    server = NewsServer(config, base_address=args.base_address)
    hosts = range(config.hosts)
    await _until_signalled(
        server,
        lambda: {
            "hosts": server.hosts,
            "seeds": [server.base(h) + "/" for h in hosts],
            "feeds": [server.base(h) + config.feed_path(h) for h in hosts],
        },
    )
    requests = server.log.requests()
    if args.record_file is not None:
        rows = ({"url": r.url, "status": r.status, "at": r.at, "conditional": r.conditional}
                for r in requests)  # fmt: skip
        _write_records(args.record_file, rows)
    print(json.dumps({"requests": len(requests)}), file=sys.stderr, flush=True)
    return 0


async def _serve_files(args: argparse.Namespace) -> int:
    base = args.base_address if args.base_address != _SITE_BASE_ADDRESS else None
    config = FileSiteConfig(bytes_per_second=args.bytes_per_second)
    server = FileServer(config) if base is None else FileServer(config, base_address=base)
    await _until_signalled(
        server,
        lambda: {"hosts": server.netlocs, "bases": {k: server.base(k) for k in server.netlocs}},
    )
    requests = server.log.requests()
    if args.record_file is not None:
        rows = (
            {"url": r.url, "range": r.range_header, "if_range": r.if_range, "status": r.status,
             "bytes_sent": r.bytes_sent, "completed": r.completed}
            for r in requests
        )  # fmt: skip
        _write_records(args.record_file, rows)
    sent = sum(r.bytes_sent for r in requests)
    print(json.dumps({"requests": len(requests), "bytes_sent": sent}), file=sys.stderr, flush=True)
    return 0


async def _serve(args: argparse.Namespace) -> int:
    if args.news:
        return await _serve_news(args)
    if args.files:
        return await _serve_files(args)
    config = SiteConfig(
        hosts=args.hosts,
        pages_per_host=args.pages_per_host,
        links_per_page=args.links_per_page,
        seed=args.seed,
        cross_host_link_ratio=args.cross_host_link_ratio,
        hostile=not args.no_hostile,
        crawl_delay_seconds=args.crawl_delay,
        latency_seconds=args.latency,
        navigation_links=args.navigation_links,
    )
    keep = args.keep_records or args.record_file is not None
    server = SiteServer(config, base_address=args.base_address, keep_records=keep)
    await _until_signalled(
        server,
        lambda: {
            "hosts": server.hosts,
            "seeds": server.graph.seeds(),
            "pages": server.graph.page_count,
            "out_of_scope_host": server.out_of_scope_host,
        },
    )
    log = server.log
    if args.record_file is not None:
        rows = ({"url": r.url, "status": r.status} for r in log.all_requests())
        _write_records(args.record_file, rows)
    concurrency = {h: log.max_concurrency(h) for h in server.hosts}
    summary = {"requests": log.total(), "max_concurrency": concurrency}
    print(json.dumps(summary), file=sys.stderr, flush=True)
    return 0


def _write_records(path: Path, rows: Iterable[Mapping[str, object]]) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(_serve(_parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
