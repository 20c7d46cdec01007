"""Scrapy bench: one Scrapy spider on crawlfleet.scrapy against scrapy-redis, two processes each.

    python -m bench.scrapy [--quick] [--json]

The spider is bench/scrapy_spider.py's, unchanged, crawling the test site's pages behind nginx
(bench/static_site.py) with the same limits (16 requests per process, 8 per host per process,
robots obeyed), as bench/fleet.py sets them up:

- ``crawlfleet``: ``crawlfleet run --workers 2`` of a CrawlJob with ``spec.crawler.scrapy``
  naming the spider: two Scrapy processes whose scheduler and dupefilter are the crawlfleet
  frontier (leases, Bloom filter), their items in the job's destination;
- ``scrapy_redis``: two Scrapy processes sharing one Redis through scrapy-redis' scheduler and
  dupefilter, a JSONL feed each (bench/fleet.py's run).

Then each again on a fresh site with one process SIGKILLed halfway through, counting the
reachable pages the site never served and those in no output (bench/fleet.py says why both).
``ratio`` is crawlfleet.scrapy's pages/s over scrapy-redis' (target ≥ 1.0: the same Scrapy
engine does the fetching and parsing on both sides, so the frontier's batched claims are
what can make a difference, and the leases must not cost more than they save).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.fleet import (
    PER_HOST,
    PER_PROCESS,
    bench_arguments,
    compare,
    fleet_job,
    run_job,
    run_scrapy_redis,
    spider_environment,
)

#: bench/scrapy_spider.py's spider, in the module that is also its project's settings.
PROJECT_SETTINGS = "bench.scrapy_spider"
SPIDER = "bench"


def run_crawlfleet_scrapy(
    setup: dict[str, Any], tmp: Path, name: str, kill_after: float | None
) -> tuple[float, float]:
    """``crawlfleet run`` of the spider as a CrawlJob's crawler: wall-clock (started, ended)."""
    job = fleet_job(setup, name)
    job["spec"]["crawler"] = {
        "scrapy": {
            "spider": SPIDER,
            "settingsModule": PROJECT_SETTINGS,
            # The same settings as scrapy-redis' processes get on their command line, less the
            # scheduler and dupefilter (the frontier is both).
            "settings": {
                "CONCURRENT_REQUESTS": PER_PROCESS,
                "CONCURRENT_REQUESTS_PER_DOMAIN": PER_HOST,
                "ROBOTSTXT_OBEY": True,
                "LOG_LEVEL": "ERROR",
                "TELNETCONSOLE_ENABLED": False,
            },
        }
    }
    # Both processes read one setup file; their stats (unused here) go to one file too.
    return run_job(job, tmp, name, kill_after, spider_environment(setup, tmp, name))


def main() -> None:
    args = bench_arguments(__doc__)
    compare({"crawlfleet": run_crawlfleet_scrapy, "scrapy_redis": run_scrapy_redis}, args, target=1)


if __name__ == "__main__":
    main()
