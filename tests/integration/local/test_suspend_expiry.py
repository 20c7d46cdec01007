"""``spec.suspendExpiry`` on a real ``crawlfleet run``: a job started suspended waits out its
expiry, then resumes by itself (``then: Resume``) or fails (``then: Fail``, exit 4); each time
the run says so once (SuspendExpired), and the site, from its own request log, saw nothing
while the job was suspended."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.runs import (  # noqa: F401 (no_stray_runs: a fixture)
    crawlfleet,
    job_for_site,
    no_stray_runs,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

SITE = SiteConfig(hosts=1, pages_per_host=10, hostile=False, latency_seconds=0.01)


def _run(site: TestSite, tmp_path: Path, then: str) -> tuple[int, str, float, Path]:
    """The run of a job suspended from the start with a 3 s expiry: (exit code, stderr, when
    it started, its folder)."""
    job = job_for_site(site, f"paused-{then.lower()}")
    job["spec"]["suspend"] = True
    job["spec"]["suspendExpiry"] = {"after": "3s", "then": then}
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(job))
    out = tmp_path / "out"
    started = time.monotonic()
    run = crawlfleet("run", str(job_file), "--out", str(out), "--workers", "1", cwd=tmp_path)
    _, err = run.communicate(timeout=120)
    return run.returncode, err, started, out


def _events(out: Path, kind: str) -> list[dict[str, Any]]:
    lines = (out / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, filter(None, lines)) if e["kind"] == kind]


def test_a_suspension_past_its_expiry_resumes_the_job(tmp_path: Path) -> None:
    with TestSite(SITE) as site:
        code, err, started, out = _run(site, tmp_path, "Resume")
        requests = site.all_requests()
    assert code == 0, err[-3000:]
    said = _events(out, "SuspendExpired")
    assert len(said) == 1, said
    assert said[0]["message"] == (
        "suspended longer than spec.suspendExpiry.after (3s): the job resumes"
        " (spec.suspend still says true)"
    )
    assert "suspended longer than spec.suspendExpiry.after (3s)" in err
    assert requests, "the job never resumed"
    assert min(r.start for r in requests) >= started + 3.0  # nothing while suspended
    summary = json.loads((out / "summary.json").read_text())
    assert summary["crawled"] == len(site.expected_pages())


def test_a_suspension_past_its_expiry_fails_the_job(tmp_path: Path) -> None:
    with TestSite(SITE) as site:
        code, err, _, out = _run(site, tmp_path, "Fail")
        requests = site.all_requests()
    assert code == 4, err[-3000:]
    assert "the job fails (spec.suspendExpiry.then: Fail)" in err
    assert requests == []
    said = _events(out, "SuspendExpired")
    assert [e["message"] for e in said] == [
        "suspended longer than spec.suspendExpiry.after (3s): the job fails"
    ]
    assert json.loads((out / "state.json").read_text())["phase"] == "Failed"
