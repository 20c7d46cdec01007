"""``crawlfleet run`` on a site nobody here wrote: Debian's PostgreSQL manual behind nginx, with
a robots.txt as real sites write it (tests/support/real_site.py), at real-world politeness.

Most of the manual's pages link the disallowed SQL command pages: a crawl that let its refusals
hold their host's slots crawled a handful of pages and then waited. Here every allowed page is
crawled exactly once, nothing disallowed is requested, and every disallowed link the crawl met
is a counted dead letter (robots_disallowed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.real_site import DocSite, postgresql_manual
from tests.support.runs import crawlfleet, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

PROJECT = Path(__file__).resolve().parents[2] / "scrapy_project"


def _job(site: DocSite, per_host: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": f"manual-{per_host}"},
        "spec": {
            "seeds": [f"http://{site.netloc}/index.html"],
            "scope": {"maxDepth": 30, "allowPrivateNetworks": True},
            "concurrency": {"perHost": per_host, "perWorker": 16, "hostDelaySeconds": 0},
            **spec,
        },
    }


def _allowed(site: DocSite) -> set[str]:
    return {
        page
        for page in site.pages()
        if not page.startswith("/sql-") or page == "/sql-commands.html"
    }


def _run(tmp_path: Path, job: dict[str, Any], workers: int, cwd: Path) -> dict[str, Any]:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(job))
    run = crawlfleet(
        "run", str(job_file), "--out", str(tmp_path / "out"), "--workers", str(workers),
        "--json", cwd=cwd,
    )  # fmt: skip
    stdout, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]
    summary: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return summary


@pytest.mark.parametrize(("per_host", "workers"), [(1, 1), (4, 2)])
def test_the_manual_is_crawled_whole_and_politely(
    tmp_path: Path, per_host: int, workers: int
) -> None:
    with DocSite(postgresql_manual(), tmp_path / "site") as site:
        summary = _run(tmp_path, _job(site, per_host), workers, tmp_path)
        requested = site.requests()
    allowed = _allowed(site)
    assert len(allowed) > 900
    pages = {path for path in requested if path.endswith(".html")}
    assert pages == allowed  # every allowed page, nothing disallowed
    assert [path for path, n in requested.items() if n > 1] == []  # each once
    assert summary["crawled"] == len(allowed)
    dead = [
        json.loads(line)
        for line in (tmp_path / "out" / "dead-letters.jsonl").read_text().splitlines()
    ]
    assert dead
    assert {letter["failure_class"] for letter in dead} == {"robots_disallowed"}
    assert all("/sql-" in letter["url"] for letter in dead)
    assert summary["dead_lettered"] == len(dead)


def test_a_scrapy_spider_crawls_the_manual_whole_and_politely(tmp_path: Path) -> None:
    with DocSite(postgresql_manual(), tmp_path / "site") as site:
        job = _job(
            site,
            2,
            crawler={
                "scrapy": {
                    "spider": "graph",
                    "args": {"start": f"http://{site.netloc}/index.html", "follow": "all"},
                }
            },
        )
        _run(tmp_path, job, 2, PROJECT)
        requested = site.requests()
    pages = {path for path in requested if path.endswith(".html")}
    assert pages == _allowed(site)
    assert not [path for path in requested if path.startswith("/sql-") and
                path != "/sql-commands.html"]  # fmt: skip
