"""``crawlfleet run`` of a job with file rules says what it stored: the complete line's
``N files (X MiB)``, and ``files`` in the JSON summary; a job without rules says nothing of
files. The counts are the frontier's (``Frontier.file_stats``), read by the tick."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from crawlfleet.frontier import FileStats
from crawlfleet.local.runner import _files_text
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.runs import crawlfleet, job_for_site, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.usefixtures("no_stray_runs")]


def test_a_job_with_file_rules_says_what_it_stored(tmp_path: Path) -> None:
    with TestSite(SiteConfig(hosts=1, pages_per_host=10, hostile=False)) as site:
        document = job_for_site(
            site,
            "pages-and-files",
            workers={"minReplicas": 1, "maxReplicas": 1},
            files={"rules": [{"match": r"\.mp4$"}]},  # the site has none: 0 files
        )
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(document))
        proc = crawlfleet("run", str(job_file), "--json", cwd=tmp_path)
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["files"] == {
        "stored": 0,
        "bytes": 0,
        "duplicates": 0,
        "resumed": 0,
        "resumed_bytes": 0,
        "restarts": 0,
    }
    (complete,) = [line for line in err.splitlines() if "crawlfleet: complete:" in line]
    assert f"{summary['crawled']} pages crawled, 0 dead-lettered, 0 files (0.0 MiB), in" in (
        complete
    )


def test_the_files_line_counts_stored_bytes_and_duplicates() -> None:
    assert _files_text(FileStats(stored=3, bytes=512 * 2**20)) == "3 files (512.0 MiB)"
    assert _files_text(FileStats(stored=1, bytes=3 * 2**30 // 2, duplicates=1)) == (
        "1 file (1536.0 MiB), 1 duplicate"
    )
    assert _files_text(FileStats(duplicates=2)).endswith(", 2 duplicates")
