"""A page's record is durable before its lease is acknowledged (DESIGN §8).

Output is at least once (crawlfleet/crawler/worker/sinks.py): a SIGKILL may cut a file, and the
frontier must then re-crawl its pages. That holds only if the worker makes the file holding a
page's record durable (fsynced and renamed into ``pages/``) *before* it acks or fails the
page's lease; acked first, a kill in between loses the record while the frontier counts the
page done. A kill cannot be aimed at that window, so this test runs a real worker (real Redis,
real HTTP to the test site) whose frontier, a subclass of the real one, looks at the durable
files at each ack and fail and notes any page not in them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from crawlfleet.config import WorkerConfig
from crawlfleet.crawler.worker import process
from crawlfleet.crawljob import parse_crawljob
from crawlfleet.frontier import FailOutcome, Failure, Frontier, Lease, Outcomes
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite


@dataclass
class AckLog:
    output_dir: Path
    claimed: dict[str, str] = field(default_factory=dict)
    acked: list[str] = field(default_factory=list)
    acked_before_written: list[str] = field(default_factory=list)

    def written(self) -> set[str]:
        return {
            json.loads(line)["url"]
            for path in self.output_dir.glob("pages/*.jsonl")
            for line in path.read_text().splitlines()
            if line
        }


class OutputCheckingFrontier(Frontier):
    """The real frontier, noting at each ack which acked URLs the output does not hold yet."""

    log: ClassVar[AckLog]

    async def claim(
        self,
        worker: str,
        count: int,
        fetched: Sequence[str] = (),
        *,
        call_id: str | None = None,
    ) -> list[Lease]:
        leases = await super().claim(worker, count, fetched, call_id=call_id)
        self.log.claimed.update((lease.lease_id, lease.url) for lease in leases)
        return leases

    async def ack(
        self, worker: str, lease_ids: Sequence[str], *, call_id: str | None = None
    ) -> Outcomes[bool]:
        self._note(lease_ids)
        return await super().ack(worker, lease_ids, call_id=call_id)

    async def fail(
        self, worker: str, failures: Sequence[Failure], *, call_id: str | None = None
    ) -> Outcomes[FailOutcome]:
        self._note([failure.lease_id for failure in failures])
        return await super().fail(worker, failures, call_id=call_id)

    def _note(self, lease_ids: Sequence[str]) -> None:
        written = self.log.written()
        urls = [self.log.claimed[lease_id] for lease_id in lease_ids]
        self.log.acked += urls
        self.log.acked_before_written += [url for url in urls if url not in written]


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite(SiteConfig(hosts=2, pages_per_host=30, hostile=False)) as running:
        yield running


async def test_pages_are_written_before_their_leases_are_acked(
    site: TestSite, redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    log = OutputCheckingFrontier.log = AckLog(out)
    monkeypatch.setattr(process, "Frontier", OutputCheckingFrontier)
    job = parse_crawljob(
        {
            "apiVersion": "crawlfleet.io/v1alpha1",
            "kind": "CrawlJob",
            "metadata": {"name": "order", "namespace": "default"},
            "spec": {
                "seeds": site.seeds,
                "scope": {"allowedDomains": site.hosts, "allowPrivateNetworks": True},
                "concurrency": {"perWorker": 8, "perHost": 4, "hostDelaySeconds": 0},
                "output": {"maxFileAgeSeconds": 1},
            },
        }
    )
    code = await process.run_worker(
        job, redis_url=redis_server.url, worker_id="order-0", config=WorkerConfig(output_dir=out)
    )
    assert code == 0
    assert len(log.acked) >= 60  # the whole site went through ack or fail
    assert log.acked_before_written == []
    assert not list((out / ".partial").iterdir())  # every spooled file was committed
