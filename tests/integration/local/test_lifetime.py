"""One runner per output folder, and nothing of a run outlives its runner, SIGKILL included."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.processes import redis_server_pid, worker_pid
from tests.support.runs import crawlfleet, job_for_site, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]


def _survivors(job_file: Path, data_dir: Path) -> list[str]:
    found = [f"worker local-{n}" for n in range(1, 20) if worker_pid(job_file, f"local-{n}")]
    if redis_server_pid(data_dir) is not None:
        found.append("redis-server")
    return found


def test_a_killed_runner_takes_its_children_along_and_its_folder_stays_usable(
    tmp_path: Path,
) -> None:
    config = SiteConfig(hosts=2, pages_per_host=100, hostile=False, latency_seconds=0.3)
    with TestSite(config) as site:
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job_for_site(site, "lifetime")))
        out = tmp_path / "out"
        first = crawlfleet("run", str(job_file), "--out", str(out), "--workers", "2", cwd=tmp_path)
        deadline = time.monotonic() + 60
        while len(site.all_requests()) < 20 or len(_survivors(job_file, out / "redis")) < 3:
            assert time.monotonic() < deadline, "the crawl did not start"
            assert first.poll() is None, first.communicate()[1][-3000:]
            time.sleep(0.05)

        # A second runner on the folder in use is refused before it starts anything.
        second = crawlfleet("run", str(job_file), "--out", str(out), "--resume", cwd=tmp_path)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2, err[-3000:]
        assert f"in use by another crawlfleet run (pid {first.pid})" in err
        assert "Traceback" not in err

        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        deadline = time.monotonic() + 10
        while survivors := _survivors(job_file, out / "redis"):
            assert time.monotonic() < deadline, f"outlived the runner: {survivors}"
            time.sleep(0.05)

        # The dead runner's lock is no lock: --resume takes the folder and finishes the job.
        again = crawlfleet(
            "run", str(job_file), "--out", str(out), "--resume", "--json", cwd=tmp_path
        )
        stdout, err = again.communicate(timeout=180)
        assert again.returncode == 0, err[-3000:]
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert summary["crawled"] == len({canonicalize(u) for u in site.expected_pages()})
        assert not _survivors(job_file, out / "redis")
