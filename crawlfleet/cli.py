"""The ``crawlfleet`` command: user-facing output lives here and nowhere else.

``crawlfleet worker`` is the entrypoint of the crawler image; ``crawlfleet validate`` checks
a CrawlJob the way the CRD will. Settings come from flags, else ``CRAWLFLEET_*`` environment
variables (read once, by ``Config.from_env`` in :mod:`crawlfleet.config`), else its defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from crawlfleet.config import Config
from crawlfleet.errors import CrawlfleetError
from crawlfleet.startup import setup_logging, without_gc

if TYPE_CHECKING:
    from crawlfleet.crawljob import CrawlJobSpec, S3Spec
    from crawlfleet.destinations import Destination
    from crawlfleet.enqueue import EnqueueReport
    from crawlfleet.local.zygote import Zygote
    from crawlfleet.output.stores import OutputStore

__all__ = ["main", "run"]


def _parser(config: Config) -> argparse.ArgumentParser:
    """Flags whose defaults are ``config``'s (defaults, then the environment, read once)."""
    parser = argparse.ArgumentParser(prog="crawlfleet", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--log-level",
        default=config.log_level,
        help="stderr log level [info; warning for run and demo (whose full log is a file) and"
        " for enqueue]",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    # The worker's own entry parses its flags (launch.py:main): the zygote runs it
    # in a forked child without this module, and `crawlfleet worker --help` shows them.
    commands.add_parser("worker", help="run one crawl worker against a job's Redis", add_help=False)

    run = commands.add_parser("run", help="run a CrawlJob on this machine (private Redis)")
    run.add_argument("job", help="CrawlJob YAML file")
    run.add_argument(
        "--once",
        action="store_true",
        help="a job with spec.schedule: one run now, then exit [a run at each due time until"
        " Ctrl-C]",
    )
    _run_flags(run, config)

    demo = commands.add_parser("demo", help="crawl the bundled loopback demo site")
    _run_flags(demo, config)

    validate = commands.add_parser("validate", help="check a CrawlJob as the CRD will")
    validate.add_argument("job", help="CrawlJob YAML file")
    validate.add_argument(
        "--policy",
        action="store_true",
        help="also apply the operator's tenancy policy (images, volume types) as the"
        " CRAWLFLEET_* variables set it (docs/security.md)",
    )

    extract = commands.add_parser(
        "extract", help="try a job's extract rules on one page and print its items"
    )
    extract.add_argument("page", help="a page's http(s) URL, or an HTML file")
    extract.add_argument("--job", required=True, help="CrawlJob YAML file with spec.extract")
    extract.add_argument(
        "--url", help="the URL a FILE stands for, which the rules' match is tried on [file://...]"
    )

    enqueue = commands.add_parser(
        "enqueue",
        help="add URLs to a running crawl: a local run of a job file, or a CrawlJob's seeds",
    )
    enqueue.add_argument(
        "target", help="the CrawlJob YAML file of a running `crawlfleet run`, or namespace/name"
    )
    enqueue.add_argument(
        "urls", nargs="+", metavar="URL", help="URLs, or - to read them from stdin"
    )
    enqueue.add_argument("--out", type=Path, help="the run's folder [./crawl-output/<name>]")
    enqueue.add_argument(
        "--redis-url", help="the run's Redis, when it is an external one with a password"
    )

    look = commands.add_parser(
        "frontier",
        help="look inside a running crawl's frontier: its hosts, one URL's story, counts,"
        " dead letters",
    )
    look.add_argument(
        "target", help="the CrawlJob YAML file of a running `crawlfleet run`, or namespace/name"
    )
    look.add_argument(
        "what",
        choices=("hosts", "url", "count", "dead-letters"),
        help="hosts: the top hosts (queued, in flight, crawled, dead, delay, next allowed"
        " time, robots.txt wait); url URL: where it is (seen, queued, leased by whom,"
        " retried when, dead, its output record); count [HOST...]: the job's counters, or"
        " those hosts' (--domain D: a domain's hosts together); dead-letters: what will"
        " not be retried, and why",
    )
    look.add_argument("args", nargs="*", metavar="URL|HOST", help="url: the URL; count: hosts")
    look.add_argument(
        "--by",
        choices=("queued", "crawled", "dead", "admitted"),
        default="queued",
        help="hosts: sort by [queued]",
    )
    look.add_argument("--top", type=int, default=20, help="hosts: how many [20]")
    look.add_argument(
        "--domain", help="count: the hosts of this registrable domain together (example.co.uk)"
    )
    look.add_argument("--reason", help="dead-letters: only this failure class")
    look.add_argument("--limit", type=int, default=50, help="dead-letters: how many to list [50]")
    look.add_argument("--out", type=Path, help="the local run's folder [./crawl-output/<name>]")
    look.add_argument("--json", action="store_true", help="one JSON document instead of text")

    output = commands.add_parser(
        "output",
        help="list, print, verify or diff a crawl's output (a folder or a bucket)",
    )
    output.add_argument(
        "action",
        choices=("ls", "cat", "items", "verify", "changes"),
        help="ls: the files (and a count of stored downloads); cat: the page records, latest"
        " fetch per URL; items: the items of those fetches; verify: the manifest and the stored"
        " downloads; changes: the URLs that appeared, changed or"
        " went away (404/410 after a 200), once each",
    )
    output.add_argument(
        "target", help="a CrawlJob YAML file (its output.destination) or a destination"
    )
    output.add_argument(
        "--all", action="store_true", help="cat: every fetch, not only the latest per URL"
    )
    output.add_argument(
        "--since",
        help="changes: only those at or after this: a time (2026-12-02T08:15:00Z), a run id"
        " (20261202T081500Z) or a duration back from now (90m, 1h30m) [all]",
    )
    output.add_argument(
        "--json", action="store_true", help="changes: one JSON object a line instead of text"
    )
    output.add_argument(
        "--deep",
        action="store_true",
        help="verify: also recompute the SHA-256 of every stored file download (reads them all)",
    )
    output.add_argument("--endpoint", help="S3 endpoint URL of an s3:// target [AWS]")
    output.add_argument("--region", help="S3 region of an s3:// target")

    operator = commands.add_parser(
        "operator", help="run the Kubernetes operator (kopf) that reconciles CrawlJobs"
    )
    knobs_op = config.operator
    where = operator.add_mutually_exclusive_group()
    where.add_argument(
        "--namespace",
        action="append",
        default=list(knobs_op.namespaces),
        help="a namespace to watch (repeatable) [CRAWLFLEET_NAMESPACES, comma-separated]",
    )
    where.add_argument(
        "--all-namespaces", action="store_true", help="watch CrawlJobs in every namespace"
    )
    operator.add_argument(
        "--peering", default=knobs_op.peering, help=f"KopfPeering name [{knobs_op.peering}]"
    )
    operator.add_argument(
        "--standalone",
        action="store_true",
        help="no peering: for a single replica where the KopfPeering CRDs are not installed",
    )
    operator.add_argument("--metrics-port", type=int, default=knobs_op.metrics_port)
    operator.add_argument("--health-port", type=int, default=knobs_op.health_port)
    operator.add_argument("--bind-host", default=knobs_op.bind_host)
    operator.add_argument(
        "--worker-image",
        default=knobs_op.worker_image,
        help="image for jobs that name none [CRAWLFLEET_WORKER_IMAGE]",
    )
    operator.add_argument(
        "--tick-seconds",
        type=float,
        default=knobs_op.tick_seconds,
        help=f"how often each job is reconciled in full [{knobs_op.tick_seconds:g}]",
    )
    return parser


def _run_flags(parser: argparse.ArgumentParser, config: Config) -> None:
    parser.add_argument(
        "--out", type=Path, help="the run's folder: Redis, logs, summary [./crawl-output/<name>]"
    )
    parser.add_argument(
        "--output",
        help="where pages go: a folder, file:// or s3://bucket/prefix/ [the job's, else --out]",
    )
    parser.add_argument("--redis-url", default=config.run.redis_url, help="use this Redis")
    parser.add_argument("--workers", type=int, help="a fixed number of workers")
    parser.add_argument(
        "--shards",
        type=int,
        help="start N redis-servers joined into a loopback Redis Cluster instead of one, and"
        " partition the job's frontier over them (at least N partitions); 1-16",
    )
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON last")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = Config.from_env()  # the one read of CRAWLFLEET_* in this process
    except CrawlfleetError as exc:
        print(f"crawlfleet: {exc}", file=sys.stderr)
        return 2
    parser = _parser(config)
    args, rest = parser.parse_known_args(argv)
    if args.command == "worker":
        with without_gc():
            from crawlfleet.launch import main as worker_main
        return worker_main(rest, log_level=args.log_level, config=config)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    quiet = args.command in ("run", "demo", "enqueue")
    setup_logging(args.log_level or ("warning" if quiet else "info"))
    try:
        if args.command == "validate":
            return _validate(args, config)
        if args.command == "output":
            return _output(args)
        if args.command == "enqueue":
            return _enqueue(args)
        if args.command == "frontier":
            return _frontier(args, config)
        if args.command == "extract":
            return _extract(args)
        if args.command == "run":
            return _run(args, Path(args.job), config)
        if args.command == "demo":
            return _demo(args, config)
        if args.command == "operator":
            return _operator(args, config)
    except CrawlfleetError as exc:
        print(f"crawlfleet: {exc}", file=sys.stderr)
        return 2
    return 2


def _operator(args: argparse.Namespace, config: Config) -> int:
    from crawlfleet.errors import ConfigError

    # kopf imports the official `kubernetes` client whenever it is installed, only to
    # recognise its model objects (memory the operator never uses: it speaks aiohttp; the
    # figure is in docs/benchmarks.md).
    sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]
    try:
        from crawlfleet.operator.main import run_operator
    except ImportError as error:  # kopf is the `operator` extra
        raise ConfigError(
            f"the operator needs the operator extra (pip install 'crawlfleet[operator]'): {error}"
        ) from error
    if not args.all_namespaces and not args.namespace:
        raise ConfigError("name the namespaces to watch (--namespace NS) or pass --all-namespaces")
    knobs = dataclasses.replace(
        config.operator,
        namespaces=tuple(args.namespace or ()),
        peering=args.peering,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        bind_host=args.bind_host,
        worker_image=args.worker_image,
        tick_seconds=args.tick_seconds,
    )
    return run_operator(
        dataclasses.replace(config, operator=knobs),
        all_namespaces=args.all_namespaces,
        standalone=args.standalone,
    )


