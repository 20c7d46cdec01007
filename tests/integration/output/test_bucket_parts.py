"""A download's part in a bucket, against the real S3 server (versitygw).

What the worker relies on: uploaded parts outlive the process (a new ``BucketParts``, as another
pod builds it, continues from their end; ListParts wins over the sidecar), bytes short of a part
wait in the local buffer, the finished file lands whole at its content key (checked on the
server's own disk, not through the client under test), a duplicate stores nothing new, and
restart, discard and finish leave no parts behind (versitygw keeps an upload's parts in the
bucket's ``.sgwtmp`` folder until it is completed or aborted: that folder is where an orphan
would show).
"""

from __future__ import annotations

import hashlib
import random
import threading
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from crawlfleet.crawler.files.bucket_parts import (
    MIN_PART_BYTES,
    BucketPart,
    BucketParts,
    make_s3_client,
)
from crawlfleet.crawler.files.parts import PartState, content_key, part_key
from crawlfleet.errors import OutputUnavailable
from tests.integration.output.test_stores import bucket_store
from tests.support.s3 import S3Credentials, S3Server

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

MIB = 2**20
PART = MIN_PART_BYTES  # the smallest part S3 takes: the tests' files stay small
URL = "http://files.test/videos/a.mp4"


def parts_of(
    server: S3Server,
    bucket: str,
    tmp_path: Path,
    *,
    prefix: str = "crawls/",
    credentials: S3Credentials | None = None,
    copy_part_limit_bytes: int | None = None,
) -> BucketParts:
    """Parts as a worker builds them: from the output store's connection (a new client each
    time, as another process would have)."""
    store = bucket_store(server, f"s3://{bucket}/{prefix}", credentials, tmp_path=tmp_path)
    parts = BucketParts.from_store(store)
    if copy_part_limit_bytes is not None:
        parts.copy_part_limit_bytes = copy_part_limit_bytes
    return parts


