"""One worker process, launched: ``crawlfleet worker``'s entry, which picks the kind of worker.

:func:`main` is the worker's own entry: ``crawlfleet worker`` hands it its arguments, and the
local runner's zygote calls it in a forked child, so a forked worker never imports the command
line (``cli.py``) and the zygote has no import circle with it. It reads the flags and the job,
then runs the worker the job asks for: crawlfleet's own (:func:`crawlfleet.crawler.run_worker`)
or, for ``spec.crawler.scrapy``, the Scrapy runtime (:mod:`crawlfleet.scrapy.process`). Both
kinds are known only here, above them, so the crawler never imports the Scrapy runtime that is
built on it (docs/architecture.md).

A worker that must stop (a bad job, a destination or Redis refused at start: exit 2; an
unexpected exception: exit 1, with its traceback) also writes why to ``--termination-log``,
for whatever runs it (crawlfleet.fleet.exits): a pod's terminationMessagePath, the local
runner's ``logs/<worker>.exit``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import secrets
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from crawlfleet.config import Config, WorkerConfig
from crawlfleet.crawler import run_worker
from crawlfleet.crawljob import CrawlJob, load_crawljob
from crawlfleet.destinations import destination_flag
from crawlfleet.errors import ConfigError, CrawlfleetError
from crawlfleet.fleet.exits import write_termination_message
from crawlfleet.startup import setup_logging, without_gc

__all__ = ["main"]


def main(
    argv: Sequence[str] | None = None,
    *,
    log_level: str | None = None,
    config: Config | None = None,
) -> int:
    """``crawlfleet worker ARGV``: crawl one job's Redis until the job is done or stopped.

    ``config`` is the process's knobs when the caller has read them already (the command
    line); else the environment is read here, once. Exit 2 with one line for a bad setting.
    """
    try:
        config = config if config is not None else Config.from_env()
    except CrawlfleetError as exc:
        print(f"crawlfleet: {exc}", file=sys.stderr)
        return 2
    args = _parser(config.worker).parse_args(argv)
    setup_logging(log_level or config.log_level or "info")
    try:
        with without_gc():
            job, knobs = _resolve(args, config.worker)
    except CrawlfleetError as exc:
        return _refused(exc, args.termination_log)
    worker_id = args.worker_id or _default_worker_id()
    if args.incarnation:
        worker_id = f"{worker_id}#{secrets.token_hex(3)}"
    launch = _launcher(job)
    try:
        return launch(
            job,
            redis_url=args.redis_url,
            worker_id=worker_id,
            config=knobs,
            exit_when_done=not args.keep_running,
            install_signal_handlers=True,
        )
    except CrawlfleetError as exc:  # a destination or a Redis refused at start: one sentence
        return _refused(exc, knobs.termination_log)
    except Exception as exc:  # a bug: the traceback goes to the log, the gist to the runner
        write_termination_message(knobs.termination_log, "WorkerCrashed", _gist(exc))
        raise


def _launcher(job: CrawlJob) -> Callable[..., int]:
    """How this process crawls: :func:`run_worker` on a loop of its own, or, for a job with
    ``spec.crawler.scrapy`` (a third kind of worker, with the same arguments and contract),
    its spider over the frontier, imported only now, so that neither Scrapy nor Twisted is
    loaded by a zygote that forks."""
    if job.spec.scrapy is None:
        return lambda job, **values: asyncio.run(run_worker(job, **values))
    from crawlfleet.scrapy.process import run_scrapy_worker

    return run_scrapy_worker


def _refused(error: CrawlfleetError, termination_log: Path | None) -> int:
    """Exit 2 with one sentence, on stderr and in the termination message."""
    print(f"crawlfleet: {error}", file=sys.stderr)
    write_termination_message(termination_log, error.reason, str(error))
    return 2


def _gist(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _parser(knobs: WorkerConfig) -> argparse.ArgumentParser:
    """Flags whose defaults are ``knobs``' (defaults, then the environment, read once)."""
    parser = argparse.ArgumentParser(
        prog="crawlfleet worker", description="Run one crawl worker against a job's Redis."
    )
    parser.add_argument("job", nargs="?", default=knobs.job_file, help="CrawlJob YAML file")
    parser.add_argument("--redis-url", default=knobs.redis_url)
    parser.add_argument("--worker-id", default=knobs.worker_id)
    parser.add_argument(
        "--incarnation",
        action="store_true",
        default=knobs.incarnation,
        help="append '#<random>' to the worker id: a restarted container is a new worker, so "
        "the leases of the one that died are not mistaken for its own (pods keep their name)",
    )
    parser.add_argument(
        "--out",
        default=knobs.output_dir,
        type=Path,
        help="output folder when neither --output nor the job names a destination",
    )
    parser.add_argument(
        "--output",
        default=knobs.destination,
        help="output destination (a folder, file:// or s3://bucket/prefix/), over the job's",
    )
    parser.add_argument("--metrics-port", type=int, default=knobs.metrics_port)
    parser.add_argument(
        "--metrics-host",
        default=knobs.metrics_host,
        help=f"address /metrics listens on (a pod passes its pod IP) [{knobs.metrics_host}]",
    )
    parser.add_argument(
        "--grace-seconds",
        type=float,
        default=knobs.drain.grace_seconds,
        help="after SIGTERM, how long in-flight fetches may finish before their leases are "
        f"released [{knobs.drain.grace_seconds:g}]",
    )
    parser.add_argument(
        "--termination-log",
        type=Path,
        default=knobs.termination_log,
        help="a file to write why the worker stopped into, when it must (its runner reads it)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        help="at least this many frontier partitions, over the job's frontier.shards (crawlfleet"
        " run --shards gives its workers the count of its local Redis Cluster's nodes)",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="do not exit when the job is complete (the operator scales workers to zero)",
    )
    return parser


def _resolve(args: argparse.Namespace, knobs: WorkerConfig) -> tuple[CrawlJob, WorkerConfig]:
    """The job and the process's knobs with the flags applied; ConfigError names what lacks."""
    if not args.job:
        raise ConfigError("no CrawlJob given: pass a file or set CRAWLFLEET_JOB_FILE")
    if not args.redis_url:
        raise ConfigError("no Redis given: pass --redis-url or set CRAWLFLEET_REDIS_URL")
    job = load_crawljob(args.job)
    if args.shards is not None:
        job = job.with_shards_at_least(args.shards)
    output = None if args.output is None else destination_flag(args.output, "--output").url
    return job, dataclasses.replace(
        knobs,
        job_file=args.job,
        redis_url=args.redis_url,
        output_dir=args.out,
        destination=output,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        termination_log=args.termination_log,
        drain=dataclasses.replace(knobs.drain, grace_seconds=args.grace_seconds),
    )


def _default_worker_id() -> str:
    """The pod name in a cluster (POD_NAME); host and pid where several share a machine."""
    pod = os.environ.get("POD_NAME")
    if pod:
        return pod
    return f"{socket.gethostname()}-{os.getpid()}"
