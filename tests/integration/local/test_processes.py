"""The local backend: its cheap exit check, and draining as a state it keeps."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from crawlfleet.config import DrainConfig
from crawlfleet.local.processes import LocalProcessBackend, _Child


def _backend_with(tmp_path: Path, code: str) -> tuple[LocalProcessBackend, _Child]:
    backend = LocalProcessBackend(
        tmp_path / "job.yaml", "redis://127.0.0.1:1/0", tmp_path, drain=DrainConfig()
    )
    process = subprocess.Popen([sys.executable, "-c", code])
    child = _Child("local-1", process, time.time())
    backend._children["local-1"] = child
    return backend, child


async def test_a_worker_that_died_on_its_own_is_noticed(tmp_path: Path) -> None:
    backend, child = _backend_with(tmp_path, "import time; time.sleep(60)")
    try:
        assert not backend.exited()
        child.process.kill()
        child.process.wait()
        assert backend.exited()
        await backend.forget("local-1")  # the tick requeued its leases
        assert not backend.exited()
    finally:
        backend.stop_all()


async def test_a_worker_asked_to_stop_drains_in_view_until_it_has_exited(tmp_path: Path) -> None:
    # A worker that takes a moment to drain: SIGTERM is caught, it exits 0 a little later.
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), sys.exit(0)))\n"
        "time.sleep(60)\n"
    )
    backend, child = _backend_with(tmp_path, code)
    time.sleep(0.3)  # the handler is installed
    await backend.scale(0)
    view = await backend.observe()
    (unit,) = view.units
    assert unit.running
    assert unit.drain_deadline is not None
    assert unit.drain_deadline >= time.time() + DrainConfig().budget_seconds - 5
    assert view.replicas == 0  # draining is not capacity
    child.process.wait(10)
    assert not backend.exited()  # it was asked to: not a crash
    (unit,) = (await backend.observe()).units
    assert not unit.running
    assert unit.drain_deadline is not None  # still known as drained, not vanished
    backend.stop_all()
