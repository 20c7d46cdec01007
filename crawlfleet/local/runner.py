"""``crawlfleet run``: a whole CrawlJob on one machine, steered by the operator's own brain.

A private redis-server (AOF on, data under the output folder, so an interrupted run
resumes), worker processes from :class:`LocalProcessBackend` (the minimum fleet started
before seeding, so their imports overlap it), and every quarter second: observe the frontier
and the processes, :func:`crawlfleet.fleet.decide`, apply. Between ticks a cheap poll (the
job's counters, a waitpid per worker) brings the next tick forward the moment the crawl is
done or a worker died. Ctrl-C or SIGTERM drains the workers (they release their leases),
stops Redis cleanly and says how to resume.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawlfleet.crawljob import CrawlJob
from crawlfleet.errors import ConfigError
from crawlfleet.fleet import FleetMemory, FleetPolicy, Observation, decide
from crawlfleet.frontier import Frontier, FrontierSettings, FrontierStats, connect
from crawlfleet.local.processes import LocalProcessBackend
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.local.zygote import Zygote

__all__ = ["RunOptions", "run_local"]

log = logging.getLogger(__name__)

EXIT_INTERRUPTED = {signal.SIGINT: 130, signal.SIGTERM: 143}


@dataclass(frozen=True, slots=True)
class RunOptions:
    job_file: Path
    output_dir: Path
    redis_url: str | None = None
    workers: int | None = None  # pin a fixed count instead of the brain's
    resume: bool = False
    json_summary: bool = False
    # Forks the workers when given (see crawlfleet/local/zygote.py); else each is started.
    zygote: Zygote | None = None
    # A full tick (heartbeats, lease expiry, the brain, scaling, progress) every
    # ``tick_seconds``; in between, one HMGET of the job's counters and a waitpid per worker
    # every ``poll_seconds``, so that the end of the crawl or a dead worker is acted on within
    # a poll instead of a tick.
    tick_seconds: float = 0.25
    poll_seconds: float = 0.05
    # The frontier's counters are exact and read in one command (a page's links are enqueued
    # before it is acked, in one script; claims, requeues and retries move counts atomically),
    # so "seeded, nothing queued, delayed or leased" is final the moment it is seen: no worker
    # can undo it. The worker's own exit check trusts it without a grace too.
    completion_grace_seconds: float = 0.0
    progress_seconds: float = 5.0


def _print(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


async def run_local(job: CrawlJob, options: RunOptions) -> int:
    out = options.output_dir
    data_dir = out / "redis"
    if options.redis_url is None and data_dir.exists() and not options.resume:
        raise ConfigError(
            f"{out} holds an earlier run; continue it with --resume, or choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    _log_to_file(out / "crawlfleet.log")
    server: RedisServer | None = None
    if options.redis_url is None:
        server = RedisServer(data_dir, appendonly=True).start()
    redis_url = options.redis_url or (server.url if server else "")
    client = connect(redis_url)
    backend = LocalProcessBackend(
        options.job_file.resolve(), redis_url, out.resolve(), zygote=options.zygote
    )
    stop_signal: list[signal.Signals] = []
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_signal.append, sig)
    started = time.monotonic()
    events = _Events(out / "events.jsonl")
    max_workers = 0
    try:
        # A worker's imports take longer than opening and seeding the frontier: start the
        # fleet's floor first, so that it loads while we seed (a worker joins the frontier
        # with the same idempotent open and seed, whichever of us comes first).
        first = 0 if job.spec.suspend else options.workers or job.spec.workers.min_replicas
        if first:
            events.emit("scale", **{"from": 0, "to": first}, reason="start-up: minimum fleet")
        for _ in range(first):
            backend.start()
        max_workers = first
        frontier = await Frontier.open(client, FrontierSettings.from_spec(job.job_id, job.spec))
        new_seeds = await frontier.seed(list(job.spec.seeds))
        _print(
            f"crawlfleet: {job.job_id}: {new_seeds} new seed(s); redis {redis_url.split('@')[-1]};"
            f" output {out}"
        )
        policy = FleetPolicy.from_spec(job.spec, options.completion_grace_seconds)
        memory = FleetMemory(replicas=first)
        progress = _Progress(job, started, options.progress_seconds)
        complete = False
        next_tick = 0.0
        while not stop_signal:
            stats = await frontier.stats()
            now = time.monotonic()
            if now < next_tick and not stats.complete and not backend.exited():
                await asyncio.sleep(options.poll_seconds)
                continue
            next_tick = now + options.tick_seconds
            beats = {b.worker: b.age_seconds for b in await frontier.workers()}
            views = backend.views(beats)
            known = {v.worker_id for v in views}
            vanished = tuple(w for w in beats if w not in known and w.startswith("local-"))
            seen = Observation.of(
                stats,
                now=time.time(),
                suspended=job.spec.suspend,
                workers=tuple(views),
                vanished=vanished,
            )
            decision, memory = decide(policy, seen, memory)
            for worker_id in decision.replace:
                backend.stop(worker_id, graceful=False)
                events.emit("replace", worker=worker_id, reason="no heartbeat")
            for worker_id in decision.requeue_owners:
                moved = await frontier.requeue_owner(worker_id)
                await frontier.forget_worker(worker_id)
                backend.forget(worker_id)
                events.emit("requeue", worker=worker_id, requeued=moved.requeued, dead=moved.dead)
            await frontier.requeue_expired()
            backend.reap()
            if decision.complete:
                events.emit("complete", crawled=stats.crawled, dead=stats.dead)
                complete = True
                break
            desired = decision.desired_replicas
            if options.workers is not None and desired > 0:
                desired = options.workers
            active = backend.active()
            if desired != len(active):
                events.emit(
                    "scale",
                    **{"from": len(active), "to": desired},
                    queued=stats.queued,
                    in_flight=stats.leased,
                    reason=decision.reason or "replace exited workers",
                )
            for _ in range(desired - len(active)):
                backend.start()
            for worker_id in reversed(active[desired:]):
                backend.stop(worker_id)
            max_workers = max(max_workers, len(backend.active()))
            progress.show(stats, len(backend.active()))
            await asyncio.sleep(options.poll_seconds)
        backend.stop_all(timeout_seconds=30)
        stats = await frontier.stats()
        elapsed = time.monotonic() - started
        if not complete:
            sig = stop_signal[0] if stop_signal else signal.SIGTERM
            _print(
                f"crawlfleet: interrupted after {stats.crawled} pages; resume with:\n"
                f"  crawlfleet run {options.job_file} --resume --out {out}"
            )
            return EXIT_INTERRUPTED.get(sig, 1)
        summary = await _summary(frontier, stats, elapsed, max_workers, out)
        progress.done(stats, elapsed)
        if options.json_summary:
            print(json.dumps(summary, sort_keys=True), flush=True)
        return 0
    finally:
        backend.stop_all(timeout_seconds=30)
        await client.aclose()
        if server is not None:
            server.stop()


async def _summary(
    frontier: Frontier, stats: FrontierStats, elapsed: float, max_workers: int, out: Path
) -> dict[str, Any]:
    dead = []
    async for letter in frontier.dead_letters():
        dead.append(
            {
                "url": letter.url,
                "failure_class": letter.failure_class,
                "message": letter.message,
                "attempts": letter.attempts,
                "depth": letter.depth,
                "parent": letter.parent,
            }
        )
    summary = {
        "phase": "Succeeded",
        "crawled": stats.crawled,
        "failed": stats.failed,
        "dead_lettered": stats.dead,
        "seen": stats.seen,
        "duplicates_skipped": stats.duplicates,
        "requeued": stats.requeued,
        "elapsed_s": round(elapsed, 3),
        "pages_per_s": round(stats.crawled / elapsed, 1) if elapsed > 0 else 0.0,
        "max_workers": max_workers,
    }
    _write_results(out, dead, summary)
    return summary


def _write_results(out: Path, dead: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The run's last files: every dead letter (also those a requeue made) and the summary."""
    with open(out / "dead-letters.jsonl", "w") as f:
        f.writelines(json.dumps(d) + "\n" for d in dead)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


