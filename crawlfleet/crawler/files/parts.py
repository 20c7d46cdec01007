"""Parts: a file download's durable, resumable bytes, and where a finished one is stored.

A download writes into a *part* that outlives the process: a later attempt (another process,
another pod) opens the part of the same URL and continues from the bytes it holds, with the
validators of the response they came from (:class:`PartState`, the part's JSON sidecar). When
the file is complete and verified, :meth:`PartWriter.finish` moves it to its content address
``files/sha256/<ab>/<sha256>``: identical bytes are stored once, whichever URL brought them.

Two kinds share one small Protocol (:class:`PartStore` opens a :class:`PartWriter`):

* :class:`LocalParts` (a folder destination): ``files/.parts/<key>.part`` holds the data and
  ``files/.parts/<key>.json`` the state, under the destination's root. A checkpoint writes the
  buffered bytes, fsyncs the data, then replaces the sidecar (written to a temporary name,
  fsynced, renamed, its folder fsynced), so the sidecar never claims a byte the disk does not
  hold. Bytes written after the last checkpoint are not trusted: opening a part cuts the data
  back to the sidecar's offset. ``.parts`` starts with a dot, so the output's listing never
  shows it (``crawlfleet.output.stores``). An open part holds an exclusive ``flock`` on its data:
  a second writer (a worker that got the lease while the first, cut off from Redis, still
  downloads) is refused with :class:`~crawlfleet.errors.OutputUnavailable` instead of
  interleaving its bytes with the first's.
* ``crawlfleet.crawler.files.bucket_parts.BucketParts`` (an S3 destination): an S3 multipart
  upload, imported by :func:`open_parts` only when a job writes to a bucket (its own module
  describes it).

Memory: a local part holds at most two buffers of unwritten bytes, each less than
:data:`WRITE_BEHIND_BYTES` and the chunk that filled it: one being written in a thread while the
next fills (so the download reads on while the disk takes the last ones); nothing holds a
whole part.
Every ``OSError`` of a local part is an :class:`~crawlfleet.errors.OutputUnavailable` naming
the path, so that a full disk is never taken for a network failure of the download.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import hashlib
import importlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TypeVar, runtime_checkable

from crawlfleet.errors import OutputUnavailable
from crawlfleet.output.stores import BucketStore, FolderStore, OutputStore, fsync_directory
from crawlfleet.urls import try_canonicalize

if TYPE_CHECKING:
    from crawlfleet.crawljob import CrawlJobSpec

__all__ = [
    "EARLY_WRITEBACK",
    "FILES_FOLDER",
    "PARTS_FOLDER",
    "WRITE_BEHIND_BYTES",
    "WRITE_BUFFER_BYTES",
    "LocalPart",
    "LocalParts",
    "PartState",
    "PartStore",
    "PartSyncsBehind",
    "PartWriter",
    "ReadBack",
    "StoredFile",
    "content_key",
    "open_parts",
    "part_key",
]

#: The layout folder of stored files, under the destination.
FILES_FOLDER: Final = "files"
#: Where parts live, under the destination: a dot name, so never listed as output.
PARTS_FOLDER: Final = f"{FILES_FOLDER}/.parts"
#: Local parts start writing their bytes back as each buffer is written (see ``_write_all``),
#: where the platform can (Linux); elsewhere a checkpoint's fsync does it all.
EARLY_WRITEBACK: Final = hasattr(os, "posix_fadvise")
#: Unwritten bytes a part buffers before it writes them (a bucket part, into its part file).
WRITE_BUFFER_BYTES: Final = 1024 * 1024
#: Unwritten bytes a local part buffers before it writes them, in a thread and behind (the next
#: buffer fills meanwhile): few thread hops for the event loop, and a bound on what a download
#: holds in memory (two buffers). 2 MiB: a 256 MiB download ran at about 474 MiB/s with 1 MiB,
#: 515 with 2 and 513 with 4 (docs/benchmarks.md, "Files").
WRITE_BEHIND_BYTES: Final = 2 * WRITE_BUFFER_BYTES
_READ_BYTES: Final = 1024 * 1024
_CONTENT_FOLDER: Final = f"{FILES_FOLDER}/sha256"
_BUCKET_PARTS_MODULE: Final = "crawlfleet.crawler.files.bucket_parts"
#: Opens of a part's path before giving up, when another writer keeps finishing it under us.
_LOCK_TRIES: Final = 3

_T = TypeVar("_T")


@dataclass(slots=True)
class PartState:
    """What a part knows of its file; the JSON sidecar a later attempt reads to resume.

    ``offset`` counts the bytes durable in the part; ``total`` is the declared full length
    (``Content-Length`` of a 200, the total of a 206's ``Content-Range``), None when the server
    did not say; ``etag`` and ``last_modified`` are the validators of the response the bytes
    came from (``If-Range`` sends one); ``restarts`` counts the times the part went back to
    zero. ``upload_id`` and ``parts`` (``{"number", "etag", "size"}`` each) are a multipart
    upload's, kept by a bucket's parts only.
    """

    url: str
    offset: int = 0
    total: int | None = None
    etag: str | None = None
    last_modified: str | None = None
    content_type: str | None = None
    restarts: int = 0
    upload_id: str | None = None
    parts: list[dict[str, object]] = field(default_factory=list)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> PartState:
        """The state a sidecar holds; ``ValueError`` when it is not one (a torn or foreign file:
        the caller starts the part afresh). Unknown keys are ignored (a newer writer's)."""
        try:
            loaded = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"not a part's state: {error}") from None
        if not isinstance(loaded, dict) or not isinstance(loaded.get("url"), str):
            raise ValueError("not a part's state: no url")
        known = {item.name for item in fields(cls)}
        state = cls(**{name: value for name, value in loaded.items() if name in known})
        _check_types(state)
        return state


def _check_types(state: PartState) -> None:
    """``ValueError`` unless every field has its type (the sidecar is input, not trusted)."""

    def optional(value: object, kind: type) -> bool:
        return value is None or (isinstance(value, kind) and not isinstance(value, bool))

    if not (
        isinstance(state.offset, int)
        and not isinstance(state.offset, bool)
        and state.offset >= 0
        and optional(state.total, int)
        and optional(state.etag, str)
        and optional(state.last_modified, str)
        and optional(state.content_type, str)
        and isinstance(state.restarts, int)
        and optional(state.upload_id, str)
        and isinstance(state.parts, list)
        and all(isinstance(part, dict) for part in state.parts)
    ):
        raise ValueError("not a part's state: a field has the wrong type")


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A finished file: its content key, its size, and whether those bytes were stored already
    (a duplicate: the part was dropped and ``key`` is the copy stored before)."""

    key: str
    size: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class ReadBack:
    """A complete part read back from its store (a download resumed across processes on S3,
    which never saw its first bytes): the SHA-256 of all its bytes, and its first
    ``sniff.HEAD_BYTES`` (fewer when the file is shorter), for the type check."""

    sha256: str
    head: bytes


class PartWriter(Protocol):
    """One open part. One writer per part at a time (the file's lease guarantees it)."""

    state: PartState

    async def write(self, chunk: bytes) -> None:
        """Append at ``state.offset`` + what is buffered; not yet durable."""
        ...

    async def checkpoint(self) -> None:
        """Make everything written durable, then move ``state.offset`` and rewrite the sidecar.
        May be called at any byte count (on a stop, before a retry)."""
        ...

    async def restart(self) -> None:
        """Drop every byte: offset 0, ``restarts`` + 1, validators, total and type cleared."""
        ...

    def durable_bytes(self) -> AsyncIterator[bytes]:
        """The bytes already durable, to hash on resume; ``NotImplementedError`` where they
        cannot be read back cheaply (a bucket: its file is hashed after it is finished)."""
        ...

    async def finish(self, sha256: str) -> StoredFile:
        """Make all bytes durable and move them to ``content_key(sha256)``, unless that
        address holds them already (then the part is dropped: a duplicate)."""
        ...

    async def discard(self) -> None:
        """Remove the part and its sidecar (a permanent failure)."""
        ...

    async def close(self) -> None:
        """Release handles; the part stays for a resume (unwritten bytes are dropped)."""
        ...


@runtime_checkable
class PartSyncsBehind(Protocol):
    """A part that can make a checkpoint durable while the download goes on (a local part).

    ``checkpoint_behind()`` writes the buffered bytes, then fsyncs them and rewrites the sidecar
    in the background and returns: the next bytes are written meanwhile. The sidecar's
    ``offset`` moves only once that fsync returned, and only to the bytes written before it; at
    most one such fsync is in flight (the next ``checkpoint_behind`` waits for the last), and
    ``checkpoint``, ``restart``, ``finish``, ``discard`` and ``close`` wait for it first, so a
    stop still ends with a durable checkpoint. A background failure is raised by the part's
    next call (``write`` included).
    """

    async def checkpoint_behind(self) -> None: ...


class PartStore(Protocol):
    """Where the parts of a job's downloads live."""

    async def open(self, url: str) -> PartWriter:
        """The part for ``url``: an existing one (to resume) if any, else a new empty one."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds (a bucket's threads and client); its parts stay.
        The worker calls it when it closes its output; no part is opened afterwards."""
        ...


def part_key(url: str) -> str:
    """The part's name: the sha256 (hex) of the canonical URL, so every worker finds it."""
    return hashlib.sha256((try_canonicalize(url) or url).encode()).hexdigest()


def content_key(sha256: str) -> str:
    """The content address of a file's bytes: ``files/sha256/<first two hex digits>/<sha256>``."""
    return f"{_CONTENT_FOLDER}/{sha256[:2]}/{sha256}"


def open_parts(store: OutputStore, spec: CrawlJobSpec) -> PartStore:
    """The parts of a job writing to ``store``: :class:`LocalParts` in a folder, and in a bucket
    ``crawlfleet.crawler.files.bucket_parts.BucketParts.from_spec(store, spec)``, imported only
    then (it loads boto3, which a folder's worker never needs). ``TypeError`` for any other."""
    if isinstance(store, FolderStore):
        return LocalParts(store.root)
    if isinstance(store, BucketStore):
        bucket_parts = importlib.import_module(_BUCKET_PARTS_MODULE)
        parts: PartStore = bucket_parts.BucketParts.from_spec(store, spec)
        return parts
    raise TypeError(f"no parts for {store!r}")


class LocalParts:
    """Parts in a folder destination: ``<root>/files/.parts/<key>.part`` and ``.json``."""

    def __init__(self, root: Path, *, early_writeback: bool = EARLY_WRITEBACK) -> None:
        self.root = root
        self.folder = root / PARTS_FOLDER
        self.early_writeback = early_writeback and EARLY_WRITEBACK

    def __repr__(self) -> str:
        return f"LocalParts({str(self.root)!r})"

    async def aclose(self) -> None:
        """Nothing to release: each part closes its own descriptor."""

    async def open(self, url: str) -> LocalPart:
        key = part_key(url)
        data_path = self.folder / f"{key}.part"
        state_path = self.folder / f"{key}.json"
        state, descriptor = await _io(data_path, lambda: self._open(url, data_path, state_path))
        return LocalPart(
            self.root,
            state,
            data_path,
            state_path,
            descriptor,
            early_writeback=self.early_writeback,
        )

    def _open(self, url: str, data_path: Path, state_path: Path) -> tuple[PartState, int]:
        _make_folders(self.folder, self.root)
        descriptor = _locked(data_path)
        try:
            state = _read_state(state_path, url)  # read under the lock: the writer's last word
            size = os.fstat(descriptor).st_size
            if size < state.offset:  # the data lost bytes the sidecar promised: start again
                state = PartState(url=url, restarts=state.restarts)
            if size != state.offset:  # bytes after the last checkpoint were never vouched for
                os.ftruncate(descriptor, state.offset)
                os.fsync(descriptor)
        except BaseException:
            os.close(descriptor)
            raise
        return state, descriptor


def _locked(data_path: Path) -> int:
    """The part's data file, opened (made if missing) and exclusively locked.

    The lock is taken on the file the path names *after* the lock is held: a writer that
    finished meanwhile renamed its data to a content key, and that file must never be opened
    as a part (it would be cut back to an empty sidecar's offset), so a moved file is let go
    and the path opened again.
    """
    for _ in range(_LOCK_TRIES):
        descriptor = os.open(data_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise OutputUnavailable(f"{data_path}: another download is writing this part") from None
        except BaseException:
            os.close(descriptor)
            raise
        opened = os.fstat(descriptor)
        try:
            named = os.stat(data_path)
        except FileNotFoundError:
            named = None
        if named is not None and (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino):
            return descriptor
        os.close(descriptor)
    raise OutputUnavailable(f"{data_path}: the part keeps moving away (finished elsewhere)")


def _read_state(state_path: Path, url: str) -> PartState:
    """The sidecar's state for ``url``; a fresh one when there is none, or it is unreadable or
    another URL's (a torn write or a foreign file must not decide what is resumed)."""
    try:
        state = PartState.from_json(state_path.read_bytes())
    except FileNotFoundError:
        return PartState(url=url)
    except ValueError:
        return PartState(url=url)
    return state if state.url == url else PartState(url=url)


class LocalPart:
    """One open local part (see :class:`LocalParts`); not safe for concurrent use."""

    def __init__(
        self,
        root: Path,
        state: PartState,
        data_path: Path,
        state_path: Path,
        descriptor: int,
        *,
        early_writeback: bool = EARLY_WRITEBACK,
    ) -> None:
        self.state = state
        self._early_writeback = early_writeback
        self._root = root
        self._data_path = data_path
        self._state_path = state_path
        self._descriptor: int | None = descriptor
        self._written = state.offset  # bytes in the data file or on their way, durable or not
        #: Chunks not yet written (kept as they came: never copied into one buffer).
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._writing: asyncio.Task[None] | None = None  # the last buffer, written behind
        self._syncing: asyncio.Task[None] | None = None  # the checkpoint made durable behind

    def __repr__(self) -> str:
        return f"LocalPart({str(self._data_path)!r}, offset={self.state.offset})"

    @property
    def path(self) -> Path:
        """The data file (``files/.parts/<key>.part``)."""
        return self._data_path

    async def write(self, chunk: bytes) -> None:
        self._buffer.append(chunk)
        self._buffered += len(chunk)
        if self._buffered < WRITE_BEHIND_BYTES:
            return
        if self._syncing is not None and self._syncing.done():
            await self._settle()  # its failure, if any, ends the download now
        await self._drain()  # at most one buffer on its way to the disk
        self._writing = asyncio.ensure_future(self._write_buffer())

    def _write_buffer(self) -> Awaitable[None]:
        """Write the buffered chunks at the end of the data, in a thread (taken now: what is
        written next goes after them)."""
        descriptor, position = self._open_descriptor(), self._written
        chunks, self._buffer, self._buffered = self._buffer, [], 0
        self._written += sum(map(len, chunks))
        early = self._early_writeback
        return _io(self._data_path, lambda: _write_all(descriptor, chunks, position, early))

    async def _drain(self) -> None:
        """Wait for the buffer being written behind, if any; raise its failure. Shielded: a
        caller cancelled meanwhile leaves it running, and still tracked (``close`` waits for
        it before the descriptor goes)."""
        writing = self._writing
        if writing is not None:
            await asyncio.shield(writing)
            self._writing = None

    async def _flush(self) -> None:
        """Every byte given to :meth:`write` is in the data file (not yet durable) on return."""
        await self._drain()
        if self._buffer:
            await self._write_buffer()

    async def checkpoint(self) -> None:
        await self._settle()
        await self._flush()
        await self._sync(self._open_descriptor(), self._written)

    async def checkpoint_behind(self) -> None:
        """See :class:`PartSyncsBehind`: the buffered bytes are written now, made durable (and
        the sidecar moved to them) in the background while the next ones arrive."""
        await self._settle()
        await self._flush()
        self._syncing = asyncio.create_task(self._sync(self._open_descriptor(), self._written))

    async def _sync(self, descriptor: int, written: int) -> None:
        """fsync the data, then move the sidecar's offset to ``written`` (bytes written before
        the fsync began: later writes are not vouched for until a later checkpoint)."""
        await _io(self._data_path, lambda: os.fsync(descriptor))
        self.state.offset = written
        await self._save_state()

    async def _settle(self) -> None:
        """Wait for the checkpoint made durable behind, if any; raise its failure."""
        syncing, self._syncing = self._syncing, None
        if syncing is not None:
            await syncing

    async def _save_state(self) -> None:
        data = self.state.to_json()
        await _io(self._state_path, lambda: _replace_durably(self._state_path, data))

    async def restart(self) -> None:
        await self._settle()  # its offset must never land after the truncation
        await self._drain()  # nor a write behind
        self._buffer, self._buffered = [], 0
        descriptor = self._open_descriptor()

        def truncate() -> None:
            os.ftruncate(descriptor, 0)
            os.fsync(descriptor)

        await _io(self._data_path, truncate)
        self._written = 0
        state = self.state
        state.offset, state.restarts = 0, state.restarts + 1
        state.total = state.etag = state.last_modified = state.content_type = None
        await self._save_state()

    async def durable_bytes(self) -> AsyncIterator[bytes]:
        await self._settle()
        remaining = self.state.offset
        with await _io(self._data_path, lambda: self._data_path.open("rb")) as source:
            while remaining > 0:
                size = min(_READ_BYTES, remaining)
                chunk = await _io(self._data_path, functools.partial(source.read, size))
                if not chunk:
                    raise OutputUnavailable(
                        f"{self._data_path}: {remaining} durable bytes are missing"
                    )
                remaining -= len(chunk)
                yield chunk

    async def finish(self, sha256: str) -> StoredFile:
        await self._settle()
        await self._flush()
        descriptor = self._open_descriptor()
        await _io(self._data_path, lambda: os.fsync(descriptor))
        self.state.offset = self._written
        await self.close()
        key = content_key(sha256)
        target = self._root / key
        duplicate = await _io(target, lambda: self._move(target))
        return StoredFile(key=key, size=self.state.offset, duplicate=duplicate)

    def _move(self, target: Path) -> bool:
        """Rename the data to ``target`` unless it exists (True: a duplicate, the data is
        dropped); then the sidecar goes. Both folders are fsynced."""
        duplicate = target.exists()
        if duplicate:
            self._data_path.unlink()
        else:
            _make_folders(target.parent, self._root)
            os.rename(self._data_path, target)
            fsync_directory(target.parent)
        self._state_path.unlink(missing_ok=True)
        fsync_directory(self._data_path.parent)
        return duplicate

    async def discard(self) -> None:
        await self.close()

        def remove() -> None:
            self._data_path.unlink(missing_ok=True)
            self._state_path.unlink(missing_ok=True)
            fsync_directory(self._data_path.parent)

        await _io(self._data_path, remove)

    async def close(self) -> None:
        self._buffer, self._buffered = [], 0
        # Never close the descriptor under a running write or fsync; if one failed, the
        # sidecar kept its last offset, and a resume starts there.
        with contextlib.suppress(OutputUnavailable):
            await self._drain()
        with contextlib.suppress(OutputUnavailable):
            await self._settle()
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is not None:
            os.close(descriptor)

    def _open_descriptor(self) -> int:
        if self._descriptor is None:
            raise ValueError(f"{self!r} is closed")
        return self._descriptor


async def _io(path: Path, work: Callable[[], _T]) -> _T:
    """``work`` in a thread; its ``OSError`` as :class:`OutputUnavailable` naming ``path``."""
    try:
        return await asyncio.to_thread(work)
    except OSError as error:
        raise OutputUnavailable(f"{path}: {error.strerror or error}") from error


def _write_all(
    descriptor: int, pieces: Sequence[bytes], position: int, early_writeback: bool
) -> None:
    """Write ``pieces`` one after another at ``position``; with ``early_writeback``, ask the
    kernel to write them back now: ``POSIX_FADV_DONTNEED`` on pages just written starts their
    writeback at once (and lets them leave the page cache once clean), so a checkpoint's fsync
    waits for the last buffer, not for the whole part, and a download of gigabytes does not push
    other files out of the cache (docs/benchmarks.md, "Local parts")."""
    start = position
    for data in pieces:
        view = memoryview(data)
        while view:
            written = os.pwrite(descriptor, view, position)
            view, position = view[written:], position + written
    if early_writeback:
        os.posix_fadvise(descriptor, start, position - start, os.POSIX_FADV_DONTNEED)


def _replace_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old or the new bytes, never a torn
    file: a temporary name, fsynced, renamed over it, the folder fsynced."""
    temporary = path.with_name(f"{path.name}.tmp")
    with temporary.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    fsync_directory(path.parent)


def _make_folders(folder: Path, root: Path) -> None:
    """Make ``folder`` and its missing parents up to ``root``, each new entry fsynced."""
    if folder.is_dir():
        return
    chain = [path for path in (folder, *folder.parents) if path == root or root in path.parents]
    for path in reversed(chain):
        if not path.is_dir():
            path.mkdir(exist_ok=True)
            fsync_directory(path.parent)
