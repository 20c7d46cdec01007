"""``crawlfleet run``: a whole CrawlJob on one machine, steered by the operator's own brain.

A private redis-server (AOF on, data under the output folder, so an interrupted run
resumes) -- or, with ``--shards N``, N of them joined into a loopback Redis Cluster
(:mod:`crawlfleet.local.redis_cluster`) over which the job's frontier is partitioned --, worker
processes from :class:`LocalProcessBackend`, and the one steering tick
(:func:`crawlfleet.fleet.steer.tick`) every quarter second. Between ticks a cheap poll (one
read of the job's counters, a waitpid per worker) brings the next tick forward the moment
the crawl is done, the backlog outgrows the fleet, or a worker died.

What the tick remembers (the scale-down window, the worker count) is kept in
``<out>/state.json``, so ``--resume`` goes on with the same decisions; the job file is
watched, so editing its ``suspend`` or ``workers`` takes effect at the next tick, as
``kubectl edit`` does in a cluster. Ctrl-C or SIGTERM drains the workers (they finish or
release their leases; a second Ctrl-C kills them instead, and their leases are requeued on
``--resume``), then stops Redis, which runs in a session of its own so that the terminal's
Ctrl-C reaches only the runner and its workers, with a SHUTDOWN that completes its
append-only file; ``state.json`` then says Suspended, and the run says how to resume.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from crawlfleet.config import Config
from crawlfleet.crawljob import CrawlJob, SeedListBounds, load_crawljob, read_seed_file
from crawlfleet.crawljob.proxy import checked_proxies
from crawlfleet.crawljob.schedule import ScheduleSpec
from crawlfleet.destinations import parse_destination
from crawlfleet.errors import ConfigError, FrontierLost, FrontierUnavailable
from crawlfleet.fleet import (
    Decision,
    FleetEvent,
    FleetMemory,
    FleetPolicy,
    WorkersFailing,
    seed_list_hash,
    steer,
)
from crawlfleet.fleet.clock import Clock, SystemClock, schedule_clock
from crawlfleet.fleet.freshness import Freshness
from crawlfleet.fleet.link_checks import LinkChecks, by_worker
from crawlfleet.fleet.recurring import (
    RecurringSchedule,
    Step,
    fresh_memory,
    run_ended,
    start_now,
    step,
)
from crawlfleet.fleet.runs import RunBook
from crawlfleet.fleet.waiting import duration, plural
from crawlfleet.frontier import FileStats, Frontier, FrontierSettings, FrontierStats
from crawlfleet.local.lifetime import RunLock
from crawlfleet.local.processes import LocalProcessBackend
from crawlfleet.local.redis_cluster import LocalRedisCluster
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.local.zygote import Zygote
from crawlfleet.output.manifest import written_counts
from crawlfleet.output.stores import OutputStore, checked_store

__all__ = ["STATE_FILE", "RunOptions", "run_local"]

log = logging.getLogger(__name__)

EXIT_INTERRUPTED = {signal.SIGINT: 130, signal.SIGTERM: 143}
#: The run's durable steering state, under the output folder.
STATE_FILE = "state.json"
#: In the private Redis's folder (``<out>/redis``): its password, readable by this user only.
PASSWORD_FILE = "password"


@dataclass(frozen=True, slots=True)
class RunOptions:
    """One run, as the command line asked for it; the process knobs are in ``config``."""

    job_file: Path
    output_dir: Path
    #: Where pages go (--output), over the job's output.destination; else ``output_dir``.
    destination: str | None = None
    config: Config = field(default_factory=Config)
    workers: int | None = None  # pin a fixed count instead of the brain's
    resume: bool = False
    json_summary: bool = False
    #: A scheduled job: one run now, then exit (else a run at each due time until Ctrl-C).
    once: bool = False
    #: ``--shards N``: a local Redis Cluster of N nodes instead of one private Redis, and at
    #: least N frontier partitions. None: one private Redis (or, resumed, what the folder ran).
    shards: int | None = None
    # Forks the workers when given (see crawlfleet/local/zygote.py); else each is started.
    zygote: Zygote | None = None


def _print(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


@dataclass
class _State:
    """``state.json``: the run's local status, written when it changes.

    The fleet's memory (what the next tick decides from), the frontier's epoch (its
    identity: a resumed run on a Redis that lost it fails, or re-seeds, and says so) and the
    next worker number are read back by ``--resume``; the phase is for people and scripts,
    as ``status.phase`` is.
    """

    path: Path
    memory: FleetMemory = field(default_factory=FleetMemory)
    next_worker: int = 1
    phase: str = "Pending"
    #: The run's Redis, for ``crawlfleet enqueue`` (never one whose URL holds a password).
    redis_url: str | None = None
    #: The 0600 file with the private Redis's password (RedisServer.write_password).
    redis_password_file: Path | None = None
    #: The private Redis's nodes: 1, or a local cluster's N (None: an external Redis).
    redis_nodes: int | None = None
    #: The frontier's partitions (spec.frontier.shards, raised to --shards), for
    #: ``crawlfleet enqueue``, which opens the same frontier.
    frontier_shards: int = 1
    #: A scheduled job's runs: the next due time, the run going, the last runs.
    book: RunBook | None = None

    @classmethod
    def load(cls, path: Path) -> _State:
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError) as error:
            log.warning("%s unreadable (%s): starting with a fresh fleet memory", path, error)
            return cls(path)
        memory = FleetMemory.from_mapping(raw.get("fleet")) or FleetMemory()
        epoch = raw.get("frontierEpoch")
        memory = replace(memory, frontier_epoch=epoch if isinstance(epoch, str) else None)
        number = raw.get("nextWorker")
        schedule = raw.get("schedule")
        return cls(
            path,
            memory,
            number if isinstance(number, int) and number > 0 else 1,
            book=RunBook.from_status(schedule) if isinstance(schedule, dict) else None,
        )

    def save(
        self, memory: FleetMemory, next_worker: int, phase: str, book: RunBook | None = None
    ) -> None:
        now = (memory, next_worker, phase, book)
        if now == (self.memory, self.next_worker, self.phase, self.book):
            return
        self.memory, self.next_worker, self.phase, self.book = now
        self._write()

    def running_on(
        self,
        redis_url: str,
        password_file: Path | None = None,
        *,
        nodes: int | None = None,
        shards: int = 1,
    ) -> None:
        """Record the run's Redis (a private one's port changes with each start): its URL
        without a password, where a private one's password is kept, its nodes, and the
        frontier's partitions."""
        self.redis_url = None if urlsplit(redis_url).password else redis_url
        self.redis_password_file = password_file
        self.redis_nodes, self.frontier_shards = nodes, shards
        self._write()

    def _write(self) -> None:
        memory = self.memory
        document: dict[str, Any] = {
            "phase": self.phase,
            "fleet": memory.to_mapping(),
            "nextWorker": self.next_worker,
        }
        if memory.frontier_epoch is not None:
            document["frontierEpoch"] = memory.frontier_epoch
        if self.redis_url is not None:
            document["redisUrl"] = self.redis_url
        if self.redis_password_file is not None:
            document["redisPasswordFile"] = str(self.redis_password_file)
        if self.redis_nodes is not None:
            document["redisNodes"] = self.redis_nodes
        document["frontierShards"] = self.frontier_shards
        if self.book is not None:
            document["schedule"] = self.book.to_status()
        text = json.dumps(document, indent=2)
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(text + "\n")
        os.replace(partial, self.path)  # a crash leaves the old state or the new, never half


