"""The test bed's child processes: started so that nothing outlives the harness, stopped in order.

Every process the control plane and the kubelet double start (etcd, kube-apiserver, each pod's
containers) runs

- in a new session, so that its whole process group can be SIGKILLed at the end, and so that
  a signal meant for the harness's own group (a terminal's Ctrl-C, a CI runner's or
  ``timeout``'s signal to its job) never reaches it;
- under ``setpriv --pdeathsig KILL`` where available, so that the kernel kills it when the
  harness dies, even by SIGKILL.

The parent-death signal has a trap (prctl(2), PR_SET_PDEATHSIG): the "parent" is the *thread*
that forked the child, not the process. A child forked by a thread that later ends is
SIGKILLed right then, while the harness runs on: the kubelet double's sync thread when the
double stops (its pods were killed by the kernel before ``stop()`` could send the SIGTERM it
promises), a thread pool or ``asyncio.to_thread`` caller at once. So :func:`spawn` hands every
fork to one thread that lives as long as the interpreter: the guard then means what it says.

Groups are killed while their leader is still unreaped, so that a group id can never have
been handed on: pids wrap within minutes on a busy machine (``pid_max`` is 32768 here and
every thread takes one), and a number freed by a reaped leader can become another session's
group -- a pod of another test run, or a ``timeout`` job, which leads its own group.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

STOP_GRACE_SECONDS = 5.0
_EXIT_POLL_SECONDS = 0.02

# Run children with a parent-death signal, so nothing outlives a harness that is killed hard.
_ORPHAN_GUARD = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []

_Start = Callable[[], subprocess.Popen[bytes]]


class _ForkingThread:
    """The one thread that forks the test bed's children, started on first use.

    It is a daemon thread: it ends only with the process, which is when the children's
    parent-death signal should fire. A process forked from the harness (after ``os.fork``)
    has no copy of the thread, so it gets a thread of its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[tuple[_Start, Future[subprocess.Popen[bytes]]]]
        self._requests = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._owner_pid = 0

    def run(self, start: _Start) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None or self._owner_pid != os.getpid():
                self._requests = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=self._serve, args=(self._requests,), name="test-bed-forks", daemon=True
                )
                self._thread.start()
                self._owner_pid = os.getpid()
            if threading.current_thread() is self._thread:
                return start()
            requests = self._requests
        done: Future[subprocess.Popen[bytes]] = Future()
        requests.put((start, done))
        return done.result()

    @staticmethod
    def _serve(
        requests: queue.SimpleQueue[tuple[_Start, Future[subprocess.Popen[bytes]]]],
    ) -> None:
        while True:
            start, done = requests.get()
            try:
                done.set_result(start())
            except BaseException as error:  # handed to the caller, who raises it
                done.set_exception(error)


_forks = _ForkingThread()


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (so its whole group can be killed), output to ``log``.

    Safe to call from any thread: the fork happens on the one forking thread (module
    docstring), so the child lives until :func:`terminate` or the harness's own death.
    """
    log.parent.mkdir(parents=True, exist_ok=True)

    def start() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                [*_ORPHAN_GUARD, *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )

    return _forks.run(start)


def exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether ``process`` has exited, *without* reaping it: its pid stays ours meanwhile."""
    if process.returncode is not None:
        return True
    try:
        found = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped by someone else: nothing of it is ours any more
        return True
    return found is not None


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group ``process`` leads, if its leader is not reaped yet.

    An unreaped leader (running or a zombie) keeps its pid, so the group id is still its
    own; once reaped, the number may already be someone else's group, and is left alone.
    """
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def terminate(
    *processes: subprocess.Popen[bytes], grace_seconds: float = STOP_GRACE_SECONDS
) -> None:
    """SIGTERM each process, wait up to ``grace_seconds`` in all, then SIGKILL their groups."""
    for process in processes:
        if not exited(process):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    for process in processes:
        while not exited(process) and time.monotonic() < deadline:
            time.sleep(_EXIT_POLL_SECONDS)
        kill_group(process)  # the group's other members, and a leader that outstayed the grace
        process.wait()
