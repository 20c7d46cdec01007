"""The workers' local layer of dedup: ``local_dedup_hit_rate`` on a navigation-heavy site.

    python -m bench.dedup [--quick] [--json]

One ``crawlfleet run --workers 2`` (its private redis-server) of the test site with a 50-link
menu on every page (``SiteConfig.navigation_links``), to its end; the figure is the run's own
``local_dedup_hit_rate`` (links the workers answered from their caches over all links checked,
crawlfleet/fleet/link_checks.py), with the counts behind it and what Redis saw: the links the
frontier's filter checked (new plus duplicates) must be the workers' remote checks.
:func:`local_dedup_hit_rate` is the figure alone, for ``bench.shards``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from crawlfleet.testsite import SiteConfig, TestSite

__all__ = ["local_dedup_hit_rate", "measure", "navigation_site"]

#: The menu every page links: issue #25's "every page links to the same 50 navigation pages".
NAVIGATION_LINKS = 50
WORKERS = 2


def navigation_site(*, quick: bool) -> SiteConfig:
    """Two hosts whose pages share a 50-link menu and add eight links of their own."""
    return SiteConfig(
        hosts=2,
        pages_per_host=300 if quick else 2000,
        links_per_page=8,
        hostile=False,
        navigation_links=NAVIGATION_LINKS,
    )


def _job(site: TestSite) -> dict[str, Any]:
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": "dedup-bench"},
        "spec": {
            "seeds": site.seeds,
            "scope": {"allowedDomains": site.hosts, "maxDepth": 1000, "allowPrivateNetworks": True},
            "concurrency": {"perWorker": 16, "perHost": 8, "hostDelaySeconds": 0},
            "output": {"format": "none"},
        },
    }


def measure(*, quick: bool = True) -> dict[str, Any]:
    """One run to its end: the rate, the counts behind it, and what Redis counted."""
    config = navigation_site(quick=quick)
    with TestSite(config, keep_records=False) as site, tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        job_file = tmp / "job.yaml"
        job_file.write_text(yaml.safe_dump(_job(site)))
        started = time.monotonic()
        run = subprocess.run(
            [
                sys.executable, "-m", "crawlfleet", "--log-level", "warning", "run",
                str(job_file), "--workers", str(WORKERS), "--out", str(tmp / "out"), "--json",
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )  # fmt: skip
        elapsed = time.monotonic() - started
    if run.returncode != 0:
        raise RuntimeError(f"crawlfleet run exited with {run.returncode}: {run.stderr[-2000:]}")
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    checks = summary["link_checks"]
    return {
        "local_dedup_hit_rate": summary["local_dedup_hit_rate"],
        "links_local_hits": checks["local_hits"],
        "links_remote_checks": checks["remote_checks"],
        # The links the frontier's filter answered, as Redis counted them.
        "filter_checks_in_redis": summary["seen"] - config.hosts + summary["duplicates_skipped"],
        "pages": summary["crawled"],
        "workers": WORKERS,
        "navigation_links": NAVIGATION_LINKS,
        "elapsed_s": round(elapsed, 2),
    }


def local_dedup_hit_rate(*, quick: bool = True) -> float:
    """The share of link checks the workers answered themselves on the navigation-heavy site."""
    rate = measure(quick=quick)["local_dedup_hit_rate"]
    if not isinstance(rate, float | int):
        raise RuntimeError("the run checked no link")
    return float(rate)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dedup", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="600 pages instead of 4,000")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    result = measure(quick=args.quick)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for key, value in result.items():
            print(f"{key:>24}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