class _JobFile:
    """The job file, re-read when it changes: its steering fields apply to a running run."""

    def __init__(
        self, path: Path, job: CrawlJob, seed_list: SeedListBounds, shards: int = 1
    ) -> None:
        self.path = path
        self.job = job
        self.seed_list = seed_list
        #: ``--shards``: the partitions every reading of the file is raised to.
        self.shards = shards
        self._mtime = self._stat()

    def _stat(self) -> int | None:
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return None

    def current(self) -> CrawlJob:
        """The job as the file says now (one stat call when it has not changed)."""
        mtime = self._stat()
        if mtime == self._mtime or mtime is None:
            return self.job
        self._mtime = mtime
        try:
            job = load_crawljob(self.path, self.seed_list).with_shards_at_least(self.shards)
        except ConfigError as error:
            _print(f"crawlfleet: {self.path} changed but is invalid, keeping the last: {error}")
            return self.job
        if job.job_id != self.job.job_id:
            _print(f"crawlfleet: {self.path} now names another job; keeping {self.job.job_id}")
            return self.job
        if job.spec != self.job.spec:
            _print(
                f"crawlfleet: {self.path} changed: suspend={job.spec.suspend}, "
                f"workers {job.spec.workers.min_replicas}-{job.spec.workers.max_replicas}"
            )
        self.job = job
        return job


def _seeds_of(job: CrawlJob, job_file: Path, seed_list: SeedListBounds) -> steer.Seeds:
    """The job's seeds for the tick: a seedsFrom list is read only if the tick seeds."""
    if job.spec.seeds_from is None:
        return job.spec.seeds

    async def read() -> tuple[str, ...]:
        listed = await asyncio.to_thread(read_seed_file, job.spec, job_file, seed_list)
        return (*job.spec.seeds, *listed)

    return read


def _seeds_hash(job: CrawlJob, job_file: Path) -> str:
    """The digest of the job's seed list: its seeds, and a seedsFrom file's size and time.

    The job file is re-read when it changes (``_JobFile``), so seeds added to it, or to its
    list, on a running run are queued by the next tick (once: the digest is remembered).
    """
    source = job.spec.seeds_from
    version = ""
    if source is not None and source.file is not None:
        path = job_file.parent / source.file
        try:
            found = path.stat()
            version = f"{path}:{found.st_size}:{found.st_mtime_ns}"
        except OSError:
            version = str(path)  # gone: the tick that reads it says so
    return seed_list_hash(job.spec.seeds, version)


async def run_local(job: CrawlJob, options: RunOptions) -> int:
    """Run the job to its end or an interruption; one run per output folder at a time."""
    with RunLock.acquire(options.output_dir):
        return await _run_locked(job, options)