def _validate(args: argparse.Namespace, config: Config) -> int:
    from crawlfleet.crawljob import load_crawljob
    from crawlfleet.errors import ConfigError
    from crawlfleet.tenancy import TenancyPolicy

    # A seedsFrom.file list is read and checked with it, within the operator's bounds.
    job = load_crawljob(args.job, config.seed_list.bounds())
    if job.spec.parser is not None:
        # Here, not in the model: the operator never imports user code (nor has it); the
        # workers that will run it do, and refuse to start without it.
        from crawlfleet.crawler.harvest.parsers import load_parser

        load_parser(job.spec.parser)
    if args.policy:
        # What the operator refuses before it looks at the cluster (a Secret's label needs it).
        problems = TenancyPolicy.from_config(config.operator).spec_problems(job.spec)
        if problems:
            lines = "".join(f"\n  {line}" for line in problems)
            raise ConfigError(f"{args.job}: the operator's policy refuses it:{lines}")
    print(f"{args.job}: CrawlJob {job.metadata.namespace}/{job.metadata.name} is valid")
    source = job.spec.seeds_from
    if source is not None and source.config_map_key_ref is not None:
        ref = source.config_map_key_ref
        label = TenancyPolicy.from_config(config.operator).seeds_label
        needs = f", which reads it only labelled {label[0]}={label[1]}" if label else ""
        print(
            f"  its seedsFrom list (ConfigMap {ref.name}, key {ref.key}) is checked by the"
            f" operator when the job starts{needs}"
        )
    return 0


