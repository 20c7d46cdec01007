"""Self-tests of the S3 test bed: the real server (versitygw) through the client the sink uses.

They pin down what the output sink (issue #12) will rely on: objects and multipart uploads land
whole, a conditional put refuses an existing key, and each way a destination can be wrong --
a bad secret, an unknown key, a bucket the account may read but not write, a missing bucket, a
server that is down -- gives an error the sink can tell apart. Objects are checked on the
server's disk, not only through the client under test.
"""

from __future__ import annotations

import hashlib
import random
import re
from datetime import timedelta
from pathlib import Path

import obstore
import pytest
from obstore.exceptions import AlreadyExistsError, GenericError, PermissionDeniedError
from obstore.store import S3Store

from tests.support.s3 import BUILD_SCRIPT, REGION, S3Credentials, S3Server, S3ServerError

MIB = 2**20


def store_for(server: S3Server, bucket: str, credentials: S3Credentials | None = None) -> S3Store:
    """An obstore client for ``bucket``; no retries, so a refusal shows at once."""
    credentials = credentials or server.root_credentials
    return S3Store(
        bucket,
        endpoint=server.endpoint_url,
        region=REGION,
        access_key_id=credentials.access_key_id,
        secret_access_key=credentials.secret_access_key,
        client_options={"allow_http": True, "timeout": "10s", "connect_timeout": "2s"},
        retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=5)},
    )


async def test_put_get_list_delete(s3_server: S3Server, s3_bucket: str) -> None:
    store = store_for(s3_server, s3_bucket)
    records = b'{"url": "http://a.test/"}\n{"url": "http://a.test/b"}\n'
    result = await obstore.put_async(store, "pages/part-00000.jsonl", records)
    await obstore.put_async(store, "pages/part-00001.jsonl", b"{}\n")
    await obstore.put_async(store, "warc/ignored.warc", b"WARC/1.1\r\n")

    assert result["e_tag"]
    fetched = await obstore.get_async(store, "pages/part-00000.jsonl")
    assert bytes(await fetched.bytes_async()) == records
    listed = await obstore.list(store, prefix="pages/").collect_async()
    assert sorted((meta["path"], meta["size"]) for meta in listed) == [
        ("pages/part-00000.jsonl", len(records)),
        ("pages/part-00001.jsonl", 3),
    ]
    stored = s3_server.stored_objects(s3_bucket)
    assert stored["pages/part-00000.jsonl"].read_bytes() == records

    await obstore.delete_async(store, ["pages/part-00001.jsonl", "warc/ignored.warc"])
    assert sorted(s3_server.stored_objects(s3_bucket)) == ["pages/part-00000.jsonl"]
    with pytest.raises(FileNotFoundError, match="NoSuchKey"):
        await obstore.get_async(store, "pages/part-00001.jsonl")


async def test_multipart_upload_lands_as_one_whole_object(
    s3_server: S3Server, s3_bucket: str
) -> None:
    store = store_for(s3_server, s3_bucket)
    body = random.Random(1).randbytes(17 * MIB)

    result = await obstore.put_async(
        store, "warc/big.warc", body, use_multipart=True, chunk_size=5 * MIB, max_concurrency=4
    )

    # A multipart ETag names its part count (S3's convention): 5 MiB parts of 17 MiB are 4.
    assert result["e_tag"] is not None
    assert result["e_tag"].strip('"').endswith("-4")
    stored = s3_server.stored_objects(s3_bucket)
    assert list(stored) == ["warc/big.warc"]  # no parts left behind as objects
    assert hashlib.sha256(stored["warc/big.warc"].read_bytes()).digest() == (
        hashlib.sha256(body).digest()
    )


async def test_create_mode_refuses_a_key_that_exists(s3_server: S3Server, s3_bucket: str) -> None:
    """A conditional put (If-None-Match: *): how a sink can never overwrite another's file."""
    store = store_for(s3_server, s3_bucket)
    await obstore.put_async(store, "pages/part-00000.jsonl", b"first\n", mode="create")

    with pytest.raises(AlreadyExistsError, match="PreconditionFailed"):
        await obstore.put_async(store, "pages/part-00000.jsonl", b"second\n", mode="create")
    assert s3_server.stored_objects(s3_bucket)["pages/part-00000.jsonl"].read_bytes() == (
        b"first\n"
    )


async def test_a_wrong_secret_is_refused_as_a_signature_mismatch(
    s3_server: S3Server, s3_bucket: str
) -> None:
    wrong = S3Credentials(s3_server.root_credentials.access_key_id, "not-the-secret")

    with pytest.raises(PermissionDeniedError, match="SignatureDoesNotMatch"):
        await obstore.put_async(store_for(s3_server, s3_bucket, wrong), "probe", b"x")
    assert s3_server.stored_objects(s3_bucket) == {}


async def test_an_unknown_access_key_is_refused(s3_server: S3Server, s3_bucket: str) -> None:
    stranger = S3Credentials("nobody-knows-me", "whatever-secret")

    with pytest.raises(PermissionDeniedError, match="InvalidAccessKeyId"):
        await obstore.put_async(store_for(s3_server, s3_bucket, stranger), "probe", b"x")


async def test_an_account_that_may_only_read_cannot_write(s3_server: S3Server) -> None:
    reader = s3_server.create_user("reader-only")
    bucket = s3_server.create_bucket("read-only-for-reader", grant_read=("reader-only",))
    await obstore.put_async(store_for(s3_server, bucket), "pages/existing.jsonl", b"{}\n")
    as_reader = store_for(s3_server, bucket, reader)

    listed = await obstore.list(as_reader).collect_async()
    assert [meta["path"] for meta in listed] == ["pages/existing.jsonl"]
    with pytest.raises(PermissionDeniedError, match="AccessDenied"):
        await obstore.put_async(as_reader, "pages/probe", b"x")
    assert sorted(s3_server.stored_objects(bucket)) == ["pages/existing.jsonl"]


async def test_a_missing_bucket_is_not_found(s3_server: S3Server) -> None:
    with pytest.raises(FileNotFoundError, match="NoSuchBucket"):
        await obstore.put_async(store_for(s3_server, "no-such-bucket"), "probe", b"x")


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
async def test_a_stopped_server_refuses_connections_and_a_restart_keeps_the_data(
    private_s3_server: S3Server, kill: bool
) -> None:
    server = private_s3_server
    bucket = server.create_bucket("survives-restarts")
    store = store_for(server, bucket)
    await obstore.put_async(store, "pages/before.jsonl", b"before\n")

    server.stop(kill=kill)
    assert not server.running
    with pytest.raises(GenericError, match="error sending request"):
        await obstore.put_async(store, "pages/during.jsonl", b"during\n")
    server.start()

    # Same endpoint, same credentials, same store object: the outage is over.
    await obstore.put_async(store, "pages/after.jsonl", b"after\n")
    fetched = await obstore.get_async(store, "pages/before.jsonl")
    assert bytes(await fetched.bytes_async()) == b"before\n"
    assert sorted(server.stored_objects(bucket)) == ["pages/after.jsonl", "pages/before.jsonl"]


def test_a_missing_binary_fails_naming_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWLFLEET_S3_CACHE", str(tmp_path / "empty-cache"))

    with pytest.raises(S3ServerError, match=re.escape(str(BUILD_SCRIPT))):
        S3Server(tmp_path / "s3")
