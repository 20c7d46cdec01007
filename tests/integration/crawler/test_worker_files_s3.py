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

from crawlfleet.crawler.files.bucket_parts import BucketParts
from crawlfleet.crawler.worker.worker import Worker
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.frontier import DeadLetter
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite.files import FileSite, FileSiteConfig, file_body, file_etag
from tests.integration.output.test_stores import bucket_store
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


def spec_for(
    seeds: list[str], destination: str, endpoint: str, *, task_attempts: int = 5
) -> CrawlJobSpec:
    return job_spec(
        {
            "retry": {"taskAttempts": task_attempts},
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


@pytest.fixture(autouse=True)
def fresh(site: FileSite, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test: the S3 server's credentials in the environment, the site's logs cleared."""
    for name, value in aws_env(s3_server).items():
        monkeypatch.setenv(name, value)
    site.reset()


def records(server: S3Server, bucket: str, prefix: str) -> list[dict[str, Any]]:
    found = []
    for key, path in server.stored_objects(bucket).items():
        if key.startswith(prefix + "files/") and key.endswith(".jsonl"):
            found += [json.loads(line) for line in path.read_text().splitlines() if line]
    return found


async def run(worker: Worker, seconds: float = CRAWL_SECONDS) -> int:
    return await asyncio.wait_for(worker.run(), seconds)


async def run_to_the_end(
    spec: CrawlJobSpec, redis: RedisServer, job_id: str, out: Path, destination: str
) -> list[DeadLetter]:
    """A worker (id ``w2``) of ``spec`` run until the job is done; the job's dead letters."""
    worker, fetcher, frontier = await in_process_worker(
        spec, redis.url, job_id, out, destination=destination, exit_when_done=True, worker_id="w2"
    )
    try:
        assert await run(worker) == 0
        return [letter async for letter in frontier.dead_letters()]
    finally:
        await fetcher.aclose()
        await frontier.aclose()


async def test_a_download_stopped_in_one_worker_is_finished_by_another_and_read_back(
    site: FileSite, s3_server: S3Server, s3_bucket: str, redis_server: RedisServer, tmp_path: Path
) -> None:
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
    await run_to_the_end(spec, redis_server, "test.files-s3", tmp_path / "w2", destination)

    asked = [r for r in site.requests("ranges") if "resumed.mp4" in r.path]
    assert asked[-1].range_header is not None
    assert asked[-1].range_header.startswith("bytes=")
    assert int(asked[-1].range_header[6:].rstrip("-")) >= 5 * MIB  # resumed, not restarted
    (record,) = records(s3_server, s3_bucket, prefix)
    assert record["sha256"] == site.sha256("resumed.mp4", size)  # read back from the upload
    assert record["resumed_from"] >= 5 * MIB
    assert record["sniffed_type"] == "mp4"  # its first bytes read back and checked
    objects = s3_server.stored_objects(s3_bucket)
    with objects[prefix + record["stored"]].open("rb") as stored:
        assert hashlib.file_digest(stored, "sha256").hexdigest() == record["sha256"]
    assert not [key for key in objects if "/.parts/" in key]  # staging and state removed


async def test_a_resumed_download_whose_first_bytes_are_another_type_fails_when_read_back(
    site: FileSite, s3_server: S3Server, s3_bucket: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A part another process began holds an HTML page where the MP4's first bytes belong (as
    if the server once served an error page at byte 0 under the file's validators): the
    worker resuming it never sees those bytes while it downloads, so the check is made on the
    completed upload read back, and the file is not stored."""
    size = 6 * MIB
    url = site.file_url("ranges", "spliced.mp4", size)
    prefix = "jobs/typed/"
    destination = f"s3://{s3_bucket}/{prefix}"
    # One attempt: the failure is dead-lettered at once, its reason there to read.
    spec = spec_for([url], destination, s3_server.endpoint_url, task_attempts=1)
    store = bucket_store(s3_server, destination, tmp_path=tmp_path / "store")
    parts = BucketParts.from_store(store)
    part = await parts.open(url)
    part.state.etag, part.state.total = file_etag("spliced.mp4", size), size
    part.state.content_type = "video/mp4"
    page = b"<!DOCTYPE html><html><body>Not found</body></html>"
    await part.write((page * (5 * MIB // len(page) + 1))[: 5 * MIB])
    await part.checkpoint()  # 5 MiB uploaded: another process resumes from there
    await part.close()
    await parts.aclose()

    dead = await run_to_the_end(
        spec, redis_server, "test.files-s3-typed", tmp_path / "w", destination
    )

    (asked,) = [r for r in site.requests("ranges") if "spliced.mp4" in r.path]
    assert asked.range_header == f"bytes={5 * MIB}-"  # resumed: the head never passed by
    (letter,) = dead
    assert letter.failure_class == "file_type_mismatch", letter
    assert "read back" in letter.message
    assert records(s3_server, s3_bucket, prefix) == []
    assert not [key for key in s3_server.stored_objects(s3_bucket) if key.startswith(prefix)]


async def test_an_upload_completed_before_its_worker_ended_is_finished_not_fetched_again(
    site: FileSite, s3_server: S3Server, s3_bucket: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A worker completed the file's upload and ended before it was copied to its content key
    (a crash during the copy): the next one confirms the file with one request (a 416 to a
    range from its total), reads the upload back, checks and stores it."""
    size = 6 * MIB
    url = site.file_url("ranges", "completed.mp4", size)
    prefix = "jobs/completed/"
    destination = f"s3://{s3_bucket}/{prefix}"
    parts = BucketParts.from_store(bucket_store(s3_server, destination, tmp_path=tmp_path / "s"))
    part = await parts.open(url)
    part.state.etag, part.state.total = file_etag("completed.mp4", size), size
    part.state.content_type = "video/mp4"
    for chunk in file_body("completed.mp4", size):
        await part.write(chunk)
    await part.read_back()  # completed; then the worker dies
    await parts.aclose()

    spec = spec_for([url], destination, s3_server.endpoint_url)
    await run_to_the_end(spec, redis_server, "test.files-s3-completed", tmp_path / "w", destination)

    (asked,) = [r for r in site.requests("ranges") if "completed.mp4" in r.path]
    assert (asked.range_header, asked.status, asked.bytes_sent) == (f"bytes={size}-", 416, 0)
    (record,) = records(s3_server, s3_bucket, prefix)
    assert record["sha256"] == site.sha256("completed.mp4", size)
    assert (record["status"], record["restarts"], record["sniffed_type"]) == (416, [], "mp4")
    objects = s3_server.stored_objects(s3_bucket)
    assert prefix + record["stored"] in objects
    assert not [key for key in objects if "/.parts/" in key]