def _enqueue(args: argparse.Namespace) -> int:
    """``crawlfleet enqueue``: URLs into a running crawl (see crawlfleet/enqueue.py).

    Exit 0 when every URL is queued or was seen already, 1 when some were refused (each is
    printed with its reason), 2 when nothing could be done (no such run or job).
    """
    from crawlfleet.enqueue import is_job_reference, stdin_urls
    from crawlfleet.errors import ConfigError

    urls: list[str] = []
    for given in args.urls:
        urls += stdin_urls(sys.stdin) if given == "-" else [given]
    if not urls:
        raise ConfigError("no URLs given (pass them as arguments, or - and one a line on stdin)")
    if is_job_reference(args.target):
        report = asyncio.run(_enqueue_cluster(args.target, urls))
        lines = report.lines(new="appended to spec.seeds", seen="already seeds")
    else:
        report = _enqueue_local(args, Path(args.target), urls)
        lines = report.lines()
    print(f"{args.target}: " + lines[0])
    for line in lines[1:]:
        print(line, file=sys.stderr)
    return 1 if report.refused else 0


def _enqueue_local(args: argparse.Namespace, job_file: Path, urls: list[str]) -> EnqueueReport:
    from crawlfleet.crawljob import load_crawljob
    from crawlfleet.enqueue import enqueue_urls, find_local_run
    from crawlfleet.errors import ConfigError, FrontierLost
    from crawlfleet.frontier import Frontier, FrontierSettings
    from crawlfleet.local.runner import STATE_FILE

    if not job_file.is_file():
        raise ConfigError(f"{job_file}: neither a CrawlJob YAML file nor namespace/name")
    job = load_crawljob(job_file)
    out = args.out or Path("crawl-output") / job.metadata.name
    run = find_local_run(job, job_file, out, STATE_FILE)
    # The run's frontier may have more partitions than the file says (crawlfleet run --shards).
    settings = FrontierSettings.from_spec(job.job_id, job.with_shards_at_least(run.shards).spec)

    async def into_frontier() -> EnqueueReport:
        url = args.redis_url or run.redis_url
        try:
            frontier = await Frontier.connect(url, settings, expect_epoch=run.epoch)
        except FrontierLost as error:
            raise ConfigError(f"the crawl in {out} lost its frontier: {error}") from None
        try:
            return await enqueue_urls(frontier, job.spec, urls)
        finally:
            await frontier.aclose()

    return asyncio.run(into_frontier())