async def _run_locked(job: CrawlJob, options: RunOptions) -> int:
    config = options.config
    out = options.output_dir
    data_dir = out / "redis"
    external_redis = config.run.redis_url
    if external_redis is None and data_dir.exists() and not options.resume:
        raise ConfigError(
            f"{out} holds an earlier run; continue it with --resume, or choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    _log_to_file(out / "crawlfleet.log")
    # Before anything starts: a destination that cannot be written to is one sentence, exit 2.
    destination = options.destination or job.spec.output.destination or str(out)
    store = await checked_store(job.spec, destination, config.worker.output)
    # So are proxies the workers could not use (CRAWLFLEET_PROXIES: the workers inherit it).
    checked_proxies(job.spec.proxy, os.environ)
    state = _State.load(out / STATE_FILE) if options.resume else _State(out / STATE_FILE)
    nodes = _private_nodes(options, data_dir)
    if nodes is not None:
        job = _partitioned(job, nodes)
    server: RedisServer | LocalRedisCluster | None = None
    if external_redis is None:
        # A password even on loopback: every user and process of the machine reaches it.
        password = secrets.token_urlsafe(24)
        server = (
            RedisServer(
                data_dir,
                appendonly=True,
                die_with_parent=True,
                own_session=True,
                password=password,
            )
            if nodes is None
            else LocalRedisCluster(
                data_dir,
                nodes,
                appendonly=True,
                die_with_parent=True,
                own_session=True,
                password=password,
            )
        ).start()
        server.write_password(data_dir / PASSWORD_FILE)
        state.running_on(
            server.address,
            data_dir / PASSWORD_FILE,
            nodes=nodes or 1,
            shards=job.spec.frontier.shards,
        )
    else:
        state.running_on(external_redis, shards=job.spec.frontier.shards)
    redis_url = external_redis or (server.url if server else "")
    backend = LocalProcessBackend(
        options.job_file.resolve(),
        redis_url,
        out.resolve(),
        drain=config.worker.drain,
        destination=_absolute(destination),
        zygote=options.zygote,
        first_number=state.next_worker,
        events_file=out / "events.jsonl",
        quick_death_seconds=config.steering.startup_grace_seconds,
        shards=nodes,
    )
    stop_signal = _StopSignals()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_signal.received, sig)
    session: _Session | None = None
    settings = FrontierSettings.from_spec(job.job_id, job.spec)
    try:
        memory = state.memory
        policy = _policy(job, options)
        try:
            frontier = await steer.open_frontier(redis_url, settings, policy=policy, memory=memory)
        except FrontierLost as error:  # and redis.onLoss is Fail: the tick's decision
            lost = await steer.frontier_lost(backend, policy, memory, str(error), now=time.time())
            assert lost is not None  # a local fleet is always in view
            state.save(lost.memory, backend.next_number, lost.decision.phase)
            return _failed(lost.decision, options, out)
        session = _Session(
            options=options,
            job_file=_JobFile(
                options.job_file, job, options.config.seed_list.bounds(), shards=nodes or 1
            ),
            state=state,
            backend=backend,
            server=server,
            frontier=frontier,
            settings=settings,
            redis_url=redis_url,
            store=store,
            destination=destination,
            stop_signal=stop_signal,
            policy=policy,
            memory=memory,
            outage=_Outage(server),
        )
        if job.spec.schedule is None:
            return await _one_crawl(session)
        return await _scheduled(session, job.spec.schedule)
    finally:
        backend.stop_all()
        if session is not None and session.frontier is not None:
            await session.frontier.aclose()
        if server is not None:
            server.stop()


def _private_nodes(options: RunOptions, data_dir: Path) -> int | None:
    """The nodes of the run's local Redis Cluster (None: one private Redis, or an external
    one): ``--shards``, or on ``--resume`` what the folder ran on, which must agree."""
    if options.config.run.redis_url is not None:
        if options.shards is not None:
            raise ConfigError(
                "--shards starts a local Redis Cluster and --redis-url names a Redis of yours:"
                " give one of them (on your own cluster, set spec.frontier.shards)"
            )
        return None
    ran = LocalRedisCluster.nodes_in(data_dir) if options.resume else 0
    if not options.resume or not data_dir.exists() or options.shards == ran:
        return options.shards
    if ran == 0 and options.shards is not None:
        raise ConfigError(
            f"{data_dir.parent} ran on one private Redis, which holds its frontier: resume it"
            " without --shards"
        )
    if options.shards is not None:
        raise ConfigError(
            f"{data_dir.parent} ran on a local Redis Cluster of {ran} nodes, which holds its"
            f" frontier: resume it with --shards {ran} (or without --shards)"
        )
    return ran or None


def _partitioned(job: CrawlJob, nodes: int) -> CrawlJob:
    """The job with a partition at least per node of its local cluster (``--shards``)."""
    try:
        return job.with_shards_at_least(nodes)
    except ConfigError as error:
        raise ConfigError(f"--shards {nodes}: {error}") from None


@dataclass
class _Session:
    """What one ``crawlfleet run`` holds while it steers: its Redis, workers, frontier, job
    file, and the fleet memory it carries from tick to tick (and from run to run)."""

    options: RunOptions
    job_file: _JobFile
    state: _State
    backend: LocalProcessBackend
    server: RedisServer | LocalRedisCluster | None
    frontier: Frontier | None
    settings: FrontierSettings
    redis_url: str
    store: OutputStore | None
    destination: str
    stop_signal: _StopSignals
    policy: FleetPolicy
    memory: FleetMemory
    outage: _Outage
    #: A scheduled job's runs (None: a job without spec.schedule).
    book: RunBook | None = None
    clock: Clock = field(default_factory=SystemClock)

    @property
    def out(self) -> Path:
        return self.options.output_dir

    @property
    def job(self) -> CrawlJob:
        return self.job_file.job

    def seeds(self) -> steer.Seeds:
        return _seeds_of(self.job, self.options.job_file, self.options.config.seed_list.bounds())

    def save(self, phase: str) -> None:
        self.state.save(self.memory, self.backend.next_number, phase, self.book)


@dataclass(frozen=True, slots=True)
class _Crawled:
    """How one crawl (a job's, or one run of a scheduled job) ended."""

    #: complete: nothing left; interrupted: Ctrl-C or SIGTERM; cancelled: the schedule ended
    #: the run (suspended, or replaced); failed: ``code`` is the exit code.
    how: Literal["complete", "interrupted", "cancelled", "failed"]
    stats: FrontierStats | None = None
    code: int = 0
    max_workers: int = 0
    elapsed_seconds: float = 0.0
    #: A job with file rules: what it stored (None for the others).
    files: FileStats | None = None
    #: Every worker's links answered locally and checked by the filter, as last heartbeated.
    link_checks: LinkChecks = field(default_factory=LinkChecks)


