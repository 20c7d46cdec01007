"""`crawlfleet run` of a scheduled job, as a user runs it: real processes, Redis and test site.

Time is the one thing not real: the run reads its due times from a file clock
(``CRAWLFLEET_SCHEDULE_CLOCK_FILE``) that the test moves forward, so a quarter-hourly schedule
runs twice in seconds. What each run did is read from the site's own request log and from the
output the runs wrote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlfleet.fleet.clock import FileClock
from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.runs import crawlfleet, crawlfleet_done, job_for_site, no_stray_runs  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

#: Ten seconds before a quarter-hour: the schedule's first due time is T0 + 10 s.
T0 = datetime(2026, 12, 2, 8, 14, 50, tzinfo=UTC)
FIRST, SECOND, LATER = "20261202T081500Z", "20261202T083000Z", "20261202T084500Z"


@pytest.fixture
def site() -> Any:
    with TestSite(SiteConfig(hosts=2, pages_per_host=25, hostile=False)) as running:
        yield running


def scheduled(site: TestSite, tmp_path: Path, **spec: object) -> tuple[Path, Path, dict[str, str]]:
    """A quarter-hourly job for the site (``spec`` sections replace the defaults'), its
    folder, and the environment with the clock at T0."""
    spec = {"schedule": {"cron": "*/15 * * * *"}, "output": {"maxFileAgeSeconds": 1}, **spec}
    return with_clock(tmp_path, job_for_site(site, "news", **spec))


def with_clock(tmp_path: Path, job: dict[str, object]) -> tuple[Path, Path, dict[str, str]]:
    """``job`` written to a file, its folder, and the environment with the clock at T0."""
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(job))
    clock = tmp_path / "clock"
    FileClock.set(clock, T0)
    env = {**os.environ, "CRAWLFLEET_SCHEDULE_CLOCK_FILE": str(clock)}
    return job_file, tmp_path / "out", env


class Said:
    """A process's stderr, read line by line in a thread, for the test to wait on."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            time.sleep(0.05)
        raise AssertionError(f"never said {text!r}:\n{''.join(self.lines)[-3000:]}")

    def text(self) -> str:
        self._thread.join(10)
        return "".join(self.lines)


def running(
    job_file: Path, out: Path, env: dict[str, str], tmp_path: Path
) -> tuple[subprocess.Popen[str], Said, Path]:
    """``crawlfleet run`` of the scheduled job, once it said its first due time (T0 + 10 s):
    the process (in a group of its own, as a terminal starts it), its stderr, its clock."""
    proc = crawlfleet(
        "run", str(job_file), "--out", str(out), cwd=tmp_path, env=env, own_group=True
    )
    said = Said(proc.stderr)
    said.wait_for("next run at 2026-12-02T08:15:00Z")
    return proc, said, Path(env["CRAWLFLEET_SCHEDULE_CLOCK_FILE"])


def fetched(site: TestSite, since: int = 0) -> Counter[str]:
    """Pages (not robots.txt) the site served since its ``since``-th request."""
    return Counter(
        canonicalize(r.url)
        for r in site.log.all_requests()[since:]
        if r.status == 200 and r.path != "/robots.txt"
    )


def manifest(out: Path, run: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((out / "runs" / run / "manifest.json").read_text())
    return loaded


def test_once_runs_one_run_now_under_its_own_prefix_and_exits(
    site: TestSite, tmp_path: Path
) -> None:
    job_file, out, env = scheduled(site, tmp_path)
    proc = crawlfleet(
        "run", str(job_file), "--once", "--out", str(out), "--json", cwd=tmp_path, env=env
    )
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    run = "20261202T081450Z"  # now, by the clock: --once does not wait for a due time
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["run"] == run
    assert summary["output"]["destination"] == str(out / "runs" / run)
    written = manifest(out, run)
    assert written["run"] == run
    pages = set(site.expected_pages())
    assert written["counts"]["crawled"] == len(pages) == summary["crawled"]
    assert set(fetched(site)) == {canonicalize(url) for url in pages}
    assert not (out / "pages").exists()  # every file of the run is under its prefix
    state = json.loads((out / "state.json").read_text())
    assert [(r["id"], r["outcome"]) for r in state["schedule"]["runs"]] == [(run, "Succeeded")]
    verified = crawlfleet_done("output", "verify", str(out), cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr
    assert f"{out}/runs/{run}: verified" in verified.stdout
    listed = crawlfleet_done("output", "ls", str(out), cwd=tmp_path)
    assert f"runs/{run}/manifest.json" in listed.stdout


def test_a_schedule_runs_at_due_times_once_for_missed_ones_from_the_last_committed_state(
    site: TestSite, tmp_path: Path
) -> None:
    job_file, out, env = scheduled(site, tmp_path)
    proc, said, clock = running(job_file, out, env, tmp_path)
    assert not site.log.all_requests()  # nothing runs before its due time

    FileClock.set(clock, T0 + timedelta(seconds=10))
    said.wait_for(f"run {FIRST} started from nothing kept")
    said.wait_for(f"run {FIRST} complete")
    said.wait_for("next run at 2026-12-02T08:30:00Z")
    first = fetched(site)
    pages = {canonicalize(url) for url in site.expected_pages()}
    assert set(first) == pages
    before_second = len(site.log.all_requests())

    # Past two due times at once (the machine asleep): one run, for the later, says so.
    FileClock.set(clock, T0 + timedelta(minutes=30, seconds=10))
    started = said.wait_for(f"run {LATER} started from the state of run {FIRST}")
    assert "1 earlier due time(s) passed unseen" in started
    said.wait_for(f"run {LATER} complete")
    said.wait_for("next run at 2026-12-02T09:00:00Z")
    second = fetched(site, before_second)
    # The seeds are fetched again; every other page the first run committed is seen, and
    # has no revisit rule: not fetched again.
    assert set(second) == {canonicalize(url) for url in site.seeds}
    assert manifest(out, LATER)["counts"]["crawled"] == len(site.seeds)
    assert manifest(out, FIRST)["counts"]["crawled"] == len(pages)

    os.killpg(proc.pid, signal.SIGINT)  # between runs: nothing is cut short
    proc.wait(60)
    err = said.text()
    assert proc.returncode == 0, err[-3000:]
    assert "stopped between runs" in err
    state = json.loads((out / "state.json").read_text())
    runs = state["schedule"]["runs"]
    assert [(r["id"], r["outcome"], r["pages"]) for r in runs] == [
        (LATER, "Succeeded", len(site.seeds)),
        (FIRST, "Succeeded", len(pages)),
    ]
    assert state["schedule"]["nextRunAt"] == "2026-12-02T09:00:00Z"


def test_replace_cancels_the_running_run_which_commits_nothing(tmp_path: Path) -> None:
    """concurrencyPolicy Replace: the run going at the next due time is cancelled (its
    workers drain) and the new run starts from what the last successful run committed --
    here nothing, so it fetches again every page the cancelled run had fetched."""
    slow = SiteConfig(hosts=2, pages_per_host=20, hostile=False, latency_seconds=0.2)
    with TestSite(slow) as site:
        job_file, out, env = scheduled(
            site,
            tmp_path,
            schedule={"cron": "*/15 * * * *", "concurrencyPolicy": "Replace"},
            concurrency={"perWorker": 2, "perHost": 1, "hostDelaySeconds": 0},
        )
        proc, said, clock = running(job_file, out, env, tmp_path)
        FileClock.set(clock, T0 + timedelta(seconds=10))
        said.wait_for(f"run {FIRST} started")
        deadline = time.monotonic() + 60
        while sum(fetched(site).values()) < 5:
            assert time.monotonic() < deadline, said.text()[-3000:]
            time.sleep(0.05)

        FileClock.set(clock, T0 + timedelta(minutes=15, seconds=10))
        said.wait_for(f"run {FIRST} cancelled")
        before_second = len(site.log.all_requests())
        cut_short = fetched(site)
        said.wait_for(f"run {SECOND} started from nothing kept")
        said.wait_for(f"run {SECOND} complete", timeout=120)
        pages = {canonicalize(url) for url in site.expected_pages()}
        assert len(cut_short) < len(pages)  # really halfway
        assert set(fetched(site, before_second)) == pages
        assert not (out / "runs" / FIRST / "manifest.json").exists()
        assert manifest(out, SECOND)["counts"]["crawled"] == len(pages)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)
    state = json.loads((out / "state.json").read_text())
    outcomes = [(r["id"], r["outcome"]) for r in state["schedule"]["runs"]]
    assert outcomes == [(SECOND, "Succeeded"), (FIRST, "Cancelled")]
    assert state["schedule"]["runs"][1]["pages"] < len(pages)
