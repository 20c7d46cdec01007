"""A run's processes live and die together: one runner per output folder, and children that
the kernel kills when the runner dies, even by SIGKILL.

**The lock.** ``crawlfleet run`` holds an ``fcntl`` lock on ``<out>/run.lock`` for as long
as it runs: a second ``run`` or ``--resume`` on the folder is refused, naming the holder's
pid, instead of starting a second redis-server on the same append-only file. The kernel drops
the lock when its process ends however it ends, so a lock left by a SIGKILLed runner is no
lock at all: the next run takes it over without a stale-file heuristic. A POSIX record lock
belongs to the process, so children (forked or started) never hold it.

**Parent-death signal.** Each child asks the kernel (prctl(2), ``PR_SET_PDEATHSIG``) for
SIGKILL when its parent dies: redis-server and the zygote when the runner dies, each worker
when the zygote (or the runner that started it) dies. The trap: the "parent" is the *thread*
that forked the child, not the process, so a child started from a thread that later ends
(a thread pool, ``asyncio.to_thread``) would be killed right then. Every child of the run
is therefore started from the runner's main thread (tests/e2e/cluster/processes.py learnt
this the hard way). The signal survives ``execve``, so it guards redis-server too. On systems
without prctl (macOS) there is no guard; the lock still holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import TracebackType

from crawlfleet.errors import ConfigError

__all__ = ["LOCK_FILE", "RunLock", "die_with_parent", "guard_after_fork"]

#: The lock file under a run's output folder.
LOCK_FILE = "run.lock"

_PR_SET_PDEATHSIG = 1


@cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once, in the parent (a child after fork should not load)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


def _guard(prctl: Callable[..., int], parent: int) -> None:
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the guard was set
        os.kill(os.getpid(), signal.SIGKILL)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child is SIGKILLed when the thread
    calling Popen ends (the process's main thread: its end is the process's), None where the
    kernel offers no such signal.

    A preexec_fn runs between fork and exec; this one only calls prctl, getppid and kill,
    takes no Python lock, so it is safe in a parent that has threads.
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()
    return lambda: _guard(prctl, parent)


def guard_after_fork(parent: int) -> None:
    """In a child just forked (no exec) from ``parent``: SIGKILL when it dies."""
    prctl = _prctl()
    if prctl is not None:
        _guard(prctl, parent)


class RunLock:
    """The one run of an output folder; :meth:`acquire` it, release it by closing."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self.path = path

    @classmethod
    def acquire(cls, folder: Path) -> RunLock:
        """Take the folder's lock, or refuse with a sentence naming the run that holds it."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(
                f"{folder} is in use by another crawlfleet run (pid {holder}): wait for it to"
                f" finish, or stop it (kill -INT {holder}) and continue with --resume"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd, path)

    @staticmethod
    def holder(folder: Path) -> int | None:
        """The pid of the run holding ``folder``'s lock, None when no run holds it.

        Asked, not taken: a test lock (``F_GETLK``) that leaves a running run alone, and a
        folder without a lock file is no run at all (none is made here). Not for the process
        that holds the lock: closing any descriptor of the file drops a process's POSIX locks.
        """
        try:
            fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            with open(fd, "rb", closefd=False) as file:
                try:
                    fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except OSError:
                    text = file.read(32).decode(errors="replace").strip()
                    return int(text) if text.isdigit() else 0
                fcntl.lockf(fd, fcntl.LOCK_UN)
                return None
        finally:
            os.close(fd)

    def release(self) -> None:
        """Give the folder up (the kernel does it too when the process ends)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