async def _enqueue_cluster(target: str, urls: list[str]) -> EnqueueReport:
    from crawlfleet.enqueue import append_seeds
    from crawlfleet.errors import ConfigError

    sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]  # see _operator
    try:
        from crawlfleet.operator.kube import Kube
    except ImportError as error:  # kopf is the `operator` extra, and its kubeconfig login
        raise ConfigError(
            "enqueue into a CrawlJob needs the operator extra (pip install"
            f" 'crawlfleet[operator]'): {error}"
        ) from error
    import kopf

    namespace, name = target.split("/", 1)
    kube = Kube(retry_budget_seconds=10.0)
    try:
        return await append_seeds(kube, namespace, name, urls)
    except (kopf.LoginError, OSError) as error:  # no kubeconfig, or one that names no file
        raise ConfigError(f"{target}: cannot log in to the cluster ({error})") from None
    finally:
        await kube.close()


def _frontier(args: argparse.Namespace, config: Config) -> int:
    """``crawlfleet frontier``: read a running crawl's frontier (see crawlfleet/inspection.py).

    Exit 0 with what was asked, 1 for a URL the frontier never saw, 2 when nothing could be
    read (no such run or job, no Redis)."""
    from crawlfleet.inspection import open_frontier_of, report

    async def look() -> int:
        frontier, output = await open_frontier_of(
            args.target, out=args.out, redis_url=config.run.redis_url
        )
        try:
            return await report(frontier, output, args)
        finally:
            await frontier.aclose()

    return asyncio.run(look())


def _output(args: argparse.Namespace) -> int:
    """``crawlfleet output ls|cat|verify``: read what a crawl wrote, wherever it went."""
    from crawlfleet.crawljob import S3Spec, load_crawljob
    from crawlfleet.destinations import destination_flag
    from crawlfleet.output.manifest import MANIFEST
    from crawlfleet.output.reader import item_records, page_records, run_ids, stored_files
    from crawlfleet.output.stores import open_store

    target = Path(args.target)
    if target.is_file() and target.suffix in (".yaml", ".yml"):
        job = load_crawljob(target)
        destination = destination_flag(
            job.spec.output.destination or str(Path("crawl-output") / job.metadata.name),
            f"{target}: spec.output.destination",
        )
        s3 = job.spec.output.s3
    else:
        destination = destination_flag(args.target, "target")
        s3 = None
    if args.endpoint or args.region:
        s3 = S3Spec(endpoint=args.endpoint or (s3.endpoint if s3 else None), region=args.region)
    store = open_store(destination, s3)

    async def run() -> int:
        if args.action == "ls":
            listed = await store.files()
            for stored in listed:
                print(f"{stored.size:>12}  {stored.key}")
            count, size = stored_files(listed)
            if count:
                print(f"{count} stored files, {size} bytes ({size / 2**20:.1f} MiB) in files/")
            return 0
        if args.action in ("cat", "items"):
            out = sys.stdout.buffer
            records = page_records if args.action == "cat" else item_records
            async for line in records(store, every_fetch=args.all):
                out.write(line + b"\n")
            out.flush()
            return 0
        if args.action == "changes":
            return await _changes(store, args.since, as_json=args.json)
        files = await store.files()
        runs = run_ids(files)
        if runs and not any(stored.key == MANIFEST for stored in files):
            # A scheduled job: each run has its layout and manifest under runs/<run-id>/.
            codes = [await _verified(destination.for_run(run), s3, args.deep) for run in runs]
            return max(codes)
        return await _verified(destination, s3, args.deep)

    try:
        return asyncio.run(run())
    except FileNotFoundError as error:
        from crawlfleet.errors import OutputError

        raise OutputError(f"{destination.url}: not found ({error.strerror or error})") from None


