"""``crawlfleet run`` with a seedsFrom.file list: read by the operator's reader, in its bounds.

The run reads the list twice (the job file's load, for the scope; the tick that seeds, for the
seeds), both through ``parse_seed_list`` with the bounds the environment sets, as the operator
reads a ConfigMap.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
import yaml

from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.runs import crawlfleet, job_for_site, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.usefixtures("no_stray_runs")]


def _job(tmp_path: Path, site: TestSite, listed: list[str]) -> Path:
    (tmp_path / "seeds.txt.gz").write_bytes(gzip.compress("\n".join(listed).encode()))
    document = job_for_site(
        site,
        "listed",
        seedsFrom={"file": "seeds.txt.gz"},
        scope={"maxDepth": 0, "allowPrivateNetworks": True},
        workers={"minReplicas": 1, "maxReplicas": 1},
    )
    del document["spec"]["seeds"]  # type: ignore[attr-defined]
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(document))
    return job_file


def test_a_listed_crawl_runs_and_a_list_past_the_bound_is_refused_alike(tmp_path: Path) -> None:
    with TestSite(SiteConfig(hosts=1, pages_per_host=20, hostile=False)) as site:
        listed = [site.url(0, f"/seed/{k}") for k in range(5)]
        job_file = _job(tmp_path, site, listed)
        proc = crawlfleet("run", str(job_file), "--json", cwd=tmp_path)
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["phase"] == "Succeeded"
        served = {r.path for r in site.log.all_requests()}
        assert {f"/seed/{k}" for k in range(5)} <= served
        # The same list past a bound the environment sets: refused before anything runs.
        env = {**os.environ, "CRAWLFLEET_SEED_LIST_MAX_LINES": "4"}
        refused = crawlfleet(
            "run", str(job_file), "--out", str(tmp_path / "again"), cwd=tmp_path, env=env
        )
        _, err = refused.communicate(timeout=60)
        assert refused.returncode == 2
        assert f"spec.seedsFrom.file ({tmp_path / 'seeds.txt.gz'}): has more than 4 lines" in err
        assert "/seed/" not in err
