"""Limits edited into the job file of a running ``crawlfleet run`` take effect within a tick.

One slow host (each answer takes 0.4 s) crawled one request at a time (``perHost: 1``); a
few pages in, the job file is edited to ``perHost: 3``. The run says so (``LimitsChanged``
in events.jsonl) and the site, from its own request log, never saw two requests at once
before that moment, and saw several at once after it, never more than three.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

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
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        out = tmp_path / "out"
        run = crawlfleet("run", str(job_file), "--out", str(out), "--workers", "1", cwd=tmp_path)
        deadline = time.monotonic() + 60
        while len([r for r in site.all_requests() if r.status == 200]) < 5:
            assert time.monotonic() < deadline, "the crawl did not start"
            assert run.poll() is None, run.communicate()[1][-3000:]
            time.sleep(0.05)
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