async def _crawl(session: _Session, *, schedule: RecurringSchedule | None = None) -> _Crawled:
    """Steer the job (or the run begun) until it is complete, interrupted or failed.

    ``schedule``: a scheduled job's run, whose due times are looked at between ticks (Forbid
    skips them, Replace or a suspension cancels the run).
    """
    config = session.options.config
    backend = session.backend
    frontier = session.frontier
    assert frontier is not None
    started = time.monotonic()
    progress = _Progress(session.job, started, config.run.progress_seconds)
    output_blocked = False
    first = True
    next_tick = 0.0
    max_workers = 0
    # Each worker's last link counters: one scaled down mid-run still counts in the summary.
    link_checks: dict[str, LinkChecks] = {}
    job = session.job
    while not session.stop_signal:
        await session.outage.restart_if_exited()
        edited = session.job_file.current()  # one stat call
        if edited is not job:
            job = edited
            session.policy = _policy(job, session.options)
        suspended = job.spec.suspend
        now = time.monotonic()
        try:
            if schedule is not None:
                running = session.book.current if session.book else None
                await _look_at_schedule(session, schedule)
                if session.book is None or session.book.current != running:
                    return _Crawled("cancelled", max_workers=max_workers)
            if (
                now < next_tick
                and not backend.exited()
                and not await steer.check(
                    frontier, session.policy, session.memory, suspended=suspended
                )
            ):
                await asyncio.sleep(config.run.poll_seconds)
                continue
            next_tick = now + config.run.tick_seconds
            done = await steer.tick(
                frontier,
                backend,
                session.policy,
                session.memory,
                now=time.time(),
                suspended=suspended,
                seeds=session.seeds(),
                seeds_hash=_seeds_hash(job, session.options.job_file),
                pages_per_second=progress.rate(),
                reachable_since=session.outage.reachable_since(time.time()),
            )
        except FrontierUnavailable as error:
            # the workers wait for Redis too (or crawl the partitions that answer); the tick
            # waits for all of it
            partitions = await steer.partition_outage(frontier, error)
            await _record(backend, session.outage.begin(error, time.time(), partitions))
            next_tick = 0.0
            await asyncio.sleep(_REDIS_RETRY_SECONDS)
            continue
        await _record(backend, session.outage.end(time.time()))
        assert done is not None  # a local fleet is always in view
        _announce(done, session.memory, frontier)
        if done.seeds_added is not None:
            _print(f"crawlfleet: {done.seeds_added.message}")
        session.memory = done.memory
        session.save(done.decision.phase)
        if done.decision.workers_failing is not None and done.decision.phase == "Failed":
            code = _workers_failing(done.decision.workers_failing, session.options, session.out)
            return _Crawled("failed", code=code)
        if done.decision.phase == "Failed" and done.memory.suspend_expired:
            _print(
                f"crawlfleet: {done.decision.reason}: the job fails (spec.suspendExpiry.then:"
                f" Fail); its frontier is kept in {session.out}"
            )
            return _Crawled("failed", code=EXIT_SUSPEND_EXPIRED)
        if done.stats is None:  # the frontier is lost
            if not done.decision.reopen:
                return _Crawled("failed", code=_failed(done.decision, session.options, session.out))
            await frontier.aclose()  # and a new one, which the next tick seeds
            frontier = session.frontier = await steer.open_frontier(
                session.redis_url, session.settings, policy=session.policy, memory=session.memory
            )
            continue
        if first:
            first = False
            _say_started(session, done)
        max_workers = max(max_workers, len(backend.active()))
        link_checks = by_worker(link_checks, done.beats)
        event = steer.output_event(done.output_blocked, output_blocked)
        if event is not None:
            output_blocked = bool(done.output_blocked)
            await backend.record(event)
            _print(f"crawlfleet: {event.message}")
        _say_news(done)
        if done.decision.complete:
            await backend.drain_all(session.stop_signal.hurry)
            stats = await frontier.stats()
            files = await frontier.file_stats() if session.policy.files else None
            elapsed = time.monotonic() - started
            progress.done(stats, elapsed, files)
            return _Crawled(
                "complete",
                stats,
                max_workers=max_workers,
                elapsed_seconds=elapsed,
                files=files,
                link_checks=LinkChecks.total(link_checks.values()),
            )
        progress.show(done, len(backend.active()), suspended)
        await asyncio.sleep(config.run.poll_seconds)
    elapsed = time.monotonic() - started
    return _Crawled("interrupted", max_workers=max_workers, elapsed_seconds=elapsed)


def _say_started(session: _Session, done: steer.Tick) -> None:
    stats = done.stats
    assert stats is not None
    news = (
        "seeded by its Scrapy spider's start requests"
        if session.policy.workers_seed and not stats.seeded
        else f"run {session.book.current}"
        if session.book is not None and session.book.current is not None
        else "resumed"
        if done.seeded is None
        else f"{done.seeded} new seed(s)"
    )
    store = session.store
    redis = session.redis_url.split("@")[-1]
    if isinstance(session.server, LocalRedisCluster):
        redis = (
            f"cluster of {len(session.server.nodes)} local nodes at {redis},"
            f" {session.settings.shards} frontier partitions"
        )
    _print(
        f"crawlfleet: {session.job.job_id}: {news}; redis {redis};"
        f" output {store.destination.url if store else 'none'}"
    )


async def _one_crawl(session: _Session) -> int:
    """A job without a schedule: crawled to its end, summarised."""
    crawled = await _crawl(session)
    if crawled.how == "failed":
        return crawled.code
    if crawled.how != "complete":
        return await _interrupted(session, crawled)
    assert crawled.stats is not None
    summary = await _summarised(session, crawled)
    store = session.store
    if store is not None:
        out = session.out
        _print(
            f"crawlfleet: output: {summary['output']['files']} files in"
            f" {store.destination.url}; list them with: crawlfleet output ls"
            f" {session.options.job_file if session.destination != str(out) else out}"
        )
    if session.options.json_summary:
        print(json.dumps(summary, sort_keys=True), flush=True)
    return 0


