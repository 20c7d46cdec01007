"""A continuous crawl of a site nobody here wrote: Debian's PostgreSQL manual behind nginx
(tests/support/real_site.py), with a recrawl rule on a few of its index pages, at perHost 2.

nginx answers validators as real static servers do (a strong ``ETag`` made of the file's mtime
and size, and ``Last-Modified``) and 304 to a conditional request that still matches. So the
index pages' revisits are conditional and answered 304 -- until one of them is edited while
the crawl runs: its next revisit is answered in full and recorded as changed. Every other page
is fetched once. Bounded: the pages one link from the manual's front page (about 110), a copy
of the tree (so that one page can be edited), the robots.txt of real_site.py.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from tests.support.news_crawls import ContinuousRun, fixed_rule, news_job, page_records
from tests.support.real_site import DocSite, postgresql_manual
from tests.support.runs import no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

INTERVAL_SECONDS = 10
#: The front page and three pages it links to that index the manual.
TRACKED = ("/index.html", "/bookindex.html", "/reference.html", "/tutorial.html")
#: Edited after its first revisit: the second is answered in full.
EDITED = "/tutorial.html"
VISITS = 3


def _visits(site: DocSite) -> dict[str, list[tuple[int, bool]]]:
    found: dict[str, list[tuple[int, bool]]] = {}
    for path, status, conditional in site.entries():
        found.setdefault(path, []).append((status, conditional))
    return found


def test_index_pages_of_a_real_site_are_revisited_conditionally(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    root = tmp_path / "manual"
    shutil.copytree(postgresql_manual(), root)
    with DocSite(root, tmp_path / "site") as site:
        base = f"http://{site.netloc}"
        pattern = "^" + re.escape(base) + "/(" + "|".join(
            re.escape(path.strip("/")) for path in TRACKED
        ) + ")$"  # fmt: skip
        job = news_job(
            "manual-recrawl",
            [f"{base}/index.html"],
            [site.netloc],
            [fixed_rule(INTERVAL_SECONDS, match=pattern)],
            scope={"maxDepth": 1, "allowPrivateNetworks": True},
            concurrency={"perHost": 2, "perWorker": 8, "hostDelaySeconds": 0},
        )
        run = ContinuousRun(job, tmp_path, redis_url=redis_server.url, workers=1)
        deadline = time.monotonic() + 60
        edited = False
        while min(len(_visits(site).get(path, [])) for path in TRACKED) < VISITS:
            run.assert_running()
            assert time.monotonic() < deadline, {p: _visits(site).get(p) for p in TRACKED}
            if not edited and len(_visits(site).get(EDITED, [])) == 2:
                page = root / EDITED.strip("/")
                page.write_bytes(page.read_bytes().replace(b"</body>", b"<p>Edited.</p></body>"))
                edited = True
            time.sleep(0.1)
        run.stop()
        visits = _visits(site)

    assert edited
    for path in TRACKED:
        expected = [(200, False), (304, True), (304, True)]
        if path == EDITED:
            expected = [(200, False), (304, True), (200, True)]
        assert visits[path][:VISITS] == expected, (path, visits[path])
    # The crawl is whole (every allowed page the front page links) and nothing else was
    # fetched twice.
    linked = set(re.findall(r'href="([a-z0-9-]+\.html)"', (root / "index.html").read_text()))
    allowed = {f"/{name}" for name in linked if not name.startswith("sql-")} | {"/index.html"}
    pages = {path for path in visits if path.endswith(".html")}
    assert allowed <= pages, sorted(allowed - pages)[:5]
    twice = {
        p: len(v)
        for p, v in visits.items()
        if len(v) > 1 and p.endswith(".html") and p not in TRACKED
    }
    assert twice == {}
    changes = {
        canonicalize(f"{base}{path}"): [] for path in TRACKED
    }  # what the worker wrote for the tracked pages, visit by visit
    for record in page_records(run.out):
        url = canonicalize(record["url"])
        if url in changes:
            changes[url].append(record.get("change"))
    for path in TRACKED:
        expected_changes = ["new", "not_modified", "not_modified"]
        if path == EDITED:
            expected_changes = ["new", "not_modified", "changed"]
        assert changes[canonicalize(f"{base}{path}")][:VISITS] == expected_changes, path
