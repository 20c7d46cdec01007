"""A pre-imported parent for local workers: ``crawlfleet run`` forks them instead of starting
interpreters.

A worker spends a good part of a second of CPU importing aiohttp, httpx, redis and pydantic
before its first request. Several of them doing it at once on a small machine, after the
runner's own imports, were a large share of a short run, and a replacement for a killed worker
paid it again (figures in docs/benchmarks.md). The zygote imports once, while the runner is
still importing, and forks each worker: a worker starts in milliseconds and shares the
imported modules' memory copy-on-write (the same idea as Android's zygote and gunicorn's
preloaded app).

The zygote is a plain child of the runner, talking JSON lines over its stdin and stdout:

* runner → zygote: ``{"argv": [...], "env": {...}, "log": PATH, "title": TITLE}`` — fork a
  worker running ``crawlfleet worker ARGV`` (the worker's own entry, ``launch.py:main``, never
  the command line) with ENV added to its environment (where secrets travel: a pipe, then the
  process's own environment, never an argv that ``ps`` shows every user), stdout and stderr
  appended to PATH, titled TITLE in ``ps``;
* zygote → runner: ``{"spawned": PID}`` per request, in order, and ``{"exited": PID,
  "code": CODE}`` when a worker exits (CODE as :attr:`subprocess.Popen.returncode`: minus
  the signal for a killed worker).

It ignores SIGINT and SIGTERM: a Ctrl-C reaches the runner and the workers (one process
group; the run's redis-server has a session of its own), and the zygote ends when the runner
closes its stdin and its last worker is gone.
This module imports only the standard library (and :mod:`crawlfleet.errors`, which imports
nothing) at the top: the runner starts the zygote before anything heavy.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crawlfleet.errors import ZygoteError
from crawlfleet.local.lifetime import die_with_parent, guard_after_fork

__all__ = ["ForkedProcess", "Zygote", "ZygoteError", "serve"]

_READ_SIZE = 65_536
_SPAWN_TIMEOUT_SECONDS = 60.0  # the first spawn waits for the zygote's imports


class Zygote:
    """The runner's side: starts the zygote process and reads its reports."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        assert process.stdout is not None
        assert process.stdin is not None
        self._out = process.stdout.fileno()
        os.set_blocking(self._out, False)
        self._buffer = b""
        self._spawned: deque[int] = deque()
        self._exits: dict[int, int] = {}
        self._eof = False

    @classmethod
    def start(cls) -> Zygote:
        process = subprocess.Popen(
            [sys.executable, "-m", "crawlfleet.local.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=die_with_parent(),  # dies with the runner (local/lifetime.py)
        )
        return cls(process)

    def spawn(
        self, argv: list[str], log: Path, title: str, env: Mapping[str, str] | None = None
    ) -> ForkedProcess:
        """Fork a worker running ``crawlfleet worker ARGV`` with ``env`` added to its
        environment; its handle, as soon as it exists."""
        request = {"argv": argv, "env": dict(env or {}), "log": str(log), "title": title}
        line = json.dumps(request) + "\n"
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line.encode())
            self.process.stdin.flush()
        except OSError as error:
            raise ZygoteError(f"the worker zygote is gone: {error}") from error
        deadline = time.monotonic() + _SPAWN_TIMEOUT_SECONDS
        while not self._spawned:
            if self._eof:
                raise ZygoteError("the worker zygote exited")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZygoteError("the worker zygote did not answer in time")
            self._read(remaining)
        return ForkedProcess(self._spawned.popleft(), self)

    def returncode(self, pid: int) -> int | None:
        self._read(0)
        code = self._exits.get(pid)
        if code is None and self._eof and not _alive(pid):
            return -signal.SIGKILL  # the zygote died first: gone, its exit code with it
        return code

    def wait(self, pid: int, timeout: float | None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.returncode(pid)) is None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired(["crawlfleet", "worker", str(pid)], timeout or 0)
            self._read(0.05 if remaining is None else min(remaining, 0.05))
        return code

    def close(self, timeout_seconds: float = 5.0) -> None:
        """No more workers: the zygote exits once its last worker has."""
        with contextlib.suppress(OSError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout_seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _read(self, timeout: float) -> None:
        if self._eof:
            return
        ready, _, _ = select.select([self._out], [], [], timeout)
        if not ready:
            return
        try:
            data = os.read(self._out, _READ_SIZE)
        except BlockingIOError:
            return
        if not data:
            self._eof = True
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            report = json.loads(line)
            if "spawned" in report:
                self._spawned.append(int(report["spawned"]))
            else:
                self._exits[int(report["exited"])] = int(report["code"])


class ForkedProcess:
    """A forked worker, with the part of :class:`subprocess.Popen` the backend uses."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self._zygote = zygote

    def poll(self) -> int | None:
        return self._zygote.returncode(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        return self._zygote.wait(self.pid, timeout)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the zygote process ------------------------------------------------------------------


def serve() -> int:
    """Import what every worker needs, then fork workers on request until stdin closes."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    gc.disable()
    import setproctitle  # noqa: F401 - imported for the workers

    import crawlfleet.launch  # noqa: F401 - the worker's entry and all it uses

    gc.enable()
    gc.freeze()  # shared with every worker copy-on-write; never scanned again
    children: set[int] = set()
    buffer = b""
    reading = True
    while reading or children:
        ready, _, _ = select.select([0] if reading else [], [], [], 0.05)
        if ready:
            data = os.read(0, _READ_SIZE)
            if not data:
                reading = False
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                pid = _fork(json.loads(line))
                children.add(pid)
                _report({"spawned": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            _report({"exited": pid, "code": os.waitstatus_to_exitcode(status)})
    return 0


def _report(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _fork(request: dict[str, Any]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    zygote = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    guard_after_fork(zygote)  # a worker dies with the zygote, which dies with the runner
    code = 1
    try:
        code = _become_worker(request)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _become_worker(request: dict[str, Any]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    import setproctitle

    setproctitle.setproctitle(request["title"])
    os.environ.update(request.get("env") or {})  # before main() reads the environment
    from crawlfleet.launch import main

    return main(request["argv"])


if __name__ == "__main__":
    sys.exit(serve())
