"""The two stores against real storage: a folder on this disk, and versitygw over S3.

What the sink relies on: a commit is durable and never replaces another file, a retry after a
lost answer succeeds, big files go up as multipart uploads, only the layout is listed, and each
way a destination can be wrong is one sentence at the start-up check (never a secret).
Objects are checked on the server's own disk, not only through the client under test.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import obstore
import pytest

from crawlfleet.config import OutputConfig
from crawlfleet.crawljob import S3Spec
from crawlfleet.destinations import parse_destination
from crawlfleet.errors import OutputError
from crawlfleet.output.stores import MULTIPART_THRESHOLD_BYTES, BucketStore, FolderStore
from tests.support.s3 import REGION, S3Credentials, S3Server

MIB = 2**20


def bucket_store(
    server: S3Server,
    destination: str,
    credentials: S3Credentials | None = None,
    *,
    endpoint: str | None = None,
    tmp_path: Path,
) -> BucketStore:
    """A store as a worker builds it: the spec's endpoint, the AWS environment's keys."""
    credentials = credentials or server.root_credentials
    environ = {
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        "HOME": str(tmp_path),  # no ~/.aws of the machine's user
    }
    return BucketStore.from_spec(
        parse_destination(destination),
        S3Spec(endpoint=endpoint or server.endpoint_url, region=REGION),
        OutputConfig(spool_dir=tmp_path / "spool", connect_timeout_seconds=1),
        environ=environ,
    )


def spooled(tmp_path: Path, data: bytes, name: str = "w-1-00000.jsonl") -> Path:
    path = tmp_path / "spool" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- a bucket -------------------------------------------------------------------------------


async def test_a_commit_lands_whole_under_the_prefix_and_the_spool_goes(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    store = bucket_store(s3_server, f"s3://{s3_bucket}/crawls/books/", tmp_path=tmp_path)
    await store.check()
    data = b'{"url": "http://a.test/"}\n' * 100
    path = spooled(tmp_path, data)

    await store.commit(path, "pages/w-1-00000.jsonl")

    stored = s3_server.stored_objects(s3_bucket)
    assert sorted(stored) == ["crawls/books/pages/w-1-00000.jsonl"]  # the probe is gone too
    assert stored["crawls/books/pages/w-1-00000.jsonl"].read_bytes() == data
    assert not path.exists()
    assert [(f.key, f.size) for f in await store.files()] == [("pages/w-1-00000.jsonl", len(data))]
    assert b"".join([chunk async for chunk in store.read("pages/w-1-00000.jsonl")]) == data


async def test_a_retry_after_a_lost_answer_succeeds_and_a_collision_is_refused(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    store = bucket_store(s3_server, f"s3://{s3_bucket}/", tmp_path=tmp_path)
    data = b"first\n"
    await store.commit(spooled(tmp_path, data), "pages/a.jsonl")
    # The same bytes again (the first answer was lost, the worker tries once more): success.
    await store.commit(spooled(tmp_path, data), "pages/a.jsonl")
    # Other bytes under the same name: never replaced.
    with pytest.raises(OutputError, match="exists with other content"):
        await store.commit(spooled(tmp_path, b"second\n"), "pages/a.jsonl")
    assert s3_server.stored_objects(s3_bucket)["pages/a.jsonl"].read_bytes() == data


async def test_a_big_file_goes_up_as_a_multipart_upload(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    store = bucket_store(s3_server, f"s3://{s3_bucket}/", tmp_path=tmp_path)
    data = random.Random(7).randbytes(MULTIPART_THRESHOLD_BYTES * 2 + MIB)
    await store.commit(spooled(tmp_path, data, "w-1-00000.warc.gz"), "warc/w-1-00000.warc.gz")

    meta = await obstore.head_async(store._store, "warc/w-1-00000.warc.gz")
    assert str(meta["e_tag"]).strip('"').endswith("-3")  # S3's multipart ETag: 3 parts
    stored = s3_server.stored_objects(s3_bucket)["warc/w-1-00000.warc.gz"]
    assert hashlib.sha256(stored.read_bytes()).digest() == hashlib.sha256(data).digest()


async def test_only_the_layout_is_listed(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    store = bucket_store(s3_server, f"s3://{s3_bucket}/", tmp_path=tmp_path)
    for key in ("pages/a.jsonl", "warc/a.warc.gz", "notes.txt", ".write-test/x", "pages/.b"):
        await obstore.put_async(store._store, key, b"x")
    await store.put("manifest.json", b"{}")
    await store.put("manifest.json", b"{}\n")  # replaced: the one file written twice
    assert [(f.key, f.size) for f in await store.files()] == [
        ("manifest.json", 3),
        ("pages/a.jsonl", 1),
        ("warc/a.warc.gz", 1),
    ]


async def test_each_run_of_a_scheduled_job_is_listed_with_its_layout(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    store = bucket_store(s3_server, f"s3://{s3_bucket}/news/", tmp_path=tmp_path)
    run = bucket_store(
        s3_server,
        parse_destination(f"s3://{s3_bucket}/news/").for_run("20261202T081500Z").url,
        tmp_path=tmp_path,
    )
    await run.put("manifest.json", b"{}")
    await run.put("pages/a.jsonl", b"x")
    for key in ("runs/20261202T081500Z/notes.txt", "runs/x/.hidden/a", "runs/manifest.json"):
        await obstore.put_async(store._store, "news/" + key, b"x")
    assert run.destination.url == f"s3://{s3_bucket}/news/runs/20261202T081500Z/"
    assert [f.key for f in await store.files()] == [
        "runs/20261202T081500Z/manifest.json",
        "runs/20261202T081500Z/pages/a.jsonl",
    ]
    assert [f.key for f in await run.files()] == ["manifest.json", "pages/a.jsonl"]


async def test_a_wrong_secret_is_one_sentence_without_the_secret(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    wrong = S3Credentials(s3_server.root_credentials.access_key_id, "not-the-secret-at-all")
    store = bucket_store(s3_server, f"s3://{s3_bucket}/x/", wrong, tmp_path=tmp_path)
    with pytest.raises(OutputError) as refused:
        await store.check()
    message = str(refused.value)
    assert message == (
        f"output destination s3://{s3_bucket}/x/ at {s3_server.endpoint_url}: the secret"
        " access key does not match the access key id (SignatureDoesNotMatch)"
    )
    assert "not-the-secret" not in message


@pytest.mark.parametrize(
    ("case", "meaning"),
    [
        ("unknown key", "the store does not know the access key id (InvalidAccessKeyId)"),
        ("missing bucket", "the bucket does not exist (NoSuchBucket)"),
        ("read only", "the credentials may not write to it (AccessDenied)"),
        ("unreachable", "cannot connect to the store"),
    ],
)
async def test_each_unusable_destination_is_found_by_the_check(
    s3_server: S3Server, tmp_path: Path, case: str, meaning: str
) -> None:
    bucket = f"check-{case.replace(' ', '-')}"
    credentials = s3_server.root_credentials
    endpoint = None
    if case == "unknown key":
        credentials = S3Credentials("nobody-knows-me", "whatever-secret")
    if case != "missing bucket":
        s3_server.create_bucket(bucket)
    if case == "read only":
        reader = s3_server.create_user("only-reads")
        s3_server.create_bucket(bucket + "-2", grant_read=("only-reads",))
        bucket, credentials = bucket + "-2", reader
    if case == "unreachable":
        endpoint = "http://127.0.0.1:9"  # discard: nothing listens
    store = bucket_store(
        s3_server, f"s3://{bucket}/", credentials, endpoint=endpoint, tmp_path=tmp_path
    )
    with pytest.raises(OutputError) as refused:
        await store.check()
    assert str(refused.value).endswith(meaning)
    assert "\n" not in str(refused.value)


async def test_a_spool_folder_that_cannot_be_made_is_one_sentence(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    (tmp_path / "spool").write_text("a file where the spool folder would go")
    store = bucket_store(s3_server, f"s3://{s3_bucket}/", tmp_path=tmp_path)
    with pytest.raises(OutputError) as refused:
        await store.check()
    assert "the spool folder" in str(refused.value)
    assert "(CRAWLFLEET_SPOOL_DIR) cannot be made" in str(refused.value)


# --- a folder -------------------------------------------------------------------------------


async def test_a_folder_commit_is_a_rename_after_fsync_and_never_replaces(tmp_path: Path) -> None:
    store = FolderStore(parse_destination(str(tmp_path / "out")))
    await store.check()
    path = store.spool_dir / "w-1-00000.jsonl"
    path.write_bytes(b"one\n")
    await store.commit(path, "pages/w-1-00000.jsonl")
    assert (tmp_path / "out" / "pages" / "w-1-00000.jsonl").read_bytes() == b"one\n"
    await store.commit(path, "pages/w-1-00000.jsonl")  # a retry after the rename: done
    path.write_bytes(b"two\n")
    with pytest.raises(OutputError, match="never replaced"):
        await store.commit(path, "pages/w-1-00000.jsonl")
    assert (tmp_path / "out" / "pages" / "w-1-00000.jsonl").read_bytes() == b"one\n"


async def test_a_folder_that_cannot_be_written_is_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file, not a folder")
    store = FolderStore(parse_destination(str(tmp_path / "taken" / "out")))
    with pytest.raises(OutputError) as refused:
        await store.check()
    assert str(refused.value) == (
        f"output folder {tmp_path / 'taken' / 'out'}: cannot write there: Not a directory"
    )


async def test_a_folder_lists_only_the_layout(tmp_path: Path) -> None:
    store = FolderStore(parse_destination(str(tmp_path)))
    for name in ("pages/a.jsonl", "pages/.b.jsonl", "redis/dump.rdb", "logs/w.log", "x.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    await store.put("dead-letters.jsonl", b"")
    assert [(f.key, f.size) for f in await store.files()] == [
        ("dead-letters.jsonl", 0),
        ("pages/a.jsonl", 1),
    ]


async def test_a_folder_lists_each_run_of_a_scheduled_job_with_its_layout(tmp_path: Path) -> None:
    base = parse_destination(str(tmp_path))
    run = FolderStore(base.for_run("20261202T081500Z"))
    await run.put("manifest.json", b"{}")
    await run.put("pages/a.jsonl", b"x")
    for name in ("runs/20261202T081500Z/x.txt", "runs/.partial/pages/a.jsonl", "runs/y.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert run.destination.path == f"{tmp_path}/runs/20261202T081500Z"
    assert [f.key for f in await FolderStore(base).files()] == [
        "runs/20261202T081500Z/manifest.json",
        "runs/20261202T081500Z/pages/a.jsonl",
    ]
    assert [f.key for f in await run.files()] == ["manifest.json", "pages/a.jsonl"]


async def test_no_credentials_at_all_is_one_sentence_that_says_where_they_go(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)  # obstore reads the process's own too
    store = BucketStore.from_spec(
        parse_destination(f"s3://{s3_bucket}/"),
        S3Spec(endpoint=s3_server.endpoint_url, region=REGION),
        OutputConfig(spool_dir=tmp_path / "spool", connect_timeout_seconds=1),
        environ={"HOME": str(tmp_path)},
    )
    with pytest.raises(OutputError, match=r"no credentials: set AWS_ACCESS_KEY_ID"):
        await store.check()


async def test_the_shared_credentials_file_is_read_as_the_aws_cli_reads_it(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    keys = s3_server.root_credentials
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text(
        f"[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
        f"[crawls]\naws_access_key_id = {keys.access_key_id}\n"
        f"aws_secret_access_key = {keys.secret_access_key}\n"
    )
    store = BucketStore.from_spec(
        parse_destination(f"s3://{s3_bucket}/"),
        S3Spec(endpoint=s3_server.endpoint_url, region=REGION),
        OutputConfig(spool_dir=tmp_path / "spool"),
        environ={"HOME": str(tmp_path), "AWS_PROFILE": "crawls"},
    )
    await store.check()