async def _summarised(session: _Session, crawled: _Crawled) -> dict[str, Any]:
    """The crawl's figures, written to ``summary.json`` in the run's folder."""
    assert crawled.stats is not None
    assert session.frontier is not None
    summary = _summary(
        crawled.stats,
        crawled.elapsed_seconds,
        crawled.max_workers,
        session.job.spec.dedup.capacity,
    )
    summary["frontier_shards"] = session.settings.shards
    if session.state.redis_nodes is not None:
        summary["redis_nodes"] = session.state.redis_nodes
    checks = crawled.link_checks
    # The workers' local layer of dedup (crawlfleet.fleet.link_checks): links answered in the
    # workers, links sent to the frontier's filter, and the share answered locally.
    summary["link_checks"] = {
        "local_hits": checks.local_hits,
        "remote_checks": checks.remote_checks,
    }
    rate = checks.hit_rate
    summary["local_dedup_hit_rate"] = None if rate is None else round(rate, 4)
    if session.job.spec.recrawl:  # a scheduled run: what its revisits found
        summary["freshness"] = Freshness.of(crawled.stats, now=time.time()).to_mapping()
    if crawled.files is not None:
        files = crawled.files
        summary["files"] = {
            "stored": files.stored,
            "bytes": files.bytes,
            "duplicates": files.duplicates,
            "resumed": files.resumed,
            "resumed_bytes": files.resumed_bytes,
            "restarts": files.restarts,
        }
    store = session.store
    if store is not None:
        # Written by the worker the frontier elected, before the tick said complete.
        counts = await written_counts(session.frontier) or {"files": 0, "pageRecords": 0}
        where = store.destination
        if session.book is not None and session.book.current is not None:
            where = where.for_run(session.book.current)
            summary["run"] = session.book.current
        summary["output"] = {
            "destination": where.url,
            "files": counts["files"],
            "page_records": counts["pageRecords"],
        }
    text = json.dumps(summary, indent=2, sort_keys=True) + "\n"
    (session.out / "summary.json").write_text(text)
    return summary


async def _interrupted(session: _Session, crawl: _Crawled | None = None) -> int:
    """Ctrl-C or SIGTERM: the workers drain, Redis stops with its append-only file complete,
    and the run says how to resume. Between two runs of a schedule (no ``crawl``) nothing
    was cut short: exit 0."""
    out, backend = session.out, session.backend
    between_runs = crawl is None
    if crawl is not None:
        await _drain(backend, session.stop_signal)
    frontier = session.frontier
    crawled = None if frontier is None or between_runs else await _crawled(frontier)
    if crawl is not None and frontier is not None and session.job.spec.keeps_going:
        await _keeps_going_summary(
            frontier, session.job, session.options, crawl.elapsed_seconds, crawl.max_workers
        )
    # Redis last, once no worker can write to it: a SHUTDOWN that completes its AOF.
    if frontier is not None:
        await frontier.aclose()
        session.frontier = None
    if session.server is not None:
        session.server.stop()
    session.save("Suspended")
    job_file = session.options.job_file
    if between_runs:
        _print(
            f"crawlfleet: stopped between runs; go on with the schedule with:\n"
            f"  crawlfleet run {job_file} --resume --out {out}"
        )
        return 0
    _print(
        f"crawlfleet: interrupted{'' if crawled is None else f' after {crawled} pages'};"
        f" resume with:\n  crawlfleet run {job_file} --resume --out {out}"
    )
    return EXIT_INTERRUPTED.get(session.stop_signal.first, 1)


async def _scheduled(session: _Session, schedule: ScheduleSpec) -> int:
    """A scheduled job: a run at each due time until Ctrl-C (or one run now, ``--once``).

    Between runs no worker runs and Redis keeps the state the last successful run committed;
    the next due time is said once each time it changes. A run cut short by Ctrl-C is taken up
    again by ``--resume`` (as an interrupted crawl is); one cancelled by the schedule
    (suspended, or replaced) commits nothing.
    """
    options = session.options
    session.clock = schedule_clock(options.config.steering.schedule_clock_file)
    session.book = session.state.book or RunBook()
    if options.once and session.book.current is None:
        assert session.frontier is not None
        began = await start_now(
            session.frontier,
            session.backend,
            schedule,
            session.book,
            now=session.clock.now(),
            seeds=session.seeds(),
        )
        _took(session, began)
    said: tuple[datetime | None, bool] | None = None
    while not session.stop_signal:
        if session.book.current is None:
            await _look_at_schedule(session, schedule)
        if session.book.current is None:
            waiting = (session.book.next_run_at, session.job.spec.suspend)
            if waiting != said:
                said = waiting
                _say_waiting(session)
            session.save("Suspended" if session.job.spec.suspend else "Scheduled")
            await asyncio.sleep(_SCHEDULE_POLL_SECONDS)
            continue
        said = None
        crawled = await _crawl(session, schedule=None if options.once else schedule)
        if crawled.how == "interrupted":
            return await _interrupted(session, crawled)
        if crawled.how == "cancelled":  # the schedule said so: its workers drain, then it goes on
            await session.backend.drain_all(session.stop_signal.hurry)
            continue
        assert session.frontier is not None
        if crawled.how == "failed":
            session.book = await run_ended(
                session.frontier,
                session.backend,
                schedule,
                session.book,
                None,
                outcome="Failed",
                now=session.clock.now(),
            )
            session.save("Failed")
            return crawled.code
        summary = await _summarised(session, crawled)
        session.book = await run_ended(
            session.frontier,
            session.backend,
            schedule,
            session.book,
            crawled.stats,
            outcome="Succeeded",
            now=session.clock.now(),
        )
        record = session.book.history[0]
        _print(
            f"crawlfleet: run {record.id} complete: {record.pages} pages, {record.changed}"
            f" changed, {record.unchanged} unchanged; output in"
            f" {summary.get('output', {}).get('destination', 'none')}"
        )
        if options.json_summary:
            print(json.dumps(summary, sort_keys=True), flush=True)
        if options.once:
            session.save("Scheduled")
            return 0
    return await _interrupted(session)


