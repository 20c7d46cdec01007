"""A ``crawlfleet run`` of the test site on a real Redis Cluster, and what a test reads back.

The run is a user's: a CrawlJob file, ``--redis-url redis+cluster://…``, two local workers.
What it did is read from outside it: the test site's request log (what was fetched, when,
how often), the run's output folder (pages written, events.jsonl, its lines on stderr) and
the job's counters in Redis (the leases in flight when a test breaks something).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.cluster
import yaml

from crawlfleet.crawljob import load_crawljob
from crawlfleet.frontier import JobKeys, canonicalize
from crawlfleet.frontier.keys import partition_of
from crawlfleet.testsite import TestSite
from tests.support.crawls import requested_urls
from tests.support.redis_cluster import RedisCluster
from tests.support.runs import crawlfleet, job_for_site

__all__ = ["ClusterRun", "Losses", "start_run"]

#: How long a run may take to end once a test has done its damage (a minute at most).
_FINISH_SECONDS = 90.0


@dataclass(frozen=True)
class Losses:
    """A crawl against the site's graph: what no request fetched, what was fetched again."""

    lost: frozenset[str]
    #: Requests past the first of each page (the site's log), and records past the first
    #: of each page in the run's output.
    repeats: int
    written_twice: int

    @property
    def figures(self) -> dict[str, int]:
        return {
            "lost": len(self.lost),
            "repeats": self.repeats,
            "written_twice": self.written_twice,
        }


@dataclass
class ClusterRun:
    """One ``crawlfleet run`` under way on a cluster, started by :func:`start_run`."""

    site: TestSite
    cluster: RedisCluster
    process: subprocess.Popen[str]
    job_id: str
    out: Path
    #: ``time.monotonic()`` just before the run started: the site's log is read from here.
    since: float
    #: The job's frontier partitions (``frontier.shards``).
    shards: int = 1
    stderr: str = field(default="")

    def partition_keys(self) -> list[JobKeys]:
        """Each partition's keys, the home's (partition 0) first."""
        return [JobKeys(self.job_id, partition=k) for k in range(self.shards)]

    def hosts_in(self, partitions: set[int]) -> set[str]:
        """The site's hosts (``host:port``) whose URLs live in ``partitions``."""
        return {host for host in self.site.hosts if partition_of(host, self.shards) in partitions}

    def requested(self) -> dict[str, int]:
        """Requests per page (canonical URL) since the run started."""
        return requested_urls(self.site, self.since)

    def wait_requested(self, pages: int, timeout_seconds: float = 60.0) -> None:
        """Until ``pages`` distinct pages were requested; fails if the run ends first."""
        deadline = time.monotonic() + timeout_seconds
        while len(self.requested()) < pages:
            assert self.process.poll() is None, "the run ended before the test broke anything"
            assert time.monotonic() < deadline, "the crawl did not get going"
            time.sleep(0.01)
        assert self.process.poll() is None, "the run ended before the test broke anything"

    def leased(self) -> int:
        """The job's leases now (every partition's counters in Redis): the pages in flight.
        Read without opening a frontier, which would create the job if the run had not yet."""
        client = redis.cluster.RedisCluster.from_url(self.cluster.url.replace("+cluster", ""))
        try:
            return sum(
                int(client.hget(keys.key("stats"), "leased") or 0) for keys in self.partition_keys()
            )
        finally:
            client.close()

    def finish(self) -> dict[str, Any]:
        """Wait for the run's end; it must succeed. Its summary (``--json``'s last line)."""
        stdout, self.stderr = self.process.communicate(timeout=_FINISH_SECONDS)
        assert self.process.returncode == 0, self.stderr[-3000:]
        summary: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
        return summary

    def written(self) -> Counter[str]:
        """Page records per URL in the run's output (the folder's pages/*.jsonl)."""
        return Counter(
            canonicalize(json.loads(line)["url"])
            for path in sorted((self.out / "pages").glob("*.jsonl"))
            for line in path.read_text().splitlines()
        )

    def events(self) -> list[dict[str, Any]]:
        """The run's events.jsonl, one dict a line."""
        path = self.out / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def worker_logs(self) -> str:
        return "".join(
            path.read_text(errors="replace") for path in (self.out / "logs").glob("*.log")
        )

    def losses(self) -> Losses:
        """What the crawl missed and repeated, against every page the site's graph holds."""
        expected = {canonicalize(url) for url in self.site.expected_pages()}
        requested, written = self.requested(), self.written()
        return Losses(
            lost=frozenset(expected - set(requested) | expected - set(written)),
            repeats=sum(count - 1 for count in requested.values()),
            written_twice=sum(count - 1 for count in written.values()),
        )


def start_run(
    site: TestSite,
    cluster: RedisCluster,
    tmp_path: Path,
    name: str,
    *,
    shards: int = 1,
    env: Mapping[str, str] | None = None,
) -> ClusterRun:
    """``crawlfleet run`` of the whole site on ``cluster`` with two workers, the job's
    frontier in ``shards`` partitions; ``env``: variables set for it (and its workers)."""
    job = job_for_site(
        site,
        name,
        concurrency={"perWorker": 4, "perHost": 2, "hostDelaySeconds": 0},
        # pages are acked once their output file is written: short files, acks all along
        output={"maxFileAgeSeconds": 1},
        # a worker is dead after longer than a failover takes (NODE_TIMEOUT_MILLISECONDS and
        # the replica's election: about 3 s here), as docs/scale.md asks of a real cluster
        lease={"ttlSeconds": 60, "heartbeatSeconds": 0.5, "deadAfterSeconds": 10},
        frontier={"shards": shards},
    )
    job_file = tmp_path / f"{name}.yaml"
    job_file.write_text(yaml.safe_dump(job))
    out = tmp_path / f"{name}-out"
    since = time.monotonic()
    process = crawlfleet(
        "run", str(job_file), "--out", str(out), "--workers", "2", "--json",
        "--redis-url", cluster.url, cwd=tmp_path,
        env=None if env is None else {**os.environ, **env},
    )  # fmt: skip
    return ClusterRun(site, cluster, process, load_crawljob(job_file).job_id, out, since, shards)
