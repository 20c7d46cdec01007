"""``crawlfleet enqueue job.yaml URL...`` into a real ``crawlfleet run`` against the test site."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.runs import (  # noqa: F401 (no_stray_runs: a fixture)
    crawlfleet,
    crawlfleet_done,
    job_for_site,
    no_stray_runs,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]


def _enqueue(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return crawlfleet_done("enqueue", *args, cwd=cwd, stdin=stdin)


def _records(out: Path) -> Counter[str]:
    """Page records per URL in the run's output."""
    return Counter(
        json.loads(line)["url"]
        for path in (out / "pages").glob("*.jsonl")
        for line in path.read_text().splitlines()
    )


#: Slow enough that the crawl is still running when the URLs come: one host, one fetch at a
#: time, 0.1 s apart, 0.05 s per answer: ~40 pages take several seconds.
SLOW_SITE = SiteConfig(hosts=1, pages_per_host=40, hostile=False, latency_seconds=0.05)
#: Slower still, for three ``crawlfleet enqueue`` processes in a row while it runs: each one
#: starts an interpreter, several seconds on a loaded machine, and ~6 s of crawl ran out once
#: (then ~18 s did, at a load of 11 on 2 cores): with LONG_DELAY_SECONDS, ~36 s.
LONG_SITE = SiteConfig(hosts=1, pages_per_host=120, hostile=False, latency_seconds=0.05)
LONG_DELAY_SECONDS = 0.25


def _slow_job(
    site: TestSite, name: str, folder: Path, *, host_delay_seconds: float = 0.1
) -> tuple[dict[str, Any], Path, Path]:
    """A job of the slow site written to ``folder``: (the document, its file, its --out)."""
    concurrency = {"perWorker": 2, "perHost": 1, "hostDelaySeconds": host_delay_seconds}
    job = job_for_site(site, name, concurrency=concurrency)
    job_file = folder / "job.yaml"
    job_file.write_text(yaml.safe_dump(job))
    return job, job_file, folder / "out"


def _start(site: TestSite, job_file: Path, out: Path) -> subprocess.Popen[str]:
    """``crawlfleet run`` with one worker, once it has crawled a few pages."""
    run = crawlfleet("run", str(job_file), "--out", str(out), "--workers", "1", cwd=out.parent)
    deadline = time.monotonic() + 60
    while len([r for r in site.all_requests() if r.status == 200]) < 5:
        assert time.monotonic() < deadline, "the crawl did not start"
        assert run.poll() is None, run.communicate()[1][-3000:]
        time.sleep(0.05)
    return run


def test_urls_enqueued_into_a_running_crawl_are_crawled_once_and_seen_ones_not_again(
    tmp_path: Path,
) -> None:
    with TestSite(LONG_SITE) as site:
        _, job_file, out = _slow_job(
            site, "enqueued", tmp_path, host_delay_seconds=LONG_DELAY_SECONDS
        )
        # Before the run: no running crawl, said in one sentence.
        early = _enqueue(str(job_file), "--out", str(out), site.url(0, "/x"), cwd=tmp_path)
        assert early.returncode == 2, early.stderr
        assert "no running crawl" in early.stderr
        assert "Traceback" not in early.stderr

        run = _start(site, job_file, out)
        unlinked = [site.url(0, f"/unlinked/{k}") for k in range(3)]
        given = [
            unlinked[0],
            unlinked[1],
            site.seeds[0],  # crawled already: seen, not crawled again
            "http://elsewhere.example/page",  # out of allowedDomains
            "ftp://ftp.example/file",  # not crawlable at all
        ]
        first = _enqueue(str(job_file), "--out", str(out), *given, cwd=tmp_path)
        assert first.returncode == 1, first.stderr  # some were refused, each named
        assert first.stdout.strip() == f"{job_file}: 2 new, 1 already seen, 2 refused"
        assert "refused (out_of_domain): http://elsewhere.example/page" in first.stderr
        assert "ftp://ftp.example/file" in first.stderr
        assert "Traceback" not in first.stderr
        # From stdin, one a line; the first unlinked page again is seen now.
        second = _enqueue(
            str(job_file),
            "--out",
            str(out),
            "-",
            cwd=tmp_path,
            stdin=f"# comment\n{unlinked[2]}\n\n{unlinked[0]}\n",
        )
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip() == f"{job_file}: 1 new, 1 already seen, 0 refused"
        assert run.poll() is None, "the crawl ended before the URLs were given"

        _, err = run.communicate(timeout=180)
        assert run.returncode == 0, err[-3000:]
        records = _records(out)
        for url in unlinked:
            assert records[canonicalize(url)] == 1, (url, records)
        assert records[canonicalize(site.seeds[0])] == 1
        served = Counter(r.path for r in site.all_requests())
        assert all(served[f"/unlinked/{k}"] == 1 for k in range(3)), served
        # After the run: no running crawl again.
        late = _enqueue(str(job_file), "--out", str(out), unlinked[0], cwd=tmp_path)
        assert late.returncode == 2
        assert "no running crawl" in late.stderr


def test_seeds_added_to_the_job_file_of_a_running_crawl_are_queued_once(tmp_path: Path) -> None:
    with TestSite(SLOW_SITE) as site:
        job, job_file, out = _slow_job(site, "reseeded", tmp_path)
        run = _start(site, job_file, out)
        added = site.url(0, "/unlinked/7")
        job["spec"]["seeds"] = [*site.seeds, added]
        job_file.write_text(yaml.safe_dump(job))
        _, err = run.communicate(timeout=180)
        assert run.returncode == 0, err[-3000:]
        assert "the seed list changed: 1 of 2 seeds new" in err
        events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
        added_events = [e for e in events if e["kind"] == "SeedsAdded"]
        assert [(e["new"], e["seeds"]) for e in added_events] == [(1, 2)]  # once, not per tick
        records = _records(out)
        assert records[canonicalize(added)] == 1
        assert records[canonicalize(site.seeds[0])] == 1
        state = json.loads((out / "state.json").read_text())
        assert state["fleet"]["seedsHash"]
        assert state["redisUrl"].startswith("redis://127.0.0.1:")


def test_bad_input_is_one_sentence(tmp_path: Path) -> None:
    missing = _enqueue(str(tmp_path / "nope.yaml"), "http://a.example/", cwd=tmp_path)
    assert missing.returncode == 2
    assert "neither a CrawlJob YAML file nor namespace/name" in missing.stderr
    empty = _enqueue("ns/job", "-", cwd=tmp_path, stdin="\n# nothing\n")
    assert empty.returncode == 2
    assert "no URLs given" in empty.stderr
    assert "Traceback" not in missing.stderr + empty.stderr
