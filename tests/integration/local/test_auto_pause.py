"""``spec.autoPause`` in a real ``crawlfleet run``: a site that starts answering every request
with 429 makes the job pause itself after ``rateLimitedFor`` (a ``RateLimited`` Event, no
worker, no request to the site while paused), and ``resumeAfter`` later it tries again and,
the site relenting, completes with every page."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.runs import (  # noqa: F401 (no_stray_runs: a fixture)
    crawlfleet,
    job_for_site,
    no_stray_runs,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]


def _events(out: Path) -> list[dict[str, Any]]:
    path = out / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_for_event(out: Path, kind: str, run: Any, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in _events(out) if e["kind"] == kind]
        if found:
            return found[0]
        assert run.poll() is None, run.communicate()[1][-3000:]
        time.sleep(0.1)
    raise AssertionError(f"no {kind} event: {[e['kind'] for e in _events(out)]}")


def test_a_job_rate_limited_everywhere_pauses_itself_and_tries_again_later(
    tmp_path: Path,
) -> None:
    config = SiteConfig(hosts=2, pages_per_host=30, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        job = job_for_site(
            site,
            "limited",
            concurrency={"perWorker": 4, "perHost": 1, "hostDelaySeconds": 0.05},
            retry={
                "requestAttempts": 1,
                "taskAttempts": 50,
                "backoffBaseSeconds": 0.2,
                "backoffMaxSeconds": 0.5,
            },
            autoPause={"rateLimitedFor": "2s", "resumeAfter": "5s"},
        )
        job_file, out = tmp_path / "job.yaml", tmp_path / "out"
        job_file.write_text(yaml.safe_dump(job))
        run = crawlfleet("run", str(job_file), "--out", str(out), cwd=tmp_path)
        deadline = time.monotonic() + 60
        while len([r for r in site.log.all_requests() if r.status == 200]) < 5:
            assert time.monotonic() < deadline, "the crawl did not start"
            time.sleep(0.05)
        site.rate_limit_everything()
        limited_at = time.monotonic()

        paused = _wait_for_event(out, "RateLimited", run)
        assert time.monotonic() - limited_at >= 2.0  # not before rateLimitedFor
        assert "longer than spec.autoPause.rateLimitedFor (2s)" in paused["message"]
        assert "it tries again in 5s" in paused["message"]
        time.sleep(1.5)  # the workers drain: the fetches under way end
        quiet_from = len(site.log.all_requests())
        time.sleep(2.0)
        while_paused = site.log.all_requests()[quiet_from:]
        assert [r for r in while_paused if r.path != "/robots.txt"] == []  # paused: no request

        site.rate_limit_everything(False)
        _wait_for_event(out, "RateLimitPauseEnded", run)
        _, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr[-3000:]
        answered = {canonicalize(r.url) for r in site.log.all_requests() if r.status == 200}
        expected = {canonicalize(url) for url in site.expected_pages()}
        assert expected <= answered  # every page, once the site relented
        state = json.loads((out / "state.json").read_text())
        assert "rateLimitedPauseSince" not in json.dumps(state)  # the pause is over