async def _look_at_schedule(session: _Session, schedule: RecurringSchedule) -> None:
    """One look at the schedule (crawlfleet.fleet.recurring), its news said at the terminal."""
    assert session.book is not None
    assert session.frontier is not None
    view = await session.backend.observe()
    took = await step(
        session.frontier,
        session.backend,
        schedule,
        session.book,
        now=session.clock.now(),
        suspended=session.job.spec.suspend,
        workers_gone=not view.units,
        seeds=session.seeds(),
    )
    _took(session, took)


def _took(session: _Session, took: Step) -> None:
    """What a look at the schedule did, kept and said; a run begun starts its fleet memory
    afresh."""
    changed = took.book != session.book
    session.book = took.book
    if took.started is not None:
        session.memory = fresh_memory(
            session.memory, _seeds_hash(session.job, session.options.job_file)
        )
    for event in took.news:
        _print(f"crawlfleet: {event.message}")
    if changed:
        session.save("Running" if took.book.current is not None else "Scheduled")


def _say_waiting(session: _Session) -> None:
    book = session.book
    assert book is not None
    if session.job.spec.suspend or book.next_run_at is None:
        _print(f"crawlfleet: {session.job.job_id}: suspended: no run starts until it resumes")
        return
    left = max(0.0, (book.next_run_at - session.clock.now()).total_seconds())
    _print(
        f"crawlfleet: {session.job.job_id}: next run at"
        f" {book.next_run_at.strftime('%Y-%m-%dT%H:%M:%SZ')} (in {duration(left)});"
        " Ctrl-C ends it"
    )


#: How often a scheduled job between runs looks at its schedule (and its job file).
_SCHEDULE_POLL_SECONDS = 0.25


class _StopSignals:
    """Ctrl-C and SIGTERM as the run receives them: the first ends the run after the workers'
    drain, a second one (``hurry``) cuts the drain short."""

    def __init__(self) -> None:
        self.signals: list[signal.Signals] = []
        self.hurry = asyncio.Event()

    def received(self, sig: signal.Signals) -> None:
        self.signals.append(sig)
        if len(self.signals) > 1:
            self.hurry.set()

    def __bool__(self) -> bool:
        return bool(self.signals)

    @property
    def first(self) -> signal.Signals:
        return self.signals[0] if self.signals else signal.SIGTERM


async def _drain(backend: LocalProcessBackend, stop_signal: _StopSignals) -> None:
    """The workers' drain after an interruption, said as it happens: they finish or release
    their leases and make their output durable, unless a second Ctrl-C kills them."""
    _print(
        f"crawlfleet: {stop_signal.first.name}: draining the workers: they finish or release"
        " their leases (Ctrl-C again to stop them at once)"
    )
    killed = await backend.drain_all(stop_signal.hurry)
    if killed:
        how = "without a drain" if stop_signal.hurry.is_set() else "past their drain budget"
        _print(
            f"crawlfleet: stopped {', '.join(killed)} {how}: what they held goes back to the"
            " queue when the run resumes"
        )


async def _crawled(frontier: Frontier) -> int | None:
    """Pages crawled so far, for the last line; None when Redis does not answer (an external
    one gone): the run still says how to resume."""
    try:
        return (await frontier.stats()).crawled
    except (FrontierUnavailable, FrontierLost) as error:
        log.warning("could not read the crawl's counters at the end: %s", error)
        return None


async def _keeps_going_summary(
    frontier: Frontier, job: CrawlJob, options: RunOptions, elapsed: float, max_workers: int
) -> None:
    """A job that keeps going ends only when stopped: its summary is written then, with its
    freshness (what it tracked, how late its revisits were, what they found)."""
    try:
        stats = await frontier.stats()
    except (FrontierUnavailable, FrontierLost) as error:
        log.warning("could not read the crawl's counters at the end: %s", error)
        return
    freshness = Freshness.of(stats, now=time.time())
    summary = _summary(stats, elapsed, max_workers, job.spec.dedup.capacity, phase="Suspended")
    summary["freshness"] = freshness.to_mapping()
    (options.output_dir / "summary.json").write_text(
        json.dumps(summary, indent=2, sort_keys=True) + "\n"
    )
    _print(f"crawlfleet: freshness: {freshness.line(time.time())}")
    if options.json_summary:
        print(json.dumps(summary, sort_keys=True), flush=True)


def _policy(job: CrawlJob, options: RunOptions) -> FleetPolicy:
    return FleetPolicy.from_spec(
        job.spec,
        options.config.steering,
        completion_grace_seconds=options.config.run.completion_grace_seconds,
        pinned_replicas=options.workers,
        stop_on_crash_loop=True,
    )


def _workers_failing(failing: WorkersFailing, options: RunOptions, out: Path) -> int:
    """The crash-loop cap: workers that cannot start end the run with what they said.

    Exit 2 when they refused (a destination, a Redis or a job they could not use: input to
    fix, as the run's own checks at start exit 2), else 1. Nothing is lost: whatever a
    worker held went back to the queue, so the run resumes where it stopped.
    """
    _print(
        f"crawlfleet: workers fail at start: {failing.summary} ({failing.reason}). Stopped"
        f" instead of starting more; once it is fixed, resume with:\n"
        f"  crawlfleet run {options.job_file} --resume --out {out}"
    )
    return 2 if failing.code == 2 else 1


#: ``crawlfleet run``'s exit code when the job's frontier was lost (redis.onLoss: Fail).
EXIT_FRONTIER_LOST = 3
#: ... and when it stayed suspended past spec.suspendExpiry with ``then: Fail``.
EXIT_SUSPEND_EXPIRED = 4


