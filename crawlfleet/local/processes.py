"""The local backend: crawl workers as child processes of ``crawlfleet run``.

The five verbs of :class:`~crawlfleet.fleet.backend.FleetBackend`, applied to processes
instead of pods: the steering tick does not know the difference. Workers are forked by the
run's :class:`~crawlfleet.local.zygote.Zygote` when it has one (milliseconds, no imports),
else started as ``crawlfleet worker`` interpreters.

A worker told to stop (scale-down, suspend, the end of the run) gets SIGTERM and stays in
the books, *draining*, until it has exited: the tick neither counts it as capacity nor
requeues its leases while it finishes or releases them itself. Past its drain budget it is
killed, and only then are its leftovers requeued. At the end of a run :meth:`drain_all`
waits for the whole fleet without blocking the runner's loop, so a second Ctrl-C can cut the
drain short (the workers are killed; what they held is requeued when the run resumes).

A worker that exits on its own is reported once, with how it ended (``Unit.last_exit``: its
termination message ``logs/<worker>.exit``, else its log's tail; crawlfleet.fleet.exits) and
how many workers in a row died so within ``quick_death_seconds`` of their start with the same
error (``Unit.quick_deaths``); a worker that outlives that window, exits cleanly or is killed
(``UnitExit.failed``) ends the count. Each worker
is a new unit, so the count is the backend's, where a pod counts its own restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from crawlfleet.config import ENV_PREFIX, DrainConfig, SteeringConfig
from crawlfleet.fleet.backend import FleetEvent, FleetView, Unit
from crawlfleet.fleet.exits import UnitExit, log_tail, parse_exit
from crawlfleet.local.lifetime import die_with_parent
from crawlfleet.local.zygote import Zygote, ZygoteError

__all__ = ["WORKER_PREFIX", "LocalProcessBackend"]

logger = logging.getLogger(__name__)

#: Local worker ids are ``local-<n>``, numbered on across resumed runs (see ``first_number``).
WORKER_PREFIX = "local-"
#: Where a worker finds its Redis URL (WorkerConfig.redis_url's variable).
REDIS_URL_VARIABLE = f"{ENV_PREFIX}REDIS_URL"
#: How often :meth:`LocalProcessBackend.drain_all` looks for exited workers (a waitpid each).
_DRAIN_POLL_SECONDS = 0.05


class _Process(Protocol):
    """What the backend needs of a worker process: a Popen, or a zygote's ForkedProcess."""

    pid: int

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


@dataclass
class _Child:
    worker_id: str
    process: _Process
    started_at: float
    #: Set when it was told to stop (wall-clock seconds): gone by then, or killed.
    drain_deadline: float | None = None
    #: How it ended, once it has; and the quick deaths in a row it made the count.
    exit: UnitExit | None = None
    quick_deaths: int = 0

    @property
    def active(self) -> bool:
        """Running and not asked to stop: part of the fleet's count."""
        return self.drain_deadline is None and self.process.poll() is None


