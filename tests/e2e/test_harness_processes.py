"""The test bed's children behave the same however the harness itself was started.

A harness runs in the foreground, under ``timeout`` (its own process group, led by
``timeout``), under ``setsid``, as ``nohup … &`` from a script (SIGINT, SIGQUIT and SIGHUP
ignored), or in a fresh process group, as CI runners and schedulers start jobs. Each test
here starts a small harness (this module run as a script) in each of those ways and checks
what ``tests/e2e/cluster/processes.py`` promises: a child started from a thread that then
ends keeps running (the parent-death signal is tied to the forking thread, see that module),
``terminate`` reaches it with SIGTERM first and kills its whole group after the grace, the
harness itself is never signalled, and a harness killed with SIGKILL leaves no child behind.
No control plane is needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster.processes import exited, spawn, terminate

REPO = Path(__file__).resolve().parents[2]

# The launch prefixes, and whether the launched harness gets a process group of its own.
LAUNCHERS: dict[str, tuple[list[str], bool]] = {
    "foreground": ([], False),
    "timeout": (["timeout", "120"], False),
    "setsid": (["setsid", "--wait"], False),
    "nohup in the background": (["sh", "-c", 'trap "" HUP INT QUIT; exec "$@"', "sh"], False),
    "new process group": ([], True),
}

# A pod's process: says when it is ready, notes SIGTERM, and has a member of its group that
# ignores SIGTERM (so only the group's SIGKILL ends it); writes that member's pid to a file.
_CHILD = """
import pathlib, signal, subprocess, sys, time
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
member = subprocess.Popen([sys.executable, "-c", stubborn])
pathlib.Path(sys.argv[1]).write_text(str(member.pid))
def stop(*_):
    print("SIGTERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(120)
"""


def _wait_for(probe: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (killed, waiting for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _spawn_from_a_passing_thread(directory: Path, name: str) -> subprocess.Popen[bytes]:
    """Start the child from a thread that ends once the child runs, as a sync thread or a
    thread pool would; the child's own code is running (its guard set) before it ends."""
    log = directory / f"{name}.log"
    started: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        started.append(
            spawn([sys.executable, "-c", _CHILD, str(directory / f"{name}.member")], log=log)
        )
        _wait_for(lambda: "ready" in log.read_text(), 30, "the child to start")

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    (child,) = started
    return child


def _harness(directory: Path) -> dict[str, Any]:
    """What the launched harness reports: run as ``python -m <this module> <directory>``."""
    child = _spawn_from_a_passing_thread(directory, "child")
    time.sleep(0.3)  # the kernel's parent-death signal would have landed by now
    alive_after_thread = not exited(child)
    member = int((directory / "child.member").read_text())
    started = time.monotonic()
    terminate(child, grace_seconds=10)
    stopped_seconds = time.monotonic() - started
    _wait_for(lambda: _gone(member), 10, "the group member to be killed")
    return {
        "alive_after_thread": alive_after_thread,
        "returncode": child.returncode,
        "saw_sigterm": "SIGTERM" in (directory / "child.log").read_text(),
        "stopped_within_grace": stopped_seconds < 5,
    }


def _orphan(directory: Path) -> None:
    """Start a child, say its pid, then wait to be killed: run with ``orphan``."""
    child = _spawn_from_a_passing_thread(directory, "orphan")
    print(json.dumps({"child": child.pid}), flush=True)
    time.sleep(120)


def _launch(launcher: str, *args: str) -> subprocess.Popen[str]:
    prefix, new_group = LAUNCHERS[launcher]
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "tests.e2e.test_harness_processes", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        process_group=0 if new_group else None,
    )


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_children_are_stopped_alike_however_the_harness_is_started(
    launcher: str, tmp_path: Path
) -> None:
    harness = _launch(launcher, str(tmp_path))
    out, _ = harness.communicate(timeout=90)
    assert harness.returncode == 0, f"the harness itself was signalled or failed: {out}"
    report = json.loads(out.splitlines()[-1])
    assert report == {
        "alive_after_thread": True,  # not killed when the thread that started it ended
        "returncode": 0,  # it exited on its own SIGTERM handler: SIGTERM came first
        "saw_sigterm": True,
        "stopped_within_grace": True,
    }


@pytest.mark.parametrize("launcher", ["foreground", "timeout", "new process group"])
def test_a_harness_killed_hard_leaves_no_child(launcher: str, tmp_path: Path) -> None:
    harness = _launch(launcher, "orphan", str(tmp_path))
    assert harness.stdout is not None
    child = json.loads(harness.stdout.readline())["child"]
    assert not _gone(child)
    try:
        # SIGKILL the harness itself (under timeout: the python process, not timeout)
        harness_pid = _only_child(harness.pid) if LAUNCHERS[launcher][0] else harness.pid
        os.kill(harness_pid, signal.SIGKILL)
        harness.wait(30)
        _wait_for(lambda: _gone(child), 10, "the orphaned child to be killed")
    finally:
        # the child's own child has no guard of its own (nor has a pod's): tidy it up
        member = int((tmp_path / "orphan.member").read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)


def _only_child(pid: int) -> int:
    """The one child of ``pid`` (the harness ``timeout`` started)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


if __name__ == "__main__":
    if sys.argv[1] == "orphan":
        _orphan(Path(sys.argv[2]))
    else:
        print(json.dumps(_harness(Path(sys.argv[1]))), flush=True)