def _failed(decision: Decision, options: RunOptions, out: Path) -> int:
    _print(
        f"crawlfleet: frontier lost: {decision.lost}. The job fails (redis.onLoss: Fail)"
        " rather than crawl again from the seeds or skip what it had queued. To start it"
        f" over: set spec.redis.onLoss: Reseed in {options.job_file} and run it again with"
        f" --resume --out {out}"
    )
    return EXIT_FRONTIER_LOST


def _announce(done: steer.Tick, before: FleetMemory, frontier: Frontier) -> None:
    """The tick's news about the frontier, as lines for the person at the terminal."""
    decision = done.decision
    if decision.reopen:
        _print(f"crawlfleet: frontier lost: {decision.lost}; re-seeding (redis.onLoss: Reseed)")
    epoch = done.memory.frontier_epoch
    if (
        before.frontier_epoch is not None
        and done.stats is not None
        and epoch != before.frontier_epoch
    ):
        _print(
            f"crawlfleet: frontier lost: {frontier.reseeded}; re-created (epoch {epoch}) and"
            " re-seeded from the seeds (redis.onLoss: Reseed): pages crawled before are"
            " crawled again"
        )
    if decision.set_pressure is not None and done.frontier_memory is not None:
        memory = done.frontier_memory
        _print(
            f"crawlfleet: frontier memory pressure {decision.set_pressure.level.name}:"
            f" Redis uses {memory.ratio:.0%} of maxmemory ({memory.used_bytes} bytes)"
        )
    if decision.bloom_nearly_full and not before.bloom_nearly_full and done.stats is not None:
        _print(
            f"crawlfleet: the Bloom filter is nearly full: {done.stats.seen} URLs seen of"
            " dedup.capacity; it grows a layer past it (more memory, a tighter error rate)"
        )


def _say_news(done: steer.Tick) -> None:
    """The tick's Events about waits and stalled leases, as lines for the person at the
    terminal (a wait's next change counted from now, not as a time)."""
    for event in done.news:
        if event.reason == "Waiting" and done.waiting is not None:
            _print(f"crawlfleet: waiting: {done.waiting.sentence(time.time())}")
        elif event.reason == "Stalled":
            _print(f"crawlfleet: stalled: {event.message}")
        else:
            _print(f"crawlfleet: {event.message}")


class _Outage:
    """Redis not answering: the run waits for it, and restarts its private server if it died.

    The private redis-server is the run's own, as a cluster's Redis pod is its Deployment's:
    when it exits (killed, out of memory), the runner starts it again on the same data
    directory and port, so it loads its append-only file and every worker's connection finds
    it where it was; at most the last second of writes (``appendfsync everysec``) is lost,
    which costs re-fetches, never a page. A server that will not start again ends the run
    with its log's last lines. An external Redis is only waited for.
    """

    def __init__(self, server: RedisServer | LocalRedisCluster | None) -> None:
        #: The private servers: one, a local cluster's nodes (each restarted on its own
        #: port and nodes.conf, so the cluster finds it again), or none.
        self.servers: list[RedisServer] = (
            []
            if server is None
            else [server]
            if isinstance(server, RedisServer)
            else [*server.nodes]
        )
        #: When the tick first found Redis unavailable; None while it answers.
        self.down_since: float | None = None
        #: When Redis answered the tick again after the last outage; None: never away.
        self.back_at: float | None = None
        #: Which partitions the last PartitionUnavailable named, and whether a spool was full.
        self.partitions_said: tuple[tuple[int, ...], bool] | None = None

    async def restart_if_exited(self) -> None:
        """One waitpid each; a server found gone is started again before the loop goes on."""
        for server in self.servers:
            code = server.exited()
            if code is None:
                continue
            _print(
                f"crawlfleet: the private redis-server exited ({code}); restarting it on its"
                f" append-only file in {server.data_dir}"
            )
            # Started here, on the main thread: the server's parent-death signal is tied to
            # the thread that forked it (local/lifetime.py); only the wait goes to a thread.
            server.launch()
            await asyncio.to_thread(server.wait_ready, _REDIS_RESTART_SECONDS)
            log.info("redis-server restarted on port %d", server.port)

    def begin(
        self,
        error: FrontierUnavailable,
        now: float,
        partitions: steer.PartitionOutage | None = None,
    ) -> FleetEvent | None:
        """Redis did not answer the tick: said once per outage, a line and an Event.
        ``partitions``: only some frontier partitions did not (``steer.partition_outage``):
        the Event is ``PartitionUnavailable``, said again when which partitions, or whether
        workers wait for a full link spool, change."""
        if partitions is not None:
            said = (partitions.partitions, partitions.spool_full > 0)
            if self.down_since is not None and said == self.partitions_said:
                return None
            self.down_since = self.down_since if self.down_since is not None else now
            self.partitions_said = said
            log.warning("%s", partitions.message)
            _print(f"crawlfleet: {partitions.message}; the run waits for it")
            return FleetEvent("PartitionUnavailable", partitions.message, warning=True)
        if self.down_since is not None:
            return None
        self.down_since = now
        log.warning("Redis unavailable: %s", error)
        _print(f"crawlfleet: Redis unavailable ({error}); waiting for it")
        return FleetEvent(
            "RedisUnavailable",
            f"Redis unavailable ({error}): the run and its workers wait for it",
            warning=True,
        )

    def reachable_since(self, now: float) -> float | None:
        """Since when Redis has answered the run (the steering tick's ``reachable_since``):
        ``now`` while it is away (a tick that gets through finds it back now), else when it
        last came back. The workers could not heartbeat while it was away."""
        return now if self.down_since is not None else self.back_at

    def end(self, now: float) -> FleetEvent | None:
        """Redis answered the tick again: how long it was away, a line and an Event."""
        if self.down_since is None:
            return None
        down_seconds = round(now - self.down_since, 1)
        self.down_since, self.back_at, self.partitions_said = None, now, None
        _print("crawlfleet: Redis answers again")
        return FleetEvent(
            "RedisAvailable",
            f"Redis answers again, after {down_seconds} s unavailable",
            fields={"down_seconds": down_seconds},
        )


