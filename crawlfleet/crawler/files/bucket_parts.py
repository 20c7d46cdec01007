"""A download's part in a bucket: an S3 multipart upload that outlives the process.

A file bound for an ``s3://`` destination is written as a multipart upload of
``files/.parts/<key>.data`` (``<key>``: :func:`~crawlfleet.crawler.files.parts.part_key`), its
state in the sidecar object ``files/.parts/<key>.json`` (a
:class:`~crawlfleet.crawler.files.parts.PartState` with the upload id and the parts uploaded).
Another process, another pod, opens the same URL's part and continues where the uploaded parts
end; ``.parts`` starts with a dot, so the output's listing never shows it.

**What is durable where.** Bytes written go to a local buffer file (an anonymous temporary
file in the output store's spool folder: an emptyDir in a pod; never memory). A checkpoint
uploads the buffer as the next part (``UploadPart``, with its ``Content-MD5`` so that the store
refuses torn bytes) once it holds at least 5 MiB (:data:`MIN_PART_BYTES`: S3 refuses to
complete an upload with a smaller part that is not the last), then rewrites the sidecar and
starts the buffer afresh. ``state.offset`` counts uploaded parts only: a checkpoint before 5 MiB
have gathered (a stop, a retry after a reset) leaves them in the buffer file, where this
process continues from them (the download asks for the bytes after what the part *holds*,
buffered ones included) but no other process can: a pod that dies costs the bytes since its
last uploaded part, never a byte of the parts before. Parts are normally
``files.partSizeBytes`` (the download checkpoints at each multiple of it); a file declared
larger than ``partSizeBytes`` x 10,000 gathers bigger parts (a checkpoint uploads only once the
buffer holds the file's size / 9,999), since an upload holds at most :data:`MAX_PARTS`.

**Resume.** The sidecar says which upload; ``ListParts`` says what it holds, and wins when the
two disagree (a sidecar write lost after its ``UploadPart``). An upload the store no longer
knows (aborted by a lifecycle rule, completed by a crash before ``finish`` was done) starts the
part over, counted in ``restarts``.

**Finish.** The last bytes go up as the last part (it may be small), then
``CompleteMultipartUpload``; unless the content key ``files/sha256/<ab>/<sha256>`` exists
(``HeadObject``), a server-side copy puts the staging object there (boto3's managed copy: one
``CopyObject`` up to 5 GiB, a multipart ``UploadPartCopy`` above), and the staging object and
the sidecar are deleted. A duplicate skips the copy. ``restart`` and ``discard`` abort the
upload (``AbortMultipartUpload``: the store drops its parts), ``discard`` deletes the sidecar.

**Hashing a resumed file.** The bytes of earlier parts were seen by another process: S3 cannot
read an unfinished upload, so :meth:`BucketPart.durable_bytes` raises ``NotImplementedError``
and the worker calls :meth:`BucketPart.read_back_sha256`, which completes the upload and
streams the staging object back to hash it. That costs one more read of the whole file from
the store (bandwidth between the worker and the store, no memory: 1 MiB at a time), paid only
by a download resumed across processes.

**Why boto3.** obstore (the output store's client, 0.12) does multipart uploads only inside one
call (``put`` with ``use_multipart``, or a writer object): it exposes no upload id, no
``UploadPart`` of a chosen number and no ``ListParts``, so an upload cannot outlive the process
that began it. boto3 speaks the low-level calls; it is synchronous, so each call runs in a
thread of the parts' own pool. Its client is built from the output store's
:class:`~crawlfleet.output.stores.S3Connection` (same endpoint, region, addressing and
credentials); every error it raises becomes an
:class:`~crawlfleet.errors.OutputUnavailable` of one sentence naming the destination, never
its credentials. Checksums: only ``Content-MD5`` (which every S3-compatible store checks);
boto3's newer default CRC headers are turned off, since several S3-compatible stores refuse
them.

**Memory** per open part: the write buffer (:data:`WRITE_BUFFER_BYTES`, 1 MiB) plus boto3's
read block while it sends a part from the buffer file (1 MiB while it hashes the payload to sign
it, over http), so about 2 MiB whatever the file's size (a test holds it under 4 MiB); a part's
bytes wait on local disk (about ``partSizeBytes`` per download, more only for files past 10,000
parts), never in memory.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final, TypeVar

from crawlfleet.crawler.files.parts import (
    PARTS_FOLDER,
    WRITE_BUFFER_BYTES,
    PartState,
    StoredFile,
    content_key,
    part_key,
)
from crawlfleet.errors import OutputError, OutputUnavailable
from crawlfleet.output.stores import BucketStore, S3Connection, describe_s3_error

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

    from crawlfleet.crawljob import CrawlJobSpec

__all__ = [
    "COPY_PART_LIMIT_BYTES",
    "MAX_PARTS",
    "MIN_PART_BYTES",
    "BucketPart",
    "BucketParts",
    "make_s3_client",
]

_MIB: Final = 1024 * 1024
#: S3's smallest part, the last one excepted.
MIN_PART_BYTES: Final = 5 * _MIB
#: S3's most parts in one upload.
MAX_PARTS: Final = 10_000
#: S3's largest object a single ``CopyObject`` copies; the finished file is copied to its content
#: key in parts of this size above it (``UploadPartCopy``).
COPY_PART_LIMIT_BYTES: Final = 5 * 1024 * _MIB
#: Parts of a multipart copy in flight at once (server-side: no bytes pass through the worker).
_COPY_CONCURRENCY: Final = 4
#: Threads of the S3 calls, apart from the event loop's default pool (which also resolves host
#: names): a part upload holds its thread for seconds, and must not queue a DNS lookup behind it.
_CALL_THREADS: Final = 8
#: Bytes read at once when the finished object is read back to hash it.
_READ_BYTES: Final = _MIB
#: boto3's own retries of a request (throttling, 5xx, dropped connections), with its standard
#: backoff, before an error reaches the download (which keeps its part and is retried later).
_MAX_ATTEMPTS: Final = 4
#: S3 error codes that mean an upload id (aborted, completed, expired) or a key is not there.
_GONE_CODES: Final = frozenset({"NoSuchUpload", "NoSuchKey", "404", "NotFound"})
_BUFFER_FOLDER: Final = "file-parts"

_T = TypeVar("_T")
_D = TypeVar("_D")


def make_s3_client(connection: S3Connection) -> S3Client:
    """A boto3 S3 client reaching what ``connection`` says, as the output store does."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=connection.access_key_id,
        aws_secret_access_key=connection.secret_access_key,
        aws_session_token=connection.session_token,
        region_name=connection.region,
    )
    config = Config(
        connect_timeout=connection.connect_timeout_seconds,
        read_timeout=connection.request_timeout_seconds,
        retries={"max_attempts": _MAX_ATTEMPTS, "mode": "standard"},
        s3={"addressing_style": "path" if connection.path_style else "virtual"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return session.client("s3", endpoint_url=connection.endpoint, config=config)


class BucketParts:
    """The parts of a job's downloads in its bucket (a ``PartStore``); see the module docstring."""

    def __init__(
        self,
        client: S3Client,
        *,
        bucket: str,
        prefix: str,
        where: str,
        spool_dir: Path,
        copy_part_limit_bytes: int = COPY_PART_LIMIT_BYTES,
    ) -> None:
        self.bucket = bucket
        #: The destination as messages name it (``s3://bucket/prefix/ at <endpoint>``).
        self.where = where
        #: Where the local buffer files go (the output store's spool folder).
        self.spool_dir = spool_dir
        #: Above this, the finished file is copied to its content key in parts of this size.
        self.copy_part_limit_bytes = copy_part_limit_bytes
        self._client = client
        self._threads = ThreadPoolExecutor(_CALL_THREADS, thread_name_prefix="crawlfleet-s3-parts")
        self._prefix = prefix.strip("/")

    def __repr__(self) -> str:
        return f"BucketParts({self.where!r})"

    @classmethod
    def from_store(cls, store: BucketStore) -> BucketParts:
        """Parts beside ``store``'s output: same bucket, prefix, endpoint and credentials."""
        destination = store.destination
        return cls(
            make_s3_client(store.connection),
            bucket=destination.bucket,
            prefix=destination.prefix,
            where=f"{destination.url} at {store.connection.where}",
            spool_dir=store.spool_dir / _BUFFER_FOLDER,
        )

    @classmethod
    def from_spec(cls, store: BucketStore, spec: CrawlJobSpec) -> BucketParts:
        """The parts of a job with ``files`` rules writing to ``store``. The part size is the
        download's (it checkpoints at each multiple of ``files.partSizeBytes``), not theirs."""
        if getattr(spec, "files", None) is None:
            raise ValueError("a job without files rules downloads no files")
        return cls.from_store(store)

    def key(self, relative: str) -> str:
        """The object key of ``relative`` (a key of the layout) under the destination's prefix."""
        return f"{self._prefix}/{relative}" if self._prefix else relative

    async def open(self, url: str) -> BucketPart:
        name = part_key(url)
        part = BucketPart(
            self,
            PartState(url=url),
            data_key=self.key(f"{PARTS_FOLDER}/{name}.data"),
            state_key=self.key(f"{PARTS_FOLDER}/{name}.json"),
        )
        await part.resume()
        return part

    async def call(self, work: Callable[[S3Client], _T]) -> _T:
        """``work`` with the client, in one of the parts' threads; boto3's errors as
        :class:`OutputUnavailable` (one sentence naming the destination, the store's error code
        in brackets)."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            ReadTimeoutError,
        )

        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._threads, work, self._client
            )
        except ClientError as error:
            raise OutputUnavailable(
                f"output destination {describe_s3_error(self.where, error, unreachable=False)}"
            ) from error
        except BotoCoreError as error:
            unreachable = isinstance(
                error,
                EndpointConnectionError
                | ConnectionClosedError
                | ConnectTimeoutError
                | ReadTimeoutError,
            )
            raise OutputUnavailable(
                "output destination"
                f" {describe_s3_error(self.where, error, unreachable=unreachable)}"
            ) from error

    async def call_or(self, work: Callable[[S3Client], _T], gone: _D) -> _T | _D:
        """:meth:`call`, or ``gone`` when the store has no such upload id or key: an answer
        the caller expects (a new part, an upload a lifecycle rule aborted, a delete done)."""
        from botocore.exceptions import ClientError

        try:
            return await self.call(work)
        except OutputUnavailable as error:
            cause = error.__cause__
            if isinstance(cause, ClientError) and _error_code(cause.response) in _GONE_CODES:
                return gone
            raise


class BucketPart:
    """One open part in a bucket (a ``PartWriter``); not safe for concurrent use."""

    def __init__(self, parts: BucketParts, state: PartState, *, data_key: str, state_key: str):
        self.state = state
        self._parts = parts
        self._data_key = data_key
        self._state_key = state_key
        self._pending = bytearray()  # written, not yet in the buffer file
        self._buffer: IO[bytes] | None = None  # the bytes of the part being gathered
        self._buffered = 0  # bytes in the buffer file
        self._buffer_md5 = hashlib.md5(usedforsecurity=False)
        self._completed = False  # CompleteMultipartUpload done (read back, or finishing)

    def __repr__(self) -> str:
        return (
            f"BucketPart({self._parts.bucket}/{self._data_key}, offset={self.state.offset},"
            f" parts={len(self.state.parts)})"
        )

    # -- resume ----------------------------------------------------------------------------

    async def resume(self) -> None:
        """Read the sidecar and the upload's parts; see the module docstring."""
        url = self.state.url
        state = await self._read_state()
        if state is None or state.url != url:
            return  # a new part
        self.state = state
        if state.upload_id is None:
            state.offset, state.parts = 0, []
            return
        listed = await self._list_parts(state.upload_id)
        if listed is None:
            # Aborted, expired, or completed by a process that died before finishing: over.
            await self._delete(self._data_key)
            self.state = PartState(url=url, restarts=state.restarts + 1)
            await self._save_state()
            return
        state.parts = _resumable(listed)
        state.offset = _size(state.parts)

    async def _read_state(self) -> PartState | None:
        def get(client: S3Client) -> bytes:
            return client.get_object(Bucket=self._parts.bucket, Key=self._state_key)["Body"].read()

        data = await self._parts.call_or(get, None)
        if data is None:
            return None
        try:
            return PartState.from_json(data)
        except ValueError:
            return None  # torn or foreign: it cannot decide what is resumed

    async def _list_parts(self, upload_id: str) -> list[dict[str, object]] | None:
        """The upload's parts as the store holds them; None if it has no such upload."""

        def list_all(client: S3Client) -> list[dict[str, object]]:
            found: list[dict[str, object]] = []
            pages = client.get_paginator("list_parts").paginate(
                Bucket=self._parts.bucket, Key=self._data_key, UploadId=upload_id
            )
            for page in pages:
                found += [
                    {"number": part["PartNumber"], "etag": part["ETag"], "size": part["Size"]}
                    for part in page.get("Parts", [])
                ]
            return found

        return await self._parts.call_or(list_all, None)

    # -- writing ---------------------------------------------------------------------------

    async def write(self, chunk: bytes) -> None:
        self._pending += chunk
        if len(self._pending) >= WRITE_BUFFER_BYTES:
            await self._flush()

    async def _flush(self) -> None:
        if not self._pending:
            return
        data, self._pending = self._pending, bytearray()  # handed over, not copied
        if self._buffer is None:
            self._buffer = await self._local(self._new_buffer)
        buffer = self._buffer

        def append() -> None:
            buffer.seek(0, os.SEEK_END)
            buffer.write(data)
            self._buffer_md5.update(data)

        await self._local(append)
        self._buffered += len(data)

    def _new_buffer(self) -> IO[bytes]:
        self._parts.spool_dir.mkdir(parents=True, exist_ok=True)
        return tempfile.TemporaryFile(dir=self._parts.spool_dir, prefix="part-")

    async def checkpoint(self) -> None:
        """Upload the buffer as the next part once it holds enough for one; until then its
        bytes wait in the local buffer file (``state.offset`` counts uploaded parts only)."""
        await self._flush()
        if self._buffered >= _part_floor(self.state.total):
            await self._upload_buffer()

    async def _upload_buffer(self) -> None:
        """The buffer as the next part, then the sidecar; the buffer starts afresh."""
        upload_id = await self._upload_id()
        number = len(self.state.parts) + 1
        if number > MAX_PARTS:
            raise OutputError(
                f"output destination {self._parts.where}: {self.state.url} needs more than"
                f" {MAX_PARTS} parts; raise files.partSizeBytes"
            )
        buffer, size = self._buffer, self._buffered
        md5 = base64.b64encode(self._buffer_md5.digest()).decode()

        def upload(client: S3Client) -> str:
            body = buffer if buffer is not None else io.BytesIO()
            body.seek(0)
            answer = client.upload_part(
                Bucket=self._parts.bucket,
                Key=self._data_key,
                UploadId=upload_id,
                PartNumber=number,
                Body=body,
                ContentLength=size,
                ContentMD5=md5,
            )
            return answer["ETag"]

        etag = await self._parts.call(upload)
        self.state.parts = [*self.state.parts, {"number": number, "etag": etag, "size": size}]
        self.state.offset = _size(self.state.parts)
        await self._reset_buffer()
        await self._save_state()

    async def _upload_id(self) -> str:
        if self.state.upload_id is None:

            def create(client: S3Client) -> str:
                answer = client.create_multipart_upload(
                    Bucket=self._parts.bucket, Key=self._data_key
                )
                return answer["UploadId"]

            upload_id = await self._parts.call(create)
            self.state.upload_id, self.state.parts, self.state.offset = upload_id, [], 0
            await self._save_state()  # at once: an upload no sidecar names is never aborted
            return upload_id
        return self.state.upload_id

    async def _reset_buffer(self) -> None:
        self._pending = bytearray()
        self._buffered = 0
        self._buffer_md5 = hashlib.md5(usedforsecurity=False)
        buffer = self._buffer
        if buffer is not None:

            def truncate() -> None:
                buffer.seek(0)
                buffer.truncate()

            await self._local(truncate)

    async def _save_state(self) -> None:
        data = self.state.to_json()

        def put(client: S3Client) -> None:
            client.put_object(
                Bucket=self._parts.bucket,
                Key=self._state_key,
                Body=data,
                ContentType="application/json",
            )

        await self._parts.call(put)

    # -- ending ----------------------------------------------------------------------------

    async def restart(self) -> None:
        await self._abort()
        await self._reset_buffer()
        state = self.state
        state.offset, state.restarts, state.parts, state.upload_id = 0, state.restarts + 1, [], None
        state.total = state.etag = state.last_modified = state.content_type = None
        await self._save_state()  # the restart stays counted for a later attempt

    async def durable_bytes(self) -> AsyncIterator[bytes]:
        """S3 cannot read an unfinished upload back: hash with :meth:`read_back_sha256`."""
        raise NotImplementedError("a bucket's part is hashed after it is completed")
        yield b""  # pragma: no cover - makes this an async generator, as the Protocol's are

    async def read_back_sha256(self) -> str:
        """Complete the upload and hash the staging object, read back 1 MiB at a time: the
        SHA-256 of a download resumed across processes (see the module docstring)."""
        await self._complete()

        def digest(client: S3Client) -> str:
            body = client.get_object(Bucket=self._parts.bucket, Key=self._data_key)["Body"]
            hasher = hashlib.sha256()
            try:
                for chunk in body.iter_chunks(_READ_BYTES):
                    hasher.update(chunk)
            finally:
                body.close()
            return hasher.hexdigest()

        return await self._parts.call(digest)

    async def finish(self, sha256: str) -> StoredFile:
        key = content_key(sha256)
        target = self._parts.key(key)
        if not self._completed:
            await self._flush()
            if await self._exists(target):  # a duplicate: no need to assemble it at all
                size = self.state.offset + self._buffered
                await self.discard()
                return StoredFile(key=key, size=size, duplicate=True)
            await self._complete()
        size = self.state.offset
        duplicate = await self._exists(target)
        if not duplicate:
            await self._copy(target)
        await self._delete(self._data_key)
        await self._delete(self._state_key)
        await self.close()
        return StoredFile(key=key, size=size, duplicate=duplicate)

    async def _complete(self) -> None:
        """The buffer as the last part, then ``CompleteMultipartUpload``; once."""
        if self._completed:
            return
        await self._flush()
        if self._buffered or not self.state.parts:
            await self._upload_buffer()  # the last part may be small; an empty file, empty
        upload_id = await self._upload_id()
        parts: list[CompletedPartTypeDef] = [
            {"PartNumber": _part_number(part), "ETag": str(part["etag"])}
            for part in self.state.parts
        ]

        def complete(client: S3Client) -> None:
            client.complete_multipart_upload(
                Bucket=self._parts.bucket,
                Key=self._data_key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )

        await self._parts.call(complete)
        self._completed = True

    async def _copy(self, target: str) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(
            multipart_threshold=self._parts.copy_part_limit_bytes,
            multipart_chunksize=self._parts.copy_part_limit_bytes,
            max_concurrency=_COPY_CONCURRENCY,
        )

        def copy(client: S3Client) -> None:
            client.copy(
                {"Bucket": self._parts.bucket, "Key": self._data_key},
                self._parts.bucket,
                target,
                Config=config,
            )

        await self._parts.call(copy)

    async def _exists(self, key: str) -> bool:
        def head(client: S3Client) -> bool:
            client.head_object(Bucket=self._parts.bucket, Key=key)
            return True

        return await self._parts.call_or(head, False)

    async def discard(self) -> None:
        await self._abort()
        await self._delete(self._state_key)
        await self.close()

    async def _abort(self) -> None:
        upload_id = self.state.upload_id
        if upload_id is None or self._completed:
            if self._completed:
                await self._delete(self._data_key)
            self._completed = False
            return

        def abort(client: S3Client) -> None:
            client.abort_multipart_upload(
                Bucket=self._parts.bucket, Key=self._data_key, UploadId=upload_id
            )

        await self._parts.call_or(abort, None)  # gone already: what an abort wants

    async def _delete(self, key: str) -> None:
        def delete(client: S3Client) -> None:
            client.delete_object(Bucket=self._parts.bucket, Key=key)

        await self._parts.call_or(delete, None)  # gone already: what a delete wants

    async def close(self) -> None:
        """Drop the local buffer; the uploaded parts and the sidecar stay for a resume."""
        self._pending = bytearray()
        buffer, self._buffer = self._buffer, None
        self._buffered = 0
        if buffer is not None:
            await self._local(buffer.close)

    async def _local(self, work: Callable[[], _T]) -> _T:
        """Local buffer work in a thread; its ``OSError`` as :class:`OutputUnavailable`."""
        try:
            return await asyncio.to_thread(work)
        except OSError as error:
            raise OutputUnavailable(
                f"the spool folder {self._parts.spool_dir} (CRAWLFLEET_SPOOL_DIR): cannot buffer"
                f" a part of {self.state.url}: {error.strerror or error}"
            ) from error


def _part_floor(total: int | None) -> int:
    """The bytes a checkpoint gathers before it uploads them as a part: S3's minimum, or more
    for a file declared so large that parts of that size would pass :data:`MAX_PARTS`."""
    return max(MIN_PART_BYTES, -(-(total or 0) // (MAX_PARTS - 1)))


def _resumable(listed: list[dict[str, object]]) -> list[dict[str, object]]:
    """The parts a later process can build on: numbered 1, 2, ... without a gap, each at least
    :data:`MIN_PART_BYTES` (a smaller one could only be a last part, of an upload completed
    already: it is asked for again)."""
    kept: list[dict[str, object]] = []
    for part in sorted(listed, key=_part_number):
        if _part_number(part) != len(kept) + 1 or _part_size(part) < MIN_PART_BYTES:
            break
        kept.append(part)
    return kept


def _size(parts: list[dict[str, object]]) -> int:
    return sum(_part_size(part) for part in parts)


def _part_number(part: dict[str, object]) -> int:
    return _integer(part["number"])


def _part_size(part: dict[str, object]) -> int:
    return _integer(part["size"])


def _integer(value: object) -> int:
    """A part's number or size, as the sidecar (JSON, untrusted) or ListParts gave it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"not a part's number or size: {value!r}")


def _error_code(response: Mapping[str, object]) -> str:
    """The S3 error code of a boto3 ``ClientError``'s response (a HEAD's is its status)."""
    error = response.get("Error")
    return str(error.get("Code", "")) if isinstance(error, Mapping) else ""