async def _changes(store: OutputStore, since_text: str | None, *, as_json: bool) -> int:
    """``crawlfleet output changes``: each URL that appeared, changed or went away, once."""
    import time
    from collections import Counter

    from crawlfleet.output.changes import changes, parse_since

    since = None if since_text is None else parse_since(since_text, time.time())
    counts: Counter[str] = Counter()
    async for event in changes(store, since=since):
        counts[event.change] += 1
        print(event.to_json() if as_json else event.to_text())
    window = f" since {since_text}" if since_text else ""
    print(
        f"{counts['new']} new, {counts['changed']} changed, {counts['gone']} gone{window}",
        file=sys.stderr,
    )
    return 0


async def _verified(destination: Destination, s3: S3Spec | None, deep: bool = False) -> int:
    """``crawlfleet output verify`` of one destination (or one run's): its lines, its code."""
    from crawlfleet.output.reader import verify
    from crawlfleet.output.stores import open_store

    result = await verify(open_store(destination, s3), deep=deep)
    if result.problem:
        print(f"crawlfleet: {result.problem}", file=sys.stderr)
        return 1
    for path in result.missing:
        print(f"missing: {destination.key(path)}", file=sys.stderr)
    for path in result.changed:
        print(f"changed: {destination.key(path)} (size or sha256 differs)", file=sys.stderr)
    for path in result.unlisted:
        print(f"not in the manifest (a duplicate nobody acked): {path}", file=sys.stderr)
    for key, url in result.files_missing:
        print(f"missing: {destination.key(key)} (the stored file of {url})", file=sys.stderr)
    for key, url in result.files_changed:
        what = "size or sha256" if deep else "size"
        print(
            f"changed: {destination.key(key)} ({what} differs from {url}'s record)",
            file=sys.stderr,
        )
    verdict = "verified" if result.ok else "FAILED"
    stored = ""
    if result.files_checked or result.files_missing:
        how = "size and sha256" if deep else "size"
        stored = (
            f"; {result.files_checked} stored files checked ({how}),"
            f" {len(result.files_missing)} missing, {len(result.files_changed)} changed"
        )
    print(
        f"{destination.url}: {verdict}: {result.checked} of"
        f" {result.checked + len(result.missing)} listed files checked,"
        f" {len(result.missing)} missing, {len(result.changed)} changed{stored}"
    )
    return 0 if result.ok else 1


def _extract(args: argparse.Namespace) -> int:
    """``crawlfleet extract --job job.yaml URL|FILE``: the quickest way to write rules."""
    import json

    from crawlfleet.crawler.harvest.extract import ExtractionError, Extractor
    from crawlfleet.crawler.harvest.harvest import decoded_html
    from crawlfleet.crawljob import load_crawljob
    from crawlfleet.errors import ConfigError

    spec = load_crawljob(args.job).spec
    extractor = Extractor.from_rules(spec.extract)
    if extractor is None:
        raise ConfigError(f"{args.job}: spec.extract holds no rules to try")
    page = Path(args.page)
    if page.is_file():
        body, content_type = page.read_bytes(), None
        url = args.url or page.resolve().as_uri()
    elif args.page.startswith(("http://", "https://")):
        url, body, content_type = asyncio.run(_fetch_one(args.page, spec))
    else:
        raise ConfigError(f"{args.page}: neither an http(s) URL nor a file")
    if not extractor.applies_to(url):
        print(f"crawlfleet: no rule of spec.extract matches {url}", file=sys.stderr)
        return 1
    try:
        items = extractor.extract(decoded_html(body, content_type), url)
    except ExtractionError as error:
        print(f"crawlfleet: {url}: {error}", file=sys.stderr)
        return 1
    for item in items:
        line = {"url": url, "source": item.source, "position": item.position, "fields": item.fields}
        print(json.dumps(line, ensure_ascii=False))
    return 0


