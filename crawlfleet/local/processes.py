"""The local backend: crawl workers as child processes of ``crawlfleet run``.

The same three verbs a cluster backend has (start, stop, list), applied to processes
instead of pods: the fleet brain does not know the difference. Workers are forked by the
run's :class:`~crawlfleet.local.zygote.Zygote` when it has one (milliseconds, no imports),
else started as ``crawlfleet worker`` interpreters.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from crawlfleet.fleet import WorkerView
from crawlfleet.local.zygote import Zygote, ZygoteError

__all__ = ["LocalProcessBackend"]

logger = logging.getLogger(__name__)


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
    stopping: bool = False


@dataclass
class LocalProcessBackend:
    """Starts ``crawlfleet worker`` processes for one job and keeps track of them."""

    job_file: Path
    redis_url: str
    output_dir: Path
    grace_seconds: float = 10.0
    zygote: Zygote | None = None
    _children: dict[str, _Child] = field(default_factory=dict)
    _next: int = 0

    def start(self) -> str:
        self._next += 1
        worker_id = f"local-{self._next}"
        logs = self.output_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        args = [
            "worker", str(self.job_file),
            "--redis-url", self.redis_url, "--worker-id", worker_id,
            "--out", str(self.output_dir), "--keep-running",
            "--grace-seconds", str(self.grace_seconds),
        ]  # fmt: skip
        process: _Process | None = None
        if self.zygote is not None:
            # The title is the command line it stands for, minus the password: `ps` and
            # `pkill -f` find a forked worker as they find a started one.
            title = " ".join(["crawlfleet", *args])
            title = title.replace(self.redis_url, _redacted(self.redis_url))
            try:
                process = self.zygote.spawn(args, logs / f"{worker_id}.log", title)
            except ZygoteError as error:  # killed with the runner's process group, say
                logger.warning("%s; starting workers as interpreters from now on", error)
                self.zygote = None
        if process is None:
            with open(logs / f"{worker_id}.log", "ab") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "crawlfleet", *args],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                )
        self._children[worker_id] = _Child(worker_id, process, time.time())
        return worker_id

    def stop(self, worker_id: str, *, graceful: bool = True) -> None:
        """SIGTERM (drain and release leases) or SIGKILL (a worker that stopped answering)."""
        child = self._children.get(worker_id)
        if child is None or child.process.poll() is not None:
            return
        child.stopping = True
        child.process.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)

    def forget(self, worker_id: str) -> None:
        self._children.pop(worker_id, None)

    def views(self, heartbeat_ages: dict[str, float]) -> list[WorkerView]:
        return [
            WorkerView(
                child.worker_id,
                running=child.process.poll() is None,
                started_at=child.started_at,
                heartbeat_age_seconds=heartbeat_ages.get(child.worker_id),
            )
            for child in self._children.values()
            if not child.stopping
        ]

    def active(self) -> list[str]:
        """Workers running and not asked to stop, oldest first."""
        return [
            c.worker_id
            for c in self._children.values()
            if not c.stopping and c.process.poll() is None
        ]

    def exited(self) -> bool:
        """Has a worker we did not ask to stop exited? Only a waitpid each: cheap to poll."""
        return any(not c.stopping and c.process.poll() is not None for c in self._children.values())

    def reap(self) -> list[tuple[str, int]]:
        """Forget workers that exited after being asked to stop; their exit codes."""
        done = []
        for worker_id, child in list(self._children.items()):
            code = child.process.poll()
            if child.stopping and code is not None:
                done.append((worker_id, code))
                del self._children[worker_id]
        return done

    def stop_all(self, timeout_seconds: float) -> None:
        for worker_id in list(self._children):
            self.stop(worker_id)
        deadline = time.monotonic() + timeout_seconds
        for child in self._children.values():
            remaining = max(0.1, deadline - time.monotonic())
            try:
                child.process.wait(remaining)
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
        self._children.clear()


def _redacted(url: str) -> str:
    """``url`` without its password, as the runner prints it."""
    scheme, _, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':')[0]}:***@{host}"
