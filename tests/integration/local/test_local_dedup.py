"""The workers' local layer of dedup (issue #25) on a site whose pages share a 50-link menu:
a real ``crawlfleet run`` (its private redis-server, two workers) of the real test site.

The links a crawl extracts are known before it runs (the site's pages through the crawler's
own extractor); the links that reached the frontier's filter are counted by Redis itself (the
frontier's ``seen`` and ``duplicates``). The run's reported ``local_dedup_hit_rate`` must be
exactly the share of extracted links that never reached Redis.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from crawlfleet.crawler.links.links import extract_links
from crawlfleet.testsite import SiteConfig, TestSite, page_path
from tests.support.runs import (  # noqa: F401 (no_stray_runs: a fixture)
    crawlfleet,
    job_for_site,
    no_stray_runs,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

#: One host, 240 pages, each with the same 50-page menu, a link home and four of its own.
SITE = SiteConfig(hosts=1, pages_per_host=240, links_per_page=4, hostile=False, navigation_links=50)


def _extracted_links(site: TestSite) -> int:
    """Links the crawl finds: every page's, as the worker's extractor reads them."""
    graph = site.graph
    return sum(
        len(extract_links(graph.render_page(0, i), graph.url(0, page_path(i))).links)
        for i in range(SITE.pages_per_host)
    )


def test_remote_link_checks_fall_by_the_share_the_local_hit_rate_reports(
    tmp_path: Path,
) -> None:
    with TestSite(SITE) as site:
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job_for_site(site, "navigation")))
        out = tmp_path / "out"
        run = crawlfleet(
            "run", str(job_file), "--out", str(out), "--workers", "2", "--json", cwd=tmp_path
        )
        stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr[-3000:]
        summary = json.loads(stdout.strip().splitlines()[-1])
        served = Counter(r.path for r in site.all_requests() if r.path != "/robots.txt")

    # Every page crawled, once.
    pages = SITE.pages_per_host
    assert summary["crawled"] == pages
    assert served == Counter(page_path(i) for i in range(pages))

    extracted = _extracted_links(site)
    checks = summary["link_checks"]
    # Every link found was answered in a worker or checked by the filter (all are in scope).
    assert checks["local_hits"] + checks["remote_checks"] == extracted
    # What Redis saw: every link the enqueue offered was new (seen, past the one seed) or a
    # duplicate; none was refused (no maxPages, no memory pressure).
    remote_in_redis = summary["seen"] - len(site.seeds) + summary["duplicates_skipped"]
    assert checks["remote_checks"] == remote_in_redis
    assert summary["links_held_back"] == 0

    rate = summary["local_dedup_hit_rate"]
    assert rate >= 0.8, summary
    # The link checks that reached Redis fell by the share the metric reports.
    assert rate == pytest.approx(1 - remote_in_redis / extracted, abs=5e-5)
    assert remote_in_redis == pytest.approx(extracted * (1 - rate), abs=extracted * 5e-5)