class _Events:
    """The run's decisions, one JSON line each (the local stand-in for Kubernetes Events)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def emit(self, kind: str, **fields: Any) -> None:
        entry = {"ts": round(time.time(), 3), "kind": kind, **fields}
        log.info("%s %s", kind, fields)
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")


def _log_to_file(path: Path) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.getLogger("crawlfleet").addHandler(handler)


class _Progress:
    """A progress line: rich on a terminal, a plain line every few seconds otherwise."""

    def __init__(self, job: CrawlJob, started: float, every_seconds: float) -> None:
        self.job = job
        self.started = started
        self.every = every_seconds
        self.last = 0.0
        self.tty = sys.stderr.isatty()
        self._console: Any = None
        if self.tty:
            from rich.console import Console

            self._console = Console(stderr=True)

    def line(self, stats: FrontierStats, workers: int) -> str:
        elapsed = max(1e-6, time.monotonic() - self.started)
        rate = stats.crawled / elapsed
        text = (
            f"crawled {stats.crawled}  {rate:.0f}/s  queued {stats.queued}  "
            f"in-flight {stats.leased}  workers {workers}  failed {stats.dead}"
        )
        max_pages = self.job.spec.scope.max_pages
        if max_pages and rate > 0:
            text += f"  ETA {max(0, max_pages - stats.crawled) / rate:.0f}s"
        return text

    def show(self, stats: FrontierStats, workers: int) -> None:
        now = time.monotonic()
        if self.tty and self._console is not None:
            self._console.print(self.line(stats, workers), end="\r", highlight=False)
        elif now - self.last >= self.every:
            self.last = now
            _print(self.line(stats, workers))

    def done(self, stats: FrontierStats, elapsed: float) -> None:
        _print(
            f"crawlfleet: complete: {stats.crawled} pages crawled, {stats.dead} dead-lettered,"
            f" in {elapsed:.1f} s"
        )