async def _fetch_one(url: str, spec: CrawlJobSpec) -> tuple[str, bytes, str | None]:
    """One page fetched as a worker fetches it (the job's limits, user agent and address
    guard); returns its URL after redirects, its body and its Content-Type."""
    from crawlfleet.crawler.fetching.fetch import Fetcher, FetchSettings
    from crawlfleet.crawljob.proxy import checked_proxies
    from crawlfleet.errors import FetchError

    fetcher = Fetcher(
        FetchSettings.from_spec(spec), proxies=checked_proxies(spec.proxy, os.environ)
    )
    try:
        result = await fetcher.fetch(url, min_html_bytes=0)
    finally:
        await fetcher.aclose()
    if result.failure is not None:
        raise FetchError(str(result.failure), f"{url}: {result.message}")
    return result.final_url, result.body, result.content_type


def _run(args: argparse.Namespace, job_file: Path, config: Config) -> int:
    from crawlfleet.local.zygote import Zygote

    # First of all: the zygote imports the workers' modules while we import ours.
    zygote = Zygote.start()
    try:
        return _run_with(args, job_file, config, zygote)
    finally:
        zygote.close()


def _run_with(args: argparse.Namespace, job_file: Path, config: Config, zygote: Zygote) -> int:
    with without_gc():
        from crawlfleet.crawljob import load_crawljob
        from crawlfleet.destinations import destination_flag
        from crawlfleet.errors import ConfigError
        from crawlfleet.local.redis_cluster import MAX_LOCAL_NODES
        from crawlfleet.local.runner import RunOptions, run_local

        job = load_crawljob(job_file, config.seed_list.bounds())
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {args.workers})")
    if args.shards is not None and not 1 <= args.shards <= MAX_LOCAL_NODES:
        raise ConfigError(f"--shards must be between 1 and {MAX_LOCAL_NODES} (got {args.shards})")
    config = dataclasses.replace(
        config, run=dataclasses.replace(config.run, redis_url=args.redis_url)
    )
    # Checked before anything starts, and resolved: a folder that climbs (../crawls) is made
    # absolute here, as the shell would, so nothing downstream meets a '..'.
    destination = None if args.output is None else destination_flag(args.output, "--output").url
    options = RunOptions(
        job_file=job_file,
        output_dir=args.out or Path("crawl-output") / job.metadata.name,
        destination=destination,
        config=config,
        workers=args.workers,
        shards=args.shards,
        resume=args.resume,
        json_summary=args.json,
        once=getattr(args, "once", False),  # `crawlfleet demo` has no schedule
        zygote=zygote,
    )
    return asyncio.run(run_local(job, options))


def _demo(args: argparse.Namespace, config: Config) -> int:
    """Serve the bundled site on loopback and run the demo CrawlJob against it."""
    from importlib.resources import files

    import yaml

    from crawlfleet.testsite import SiteConfig, TestSite

    template = yaml.safe_load(files("crawlfleet.local").joinpath("demo.yaml").read_text())
    site_config = SiteConfig(hosts=3, pages_per_host=100, hostile_heavy=False, hostile_slow=False)
    with TestSite(site_config) as site:
        template["spec"]["seeds"] = site.seeds
        template["spec"]["scope"]["allowedDomains"] = site.hosts
        out = args.out or Path("crawl-output") / "demo"
        if (out / "demo-job.yaml").exists():
            shutil.rmtree(out)  # an earlier demo: its site had other ports, start afresh
        out.mkdir(parents=True, exist_ok=True)
        job_file = out / "demo-job.yaml"
        job_file.write_text(yaml.safe_dump(template, sort_keys=False))
        print(f"crawlfleet demo: serving {len(site.hosts)} loopback hosts", file=sys.stderr)
        args.out = out
        return _run(args, job_file, config)


def run() -> NoReturn:
    """The ``crawlfleet`` command: :func:`main`, then an exit that a native runtime cannot spoil.

    obstore (the S3 client) completes its futures on a Tokio runtime that Python never shuts
    down; a worker thread still handing back a result while the interpreter finalizes panics,
    and the process aborts with SIGABRT after everything succeeded (a known race of
    pyo3-async-runtimes: roughly one exit in ten here, after a listing or a download). Once
    obstore is loaded the process therefore ends with ``os._exit`` after flushing what
    finalization would have flushed: the output is durable by then, the logs written.
    """
    code = main()
    if "obstore" not in sys.modules:
        sys.exit(code)
    logging.shutdown()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
