"""`crawlfleet run` says what it waits for, as a user sees it: its lines and events.jsonl.

Real processes, a real Redis and the real test site, whose robots.txt answers 503 (with
``Retry-After``) before it answers at all: the run waits for it, says so while it does, and
then crawls every page. And a real S3 server that stops mid-crawl: the leases waiting for it
become ``Stalled``, with their stage, until it is back.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.frontier_actor import fetch_budget
from tests.support.runs import crawlfleet, job_for_site, no_stray_runs  # noqa: F401 (a fixture)
from tests.support.s3 import S3Server, aws_env

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

#: A progress line this often (the default, 5 s, is longer than the whole wait here).
PROGRESS = {"CRAWLFLEET_PROGRESS_SECONDS": "0.2"}


def test_a_robots_txt_answering_503_is_waited_for_and_the_run_says_so(tmp_path: Path) -> None:
    config = SiteConfig(
        hosts=1,
        pages_per_host=12,
        hostile=False,
        robots_failures=3,
        robots_retry_after_seconds=1,
    )
    with TestSite(config) as site:
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job_for_site(site, "robots-wait")))
        out = tmp_path / "out"
        run = crawlfleet(
            "run", str(job_file), "--out", str(out), "--workers", "1", "--json",
            cwd=tmp_path, env={**os.environ, **PROGRESS},
        )  # fmt: skip
        stdout, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-3000:]
        robots_asked = [r for r in site.all_requests() if r.path == "/robots.txt"]
        expected = len(site.expected_pages())
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["crawled"] == expected  # it waited, then crawled every page
    assert len(robots_asked) == 4  # three 503s, each asked again after its Retry-After
    assert summary["dead_lettered"] == 0  # a deferral costs no attempt

    # The news, once, when the wait began; and the progress line, while it lasted.
    assert "crawlfleet: waiting: 1 host for robots.txt (503), next try " in err, err[-3000:]
    progress = [line for line in err.splitlines() if line.startswith("crawled ")]
    waiting = [line for line in progress if "waiting: 1 host for robots.txt (503)" in line]
    assert waiting, progress
    assert "queued 1 " in waiting[0]  # the seed, held back, not lost
    assert "in-flight 0 " in waiting[0]
    # events.jsonl: one Waiting Event with its reason, and its count of hosts.
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    waits = [e for e in events if e["kind"] == "Waiting"]
    assert [(e["why"], e["count"]) for e in waits] == [("RobotsTxt", 1)]
    assert waits[0]["message"].startswith("waiting: 1 host for robots.txt (503), next try at ")
    kinds = [e["kind"] for e in events]
    assert kinds.index("Waiting") < kinds.index("Completed")
    assert "Stalled" not in kinds  # a deferred lease is given back: nothing is stuck


def test_leases_stuck_behind_a_store_that_is_down_are_stalled_until_it_is_back(
    private_s3_server: S3Server, tmp_path: Path
) -> None:
    """The destination (a real S3 server) stops mid-crawl: the worker claims nothing and its
    pages' leases wait in the output stage, heartbeat after heartbeat. Past the stall
    threshold (here 3 × 2 + 2 + 1 = 9 s) the run says they are stalled, with the stage; once
    the store is back they move, the run says so, and every page lands once."""
    server = private_s3_server
    bucket = server.create_bucket("stall")
    config = SiteConfig(hosts=1, pages_per_host=80, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        job = job_for_site(
            site,
            "stall",
            lease={"ttlSeconds": 2, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
            fetch=fetch_budget(2.0),
            output={"maxFileAgeSeconds": 1},
        )
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        out = tmp_path / "out"
        run = crawlfleet(
            "run", str(job_file), "--output", f"s3://{bucket}/", "--workers", "1",
            "--out", str(out), "--json",
            cwd=tmp_path, env={**aws_env(server), **PROGRESS},
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while len(site.all_requests()) < 20:
            assert time.monotonic() < deadline, "the crawl did not start"
            assert run.poll() is None, run.communicate()[1][-3000:]
            time.sleep(0.05)
        server.stop()
        while "Stalled" not in _kinds(out):
            assert time.monotonic() < deadline + 60, _kinds(out)
            assert run.poll() is None, run.communicate()[1][-3000:]
            time.sleep(0.2)
        server.start()
        stdout, err = run.communicate(timeout=240)
        assert run.returncode == 0, err[-3000:]
        expected = len(site.expected_pages())
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["crawled"] == expected
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    stalls = [e for e in events if e["kind"] == "Stalled"]
    assert stalls, [e["kind"] for e in events]
    # A loaded machine may see one late heartbeat while the store is down (the stall ends for
    # want of a fresh report, then begins again): every announcement is the same stall.
    for stall in stalls:
        assert (stall["why"], stall["stage"]) == ("StuckOutput", "output"), stall
        assert stall["workers"] == "local-1", stall
        assert stall["leases"] > 0
        assert stall["oldest_seconds"] > 9.0
        assert "their records wait for the output to become durable" in stall["message"]
    # Each Stalled is followed by its StallEnded, the last one once the store is back.
    said = [e["kind"] for e in events if e["kind"] in ("Stalled", "StallEnded")]
    assert said == ["Stalled", "StallEnded"] * len(stalls), said
    # Meanwhile the crawl waited for its output, and said that too.
    waits = [e for e in events if e["kind"] == "Waiting"]
    assert "OutputBlocked" in [e["why"] for e in waits]
    assert "crawlfleet: stalled: leases stopped moving while their workers heartbeat: " in err
    stalled_lines = [line for line in err.splitlines() if "  stalled: " in line]
    assert stalled_lines, err[-3000:]
    assert " in output for " in stalled_lines[-1]


def _kinds(out: Path) -> list[str]:
    """The kinds of the run's events so far (events.jsonl grows a whole line at a time)."""
    try:
        lines = (out / "events.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line)["kind"] for line in lines]
