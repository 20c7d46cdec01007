"""The stores behind destinations: a folder (fsync, rename) and an S3-compatible bucket (obstore).

One small Protocol, one implementation per kind. A store knows nothing of pages, rotation or
leases (the worker's sink decides what to write and when, ``crawlfleet.crawler.worker.sinks``); it
makes a finished file durable under a key, writes the few whole files of completion, lists the
layout and reads it back. What "durable" means is each store's promise:

* ``FolderStore``: the file is written to ``<root>/.partial/``, fsynced, renamed into place and
  its directory fsynced. A crash before the rename leaves a ``.partial`` file that no reader
  counts (its records' leases were never acked, so they are crawled again).
* ``BucketStore``: the object's PUT (or a multipart upload's CompleteMultipartUpload) answered
  2xx. obstore signs the payload, so a 2xx is for exactly these bytes. Files up to
  ``MULTIPART_THRESHOLD_BYTES`` go up in one PUT with ``If-None-Match: *`` (never overwriting);
  a retry that meets an existing key compares the stored bytes with its own, since an earlier
  attempt whose answer was lost may have landed. Larger files go up as a multipart upload,
  which S3 cannot make conditional; their names are unique to the writer (see the sink).

Keys are relative to the destination (``pages/<file>.jsonl``). Only the layout is listed
(``pages/``, ``items/``, ``warc/``, ``dead-letters.jsonl``, ``manifest.json``; a run's folder
also holds its Redis and logs), and never a name that starts with a dot anywhere in the key
(``.partial/``, ``.write-test/``: the store's own).

Errors: everything a store raises is an :class:`~crawlfleet.errors.OutputError` whose message is
one sentence naming the destination, never its credentials; obstore's S3 error codes
(``AccessDenied``, ``NoSuchBucket``, ...) are read from its messages here, once.
"""

from __future__ import annotations

import asyncio
import configparser
import contextlib
import hashlib
import os
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from crawlfleet.config import OutputConfig
from crawlfleet.destinations import LAYOUT_FILES, LAYOUT_FOLDERS, RUNS_FOLDER, Destination
from crawlfleet.errors import OutputError, OutputUnavailable

if TYPE_CHECKING:
    from obstore.store import S3Config, S3Store

    from crawlfleet.crawljob import CrawlJobSpec, S3Spec

__all__ = [
    "MULTIPART_THRESHOLD_BYTES",
    "BucketStore",
    "FolderStore",
    "OutputStore",
    "S3Connection",
    "StoredObject",
    "checked_store",
    "describe_s3_error",
    "open_store",
]

_MIB: Final = 1024 * 1024
#: Files above this go up as multipart uploads in parts of this size (S3's minimum part is
#: 5 MiB; 8 MiB is the AWS CLI's default), four parts in flight.
MULTIPART_THRESHOLD_BYTES: Final = 8 * _MIB
_MULTIPART_CONCURRENCY: Final = 4
_READ_CHUNK_BYTES: Final = _MIB
_SPOOL: Final = ".partial"
_WRITE_TEST: Final = ".write-test"
# obstore retries 5xx, dropped connections and timeouts itself, briefly, so a blip never reaches
# the sink; a longer outage surfaces after RETRY_TIMEOUT and the sink's own backoff takes over
# (keeping the file, acking nothing, raising its metric). Timeouts: OutputConfig.
_MAX_RETRIES: Final = 3
_RETRY_TIMEOUT: Final = timedelta(seconds=10)
_DEFAULT_REGION: Final = "us-east-1"
# S3 error codes in obstore's messages, and what each means for the user.
_S3_CODES: Final = (
    ("NoSuchBucket", "the bucket does not exist"),
    ("InvalidAccessKeyId", "the store does not know the access key id"),
    ("SignatureDoesNotMatch", "the secret access key does not match the access key id"),
    ("ExpiredToken", "the session token has expired"),
    ("InvalidToken", "the session token is not valid"),
    ("AccessDenied", "the credentials may not write to it"),
    ("AllAccessDisabled", "all access to the bucket is disabled"),
)


@dataclass(frozen=True, slots=True)
class StoredObject:
    """A file of the layout: its key relative to the destination and its size in bytes."""

    key: str
    size: int


