"""`crawlfleet run` and `crawlfleet demo` as a user runs them: real processes, real Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.processes import worker_pid
from tests.support.runs import crawlfleet, job_for_site, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]


def test_demo_completes_and_summarises(tmp_path: Path) -> None:
    proc = crawlfleet("demo", "--json", cwd=tmp_path)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["phase"] == "Succeeded"
    assert summary["crawled"] > 200
    assert summary["dead_lettered"] >= 3  # 404, 410, robots-disallowed at least
    for key in ("failed", "seen", "duplicates_skipped", "requeued", "elapsed_s", "pages_per_s"):
        assert key in summary
    assert 1 <= summary["max_workers"] <= 3
    folder = tmp_path / "crawl-output" / "demo"
    assert json.loads((folder / "summary.json").read_text()) == summary
    pages = [
        json.loads(line)
        for path in folder.glob("pages/*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert len({p["url"] for p in pages if not p["failure_class"]}) == summary["crawled"]
    dead = [json.loads(x) for x in (folder / "dead-letters.jsonl").read_text().splitlines()]
    assert {d["failure_class"] for d in dead} >= {"http_404", "http_410", "robots_disallowed"}


def test_interrupted_run_resumes_without_recrawling(tmp_path: Path) -> None:
    config = SiteConfig(hosts=2, pages_per_host=60, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        job = job_for_site(
            site,
            "resumable",
            concurrency={"perWorker": 4, "perHost": 2, "hostDelaySeconds": 0.02},
            lease={"ttlSeconds": 10, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
        )
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        out = tmp_path / "out"
        first = crawlfleet("run", str(job_file), "--out", str(out), "--workers", "2", cwd=tmp_path)
        deadline = time.monotonic() + 60
        while len([r for r in site.all_requests() if r.status == 200]) < 30:
            assert time.monotonic() < deadline, "the crawl did not start"
            time.sleep(0.05)
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 130, err[-3000:]
        assert "--resume" in err
        done_before = len(site.all_requests())
        assert done_before < len(site.expected_pages()) + 2  # really interrupted

        again = crawlfleet(
            "run", str(job_file), "--out", str(out), "--resume", "--json", cwd=tmp_path
        )
        stdout, err = again.communicate(timeout=180)
        assert again.returncode == 0, err[-3000:]
        summary = json.loads(stdout.strip().splitlines()[-1])
        expected = {canonicalize(u) for u in site.expected_pages()}
        assert summary["crawled"] == len(expected)
        fetched = Counter(
            canonicalize(r.url) for r in site.all_requests() if r.path != "/robots.txt"
        )
        assert set(fetched) == expected
        twice = [u for u, n in fetched.items() if n > 1]
        assert len(twice) <= 2 * 4  # at most what was in flight at the interruption


def test_a_second_run_into_the_same_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out" / "redis").mkdir(parents=True)
    example = Path(__file__).parents[3] / "examples" / "crawljob.yaml"
    proc = crawlfleet("run", str(example), "--out", str(tmp_path / "out"), cwd=tmp_path)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "--resume" in err


def test_a_killed_worker_is_replaced_and_its_leases_requeued(tmp_path: Path) -> None:
    config = SiteConfig(hosts=2, pages_per_host=80, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        job = job_for_site(
            site, "killed", concurrency={"perWorker": 4, "perHost": 2, "hostDelaySeconds": 0.02}
        )
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        run = crawlfleet(
            "run",
            str(job_file),
            "--out",
            str(tmp_path / "out"),
            "--workers",
            "2",
            "--json",
            cwd=tmp_path,
        )
        deadline = time.monotonic() + 60
        pid = None
        while pid is None or len(site.all_requests()) < 20:
            assert time.monotonic() < deadline, "the crawl did not start"
            pid = worker_pid(job_file, "local-1")
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        stdout, err = run.communicate(timeout=180)
        assert run.returncode == 0, err[-3000:]
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert summary["crawled"] == len(site.expected_pages())
        # Its leases came back at once: requeued by the runner as its process exited, none by
        # expiry.
        lines = (tmp_path / "out" / "events.jsonl").read_text().splitlines()
        events = [json.loads(line) for line in lines]
        requeues = [e for e in events if e["kind"] == "LeasesRequeued"]
        assert [(e["worker"], e["why"]) for e in requeues] == [("local-1", "exited")]
        assert requeues[0]["requeued"] > 0
        assert not [e for e in events if e["kind"] == "LeasesExpired"]
        logs = sorted(p.name for p in (tmp_path / "out" / "logs").iterdir())
        assert "local-3.log" in logs  # a replacement was started


def test_workers_killed_repeatedly_lose_no_page(tmp_path: Path) -> None:
    # 20 ms a response at 8 requests in flight: at most ~400 pages/s, so the 2,000 pages last
    # several seconds however fast the workers start (forked) and crawl.
    config = SiteConfig(hosts=2, pages_per_host=1000, hostile=False, latency_seconds=0.02)
    with TestSite(config) as site:
        job_file = tmp_path / "job.yaml"
        job_file.write_text(
            yaml.safe_dump(
                job_for_site(
                    site, "chaos", concurrency={"perWorker": 8, "perHost": 4, "hostDelaySeconds": 0}
                )
            )
        )
        run = crawlfleet(
            "run",
            str(job_file),
            "--out",
            str(tmp_path / "out"),
            "--workers",
            "3",
            "--json",
            cwd=tmp_path,
        )
        kills = 0
        deadline = time.monotonic() + 120
        next_kill = time.monotonic() + 1
        while run.poll() is None and kills < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
            if time.monotonic() < next_kill:
                continue
            victims = [
                pid for n in range(1, 20) if (pid := worker_pid(job_file, f"local-{n}")) is not None
            ]
            if victims:
                os.kill(victims[kills % len(victims)], signal.SIGKILL)
                kills += 1
            next_kill = time.monotonic() + 1
        stdout, err = run.communicate(timeout=180)
        assert run.returncode == 0, err[-3000:]
        assert kills >= 2, "the crawl ended before the chaos began"
        summary = json.loads(stdout.strip().splitlines()[-1])
        expected = {canonicalize(u) for u in site.expected_pages()}
        assert len(expected) >= 2000
        assert summary["crawled"] == len(expected)
        fetched = Counter(
            canonicalize(r.url) for r in site.all_requests() if r.path != "/robots.txt"
        )
        assert set(fetched) == expected
        duplicates = sum(n - 1 for n in fetched.values())
        assert duplicates <= summary["requeued"], (duplicates, summary)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "kind"),
        ("- just\n- a list\n", "mapping"),
        (
            "apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: x}\n"
            "spec: {seeds: ['https://a.example/'], scope: {maxDepht: 2}}\n",
            "spec.scope.maxDepht",
        ),
        (
            "apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: x}\n"
            "spec: {seeds: ['ftp://a.example/']}\n",
            "spec.seeds",
        ),
    ],
)
def test_bad_crawljobs_are_refused_before_anything_starts(
    tmp_path: Path, document: str, message: str
) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(document)
    proc = crawlfleet("run", str(job_file), "--out", str(tmp_path / "out"), cwd=tmp_path)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_unreachable_redis_and_missing_redis_server_are_clear(tmp_path: Path) -> None:
    example = Path(__file__).parents[3] / "examples" / "crawljob.yaml"
    proc = crawlfleet(
        "run",
        str(example),
        "--out",
        str(tmp_path / "a"),
        "--redis-url",
        "redis://127.0.0.1:1/0",
        cwd=tmp_path,
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "Redis" in err
    assert "Traceback" not in err
    missing = subprocess.run(
        [sys.executable, "-m", "crawlfleet", "run", str(example), "--out", str(tmp_path / "b")],
        cwd=tmp_path,
        env={**os.environ, "PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2
    assert "redis-server was not found" in missing.stderr
    assert "apt-get install redis-server" in missing.stderr
