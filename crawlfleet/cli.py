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
import gc
import json
import logging
import os
import secrets
import shutil
import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from crawlfleet.config import Config
from crawlfleet.errors import CrawlfleetError

if TYPE_CHECKING:
    from crawlfleet.local.zygote import Zygote

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
    """JSON lines on stderr at ``level``; crawlfleet's own INFO still reaches file handlers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter())
    handler.setLevel(level.upper())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("crawlfleet").setLevel(min(logging.INFO, handler.level))
    # httpx logs every request at INFO: a JSON line per page is noise and CPU. Our own
    # request layer logs what matters (retries, failures) with its layer field.
    if handler.level > logging.DEBUG:
        logging.getLogger("httpx").setLevel(logging.WARNING)


def _default_worker_id() -> str:
    """The pod name in a cluster (POD_NAME); host and pid where several share a machine."""
    pod = os.environ.get("POD_NAME")
    if pod:
        return pod
    return f"{socket.gethostname()}-{os.getpid()}"


def _parser(config: Config) -> argparse.ArgumentParser:
    """Flags whose defaults are ``config``'s (defaults, then the environment, read once)."""
    parser = argparse.ArgumentParser(prog="crawlfleet", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--log-level",
        default=config.log_level,
        help="stderr log level [info; warning for run and demo, whose full log is a file]",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    worker = commands.add_parser("worker", help="run one crawl worker against a job's Redis")
    knobs = config.worker
    worker.add_argument("job", nargs="?", default=knobs.job_file, help="CrawlJob YAML file")
    worker.add_argument("--redis-url", default=knobs.redis_url)
    worker.add_argument("--worker-id", default=knobs.worker_id)
    worker.add_argument(
        "--incarnation",
        action="store_true",
        default=knobs.incarnation,
        help="append '#<random>' to the worker id: a restarted container is a new worker, so "
        "the leases of the one that died are not mistaken for its own (pods keep their name)",
    )
    worker.add_argument("--out", default=knobs.output_dir, type=Path)
    worker.add_argument("--metrics-port", type=int, default=knobs.metrics_port)
    worker.add_argument(
        "--metrics-host",
        default=knobs.metrics_host,
        help=f"address /metrics listens on (a pod passes its pod IP) [{knobs.metrics_host}]",
    )
    worker.add_argument(
        "--grace-seconds",
        type=float,
        default=knobs.drain.grace_seconds,
        help="after SIGTERM, how long in-flight fetches may finish before their leases are "
        f"released [{knobs.drain.grace_seconds:g}]",
    )
    worker.add_argument(
        "--keep-running",
        action="store_true",
        help="do not exit when the job is complete (the operator scales workers to zero)",
    )

    run = commands.add_parser("run", help="run a CrawlJob on this machine (private Redis)")
    run.add_argument("job", help="CrawlJob YAML file")
    _run_flags(run, config)

    demo = commands.add_parser("demo", help="crawl the bundled loopback demo site")
    _run_flags(demo, config)

    validate = commands.add_parser("validate", help="check a CrawlJob as the CRD will")
    validate.add_argument("job", help="CrawlJob YAML file")

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
    parser.add_argument("--out", type=Path, help="output folder [./crawl-output/<name>]")
    parser.add_argument("--redis-url", default=config.run.redis_url, help="use this Redis")
    parser.add_argument("--workers", type=int, help="a fixed number of workers")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON last")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = Config.from_env()  # the one read of CRAWLFLEET_* in this process
    except CrawlfleetError as exc:
        print(f"crawlfleet: {exc}", file=sys.stderr)
        return 2
    args = _parser(config).parse_args(argv)
    quiet = args.command in ("run", "demo")
    _setup_logging(args.log_level or ("warning" if quiet else "info"))
    try:
        if args.command == "worker":
            return _worker(args, config)
        if args.command == "validate":
            return _validate(args)
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
    # recognise its model objects (20 MB the operator never uses: it speaks aiohttp).
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


def _validate(args: argparse.Namespace) -> int:
    from crawlfleet.crawljob import load_crawljob

    job = load_crawljob(args.job)
    print(f"{args.job}: CrawlJob {job.metadata.namespace}/{job.metadata.name} is valid")
    return 0


@contextlib.contextmanager
def _start_up() -> Iterator[None]:
    """No cyclic GC while a command imports its modules and parses its job.

    Start-up builds only long-lived objects (modules, pydantic's validators), so the
    collections their allocations trigger find nothing to free: ~45 ms of the ~0.7 s of CPU
    a worker spends before its first request (median of eight alternating runs), which a
    crawl run pays once per worker it starts.
    """
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _run(args: argparse.Namespace, job_file: Path, config: Config) -> int:
    from crawlfleet.local.zygote import Zygote

    # First of all: the zygote imports the workers' modules while we import ours.
    zygote = Zygote.start()
    try:
        return _run_with(args, job_file, config, zygote)
    finally:
        zygote.close()


def _run_with(args: argparse.Namespace, job_file: Path, config: Config, zygote: Zygote) -> int:
    with _start_up():
        from crawlfleet.crawljob import load_crawljob
        from crawlfleet.errors import ConfigError
        from crawlfleet.local.runner import RunOptions, run_local

        job = load_crawljob(job_file)
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {args.workers})")
    config = dataclasses.replace(
        config, run=dataclasses.replace(config.run, redis_url=args.redis_url)
    )
    options = RunOptions(
        job_file=job_file,
        output_dir=args.out or Path("crawl-output") / job.metadata.name,
        config=config,
        workers=args.workers,
        resume=args.resume,
        json_summary=args.json,
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


def _worker(args: argparse.Namespace, config: Config) -> int:
    with _start_up():
        from crawlfleet.crawler.process import run_worker
        from crawlfleet.crawljob import load_crawljob
        from crawlfleet.errors import ConfigError

        if not args.job:
            raise ConfigError("no CrawlJob given: pass a file or set CRAWLFLEET_JOB_FILE")
        if not args.redis_url:
            raise ConfigError("no Redis given: pass --redis-url or set CRAWLFLEET_REDIS_URL")
        job = load_crawljob(args.job)
    knobs = dataclasses.replace(
        config.worker,
        job_file=args.job,
        redis_url=args.redis_url,
        output_dir=args.out,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        drain=dataclasses.replace(config.worker.drain, grace_seconds=args.grace_seconds),
    )
    worker_id = args.worker_id or _default_worker_id()
    if args.incarnation:
        worker_id = f"{worker_id}#{secrets.token_hex(3)}"

    async def _run() -> int:
        return await run_worker(
            job,
            redis_url=args.redis_url,
            worker_id=worker_id,
            config=knobs,
            exit_when_done=not args.keep_running,
            install_signal_handlers=True,
        )

    return asyncio.run(_run())


if __name__ == "__main__":
    sys.exit(main())
