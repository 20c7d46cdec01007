"""A download into a bucket, killed mid-body, continues its multipart upload (issue 24).

``crawlfleet run --output s3://...`` on the suite's S3 server (versitygw), one big file on the
file test site's Range-honouring host, one worker, SIGKILLed once about half of the file has
gone out. The part is an S3 multipart upload whose parts are durable as they go (each
uploaded at a checkpoint, the sidecar object beside it), so the worker the run starts next
finds it, asks the site for the rest only (``Range: bytes=N-``, N > 0: the site sends at most
1.2 times the file in all) and completes the same upload. The object stored under its content
key, read from the server's own disk and hashed here, is the file; nothing is left under
``files/.parts/`` and no multipart upload is left open.

Runtime: about 12 s (a 200 MB file at 25 MB/s, half of it again after the kill).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite.files import FileSite, FileSiteConfig
from tests.support.file_crawls import (
    KILLED_FILE_BYTES,
    KILLED_FILE_BYTES_PER_SECOND,
    bucket_objects,
    content_key,
    file_records,
    files_job,
    kill_at,
    part_leftovers,
    resumed_from,
    run_one_worker,
    served,
    sha256_of,
    stored_blobs,
    summary_of,
    write_job,
)
from tests.support.runs import no_stray_runs  # noqa: F401 (a fixture)
from tests.support.s3 import S3Server, aws_env

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

FILE_BYTES = KILLED_FILE_BYTES
NAME = "talk.mp4"
PREFIX = "downloads/"


def open_uploads(server: S3Server, bucket: str) -> list[str]:
    """The multipart uploads still open in ``bucket``, from versitygw's posix backend: a
    folder ``<key hash>/<upload id>`` each in the bucket's temporary folder, removed when
    the upload is completed or aborted."""
    temporary = server.data_dir / bucket / ".sgwtmp" / "multipart"
    return sorted(p.relative_to(temporary).as_posix() for p in temporary.glob("*/*"))


def test_a_killed_download_into_a_bucket_continues_its_multipart_upload(
    tmp_path: Path, redis_server: RedisServer, s3_server: S3Server, s3_bucket: str
) -> None:
    with FileSite(FileSiteConfig(bytes_per_second=KILLED_FILE_BYTES_PER_SECOND)) as site:
        url = site.url("ranges", f"/files/{NAME}?size={FILE_BYTES}")
        job = write_job(tmp_path, files_job("into-bucket", [url], [{"match": r"\.mp4(\?|$)"}]))
        out = tmp_path / "run"
        destination = f"s3://{s3_bucket}/{PREFIX}"
        run = run_one_worker(
            job, out, redis_server.url, "--output", destination, env=aws_env(s3_server)
        )
        at_kill = kill_at(site, [("ranges", NAME, FILE_BYTES)], job, run)[NAME]
        stdout, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-3000:]
        log = served(site, "ranges", NAME)

    summary = summary_of(stdout)
    assert summary["crawled"] == 1
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["why"] for e in events if e["kind"] == "LeasesRequeued"] == ["exited"]

    # The next attempt asked for the rest only.
    start = resumed_from(log, at_kill, FILE_BYTES)

    # The same upload completed: the stored object is the file, nothing else is left.
    objects = bucket_objects(s3_server, s3_bucket, PREFIX)
    (record,) = file_records(objects)
    sha256 = site.sha256(NAME, FILE_BYTES)
    assert (record["url"], record["sha256"], record["size"]) == (url, sha256, FILE_BYTES)
    assert record["resumed_from"] == start
    assert record["stored"] == content_key(sha256)
    blobs = stored_blobs(objects)
    assert list(blobs) == [content_key(sha256)]
    assert sha256_of(blobs[content_key(sha256)]) == sha256
    assert part_leftovers(objects) == []
    assert open_uploads(s3_server, s3_bucket) == []
