"""The local backend's cheap exit check, the runner's cue for an early tick."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from crawlfleet.local.processes import LocalProcessBackend, _Child


def _backend_with(tmp_path: Path, code: str) -> tuple[LocalProcessBackend, _Child]:
    backend = LocalProcessBackend(tmp_path / "job.yaml", "redis://127.0.0.1:1/0", tmp_path)
    process = subprocess.Popen([sys.executable, "-c", code])
    child = _Child("local-1", process, time.time())
    backend._children["local-1"] = child
    return backend, child


def test_a_worker_that_died_on_its_own_is_noticed(tmp_path: Path) -> None:
    backend, child = _backend_with(tmp_path, "import time; time.sleep(60)")
    try:
        assert not backend.exited()
        child.process.kill()
        child.process.wait()
        assert backend.exited()
        backend.forget("local-1")  # the runner requeued its leases
        assert not backend.exited()
    finally:
        backend.stop_all(timeout_seconds=5)


def test_a_worker_asked_to_stop_is_not_an_unexpected_exit(tmp_path: Path) -> None:
    backend, child = _backend_with(tmp_path, "import time; time.sleep(60)")
    backend.stop("local-1")
    child.process.wait()
    assert not backend.exited()
    assert backend.reap() == [("local-1", -15)]
