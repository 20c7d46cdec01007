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

pytestmark = pytest.mark.slow


def crawlfleet(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "crawlfleet", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


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
        for path in folder.glob("pages-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert len({p["url"] for p in pages if not p["failure_class"]}) == summary["crawled"]
    dead = [json.loads(x) for x in (folder / "dead-letters.jsonl").read_text().splitlines()]
    assert {d["failure_class"] for d in dead} >= {"http_404", "http_410", "robots_disallowed"}


def test_interrupted_run_resumes_without_recrawling(tmp_path: Path) -> None:
    config = SiteConfig(hosts=2, pages_per_host=60, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        job = {
            "apiVersion": "crawlfleet.io/v1alpha1",
            "kind": "CrawlJob",
            "metadata": {"name": "resumable"},
            "spec": {
                "seeds": site.seeds,
                "scope": {
                    "allowedDomains": site.hosts,
                    "maxDepth": 10,
                    "allowPrivateNetworks": True,
                },
                "concurrency": {"perWorker": 4, "perHost": 2, "hostDelaySeconds": 0.02},
                "lease": {"ttlSeconds": 10, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
            },
        }
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


def _pid_of_worker(worker_id: str, job_file: Path) -> int | None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(job_file).encode() in cmdline and worker_id.encode() in cmdline:
            return int(proc.name)
    return None


def test_a_killed_worker_is_replaced_and_its_leases_requeued(tmp_path: Path) -> None:
    config = SiteConfig(hosts=2, pages_per_host=80, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        job = {
            "apiVersion": "crawlfleet.io/v1alpha1",
            "kind": "CrawlJob",
            "metadata": {"name": "killed"},
            "spec": {
                "seeds": site.seeds,
                "scope": {
                    "allowedDomains": site.hosts,
                    "maxDepth": 10,
                    "allowPrivateNetworks": True,
                },
                "concurrency": {"perWorker": 4, "perHost": 2, "hostDelaySeconds": 0.02},
                "lease": {"ttlSeconds": 60, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
            },
        }
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
            pid = _pid_of_worker("local-1", job_file)
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        stdout, err = run.communicate(timeout=180)
        assert run.returncode == 0, err[-3000:]
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert summary["crawled"] == len(site.expected_pages())
        # Its leases came back at once (requeued by the runner, not by a 60 s expiry).
        assert summary["elapsed_s"] < 50
        logs = sorted(p.name for p in (tmp_path / "out" / "logs").iterdir())
        assert "local-3.log" in logs  # a replacement was started
