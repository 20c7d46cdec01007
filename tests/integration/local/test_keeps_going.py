"""A job that keeps going, as a user runs it: ``crawlfleet run`` of a job with a revisit rule.

Real processes, a real Redis and the real test site over loopback. The job's seed page is
tracked (a rule matches it); the rest of the site is fetched once. Once everything is crawled
the run does not complete: it waits for the seed's next revisit with its fleet at zero
(``minReplicas: 0``), wakes a worker when the revisit is due, fetches the page again, and says
how fresh it keeps it. Suspended meanwhile, it revisits nothing; resumed, it does; Ctrl-C ends
it cleanly, with its freshness in ``summary.json``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
import yaml

from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.runs import crawlfleet, job_for_site, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

#: The shortest interval a rule may have (crawljob/recrawl.py's floor): the test waits for it.
INTERVAL = "10s"
#: The brain wakes no worker ahead of a revisit (CRAWLFLEET_RETRY_LEAD_SECONDS 0), and ticks
#: often: the fleet goes to zero between visits, and is woken from zero by the due revisit.
ENV = {
    "CRAWLFLEET_PROGRESS_SECONDS": "0.2",
    "CRAWLFLEET_RETRY_LEAD_SECONDS": "0",
}


def _events(out: Path) -> list[dict[str, object]]:
    path = out / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _state(out: Path) -> str | None:
    try:
        return str(json.loads((out / "state.json").read_text())["phase"])
    except (OSError, ValueError, KeyError):
        return None


def test_a_job_that_keeps_going_waits_at_zero_workers_and_revisits_its_page_when_due(
    tmp_path: Path,
) -> None:
    config = SiteConfig(hosts=1, pages_per_host=6, hostile=False)
    with TestSite(config) as site:
        (seed,) = site.seeds
        job = job_for_site(
            site,
            "keeps-going",
            recrawl=[
                {
                    "match": f"^{re.escape(seed)}$",
                    "interval": INTERVAL,
                    "minInterval": INTERVAL,
                    "adaptive": {"whenChanged": 1, "whenUnchanged": 1},
                }
            ],
            workers={"minReplicas": 0, "maxReplicas": 1, "scaleDownDelaySeconds": 1},
        )
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        out = tmp_path / "out"
        run = crawlfleet(
            "run", str(job_file), "--out", str(out), "--json",
            cwd=tmp_path, env={**os.environ, **ENV}, own_group=True,
        )  # fmt: skip
        expected = len(site.expected_pages())
        deadline = time.monotonic() + 90
        # The first visit, then the fleet at zero while the job waits for the revisit.
        while not any(e["kind"] == "Scaled" and e["to"] == 0 for e in _events(out)):
            assert time.monotonic() < deadline, _events(out)
            assert run.poll() is None, run.communicate()[1][-3000:]
            time.sleep(0.1)
        assert site.count(seed) == 1
        (first,) = [r for r in site.all_requests() if r.url == seed]
        # Suspended as any job is (the job file is the local spec): nothing is revisited
        # while it is, though the revisit comes due.
        job_file.write_text(yaml.safe_dump({**job, "spec": {**job["spec"], "suspend": True}}))
        while _state(out) != "Suspended":
            assert time.monotonic() < deadline, _events(out)
            time.sleep(0.1)
        while time.monotonic() < first.start + 12:  # the interval, and a tick or so
            assert run.poll() is None, run.communicate()[1][-3000:]
            time.sleep(0.2)
        assert site.count(seed) == 1
        # Resumed, the revisit that came due meanwhile wakes a worker from zero.
        job_file.write_text(yaml.safe_dump(job))
        while site.count(seed) < 2:
            assert time.monotonic() < deadline, _events(out)
            assert run.poll() is None, run.communicate()[1][-3000:]
            time.sleep(0.1)
        os.killpg(run.pid, signal.SIGINT)
        stdout, err = run.communicate(timeout=90)
        urls = {r.url for r in site.all_requests() if r.path != "/robots.txt"}
        fetched_twice = [url for url in urls if site.count(url) > 1 and url != seed]
    assert run.returncode == 130, err[-3000:]
    assert fetched_twice == []  # only the tracked page is revisited
    assert len(urls) == expected

    events = _events(out)
    kinds = [e["kind"] for e in events]
    assert "Completed" not in kinds  # it never completed by itself
    assert "Stalled" not in kinds
    scaled = [(e["from"], e["to"]) for e in events if e["kind"] == "Scaled"]
    assert scaled[:3] == [(0, 1), (1, 0), (0, 1)], scaled  # woken from zero by the revisit
    (waiting,) = [e for e in events if e["kind"] == "Waiting"]
    assert waiting["why"] == "NextRevisit"
    assert re.match(r"waiting: next revisit due at \S+Z \(1 tracked\)", str(waiting["message"]))

    # The run's line says how fresh it keeps its pages, not a progress towards an end.
    lines = [line for line in err.splitlines() if line.startswith("tracked ")]
    assert any(line.startswith("tracked 1  due 0  next revisit in ") for line in lines), lines
    assert "crawlfleet: waiting: next revisit due in " in err
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["phase"] == "Suspended"
    freshness = summary["freshness"]
    assert freshness["tracked"] == 1
    revisits = freshness["changed"] + freshness["unchanged"] + freshness["notModified"]
    assert revisits >= 1  # the test site's pages do not change: unchanged or not modified
    assert freshness["gone"] == 0
    assert "lagP95Seconds" in freshness
    state = json.loads((out / "state.json").read_text())
    assert state["phase"] == "Suspended"
