"""The ``crawlfleet`` command: user-facing output lives here and nowhere else.

``crawlfleet worker`` is the entrypoint of the crawler image; ``crawlfleet validate`` checks
a CrawlJob the way the CRD will. Settings come from flags, else ``CRAWLFLEET_*`` environment
variables (read once, here), else defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from crawlfleet.errors import CrawlfleetError

__all__ = ["main"]


class _JsonFormatter(logging.Formatter):
    """One JSON object per line, with the structured fields (layer, worker, job) kept."""

    _FIELDS = ("layer", "worker", "job", "host")

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in self._FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"CRAWLFLEET_{name}", default)


def _default_worker_id() -> str:
    """The pod name in a cluster (HOSTNAME); host and pid where several share a machine."""
    pod = os.environ.get("POD_NAME")
    if pod:
        return pod
    return f"{socket.gethostname()}-{os.getpid()}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crawlfleet", description=__doc__.split("\n")[0])
    parser.add_argument("--log-level", default=_env("LOG_LEVEL", "info"))
    commands = parser.add_subparsers(dest="command", required=True)

    worker = commands.add_parser("worker", help="run one crawl worker against a job's Redis")
    worker.add_argument("job", nargs="?", default=_env("JOB_FILE"), help="CrawlJob YAML file")
    worker.add_argument("--redis-url", default=_env("REDIS_URL"))
    worker.add_argument("--worker-id", default=_env("WORKER_ID") or _default_worker_id())
    worker.add_argument("--out", default=_env("OUTPUT_DIR", "crawl-output"), type=Path)
    worker.add_argument("--metrics-port", type=int, default=int(_env("METRICS_PORT", "0") or 0))
    worker.add_argument(
        "--grace-seconds", type=float, default=float(_env("GRACE_SECONDS", "25") or 25)
    )
    worker.add_argument(
        "--keep-running",
        action="store_true",
        help="do not exit when the job is complete (the operator scales workers to zero)",
    )

    validate = commands.add_parser("validate", help="check a CrawlJob as the CRD will")
    validate.add_argument("job", help="CrawlJob YAML file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _setup_logging(args.log_level)
    try:
        if args.command == "worker":
            return _worker(args)
        if args.command == "validate":
            return _validate(args)
    except CrawlfleetError as exc:
        print(f"crawlfleet: {exc}", file=sys.stderr)
        return 2
    return 2


def _validate(args: argparse.Namespace) -> int:
    from crawlfleet.crawljob import load_crawljob

    job = load_crawljob(args.job)
    print(f"{args.job}: CrawlJob {job.metadata.namespace}/{job.metadata.name} is valid")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from crawlfleet.crawler.process import run_worker
    from crawlfleet.crawljob import load_crawljob
    from crawlfleet.errors import ConfigError

    if not args.job:
        raise ConfigError("no CrawlJob given: pass a file or set CRAWLFLEET_JOB_FILE")
    if not args.redis_url:
        raise ConfigError("no Redis given: pass --redis-url or set CRAWLFLEET_REDIS_URL")
    job = load_crawljob(args.job)

    async def _run() -> int:
        return await run_worker(
            job,
            redis_url=args.redis_url,
            worker_id=args.worker_id,
            output_dir=args.out,
            metrics_port=args.metrics_port,
            grace_seconds=args.grace_seconds,
            exit_when_done=not args.keep_running,
            install_signal_handlers=True,
        )

    return asyncio.run(_run())


if __name__ == "__main__":
    sys.exit(main())
