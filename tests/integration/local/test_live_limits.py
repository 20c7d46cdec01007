"""Limits and scope edited into the job file of a running ``crawlfleet run`` take effect at once.

One slow host (each answer takes 0.4 s) crawled one request at a time (``perHost: 1``); a
few pages in, the job file is edited to ``perHost: 3``. The run says so (``LimitsChanged``
in events.jsonl) and the site, from its own request log, never saw two requests at once
before that moment, and saw several at once after it, never more than three.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from crawlfleet.testsite import RequestRecord, SiteConfig, TestSite
from tests.support.runs import (  # noqa: F401 (no_stray_runs: a fixture)
    crawlfleet,
    job_for_site,
    no_stray_runs,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

SITE = SiteConfig(hosts=1, pages_per_host=60, hostile=False, latency_seconds=0.4)


def _most_at_once(requests: list[RequestRecord], since: float, until: float) -> int:
    """The most requests the site was answering at one moment between ``since`` and
    ``until`` (a request counts from its arrival to its answer)."""
    moments = sorted(
        [(r.start, 1) for r in requests if since <= r.start <= until]
        + [(r.end, -1) for r in requests if r.end is not None and since <= r.start <= until]
    )
    most = now = 0
    for _, step in moments:
        now += step
        most = max(most, now)
    return most


def _started(
    site: TestSite, job: dict[str, Any], job_file: Path, out: Path
) -> subprocess.Popen[str]:
    """``crawlfleet run`` of ``job`` with one worker, once the site has answered 5 pages."""
    job_file.write_text(yaml.safe_dump(job))
    run = crawlfleet("run", str(job_file), "--out", str(out), "--workers", "1", cwd=out.parent)
    deadline = time.monotonic() + 60
    while len([r for r in site.all_requests() if r.status == 200]) < 5:
        assert time.monotonic() < deadline, "the crawl did not start"
        assert run.poll() is None, run.communicate()[1][-3000:]
        time.sleep(0.05)
    return run


def _events(out: Path) -> list[dict[str, Any]]:
    path = out / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_per_host_raised_in_the_job_file_applies_within_a_tick(tmp_path: Path) -> None:
    with TestSite(SITE) as site:
        job = job_for_site(
            site, "widened", concurrency={"perWorker": 8, "perHost": 1, "hostDelaySeconds": 0.1}
        )
        job_file, out = tmp_path / "job.yaml", tmp_path / "out"
        run = _started(site, job, job_file, out)
        job["spec"]["concurrency"]["perHost"] = 3
        edited_at = time.monotonic()
        job_file.write_text(yaml.safe_dump(job))
        _, err = run.communicate(timeout=180)
        assert run.returncode == 0, err[-3000:]
        requests = [r for r in site.all_requests() if r.path != "/robots.txt"]
    said = [e for e in _events(out) if e["kind"] == "LimitsChanged"]
    assert len(said) == 1, said
    assert said[0]["message"].startswith("concurrency.perHost 1 -> 3:"), said
    assert _most_at_once(requests, 0.0, edited_at) == 1
    # within a tick (a quarter second) and a fetch (the host's slot settles first)
    after = _most_at_once(requests, edited_at + 2.0, float("inf"))
    assert 2 <= after <= 3, after


def test_an_exclusion_added_to_a_running_crawl_stops_its_urls(tmp_path: Path) -> None:
    """``scope.exclude`` gains a pattern mid-crawl: from a heartbeat and a fetch later the site
    sees no request that matches it, the run says so (ScopeChanged), and the URLs queued
    before are dropped with their reason (dead letters of class excluded_live), none lost
    in silence."""
    site_config = SiteConfig(hosts=1, pages_per_host=70, hostile=False, latency_seconds=0.1)
    with TestSite(site_config) as site:
        job = job_for_site(
            site, "narrowed", concurrency={"perWorker": 4, "perHost": 1, "hostDelaySeconds": 0.1}
        )
        job_file, out = tmp_path / "job.yaml", tmp_path / "out"
        run = _started(site, job, job_file, out)
        job["spec"]["scope"]["exclude"] = ["/d[13]/"]
        edited_at = time.monotonic()
        job_file.write_text(yaml.safe_dump(job))
        _, err = run.communicate(timeout=180)
        assert run.returncode == 0, err[-3000:]
        requests = site.all_requests()
    excluded = re.compile("/d[13]/")
    late = [r.path for r in requests if excluded.search(r.path) and r.start > edited_at + 2.0]
    assert late == [], late
    before = [r.path for r in requests if excluded.search(r.path) and r.start <= edited_at]
    after = [r.path for r in requests if not excluded.search(r.path) and r.start > edited_at]
    assert after, "nothing crawled after the edit: the test proves nothing"
    said = [e for e in _events(out) if e["kind"] == "ScopeChanged"]
    assert len(said) == 1, said
    assert said[0]["message"].startswith("scope.exclude: +'/d[13]/':"), said
    dropped = [
        json.loads(line)
        for line in (out / "dead-letters.jsonl").read_text().splitlines()
        if line.strip()
    ]
    live = [d for d in dropped if d["failure_class"] == "excluded_live"]
    assert live, dropped  # queued before the edit, dropped when claimed
    assert all(excluded.search(d["url"]) for d in live), live
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dead_lettered"] >= len(live)
    fetched = {r.path for r in requests}
    assert not any(urlsplit(d["url"]).path in fetched for d in live)  # dropped before a request
    print(f"excluded: {len(before)} fetched before the edit, {len(live)} dropped after")