class OutputStore(Protocol):
    """A destination's storage: what a folder and a bucket both do, and nothing more."""

    destination: Destination
    #: Where a writer keeps the files it is still writing (inside the folder for a folder,
    #: so that committing is a rename; a local temporary folder for a bucket).
    spool_dir: Path

    async def check(self) -> None:
        """A test write at start-up: an :class:`OutputError` saying why, if it cannot write."""
        ...

    async def commit(self, spooled: Path, key: str) -> None:
        """Make the finished file ``spooled`` durable at ``key`` (never overwriting another
        file); on return it is. Safe to call again after a failure."""
        ...

    async def put(self, key: str, data: bytes) -> None:
        """Write a small whole file durably, replacing an earlier one (manifest, dead letters)."""
        ...

    async def files(self) -> list[StoredObject]:
        """Every file of the layout, sorted by key."""
        ...

    def read(self, key: str) -> AsyncIterator[bytes]:
        """The file's bytes in chunks; ``FileNotFoundError`` if it does not exist."""
        ...


def open_store(
    destination: Destination,
    s3: S3Spec | None = None,
    config: OutputConfig | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> OutputStore:
    """The store of ``destination``; a bucket's credentials come from ``environ`` (the AWS
    variables, else the shared credentials file), never from the spec."""
    if destination.kind == "folder":
        return FolderStore(destination)
    environ = os.environ if environ is None else environ
    return BucketStore.from_spec(destination, s3, config or OutputConfig(), environ=environ)


async def checked_store(
    spec: CrawlJobSpec, destination: str, config: OutputConfig | None = None
) -> OutputStore | None:
    """The store a job's output goes to, checked with a test write; None for format none.

    ``destination`` was validated by the model (or by the CLI with the same parser). Run at
    start-up by ``crawlfleet run`` and by every worker, before anything is claimed: an
    unusable destination is an :class:`OutputError` there, never pages crawled into the void.
    """
    if spec.output.format == "none":
        return None
    from crawlfleet.destinations import parse_destination

    store = open_store(parse_destination(destination), spec.output.s3, config)
    await store.check()
    return store


# --- a folder -------------------------------------------------------------------------------


class FolderStore:
    """A folder on a local disk or a mounted volume; see the module docstring."""

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self.root = Path(destination.path).absolute()
        self.spool_dir = self.root / _SPOOL

    def __repr__(self) -> str:
        return f"FolderStore({str(self.root)!r})"

    async def check(self) -> None:
        try:
            await asyncio.to_thread(self._check)
        except OSError as exc:
            raise OutputError(
                f"output folder {self.root}: cannot write there: {exc.strerror or exc}"
            ) from exc

    def _check(self) -> None:
        created = not self.root.exists()
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        probe = self.spool_dir / f"{_WRITE_TEST}-{secrets.token_hex(4)}"
        with probe.open("xb") as out:
            out.write(b"crawlfleet write test\n")
            out.flush()
            os.fsync(out.fileno())
        probe.unlink()
        if created:
            _fsync_directory(self.root.parent)

    async def commit(self, spooled: Path, key: str) -> None:
        try:
            await asyncio.to_thread(self._commit, spooled, key)
        except FileExistsError as exc:
            raise OutputError(
                f"{self._where(key)} exists: output files are never replaced"
            ) from exc
        except OSError as exc:
            raise OutputUnavailable(
                f"{self._where(key)}: cannot write: {exc.strerror or exc}"
            ) from exc

    def _commit(self, spooled: Path, key: str) -> None:
        target = self.root / key
        if not spooled.exists() and target.exists():
            _fsync_directory(target.parent)  # an earlier attempt renamed it: finish its work
            return
        descriptor = os.open(spooled, os.O_RDONLY)
        try:
            os.fsync(descriptor)  # the data first, then the name that points at it
        finally:
            os.close(descriptor)
        self._make_parent(target)
        if target.exists():
            raise FileExistsError(target)
        os.rename(spooled, target)
        _fsync_directory(target.parent)

    async def put(self, key: str, data: bytes) -> None:
        try:
            await asyncio.to_thread(self._put, key, data)
        except OSError as exc:
            raise OutputUnavailable(
                f"{self._where(key)}: cannot write: {exc.strerror or exc}"
            ) from exc

    def _put(self, key: str, data: bytes) -> None:
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        spooled = self.spool_dir / f"{Path(key).name}.{secrets.token_hex(4)}"
        with spooled.open("xb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        target = self.root / key
        self._make_parent(target)
        os.replace(spooled, target)
        _fsync_directory(target.parent)

    def _make_parent(self, target: Path) -> None:
        if not target.parent.is_dir():
            target.parent.mkdir(parents=True, exist_ok=True)
            _fsync_directory(target.parent.parent)  # the new folder's own entry

    async def files(self) -> list[StoredObject]:
        try:
            return await asyncio.to_thread(self._files)
        except OSError as exc:
            raise OutputError(
                f"output folder {self.root}: cannot list: {exc.strerror or exc}"
            ) from exc

    def _files(self) -> list[StoredObject]:
        if not self.root.is_dir():
            raise FileNotFoundError(2, "no such folder", str(self.root))
        runs = self.root / RUNS_FOLDER
        # The layout here, and under each run of a scheduled job (runs/<run-id>/).
        tops = [self.root]
        if runs.is_dir():
            tops += sorted(path for path in runs.iterdir() if _plain(path.name) and path.is_dir())
        found: list[StoredObject] = []
        for top in tops:
            found += [
                StoredObject(self._key(top / name), (top / name).stat().st_size)
                for name in LAYOUT_FILES
                if (top / name).is_file()
            ]
            for layout_folder in LAYOUT_FOLDERS:
                for folder, subfolders, names in os.walk(top / layout_folder):
                    subfolders[:] = [name for name in subfolders if _plain(name)]
                    base = Path(folder)
                    for name in names:
                        if _plain(name):
                            found.append(
                                StoredObject(self._key(base / name), (base / name).stat().st_size)
                            )
        return sorted(found, key=lambda stored: stored.key)

    def _key(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    async def read(self, key: str) -> AsyncIterator[bytes]:
        with (self.root / key).open("rb") as source:
            while chunk := await asyncio.to_thread(source.read, _READ_CHUNK_BYTES):
                yield chunk

    def _where(self, key: str) -> str:
        return str(self.root / key)


def _fsync_directory(path: Path) -> None:
    """Make a folder's entries (a new name, a rename) durable, as fsync does for data."""
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


# --- a bucket -------------------------------------------------------------------------------


class BucketStore:
    """A bucket (and key prefix) of an S3-compatible store, through obstore."""

    def __init__(
        self,
        destination: Destination,
        store: S3Store,
        *,
        connection: S3Connection,
        spool_dir: Path,
    ) -> None:
        self.destination = destination
        self.spool_dir = spool_dir
        #: Where the store is and who signs: a file download's parts (boto3) reach the same
        #: bucket with it (``crawlfleet.crawler.files.bucket_parts``).
        self.connection = connection
        self._store = store

    def __repr__(self) -> str:
        return f"BucketStore({self.destination.url!r}, endpoint={self.connection.where!r})"

    @classmethod
    def from_spec(
        cls,
        destination: Destination,
        s3: S3Spec | None,
        config: OutputConfig,
        *,
        environ: Mapping[str, str],
    ) -> BucketStore:
        """The client for ``destination``: the spec's endpoint, region and addressing, the
        environment's credentials (the standard AWS variables; else ``AWS_PROFILE``'s keys
        in the shared credentials file, as the AWS CLI reads them)."""
        from obstore.store import S3Store

        connection = S3Connection.resolve(s3, config, environ=environ)
        settings: S3Config = {
            "region": connection.region,
            "virtual_hosted_style_request": not connection.path_style,
        }
        if connection.endpoint:
            settings["endpoint"] = connection.endpoint
        if connection.access_key_id and connection.secret_access_key:
            settings["access_key_id"] = connection.access_key_id
            settings["secret_access_key"] = connection.secret_access_key
            if connection.session_token:
                settings["session_token"] = connection.session_token
        store = S3Store(
            destination.bucket,
            prefix=destination.prefix.rstrip("/") or None,
            config=settings,
            client_options={
                "allow_http": connection.plain_http,
                "connect_timeout": timedelta(seconds=connection.connect_timeout_seconds),
                "timeout": timedelta(seconds=connection.request_timeout_seconds),
            },
            retry_config={"max_retries": _MAX_RETRIES, "retry_timeout": _RETRY_TIMEOUT},
        )
        spool = config.spool_dir or Path(_temporary_folder(environ))
        return cls(destination, store, connection=connection, spool_dir=spool / "crawlfleet-spool")

    async def check(self) -> None:
        import obstore

        key = f"{_WRITE_TEST}/{secrets.token_hex(8)}"
        try:
            await obstore.put_async(self._store, key, b"crawlfleet write test\n")
        except Exception as exc:
            raise OutputError(f"output destination {self._explain(exc)}") from exc
        # Allowed to write but not to delete: the probe stays, harmless (never listed).
        with contextlib.suppress(Exception):
            await obstore.delete_async(self._store, key)
        try:
            self.spool_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(
                f"output destination {self.destination.url}: the spool folder {self.spool_dir}"
                f" (CRAWLFLEET_SPOOL_DIR) cannot be made: {exc.strerror or exc}"
            ) from exc

    async def commit(self, spooled: Path, key: str) -> None:
        import obstore
        from obstore.exceptions import AlreadyExistsError

        try:
            if os.stat(spooled).st_size <= MULTIPART_THRESHOLD_BYTES:
                await obstore.put_async(self._store, key, spooled, mode="create")
            else:
                await obstore.put_async(
                    self._store,
                    key,
                    spooled,
                    use_multipart=True,
                    chunk_size=MULTIPART_THRESHOLD_BYTES,
                    max_concurrency=_MULTIPART_CONCURRENCY,
                )
        except AlreadyExistsError as exc:
            # An earlier attempt whose answer was lost may have landed: the same bytes are
            # success, other bytes a name collision (which unique names rule out).
            if not await self._holds(key, spooled):
                raise OutputError(
                    f"{self.destination.url}{key} exists with other content: output files are"
                    " never replaced"
                ) from exc
        except FileNotFoundError as exc:  # the spooled file itself (obstore opens it)
            if exc.filename is not None or "NoSuch" not in str(exc):
                raise OutputError(f"{spooled}: the spooled file is gone") from exc
            raise OutputUnavailable(f"output destination {self._explain(exc)}") from exc
        except Exception as exc:
            raise OutputUnavailable(f"output destination {self._explain(exc)}") from exc
        os.unlink(spooled)

    async def _holds(self, key: str, spooled: Path) -> bool:
        import obstore

        stored = await obstore.get_async(self._store, key)
        remote = hashlib.sha256(bytes(await stored.bytes_async())).digest()
        local = await asyncio.to_thread(_file_sha256, spooled)
        return remote == local

    async def put(self, key: str, data: bytes) -> None:
        import obstore

        try:
            await obstore.put_async(self._store, key, data)
        except Exception as exc:
            raise OutputUnavailable(f"output destination {self._explain(exc)}") from exc

    async def files(self) -> list[StoredObject]:
        import obstore

        found = []
        try:
            async for batch in obstore.list(self._store, chunk_size=1000):
                for meta in batch:
                    key = str(meta["path"])
                    if _in_layout(key):
                        found.append(StoredObject(key, int(meta["size"])))
        except Exception as exc:
            raise OutputError(f"output destination {self._explain(exc)}") from exc
        return sorted(found, key=lambda stored: stored.key)

    async def read(self, key: str) -> AsyncIterator[bytes]:
        import obstore

        try:
            result = await obstore.get_async(self._store, key)
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise OutputError(f"output destination {self._explain(exc)}") from exc
        async for chunk in result.stream(min_chunk_size=_READ_CHUNK_BYTES):
            yield bytes(chunk)

    def _explain(self, error: BaseException) -> str:
        """``s3://bucket/prefix/ at <endpoint>: <what went wrong> (<code>)``: one sentence."""
        from obstore.exceptions import GenericError

        unreachable = isinstance(error, GenericError) and "error sending request" in str(error)
        return describe_s3_error(
            f"{self.destination.url} at {self.connection.where}", error, unreachable=unreachable
        )


@dataclass(frozen=True, slots=True)
class S3Connection:
    """Where a bucket's store is and who signs for it, resolved once from the spec and the
    environment; the output store (obstore) and a download's parts (boto3) both build their
    client from it, so they reach the same place as the same user. The credentials stay out of
    ``repr`` (and so out of logs and messages)."""

    endpoint: str | None
    region: str
    path_style: bool
    connect_timeout_seconds: float
    request_timeout_seconds: float
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def resolve(
        cls, s3: S3Spec | None, config: OutputConfig, *, environ: Mapping[str, str]
    ) -> S3Connection:
        """The spec's endpoint, region and addressing; the environment's credentials (the
        standard AWS variables; else ``AWS_PROFILE``'s keys in the shared credentials file, as
        the AWS CLI reads them). No key pair: the client's own chain (instance roles, web
        identity) decides."""
        endpoint = (s3.endpoint if s3 else None) or environ.get("AWS_ENDPOINT_URL")
        region = (
            (s3.region if s3 else None)
            or environ.get("AWS_REGION")
            or environ.get("AWS_DEFAULT_REGION")
            or _shared_setting(environ, "config", "region")
            or _DEFAULT_REGION
        )
        key_id = environ.get("AWS_ACCESS_KEY_ID")
        secret = environ.get("AWS_SECRET_ACCESS_KEY")
        token = environ.get("AWS_SESSION_TOKEN")
        if not key_id:
            key_id = _shared_setting(environ, "credentials", "aws_access_key_id")
            secret = _shared_setting(environ, "credentials", "aws_secret_access_key")
            token = _shared_setting(environ, "credentials", "aws_session_token")
        signs = bool(key_id and secret)
        return cls(
            endpoint=endpoint or None,
            region=region,
            path_style=s3.path_style if s3 else True,
            connect_timeout_seconds=config.connect_timeout_seconds,
            request_timeout_seconds=config.request_timeout_seconds,
            access_key_id=key_id if signs else None,
            secret_access_key=secret if signs else None,
            session_token=(token or None) if signs else None,
        )

    @property
    def where(self) -> str:
        """The store as a message names it: its endpoint, or AWS S3 of the region."""
        return self.endpoint or f"AWS S3 ({self.region})"

    @property
    def plain_http(self) -> bool:
        """The endpoint is http:// (a trusted network, or the test server)."""
        return bool(self.endpoint and self.endpoint.startswith("http://"))


def describe_s3_error(where: str, error: BaseException, *, unreachable: bool) -> str:
    """``<where>: <what went wrong> (<code>)``: one sentence, whichever client raised ``error``
    (S3's error codes are in both obstore's and boto3's messages); ``unreachable`` is the
    client's own judgement that no answer came."""
    text = str(error)
    for code, meaning in _S3_CODES:
        if code in text:
            return f"{where}: {meaning} ({code})"
    if unreachable:
        return f"{where}: cannot connect to the store"
    if "169.254.169.254" in text or "credential" in text.lower():
        return (
            f"{where}: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or"
            " a profile in ~/.aws/credentials), or output.s3.secretRef in a cluster"
        )
    if isinstance(error, FileNotFoundError):
        return f"{where}: not found ({_first_line(text)})"
    return f"{where}: {_first_line(text)}"


def _in_layout(key: str) -> bool:
    """A key of the layout, here or under a run of a scheduled job (``runs/<run-id>/``)."""
    parts = key.split("/")
    if not all(_plain(part) for part in parts):
        return False
    if len(parts) > 2 and parts[0] == RUNS_FOLDER:
        parts = parts[2:]
    return "/".join(parts) in LAYOUT_FILES if len(parts) == 1 else parts[0] in LAYOUT_FOLDERS


def _plain(name: str) -> bool:
    """Not hidden (a spool's or an editor's file) and not empty."""
    return bool(name) and not name.startswith(".")


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _file_sha256(path: Path) -> bytes:
    with path.open("rb") as source:
        return hashlib.file_digest(source, "sha256").digest()


def _temporary_folder(environ: Mapping[str, str]) -> str:
    import tempfile

    return environ.get("TMPDIR") or tempfile.gettempdir()


def _shared_setting(environ: Mapping[str, str], kind: str, name: str) -> str | None:
    """``name`` of the AWS profile (``AWS_PROFILE``, else default) in ~/.aws/config or
    ~/.aws/credentials, as the AWS CLI reads them; None when there is no such file or key."""
    profile = environ.get("AWS_PROFILE") or "default"
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    if kind == "credentials":
        path = environ.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials"
        section = profile
    else:
        path = environ.get("AWS_CONFIG_FILE") or home / ".aws" / "config"
        section = profile if profile == "default" else f"profile {profile}"
    parser = configparser.RawConfigParser()
    try:
        parser.read(Path(path).expanduser(), encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    return parser.get(section, name, fallback=None) or None
