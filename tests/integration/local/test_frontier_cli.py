"""``crawlfleet frontier job.yaml hosts|url|count|dead-letters`` on a real ``crawlfleet run``.

A slow crawl of the test site (three hosts, one fetch at a time each, a delay between
fetches) is looked at while it runs, and what the commands say is checked against what the
site itself served (its request log): no host is said to have more pages crawled than the
site answered, the counters of the hosts add up to the job's, a page the site served and
whose record is durable is "done" with the output file that holds it, a URL nobody linked
was never seen, and the 404 the site answered is a dead letter with its class. Then the run
is interrupted (Ctrl-C), and the commands say there is no crawl to read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from crawlfleet.testsite.graph import page_path
from tests.support.runs import (  # noqa: F401 (no_stray_runs: a fixture)
    crawlfleet,
    crawlfleet_done,
    job_for_site,
    no_stray_runs,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

#: Three hosts of 120 pages, fetched one at a time 0.2 s apart: ~30 s of crawl to look at (40
#: ran out before the last command on a loaded CI machine). The run is interrupted once the
#: commands were checked, so a longer crawl costs nothing.
SITE = SiteConfig(
    hosts=3, pages_per_host=120, latency_seconds=0.03, hostile_slow=False, hostile_heavy=False
)


_PAGES = frozenset(page_path(i) for i in range(SITE.pages_per_host))


def _look(job_file: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return crawlfleet_done("frontier", str(job_file), *args, "--out", str(out), cwd=out.parent)


def _json(job_file: Path, out: Path, *args: str) -> Any:
    done = _look(job_file, out, *args, "--json")
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def _served(site: TestSite) -> Counter[str]:
    """Pages the site answered 200, per host (netloc)."""
    return Counter(r.host for r in site.all_requests() if r.status == 200 and r.path in _PAGES)


def _until(what: str, check: Any, seconds: float = 60.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"never: {what}")


def test_the_frontier_commands_agree_with_the_site(tmp_path: Path) -> None:
    with TestSite(SITE) as site:
        job = job_for_site(
            site, "looked", concurrency={"perWorker": 4, "perHost": 1, "hostDelaySeconds": 0.2}
        )
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        out = tmp_path / "out"
        run = crawlfleet(
            "run", str(job_file), "--out", str(out), "--workers", "1", cwd=tmp_path,
            own_group=True,
        )  # fmt: skip
        _until("the crawl started", lambda: sum(_served(site).values()) >= 6)

        hosts = _json(job_file, out, "hosts", "--top", "10")["hosts"]
        served = _served(site)
        assert {h["host"] for h in hosts} <= set(site.hosts), hosts
        assert any(h["counts"]["queued"] > 0 for h in hosts), hosts  # a slow crawl: work waits
        for h in hosts:  # acked only after the site answered
            assert h["counts"]["crawled"] <= served[h["host"]], (h, served)
            assert h["in_flight"] <= 1, h  # perHost 1
        text = _look(job_file, out, "hosts")
        assert text.returncode == 0, text.stderr
        assert text.stdout.splitlines()[0].split()[:3] == ["HOST", "PART", "QUEUED"]

        counts = _json(job_file, out, "count", *site.hosts)
        totals = _json(job_file, out, "count")
        assert sum(c["crawled"] for c in counts.values()) <= totals["crawled"] + 10
        assert totals["seen"] >= totals["queued"] + totals["crawled"] > 0

        seed = canonicalize(site.seeds[0])
        story = _until(
            "the first seed's record is durable",
            lambda: (s := _json(job_file, out, "url", seed))["state"] == "done" and s,
        )
        assert story["seen"]
        assert story["output"], story
        assert all(key.startswith("pages/") for key, _record in story["output"])
        assert [record["status"] for _key, record in story["output"]] == [200]

        never = _look(job_file, out, "url", site.url(0, "/never/linked"))
        assert never.returncode == 1, never.stderr
        assert "seen       no" in never.stdout

        # the site's 404 (linked from host 0's first pages): dead, with its class
        missing = canonicalize(site.url(0, "/status/404"))
        _until(
            "the site answered /status/404",
            lambda: any(r.path == "/status/404" and r.status == 404 for r in site.all_requests()),
        )
        letters = _until(
            "the 404 is a dead letter",
            lambda: [
                d
                for d in _json(job_file, out, "dead-letters", "--reason", "http_404")[
                    "dead_letters"
                ]
                if d["url"] == missing
            ],
        )
        assert letters[0]["attempts"] == 1
        dead = _look(job_file, out, "url", missing)
        assert "dead-lettered: http_404" in dead.stdout, dead.stdout
        top_dead = _json(job_file, out, "hosts", "--by", "dead", "--top", "1")["hosts"]
        assert top_dead[0]["host"] == urlsplit(missing).netloc
        assert top_dead[0]["counts"]["dead"] >= 1

        # What the commands say is checked; the rest of the crawl would only be waited for
        # (about a minute on a loaded CI machine). Ctrl-C ends the run.
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=120)
        assert run.returncode == 130, err[-3000:]  # interrupted, as a terminal's Ctrl-C
    # once the run is over there is no frontier to read, said in one sentence
    late = _look(job_file, out, "hosts")
    assert late.returncode == 2
    assert "no running crawl" in late.stderr