@dataclass
class LocalProcessBackend:
    """Starts ``crawlfleet worker`` processes for one job and keeps track of them."""

    job_file: Path
    redis_url: str
    output_dir: Path
    drain: DrainConfig
    #: Where the workers write their pages (``crawlfleet worker --output``); None: the
    #: job's own destination, else ``output_dir``.
    destination: str | None = None
    zygote: Zygote | None = None
    #: The number of the first worker this backend starts (a resumed run goes on counting,
    #: so a worker of the run before is never mistaken for one of this run).
    first_number: int = 1
    #: Where :meth:`record` appends its events (one JSON object a line); None: log only.
    events_file: Path | None = None
    #: A worker that exits within this long of its start died while starting.
    quick_death_seconds: float = SteeringConfig().startup_grace_seconds
    #: ``crawlfleet run --shards``: the workers' frontier has at least this many partitions
    #: (``crawlfleet worker --shards``), as the runner's has. None: the job file's.
    shards: int | None = None
    _children: dict[str, _Child] = field(default_factory=dict)
    _started: int = 0
    #: Quick deaths in a row, their error, and when the last one was seen.
    _deaths: int = 0
    _death_error: tuple[str, str] | None = None
    _death_at: float = 0.0

    @property
    def next_number(self) -> int:
        """The number the next worker started will get (kept in the run's state file)."""
        return self.first_number + self._started

    # -- the FleetBackend protocol --------------------------------------------------------

    async def observe(self) -> FleetView:
        self._count_deaths(time.time())
        units = tuple(
            Unit(
                child.worker_id,
                running=child.exit is None,
                started_at=child.started_at,
                drain_deadline=child.drain_deadline,
                last_exit=child.exit,
                quick_deaths=child.quick_deaths,
            )
            for child in self._children.values()
        )
        count = len(self.active())
        return FleetView(units, replicas=count, ready=count, owns=WORKER_PREFIX)

    async def scale(self, replicas: int) -> None:
        active = self.active()
        for _ in range(replicas - len(active)):
            self.start()
        for worker_id in reversed(active[replicas:]):  # the newest go first
            self.stop(worker_id)

    async def replace(self, unit: str) -> None:
        """SIGKILL: a worker that stopped answering gets no drain."""
        child = self._children.get(unit)
        if child is not None and child.process.poll() is None:
            child.process.kill()

    async def forget(self, unit: str) -> None:
        self._children.pop(unit, None)

    async def record(self, event: FleetEvent) -> None:
        """A line of events.jsonl: the local stand-in for a Kubernetes Event."""
        log = logger.warning if event.warning else logger.info
        log("%s: %s", event.reason, event.message)
        if self.events_file is not None:
            entry = {"kind": event.reason, "message": event.message, **event.fields}
            _append_line(self.events_file, entry)

    def _count_deaths(self, now: float) -> None:
        """Read how each newly exited worker ended; keep the count of quick deaths in a row."""
        for child in self._children.values():
            code = child.process.poll()
            if code is None:
                if child.started_at > self._death_at and now - child.started_at >= (
                    self.quick_death_seconds
                ):
                    self._deaths, self._death_error = 0, None  # a worker started fine since
                continue
            if child.exit is not None:
                continue
            lived = max(0.0, now - child.started_at)
            child.exit = parse_exit(code, self._last_words(child, code), lived_seconds=lived)
            told = child.drain_deadline is not None
            if told or not child.exit.failed or lived >= self.quick_death_seconds:
                self._deaths, self._death_error = 0, None
                continue
            same = child.exit.error == self._death_error
            self._deaths = self._deaths + 1 if same else 1
            self._death_error, self._death_at = child.exit.error, now
            child.quick_deaths = self._deaths

    def _last_words(self, child: _Child, code: int) -> str:
        """Its termination message; else, for a failure, its log's tail (as a pod's
        FallbackToLogsOnError); a few hundred bytes, read once per exit."""
        logs = self.output_dir / "logs"
        try:
            written = (logs / f"{child.worker_id}.exit").read_text(encoding="utf-8")
        except OSError:
            written = ""
        if written.strip() or code == 0:
            return written
        return log_tail(logs / f"{child.worker_id}.log")

    # -- processes ------------------------------------------------------------------------

    def start(self) -> str:
        worker_id = f"{WORKER_PREFIX}{self.next_number}"
        self._started += 1
        logs = self.output_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # The Redis URL (a private Redis's password in it) goes in the environment, which only
        # the same user can read; an argv is in /proc/<pid>/cmdline and `ps` for everyone.
        env = {REDIS_URL_VARIABLE: self.redis_url}
        args = [
            str(self.job_file),
            "--worker-id", worker_id,
            "--out", str(self.output_dir), "--keep-running",
            "--grace-seconds", str(self.drain.grace_seconds),
            "--termination-log", str(logs / f"{worker_id}.exit"),
            *(("--output", self.destination) if self.destination else ()),
            *(("--shards", str(self.shards)) if self.shards else ()),
        ]  # fmt: skip
        process: _Process | None = None
        if self.zygote is not None:
            # The title is the command line it stands for: `ps` and `pkill -f` find a forked
            # worker as they find a started one.
            title = " ".join(["crawlfleet", "worker", *args])
            try:
                process = self.zygote.spawn(args, logs / f"{worker_id}.log", title, env)
            except ZygoteError as error:  # killed with the runner's process group, say
                logger.warning("%s; starting workers as interpreters from now on", error)
                self.zygote = None
        if process is None:
            with open(logs / f"{worker_id}.log", "ab") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "crawlfleet", "worker", *args],
                    env={**os.environ, **env},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    preexec_fn=die_with_parent(),  # dies with the runner (local/lifetime.py)
                )
        self._children[worker_id] = _Child(worker_id, process, time.time())
        return worker_id

    def stop(self, worker_id: str) -> None:
        """SIGTERM: the worker drains (stops claiming, finishes or releases its leases)."""
        child = self._children.get(worker_id)
        if child is None or child.drain_deadline is not None or child.process.poll() is not None:
            return
        child.drain_deadline = time.time() + self.drain.budget_seconds
        child.process.send_signal(signal.SIGTERM)

    def active(self) -> list[str]:
        """Workers running and not asked to stop, oldest first."""
        return [c.worker_id for c in self._children.values() if c.active]

    def exited(self) -> bool:
        """Has a worker we did not ask to stop exited? Only a waitpid each: cheap to poll."""
        return any(
            c.drain_deadline is None and c.process.poll() is not None
            for c in self._children.values()
        )

    def stop_all(self) -> None:
        """Drain every worker and wait for them, within the drain budget; then kill."""
        deadline = self._stop_everyone()
        for child in self._children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(max(0.1, deadline - time.monotonic()))
        self._kill_the_rest()

    async def drain_all(self, hurry: asyncio.Event) -> list[str]:
        """Drain every worker and wait for them, within the drain budget, without blocking the
        loop; when ``hurry`` is set (a second Ctrl-C) or the budget is spent, kill those left.

        Returns the workers killed: their leases stay theirs in the frontier until the next
        tick of a run on it requeues them (``--resume``).
        """
        deadline = self._stop_everyone()
        while not hurry.is_set() and time.monotonic() < deadline:
            if all(child.process.poll() is not None for child in self._children.values()):
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_DRAIN_POLL_SECONDS):
                    await hurry.wait()
        return self._kill_the_rest()

    def _stop_everyone(self) -> float:
        """SIGTERM to every worker not told yet; the monotonic time they must be gone by."""
        for worker_id in list(self._children):
            self.stop(worker_id)
        return time.monotonic() + self.drain.budget_seconds

    def _kill_the_rest(self) -> list[str]:
        """SIGKILL the workers still running, reap every one, forget them all."""
        killed = []
        for child in self._children.values():
            if child.process.poll() is None:
                child.process.kill()
                killed.append(child.worker_id)
            child.process.wait()
        self._children.clear()
        return killed


def _append_line(path: Path, entry: Mapping[str, object]) -> None:
    """One JSON line, appended: a few hundred bytes, so not worth a thread."""
    with open(path, "a") as f:
        f.write(json.dumps({"ts": round(time.time(), 3), **entry}) + "\n")