def data_of(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


async def write(part: BucketPart, data: bytes, *, checkpoint_every: int = PART) -> None:
    """As the download writes: 64 KiB chunks, a checkpoint at each multiple of the part size."""
    for start in range(0, len(data), 64 * 1024):
        await part.write(data[start : start + 64 * 1024])
        if (start + 64 * 1024) % checkpoint_every == 0:
            await part.checkpoint()


def client(server: S3Server, tmp_path: Path) -> S3Client:
    """A client of the test's own, to do what a lifecycle rule would and to read metadata."""
    return make_s3_client(bucket_store(server, "s3://any/", tmp_path=tmp_path).connection)


def staging_key(part: BucketPart) -> str:
    return f"crawls/files/.parts/{part_key(part.state.url)}.data"


def leftovers(server: S3Server, bucket: str) -> list[str]:
    """Files of unfinished multipart uploads on the server's disk."""
    temporary = server.data_dir / bucket / ".sgwtmp"
    return sorted(str(path) for path in temporary.rglob("*") if path.is_file())


def written_at(server: S3Server, bucket: str) -> dict[str, int]:
    """Each object and when the server last wrote it."""
    return {key: path.stat().st_mtime_ns for key, path in server.stored_objects(bucket).items()}


def sidecar(server: S3Server, bucket: str, prefix: str = "crawls/") -> PartState | None:
    found = [
        path
        for key, path in server.stored_objects(bucket).items()
        if key.startswith(f"{prefix}files/.parts/") and key.endswith(".json")
    ]
    return PartState.from_json(found[0].read_bytes()) if found else None


async def test_three_parts_outlive_the_process_and_another_finishes_the_file(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    data = data_of(3 * PART + 3 * MIB)
    first = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    assert first.state.offset == 0
    first.state.etag = '"v1"'
    first.state.total = len(data)
    await write(first, data[: 3 * PART])
    assert first.state.offset == 3 * PART
    assert [part["number"] for part in first.state.parts] == [1, 2, 3]
    await first.write(data[3 * PART : 3 * PART + MIB])  # never checkpointed: not durable
    await first.close()

    # Another process: a new client, the sidecar and ListParts say where the file stands.
    second = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    assert second.state.offset == 3 * PART
    assert second.state.upload_id == first.state.upload_id
    assert (second.state.etag, second.state.total) == ('"v1"', len(data))
    with pytest.raises(NotImplementedError):
        async for _ in second.durable_bytes():
            pass
    await second.write(data[3 * PART :])  # the last part: smaller than 5 MiB
    sha256 = hashlib.sha256(data).hexdigest()
    read = await second.read_back()
    assert (read.sha256, read.head) == (sha256, data[:4096])  # the type check's first bytes
    stored = await second.finish(sha256)

    assert (stored.key, stored.size, stored.duplicate) == (content_key(sha256), len(data), False)
    objects = s3_server.stored_objects(s3_bucket)
    assert sorted(objects) == [f"crawls/{content_key(sha256)}"]  # staging and sidecar gone
    assert hashlib.sha256(objects[f"crawls/{stored.key}"].read_bytes()).hexdigest() == sha256
    assert leftovers(s3_server, s3_bucket) == []


async def test_bytes_short_of_a_part_wait_in_the_buffer_and_a_later_process_asks_again(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    data = data_of(PART + 3 * MIB, seed=2)
    part = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    await part.write(data[: 2 * MIB])
    await part.checkpoint()  # a stop or a retry after 2 MiB: S3 takes no part that small
    assert (part.state.offset, part.state.parts) == (0, [])
    assert sidecar(s3_server, s3_bucket) is None
    await part.write(data[2 * MIB : PART + 2 * MIB])  # this process goes on from what it holds
    await part.checkpoint()
    assert [(p["number"], p["size"]) for p in part.state.parts] == [(1, PART + 2 * MIB)]
    await part.write(data[PART + 2 * MIB :])
    await part.checkpoint()  # 1 MiB more: in the buffer only
    assert part.state.offset == PART + 2 * MIB
    state = sidecar(s3_server, s3_bucket)
    assert state is not None
    assert (state.offset, state.upload_id) == (PART + 2 * MIB, part.state.upload_id)
    await part.close()

    # A later process has only the uploaded part: it asks for the rest again.
    later = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    assert later.state.offset == PART + 2 * MIB
    await later.write(data[PART + 2 * MIB :])
    sha256 = hashlib.sha256(data).hexdigest()
    stored = await later.finish(sha256)
    objects = s3_server.stored_objects(s3_bucket)
    assert objects[f"crawls/{stored.key}"].read_bytes() == data
    assert leftovers(s3_server, s3_bucket) == []


async def test_list_parts_wins_over_the_sidecar(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    data = data_of(2 * PART, seed=5)
    part = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    await write(part, data)
    assert part.state.offset == 2 * PART
    # The sidecar written after part 1 only (its rewrite after part 2 was lost): ListParts says 2.
    stale = PartState.from_json(part.state.to_json())
    stale.offset, stale.parts = PART, stale.parts[:1]
    client(s3_server, tmp_path).put_object(
        Bucket=s3_bucket, Key=staging_key(part).replace(".data", ".json"), Body=stale.to_json()
    )
    await part.close()

    later = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    assert later.state.offset == 2 * PART
    assert [p["number"] for p in later.state.parts] == [1, 2]
    stored = await later.finish(hashlib.sha256(data).hexdigest())
    assert s3_server.stored_objects(s3_bucket)[f"crawls/{stored.key}"].read_bytes() == data


async def test_the_same_bytes_from_another_url_are_a_duplicate_and_store_nothing_new(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    parts = parts_of(s3_server, s3_bucket, tmp_path)
    data = data_of(300 * 1024, seed=3)  # one small part
    sha256 = hashlib.sha256(data).hexdigest()
    first = await parts.open(URL)
    await write(first, data)
    assert (await first.finish(sha256)).duplicate is False
    before = {
        key: path.stat().st_mtime_ns for key, path in s3_server.stored_objects(s3_bucket).items()
    }

    mirror = await parts.open("http://mirror.test/a.mp4")
    await write(mirror, data)
    await mirror.checkpoint()  # part of it uploaded before the end: it is aborted, not completed
    stored = await mirror.finish(sha256)

    assert (stored.key, stored.size, stored.duplicate) == (content_key(sha256), len(data), True)
    after = {
        key: path.stat().st_mtime_ns for key, path in s3_server.stored_objects(s3_bucket).items()
    }
    assert after == before  # the one copy, untouched; no staging object, no sidecar
    assert leftovers(s3_server, s3_bucket) == []


async def test_restart_aborts_the_upload_and_keeps_the_count(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    part = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    part.state.etag = '"v1"'
    await write(part, data_of(2 * PART))
    assert leftovers(s3_server, s3_bucket) != []  # the two parts, on the server's disk
    await part.restart()

    assert (part.state.offset, part.state.restarts, part.state.parts) == (0, 1, [])
    assert (part.state.upload_id, part.state.etag) == (None, None)
    assert leftovers(s3_server, s3_bucket) == []
    await part.close()
    again = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    assert (again.state.offset, again.state.restarts) == (0, 1)


async def test_discard_leaves_nothing(s3_server: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    part = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    await write(part, data_of(PART + MIB))
    await part.checkpoint()
    await part.discard()
    assert s3_server.stored_objects(s3_bucket) == {}
    assert leftovers(s3_server, s3_bucket) == []


async def test_an_upload_the_store_forgot_starts_over_counted(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    part = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    await write(part, data_of(PART))
    await part.close()
    upload_id = part.state.upload_id
    assert upload_id is not None
    # A lifecycle rule (AbortIncompleteMultipartUpload) aborts it while no one holds it.
    client(s3_server, tmp_path).abort_multipart_upload(
        Bucket=s3_bucket, Key=staging_key(part), UploadId=upload_id
    )

    again = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    assert (again.state.offset, again.state.upload_id, again.state.restarts) == (0, None, 1)
    state = sidecar(s3_server, s3_bucket)
    assert state is not None
    assert (state.upload_id, state.restarts) == (None, 1)  # counted for later attempts too
    await write(again, data_of(PART))
    assert again.state.offset == PART  # a new upload


async def test_a_file_past_the_copy_limit_is_copied_in_parts(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    # The limit is S3's 5 GiB; lowered here so that the multipart copy (UploadPartCopy) runs.
    parts = parts_of(s3_server, s3_bucket, tmp_path, prefix="", copy_part_limit_bytes=PART)
    data = data_of(2 * PART + MIB, seed=4)
    sha256 = hashlib.sha256(data).hexdigest()
    part = await parts.open(URL)
    await write(part, data)
    stored = await part.finish(sha256)
    objects = s3_server.stored_objects(s3_bucket)
    assert sorted(objects) == [content_key(sha256)]
    assert hashlib.sha256(objects[stored.key].read_bytes()).hexdigest() == sha256
    etag = client(s3_server, tmp_path).head_object(Bucket=s3_bucket, Key=stored.key)["ETag"]
    assert etag.strip('"').endswith("-3")  # a multipart object: copied in 3 parts
    assert leftovers(s3_server, s3_bucket) == []


async def test_a_refusal_is_one_sentence_naming_the_destination_never_the_secret(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    wrong = S3Credentials(s3_server.root_credentials.access_key_id, "not-the-secret-0123456789")
    parts = parts_of(s3_server, s3_bucket, tmp_path, credentials=wrong)
    with pytest.raises(OutputUnavailable) as raised:
        await parts.open(URL)  # its sidecar is read first
    message = str(raised.value)
    assert message.startswith(f"output destination s3://{s3_bucket}/crawls/ at http://")
    assert "(SignatureDoesNotMatch)" in message
    assert wrong.secret_access_key not in message


async def test_a_file_never_sits_in_memory(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """Python's allocations while 4 parts stream through: the 1 MiB write buffer and the
    client's blocks, never a part (5 MiB here) or the file (20 MiB)."""
    parts = parts_of(s3_server, s3_bucket, tmp_path)
    warm = await parts.open("http://files.test/warm-up")  # the client loads its models once
    await write(warm, b"w" * 1024)
    await warm.finish(hashlib.sha256(b"w" * 1024).hexdigest())
    chunk = data_of(64 * 1024, seed=6)
    chunks = 4 * PART // len(chunk)
    digest = hashlib.sha256()
    part = await parts.open(URL)

    tracemalloc.start()
    try:
        for number in range(chunks):
            await part.write(chunk)
            digest.update(chunk)
            if (number + 1) * len(chunk) % PART == 0:
                await part.checkpoint()
        await part.finish(digest.hexdigest())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MIB, f"{peak / MIB:.1f} MiB"
    assert part.state.offset == 4 * PART


async def test_aclose_ends_the_threads_and_the_parts_stay(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    # This store's threads: another test's store left to the garbage collector may still
    # have threads of the same name in this process (CI saw one).
    before = set(threading.enumerate())
    parts = parts_of(s3_server, s3_bucket, tmp_path)
    part = await parts.open(URL)
    await write(part, data_of(PART))
    await part.close()
    mine = [
        thread
        for thread in threading.enumerate()
        if thread.name.startswith("crawlfleet-s3-parts") and thread not in before
    ]
    assert mine
    await parts.aclose()
    assert not any(thread.is_alive() for thread in mine)
    again = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    assert again.state.offset == PART  # closing the store keeps its parts


async def test_an_upload_completed_by_a_process_that_ended_before_finish_is_kept(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    data = data_of(PART + MIB)
    first = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    first.state.etag, first.state.total = '"v1"', len(data)
    await write(first, data)
    sha256 = hashlib.sha256(data).hexdigest()
    assert (await first.read_back()).sha256 == sha256  # completed; then the process dies
    completed_at = written_at(s3_server, s3_bucket)[staging_key(first)]

    second = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    assert (second.state.offset, second.state.restarts) == (len(data), 0)  # not started over
    assert (await second.read_back()).sha256 == sha256  # no new upload: the same object
    assert written_at(s3_server, s3_bucket)[staging_key(second)] == completed_at
    stored = await second.finish(sha256)
    assert (stored.size, stored.duplicate) == (len(data), False)
    assert sorted(s3_server.stored_objects(s3_bucket)) == [f"crawls/{content_key(sha256)}"]


async def test_a_completed_upload_of_another_size_than_declared_starts_over(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    data = data_of(PART + MIB)
    first = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    first.state.etag, first.state.total = '"v1"', len(data) + 1  # one byte never came
    await write(first, data)
    await first.read_back()

    second = await parts_of(s3_server, s3_bucket, tmp_path).open(URL)
    assert (second.state.offset, second.state.restarts) == (0, 1)
    assert staging_key(second) not in s3_server.stored_objects(s3_bucket)
