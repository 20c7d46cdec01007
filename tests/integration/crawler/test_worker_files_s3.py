"""File downloads through a real worker into a bucket (issue 24): versitygw, redis-server, FileSite.

The worker writes to ``s3://`` (BucketParts: a multipart upload per download); what landed is
read from the S3 server's own disk. A download stopped by one worker is finished by another,
which never saw its first bytes: its sha256 is read back from the completed upload.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.crawler.worker.worker import Worker
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite.files import FileSite, FileSiteConfig
from tests.support.s3 import S3Server, aws_env
from tests.support.specs import job_spec
from tests.support.workers import in_process_worker

pytestmark = pytest.mark.slow

CRAWL_SECONDS = 30.0
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def site() -> Iterator[FileSite]:
    with FileSite(FileSiteConfig(default_size=64 * 1024)) as running:
        yield running


def spec_for(seeds: list[str], destination: str, endpoint: str) -> CrawlJobSpec:
    return job_spec(
        {
            "scope": {"maxDepth": 0, "allowPrivateNetworks": True},
            "concurrency": {"perHost": 2, "hostDelaySeconds": 0},
            "lease": {"ttlSeconds": 5, "heartbeatSeconds": 0.5, "deadAfterSeconds": 4},
            "output": {
                "maxFileAgeSeconds": 1,
                "destination": destination,
                "s3": {"endpoint": endpoint},
            },
            "files": {"rules": [{"match": r"\.mp4"}], "partSizeBytes": 5 * MIB},
        },
        seeds=seeds,
    )


def records(server: S3Server, bucket: str, prefix: str) -> list[dict[str, Any]]:
    found = []
    for key, path in server.stored_objects(bucket).items():
        if key.startswith(prefix + "files/") and key.endswith(".jsonl"):
            found += [json.loads(line) for line in path.read_text().splitlines() if line]
    return found


async def run(worker: Worker, seconds: float = CRAWL_SECONDS) -> int:
    return await asyncio.wait_for(worker.run(), seconds)


async def test_a_download_stopped_in_one_worker_is_finished_by_another_and_read_back(
    site: FileSite,
    s3_server: S3Server,
    s3_bucket: str,
    redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in aws_env(s3_server).items():
        monkeypatch.setenv(name, value)
    site.reset()
    size = 8 * MIB
    url = site.file_url("ranges", "resumed.mp4", size)
    prefix = "jobs/files/"
    destination = f"s3://{s3_bucket}/{prefix}"
    spec = spec_for([url], destination, s3_server.endpoint_url)
    site.throttle(4 * MIB)
    try:
        first, fetcher, frontier = await in_process_worker(
            spec, redis_server.url, "test.files-s3", tmp_path / "w1", destination=destination,
            exit_when_done=True,
        )  # fmt: skip
        task = asyncio.create_task(run(first))
        while site.bytes_sent(url) < 6 * MIB:
            assert not task.done(), task
            await asyncio.sleep(0.05)
        first.request_stop()  # checkpoints: the 5 MiB and more it holds go up as a part
        assert await task == 0
        await fetcher.aclose()
        await frontier.aclose()
    finally:
        site.throttle(0)
    second, fetcher, frontier = await in_process_worker(
        spec, redis_server.url, "test.files-s3", tmp_path / "w2", destination=destination,
        exit_when_done=True, worker_id="w2",
    )  # fmt: skip
    try:
        assert await run(second) == 0
    finally:
        await fetcher.aclose()
        await frontier.aclose()

    asked = [r for r in site.requests("ranges") if "resumed.mp4" in r.path]
    assert asked[-1].range_header is not None
    assert asked[-1].range_header.startswith("bytes=")
    assert int(asked[-1].range_header[6:].rstrip("-")) >= 5 * MIB  # resumed, not restarted
    (record,) = records(s3_server, s3_bucket, prefix)
    assert record["sha256"] == site.sha256("resumed.mp4", size)  # read back from the upload
    assert record["resumed_from"] >= 5 * MIB
    objects = s3_server.stored_objects(s3_bucket)
    with objects[prefix + record["stored"]].open("rb") as stored:
        assert hashlib.file_digest(stored, "sha256").hexdigest() == record["sha256"]
    assert not [key for key in objects if "/.parts/" in key]  # staging and state removed
