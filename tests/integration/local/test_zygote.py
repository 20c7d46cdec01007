"""The worker zygote as `crawlfleet run` uses it: real forks, real exit codes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from crawlfleet.config import DrainConfig
from crawlfleet.errors import CrawlfleetError
from crawlfleet.local.processes import LocalProcessBackend
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.local.zygote import Zygote
from tests.support.processes import worker_pid

JOB = {
    "apiVersion": "crawlfleet.io/v1alpha1",
    "kind": "CrawlJob",
    "metadata": {"name": "zygote", "namespace": "default"},
    "spec": {"seeds": ["http://127.0.0.1:9/"], "scope": {"allowPrivateNetworks": True}},
}


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    started = Zygote.start()
    try:
        yield started
    finally:
        started.close()


def write_job(tmp_path: Path, spec_changes: dict[str, object] | None = None) -> Path:
    doc = {**JOB, "spec": {**JOB["spec"], **(spec_changes or {})}}  # type: ignore[dict-item]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_forked_worker_exits_with_its_code_and_writes_its_log(
    zygote: Zygote, tmp_path: Path
) -> None:
    helped = zygote.spawn(["--help"], tmp_path / "help.log", "crawlfleet worker --help")
    assert helped.wait(30) == 0
    assert "usage: crawlfleet worker" in (tmp_path / "help.log").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**JOB, "kind": "CronJob"}))
    argv = [str(bad), "--redis-url", "redis://127.0.0.1:9/0"]
    refused = zygote.spawn(argv, tmp_path / "bad.log", "crawlfleet worker")
    assert refused.wait(30) == 2
    log = (tmp_path / "bad.log").read_text()
    assert "CronJob" in log
    assert "Traceback" not in log


def test_a_forked_worker_is_found_by_its_title_and_a_kill_is_reported(
    zygote: Zygote, tmp_path: Path, redis_server: RedisServer
) -> None:
    job = write_job(tmp_path)
    argv = [str(job), "--redis-url", redis_server.url, "--worker-id", "z-1"]
    argv += ["--out", str(tmp_path / "out"), "--keep-running"]
    worker = zygote.spawn(argv, tmp_path / "z-1.log", " ".join(["crawlfleet", "worker", *argv]))
    assert worker.poll() is None
    deadline = time.monotonic() + 10  # the child titles itself just after the fork
    while worker_pid(job, "z-1") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker_pid(job, "z-1") == worker.pid  # as `ps`/`pkill -f` would find it
    with pytest.raises(subprocess.TimeoutExpired):
        worker.wait(0.2)
    worker.send_signal(signal.SIGKILL)
    assert worker.wait(30) == -signal.SIGKILL
    assert worker.poll() == -signal.SIGKILL


def test_ctrl_c_reaches_workers_not_the_zygote(zygote: Zygote, tmp_path: Path) -> None:
    """A terminal's SIGINT goes to the whole process group; the zygote must outlive it."""
    first = zygote.spawn(["--help"], tmp_path / "first.log", "crawlfleet worker --help")
    assert first.wait(30) == 0  # the zygote is up and has set its signal dispositions
    os.kill(zygote.process.pid, signal.SIGINT)
    after = zygote.spawn(["--help"], tmp_path / "after.log", "crawlfleet worker --help")
    assert after.wait(30) == 0


def test_closing_ends_the_zygote_once_its_workers_are_gone(tmp_path: Path) -> None:
    zygote = Zygote.start()
    child = zygote.spawn(["--help"], tmp_path / "v.log", "crawlfleet worker --help")
    zygote.close()
    assert zygote.process.returncode == 0
    assert child.poll() == 0


def test_a_dead_zygote_costs_the_speed_not_the_run(tmp_path: Path) -> None:
    """The backend starts workers as interpreters once its zygote is gone."""
    zygote = Zygote.start()
    zygote.process.kill()
    zygote.process.wait()
    backend = LocalProcessBackend(
        write_job(tmp_path),
        "redis://127.0.0.1:9/0",
        tmp_path / "out",
        drain=DrainConfig(),
        zygote=zygote,
    )
    worker_id = backend.start()
    assert backend.zygote is None
    assert backend.active() == [worker_id]
    backend.stop_all()
    zygote.close()


def test_a_dead_zygote_is_a_crawlfleet_error(tmp_path: Path) -> None:
    """So the CLI reports it in one line, as every error it raises on purpose."""
    zygote = Zygote.start()
    zygote.process.kill()
    zygote.process.wait()
    with pytest.raises(CrawlfleetError, match="zygote"):
        zygote.spawn(["--help"], tmp_path / "v.log", "crawlfleet worker --help")
    zygote.close()
