"""The local backend: its cheap exit check, and draining as a state it keeps."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from crawlfleet.config import DrainConfig
from crawlfleet.fleet import Unit
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


async def _start_and_reap(backend: LocalProcessBackend) -> Unit:
    """Start a real worker, wait for it to exit, and return the unit the next observe shows."""
    worker_id = backend.start()
    backend._children[worker_id].process.wait(60)
    (unit,) = [u for u in (await backend.observe()).units if u.name == worker_id]
    await backend.forget(worker_id)  # as the tick does, once it requeued the leases
    return unit


async def test_workers_that_die_at_start_are_counted_with_what_they_said(tmp_path: Path) -> None:
    """Real workers on an invalid job: each exits 2 and writes its reason and sentence to
    logs/<worker>.exit; the backend reads it and counts the deaths in a row with the same
    error. Another error starts the count again."""
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: x}\n")
    backend = LocalProcessBackend(job, "redis://127.0.0.1:1/0", tmp_path, drain=DrainConfig())
    try:
        deaths = [await _start_and_reap(backend) for _ in range(3)]
        assert [u.quick_deaths for u in deaths] == [1, 2, 3]
        last = deaths[-1].last_exit
        assert last is not None
        assert (last.code, last.reason) == (2, "InvalidConfig")
        assert "spec" in last.message
        assert (tmp_path / "logs" / "local-3.exit").read_text().startswith("InvalidConfig: ")
        job.write_text("not: [a, crawljob")  # another error: a new count
        other = await _start_and_reap(backend)
        assert other.quick_deaths == 1
        assert other.last_exit is not None
        assert other.last_exit.message != last.message
    finally:
        backend.stop_all()