async def _record(backend: LocalProcessBackend, event: FleetEvent | None) -> None:
    if event is not None:
        await backend.record(event)


#: How long a restarted private redis-server may take to load its append-only file.
_REDIS_RESTART_SECONDS = 300.0
#: Between two tries to reach a Redis that did not answer.
_REDIS_RETRY_SECONDS = 0.5


def _summary(
    stats: FrontierStats,
    elapsed: float,
    max_workers: int,
    capacity: int,
    *,
    phase: str = "Succeeded",
) -> dict[str, Any]:
    """The run's figures (``summary.json`` in the run's folder; the output's own last files,
    dead-letters.jsonl and manifest.json, are in the destination: see crawlfleet.output)."""
    summary: dict[str, Any] = {
        "phase": phase,
        "crawled": stats.crawled,
        "failed": stats.failed,
        "dead_lettered": stats.dead,
        "seen": stats.seen,
        "duplicates_skipped": stats.duplicates,
        "requeued": stats.requeued,
        "elapsed_s": round(elapsed, 3),
        "pages_per_s": round(stats.crawled / elapsed, 1) if elapsed > 0 else 0.0,
        "max_workers": max_workers,
        # Links the frontier's memory backpressure held back (met again later, admitted then).
        "links_held_back": stats.over_budget,
        # Links refused because their host's budget was spent (scope.maxQueuedPerHost,
        # scope.maxPagesPerHost), each time one was met.
        "links_over_host_budget": stats.host_budget,
        "bloom": {
            "capacity": capacity,
            "fill_ratio": round(stats.seen / capacity, 4),
            "layers": stats.bloom_layers,
            "layer_fill_ratio": round(stats.bloom_fill_ratio, 4),
            "false_positive_rate": float(f"{stats.bloom_false_positive_rate:.3g}"),
        },
    }
    return summary


def _absolute(destination: str) -> str:
    """A folder destination as an absolute path: the workers may run in another directory."""
    parsed = parse_destination(destination)
    return destination if parsed.kind == "s3" else str(Path(parsed.path).absolute())


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
        self.stats: FrontierStats | None = None
        self.shown_at = started
        self.recent_rate = 0.0
        self.tty = sys.stderr.isatty()
        self._console: Any = None
        if self.tty:
            from rich.console import Console

            self._console = Console(stderr=True)

    def line(self, stats: FrontierStats, workers: int) -> str:
        elapsed = max(1e-6, time.monotonic() - self.started)
        rate = stats.crawled / elapsed
        if self.job.spec.keeps_going:
            # No end to progress towards: how fresh it keeps its pages is the news.
            return (
                f"{Freshness.of(stats, now=time.time()).line(time.time())}  crawled"
                f" {stats.crawled}  queued {stats.queued}  in-flight {stats.leased}"
                f"  workers {workers}"
            )
        text = (
            f"crawled {stats.crawled}  {rate:.0f}/s  queued {stats.queued}  "
            f"in-flight {stats.leased}  workers {workers}  failed {stats.dead}"
        )
        max_pages = self.job.spec.scope.max_pages
        if max_pages and rate > 0:
            text += f"  ETA {max(0, max_pages - stats.crawled) / rate:.0f}s"
        return text

    def rate(self) -> float | None:
        """Pages a second lately (None before the first pages): what backpressure slows."""
        return self.recent_rate or None

    def show(self, done: steer.Tick, workers: int, suspended: bool) -> None:
        """The line of this tick: the counters, and what the crawl waits for when it does, or
        the leases that stopped moving (``stalled:``, with their stage)."""
        stats = done.stats
        assert stats is not None  # a tick that lost its frontier shows no progress
        now = time.monotonic()
        if self.stats is not None and now > self.shown_at:
            instant = max(0, stats.crawled - self.stats.crawled) / (now - self.shown_at)
            # About 2.5 s of ticks; the first reading stands alone, not averaged with nothing.
            weight = 0.1 if self.recent_rate else 1.0
            self.recent_rate = (1 - weight) * self.recent_rate + weight * instant
        self.stats, self.shown_at = stats, now
        now = time.monotonic()
        text = self.line(stats, workers)
        if done.files is not None:
            text += f"  {_files_text(done.files)}"
        if done.waiting is not None and done.waiting.reason != "NextRevisit":
            text += f"  waiting: {done.waiting.sentence(time.time())}"
        elif suspended:
            text += "  (suspended)"
        if done.stall is not None:
            main = done.stall.main
            text += (
                f"  stalled: {done.stall.leases} lease(s) in {main.stage} for"
                f" {duration(main.oldest_seconds)}"
                + (f" ({main.output_blocked_reason})" if main.output_blocked_reason else "")
            )
        if self.tty and self._console is not None:
            self._console.print(text, end="\r", highlight=False)
        elif now - self.last >= self.every:
            self.last = now
            _print(text)

    def done(self, stats: FrontierStats, elapsed: float, files: FileStats | None = None) -> None:
        stored = "" if files is None else f" {_files_text(files)},"
        _print(
            f"crawlfleet: complete: {stats.crawled} pages crawled, {stats.dead} dead-lettered,"
            f"{stored} in {elapsed:.1f} s"
        )


def _files_text(files: FileStats) -> str:
    """A job with file rules, in the local run's lines: ``3 files (512.0 MiB)``, and the
    duplicates when there are any (their bytes were stored before, so they are not counted)."""
    text = f"{plural(files.stored, 'file')} ({files.bytes / 2**20:.1f} MiB)"
    return text + (f", {plural(files.duplicates, 'duplicate')}" if files.duplicates else "")
