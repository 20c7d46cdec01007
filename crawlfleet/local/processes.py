"""The local backend: crawl workers as child processes of ``crawlfleet run``.

The same three verbs a cluster backend has (start, stop, list), applied to processes
instead of pods: the fleet brain does not know the difference.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from crawlfleet.fleet import WorkerView

__all__ = ["LocalProcessBackend"]


@dataclass
class _Child:
    worker_id: str
    process: subprocess.Popen[bytes]
    started_at: float
    stopping: bool = False


@dataclass
class LocalProcessBackend:
    """Starts ``crawlfleet worker`` processes for one job and keeps track of them."""

    job_file: Path
    redis_url: str
    output_dir: Path
    grace_seconds: float = 10.0
    _children: dict[str, _Child] = field(default_factory=dict)
    _next: int = 0

    def start(self) -> str:
        self._next += 1
        worker_id = f"local-{self._next}"
        logs = self.output_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{worker_id}.log", "ab") as log:
            process = subprocess.Popen(
                [
                    sys.executable, "-m", "crawlfleet", "worker", str(self.job_file),
                    "--redis-url", self.redis_url, "--worker-id", worker_id,
                    "--out", str(self.output_dir), "--keep-running",
                    "--grace-seconds", str(self.grace_seconds),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )  # fmt: skip
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
