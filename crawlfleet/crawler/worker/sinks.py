"""Crawl output: one JSONL line per fetch and optional WARC archives, durable before acked.

Each worker writes only its own files (names carry its id and a random incarnation), so workers
never share a file and need no lock across processes; the job's output is the union of every
worker's files, in the same layout in every destination (docs/output.md):

* ``pages/<worker>-<incarnation>-<n>.jsonl``: one :class:`PageRecord` per fetch attempt that
  reached the output stage (formats ``jsonl`` and ``warc``). Output is *at least once*: a page
  whose lease was lost after it was written is fetched again by another worker, so the same
  ``url`` may appear twice, told apart by ``fetch_id`` (unique per fetch). Readers keep one line
  per ``url`` (the latest ``fetched_at``): that is what "idempotent by URL" means (DESIGN §4).
* ``files/<worker>-<incarnation>-<n>.jsonl``: one :class:`FileRecord` per file download that
  was stored (``spec.files``, DESIGN §11), beside the same generation's page file, as items
  are. A file is not a page: it gets no page record and nothing in a WARC (its bytes are in
  ``files/sha256/<ab>/<sha256>``, finished and durable before its record is written).
* ``warc/<worker>-<incarnation>-<n>.warc.gz`` (format ``warc``): a ``warcinfo`` record at the
  head of each file, then a ``request`` + ``response`` pair per fetched page
  (``WARC-Concurrent-To`` links them), one gzip member per record so any file can be read from
  any record boundary. A revisit that found the page as it was (a 304, or a 200 with the same
  payload digest: ``crawler/worker/revisits.py``) gets a ``revisit`` record instead of the
  response, of profile ``server-not-modified`` or ``identical-payload-digest``, carrying
  ``WARC-Refers-To-Target-URI`` and, when they are known, ``WARC-Refers-To-Date`` and the
  original ``WARC-Payload-Digest``: what replay tools (pywb, wabac.js) resolve it by.

**Durable before ack** (DESIGN §8). Pages are written into the worker's current *generation*:
one page file and, for WARC, one archive with the same number, spooled to local disk as the
records come (one write per flushed batch, no fsync). A generation is sealed when a file passes
``maxFileBytes``, when it is ``maxFileAgeSeconds`` old, when it holds
``max_records_per_file`` records, when the worker finds nothing left to claim, or when the
worker drains; sealing hands its files to the store (fsync and rename, or an upload) in the
background, and only when every file of the generation is durable does the sink call
``on_durable``, which is where the worker acks the generation's leases, all in one call. Until
then the worker extends those leases with its in-flight ones, so a kill at any moment costs a
re-crawl, never a record the frontier counts as done.

A store that fails keeps its file: the sink retries with exponential backoff (up to
``retry_max_seconds`` apart) for as long as the worker lives, never drops a record and never
acks one early. Meanwhile :attr:`OutputSink.blocked` is true, as it is while
``max_pending_files`` generations wait to become durable, and the worker claims nothing
(backpressure): the local buffer is bounded by what was in flight when the destination failed.

**A spool that cannot take a batch** (a full disk, a quota, an I/O error): every batch goes
into each file of the generation (pages, items, WARC) whole or not at all. The sink writes the
batch's bytes unbuffered, file by file, and on an error cuts every file back to its size before
the batch and raises :class:`~crawlfleet.errors.OutputWriteError` (the errno's name and the
file): no torn line, no half record, and the records counted only once written. The caller
keeps the batch and writes it again once :attr:`OutputSink.write_backoff_seconds` is 0 (the
same backoff as the store's retries; an earlier write is refused without touching the disk).
Meanwhile :attr:`OutputSink.blocked` is true and :attr:`OutputSink.blocked_reason` says why
(``ENOSPC writing /out/.partial/w-1a2b3c-00004.jsonl (No space left on device)``). Sealing never
raises: a generation whose cut-back failed stays open (and the sink blocked) until a cut-back
succeeds; a sealed one retries until it is durable.

Format ``none`` writes no file at all: :meth:`OutputSink.write` returns None and the worker acks
at once. Dead letters are not the workers' files: they live in the frontier, and one
``dead-letters.jsonl`` is written from there at completion (``crawlfleet.output.manifest``),
which an append-less object store could not do with a file per worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import hashlib
import http
import io
import json
import logging
import os
import random
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal
from urllib.parse import urlsplit

from crawlfleet.errors import OutputWriteError

if TYPE_CHECKING:  # warcio is imported on the first WARC record, not by every worker
    from warcio.recordloader import ArcWarcRecord
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    from crawlfleet.crawler.harvest.extract import Item
    from crawlfleet.crawler.worker.metrics import WorkerMetrics
    from crawlfleet.crawler.worker.revisits import WarcRevisitRef
    from crawlfleet.crawljob import OutputSpec
    from crawlfleet.output.stores import OutputStore

__all__ = [
    "DurableFile",
    "FileRecord",
    "OutputFormat",
    "OutputSink",
    "PageOutput",
    "PageRecord",
    "safe_file_token",
]

log = logging.getLogger(__name__)

OutputFormat = Literal["jsonl", "warc", "none"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_MAX_TOKEN_LENGTH: Final = 100
# Headers that describe the wire encoding of the body; the body we archive is decoded.
_WIRE_HEADERS: Final = frozenset({"content-encoding", "transfer-encoding", "content-length"})


def safe_file_token(worker: str) -> str:
    """``worker`` made safe for a file name: no separators, no leading dot, bounded length."""
    token = _UNSAFE.sub("_", worker).lstrip(".")[:_MAX_TOKEN_LENGTH]
    return token or "worker"


@dataclass(frozen=True, slots=True)
class PageRecord:
    """One fetch attempt as a JSONL line; the field names are the file format.

    ``status`` is None when no response arrived; ``failure_class`` is a
    :class:`~crawlfleet.crawler.fetching.failures.FailureClass` value or None on success; ``parent``
    is the page the URL was found on ("" for seeds); ``fetched_at`` is seconds since the epoch.
    """

    url: str
    final_url: str
    status: int | None
    depth: int
    parent: str
    fetched_at: float
    content_type: str | None
    length: int
    sha256: str | None
    title: str | None
    outlinks: int
    failure_class: str | None
    attempt: int
    worker: str
    fetch_id: str
    #: The page's HTML or visible text (``output.content``); None, and absent from the line,
    #: when content is not asked for or the page has none (not HTML, a failure).
    content: str | None = None
    #: The content was cut at ``output.maxContentBytes``.
    content_truncated: bool = False
    #: The ``<lastmod>`` of the sitemap entry that queued the URL (``scope.sitemaps``), as the
    #: site wrote it (a W3C datetime); None, and absent from the line, for every other page.
    lastmod: str | None = None
    #: What a visit of a URL with a recrawl rule found (``crawljob.recrawl.Change``: new,
    #: changed, unchanged, not_modified, gone); None, and absent from the line, for the rest.
    change: str | None = None

    def to_json(self) -> str:
        # Field by field: dataclasses.asdict deep-copies and was a visible cost per page.
        fields = {name: getattr(self, name) for name in _RECORD_FIELDS}
        if self.content is not None:
            fields["content"] = self.content
            fields["content_truncated"] = self.content_truncated
        if self.lastmod is not None:
            fields["lastmod"] = self.lastmod
        if self.change is not None:
            fields["change"] = self.change
        return _ENCODER.encode(fields)


# Written only when set: most records have none of them.
_OPTIONAL_FIELDS: Final = frozenset({"content", "content_truncated", "lastmod", "change"})
_RECORD_FIELDS = tuple(
    f.name for f in dataclasses.fields(PageRecord) if f.name not in _OPTIONAL_FIELDS
)
# One encoder for every line: json.dumps with options builds a new one per call.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One stored file download as a JSONL line of ``files/``; the field names are the format.

    ``stored`` is the content key the bytes are under (``files/sha256/<ab>/<sha256>``), which a
    duplicate shares with the first copy (``duplicate`` true: no new bytes were stored);
    ``resumed_from`` the bytes the part already held when the attempt that finished began (0:
    from scratch); ``restarts`` the restart reasons of that attempt (``crawler/files/resume.py``);
    ``rule`` the index of the ``files.rules`` entry that made the URL a file; ``parent`` the
    page the URL was found on ("" for a seed).
    """

    url: str
    final_url: str
    status: int | None
    size: int
    sha256: str
    content_type: str | None
    sniffed_type: str | None
    etag: str | None
    last_modified: str | None
    parent: str
    depth: int
    rule: int
    stored: str
    duplicate: bool
    resumed_from: int
    restarts: tuple[str, ...]
    attempt: int
    worker: str
    fetch_id: str
    fetched_at: float

    def to_json(self) -> str:
        fields: dict[str, object] = {name: getattr(self, name) for name in _FILE_FIELDS}
        fields["restarts"] = list(self.restarts)
        return _ENCODER.encode(fields)


_FILE_FIELDS: Final = tuple(f.name for f in dataclasses.fields(FileRecord))


@dataclass(frozen=True, slots=True)
class PageOutput:
    """A page for :meth:`OutputSink.write`: its record plus what a WARC archives.

    ``body`` is the decoded body as the crawler read it; without a body or a status the page
    gets no WARC records (there is nothing to archive), only its JSONL line. ``revisit`` makes
    its WARC records a ``request`` and a ``revisit`` (no payload) instead.
    """

    record: PageRecord
    request_headers: Mapping[str, str] | None = None
    response_headers: Mapping[str, str] | None = None
    body: bytes | None = None
    #: What ``spec.extract`` made of the page: one line each in the generation's items file.
    items: Sequence[Item] = ()
    revisit: WarcRevisitRef | None = None
    #: A stored file download: its line goes to the generation's ``files/`` stream and
    #: ``record`` (its lease's bookkeeping) to no page file, no WARC.
    file: FileRecord | None = None


@dataclass(frozen=True, slots=True)
class DurableFile:
    """A file the store has made durable: what the manifest lists for it."""

    key: str
    """Relative to the destination: ``pages/<name>.jsonl``, ``items/<name>.jsonl``,
    ``files/<name>.jsonl``."""
    size: int
    sha256: str
    records: int
    """Records in it: page records, items (an items file), file records (a files file), pages
    archived (a WARC file)."""

    def to_mapping(self) -> dict[str, str | int]:
        return {"path": self.key, "size": self.size, "sha256": self.sha256, "records": self.records}


#: Called with a generation's number and its files once all of them are durable; the worker
#: acks the generation's leases there. An exception makes the sink call it again later.
OnDurable = Callable[[int, Sequence[DurableFile]], Awaitable[None]]


class _Spool:
    """One file of a generation while it is written: local, unsynced, created exclusively.

    Unbuffered, so that what a failed batch left is exactly what the cut-back removes: a
    buffered file would keep the unwritten rest in its buffer and write it on the next flush
    or at close, after the cut.
    """

    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self.key = key
        self.file = path.open("xb", buffering=0)
        #: Bytes of the whole batches in the file: where a failed batch is cut back to.
        self.size = 0
        self.records = 0

    def append(self, data: bytes) -> None:
        """Write all of ``data`` after the whole batches (a write may take only a part)."""
        view = memoryview(data)
        try:
            while view:
                view = view[self.file.write(view) :]
        except OSError as exc:
            exc.filename = exc.filename or str(self.path)  # the file the error names
            raise

    def cut_back(self) -> None:
        """Drop whatever a failed batch left after the last whole one."""
        try:
            os.ftruncate(self.file.fileno(), self.size)
            self.file.seek(self.size)
        except OSError as exc:
            exc.filename = exc.filename or str(self.path)
            raise

    def discard(self) -> None:
        """Close and remove a file that holds no whole batch (it was opened for a failed one)."""
        self.file.close()
        self.path.unlink(missing_ok=True)

    def describe(self) -> DurableFile:
        """Size and SHA-256 of the closed file: once per file, off the event loop."""
        with self.path.open("rb") as source:
            digest = hashlib.file_digest(source, "sha256").hexdigest()
        return DurableFile(self.key, self.path.stat().st_size, digest, self.records)


@dataclass(slots=True)
class _Generation:
    """The files a worker writes together and that become durable together."""

    number: int
    opened_at: float
    pages: _Spool
    warc: _Spool | None = None
    #: Writes each batch's WARC records into ``warc_batch``; the sink appends those bytes.
    warc_writer: WARCWriter | None = None
    warc_batch: io.BytesIO = dataclasses.field(default_factory=io.BytesIO)
    #: Opened with the generation's first item: a crawl without extraction writes none.
    items: _Spool | None = None
    #: Opened with the generation's first stored file download (``spec.files``).
    files: _Spool | None = None
    #: A failed batch could not be cut back: no write and no seal until a cut-back succeeds.
    torn: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def spools(self) -> list[_Spool]:
        spools = (self.pages, self.warc, self.items, self.files)
        return [spool for spool in spools if spool is not None]

    @property
    def written(self) -> list[_Spool]:
        """The files that hold something: a generation of file downloads only leaves its page
        file (and WARC) empty, and an empty file is not worth a commit nor a manifest line."""
        kept = [spool for spool in self.spools if spool.size > 0]
        return kept or [self.pages]

    @property
    def size(self) -> int:
        return max(spool.size for spool in self.spools)

    @property
    def records(self) -> int:
        """Pages and stored file downloads written in it (items ride with their pages)."""
        return self.pages.records + (self.files.records if self.files is not None else 0)

    def close(self) -> None:
        for spool in self.spools:
            spool.file.close()


def _errno_name(error: OSError) -> str:
    """``ENOSPC`` for an OSError of errno 28: the label and the reason's first word."""
    return errno.errorcode.get(error.errno or 0, "unknown")


def _backoff_seconds(attempt: int, max_seconds: float, rng: random.Random) -> float:
    """The sink's one backoff, for the store and the spool alike: 0.5 s doubling up to
    ``max_seconds``, ±30 % jitter (DESIGN §4's request layer does the same)."""
    delay: float = min(max_seconds, 0.5 * 2 ** min(attempt - 1, 16))
    return delay * rng.uniform(0.7, 1.3)


class OutputSink:
    """One worker's output: spooled, sealed by size and age, made durable, then acked.

    See the module docstring. All methods run on the worker's event loop; the blocking work
    (hashing, fsync, a rename) runs in a thread, uploads on obstore's own threads. Build it with
    :meth:`from_spec`: format, sizes and ages come from the CrawlJob model.
    """

    def __init__(
        self,
        store: OutputStore | None,
        worker: str,
        *,
        format: OutputFormat,
        max_file_bytes: int,
        max_file_age_seconds: float,
        max_records_per_file: int,
        max_pending_files: int,
        retry_max_seconds: float,
        on_durable: OnDurable,
        metrics: WorkerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.worker = worker
        self.format: OutputFormat = format if store is not None else "none"
        self.max_file_bytes = max_file_bytes
        self.max_file_age_seconds = max_file_age_seconds
        self.max_records_per_file = max_records_per_file
        self.max_pending_files = max_pending_files
        self.retry_max_seconds = retry_max_seconds
        self.on_durable = on_durable
        self.metrics = metrics
        self._clock = clock
        self._rng = rng or random.Random()
        # A random incarnation: a restarted worker (same id, locally) never meets its old names.
        self._stem = f"{safe_file_token(worker)}-{secrets.token_hex(3)}"
        self._next_number = 0
        self._current: _Generation | None = None
        self._sealed: dict[int, _Generation] = {}
        self._closed = False
        # The store's last attempt failed: why, and when it is tried next (the sink's clock).
        # Any attempt that succeeds clears it: the destination is back, whatever still waits.
        self._failing: tuple[str, float] | None = None
        # The spool failing: the last batch's error, failures in a row, the next try.
        self._write_error: OutputWriteError | None = None
        self._write_failures = 0
        self._write_retry_at = 0.0

    @classmethod
    def from_spec(
        cls,
        store: OutputStore | None,
        worker: str,
        output: OutputSpec,
        *,
        on_durable: OnDurable,
        max_records_per_file: int,
        max_pending_files: int,
        retry_max_seconds: float,
        metrics: WorkerMetrics | None = None,
    ) -> OutputSink:
        """The sink a CrawlJob's ``output`` section asks for; the counts are process knobs."""
        return cls(
            store,
            worker,
            format=output.format,
            max_file_bytes=output.max_file_bytes,
            max_file_age_seconds=output.max_file_age_seconds,
            max_records_per_file=max_records_per_file,
            max_pending_files=max_pending_files,
            retry_max_seconds=retry_max_seconds,
            on_durable=on_durable,
            metrics=metrics,
        )

    # -- state the worker steers by -------------------------------------------------------

    @property
    def blocked(self) -> bool:
        """Claim nothing: the spool or the destination is failing, or too many files wait."""
        return self.blocked_reason is not None

    @property
    def blocked_reason(self) -> str | None:
        """Why :attr:`blocked`, in a few words for a heartbeat or a log line; None: not."""
        if self._write_error is not None:  # set too while a torn generation waits
            return str(self._write_error)
        if self._failing is not None:
            return self._failing[0]
        if len(self._sealed) >= self.max_pending_files:
            return f"{len(self._sealed)} file generations wait for the destination"
        return None

    @property
    def retry_in_seconds(self) -> float | None:
        """Seconds until what :attr:`blocked_reason` names is tried again; None when nothing
        is retrying (files waiting for uploads in progress, or not blocked)."""
        if self._write_error is not None:
            return self.write_backoff_seconds
        if self._failing is not None:
            return max(0.0, self._failing[1] - self._clock())
        return None

    @property
    def write_backoff_seconds(self) -> float:
        """Seconds before :meth:`write` touches the spool again after a failed batch (0: now)."""
        if self._write_error is None:
            return 0.0
        return max(0.0, self._write_retry_at - self._clock())

    @property
    def pending_files(self) -> int:
        """Generations sealed and not yet durable (each is one or two files)."""
        return len(self._sealed)

    @property
    def open_records(self) -> int:
        """Records in the generation being written, pages and file downloads (0: nothing
        waits to be sealed)."""
        return self._current.records if self._current is not None else 0

    # -- writing --------------------------------------------------------------------------

    def write(self, pages: Sequence[PageOutput]) -> int | None:
        """Spool a batch of pages; returns the generation that holds them, whose leases must
        wait for :data:`OnDurable`. None: nothing to wait for (format none, or no pages).

        Raises :class:`~crawlfleet.errors.OutputWriteError` when the spool cannot take the
        batch (then no file holds any of it), or when an earlier batch failed and its backoff
        (:attr:`write_backoff_seconds`) has not passed: keep the batch and write it again.
        """
        if self._closed:
            raise ValueError("OutputSink is closed")
        if self.format == "none" or not pages:
            return None
        if self._write_error is not None and self.write_backoff_seconds > 0:
            raise self._write_error.with_traceback(None)
        try:
            generation = self._current
            if generation is not None and generation.torn:
                self._mend(generation)
            if generation is None:
                generation = self._open()
            self._append(generation, pages)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        if self._write_error is not None:
            log.info(
                "output spool writable again", extra={"layer": "output", "worker": self.worker}
            )
            self._write_error = None
            self._write_failures = 0
            self._report()
        if self._full(generation):
            self.rotate()
        return generation.number

    def tick(self) -> None:
        """Seal the current generation if it is full or old (the worker calls this often)."""
        generation = self._current
        if generation is not None and (
            self._full(generation)
            or self._clock() - generation.opened_at >= self.max_file_age_seconds
        ):
            self.rotate()

    def rotate(self, *, force: bool = False) -> bool:
        """Seal the current generation and make it durable in the background. Never raises.

        Refused (False) while :attr:`blocked` by pending files, unless ``force``: the current
        generation then keeps taking what is already in flight, and claiming stops. Refused
        too while a failed batch could not be cut back out of it (it stays open, retried at
        the next write or rotation).
        """
        generation = self._current
        if generation is None or (not force and len(self._sealed) >= self.max_pending_files):
            return False
        if generation.torn:
            try:
                self._mend(generation)
            except OSError as exc:
                self._count_write_error(exc)
                return False
        self._current = None
        try:
            generation.close()  # unbuffered: closing writes nothing, it frees descriptors
        except OSError as exc:
            # A deferred error of a network file system: the store's fsync is the check.
            self._warn("closing %s failed: %s", generation.pages.key, exc)
        self._sealed[generation.number] = generation
        generation.task = asyncio.create_task(self._make_durable(generation))
        self._report()
        return True

    async def drain(self, timeout_seconds: float) -> list[int]:
        """Seal what is open and wait up to ``timeout_seconds`` for everything to be durable
        and acked; returns the generations still waiting (their leases were not acked)."""
        self.rotate(force=True)
        tasks = [g.task for g in self._sealed.values() if g.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=max(0.0, timeout_seconds))
        waiting = sorted(self._sealed)
        if self._current is not None:  # torn, and could not be cut back even now
            waiting.append(self._current.number)
        return waiting

    async def aclose(self) -> None:
        """Stop every upload and remove the spooled files nobody acked. Idempotent.

        Their records' leases were never acked, so the frontier hands the pages out again: a
        spooled file left behind would only be a duplicate no reader counts.
        """
        self._closed = True
        unfinished = list(self._sealed.values())
        if self._current is not None:
            unfinished.append(self._current)
            self._current = None
        tasks = [g.task for g in unfinished if g.task is not None and not g.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for generation in unfinished:
            for spool in generation.spools:
                try:
                    spool.file.close()
                    spool.path.unlink(missing_ok=True)
                except OSError as exc:  # left in the store's spool folder, which no reader lists
                    self._warn("could not remove %s: %s", spool.path, exc)
        self._sealed.clear()
        self._failing = None
        self._report()

    # -- internals ------------------------------------------------------------------------

    def _open(self) -> _Generation:
        """A new generation's files; nothing is left behind when one of them cannot be made."""
        assert self.store is not None
        number = self._next_number
        name = f"{self._stem}-{number:05d}"
        spool_dir = self.store.spool_dir
        spool_dir.mkdir(parents=True, exist_ok=True)
        pages = _Spool(spool_dir / f"{name}.jsonl", f"pages/{name}.jsonl")
        generation = _Generation(number, self._clock(), pages)
        if self.format == "warc":
            try:
                generation.warc = _Spool(spool_dir / f"{name}.warc.gz", f"warc/{name}.warc.gz")
            except OSError:
                pages.discard()
                raise
        self._next_number += 1
        self._current = generation
        return generation

    def _append(self, generation: _Generation, pages: Sequence[PageOutput]) -> None:
        """Write one batch into every file of ``generation``, whole or not at all.

        Every file's bytes are encoded first, then appended file by file; an OSError cuts
        every file back to its last whole batch and propagates.
        """
        downloads = [page.file for page in pages if page.file is not None]
        if downloads:
            pages = [page for page in pages if page.file is None]
        parts = [(generation.pages, _page_lines(pages), len(pages))]
        items = _item_lines(pages)
        if generation.warc is not None:
            parts.append(self._warc_batch(generation, pages))
        opened: list[str] = []
        if items:
            if generation.items is None:
                generation.items = self._side_spool(generation, "items")
                opened.append("items")
            parts.append((generation.items, b"".join(items), len(items)))
        if downloads:
            if generation.files is None:
                generation.files = self._side_spool(generation, "files")
                opened.append("files")
            lines = "".join([record.to_json() + "\n" for record in downloads])
            data = lines.encode("utf-8", errors="replace")
            parts.append((generation.files, data, len(downloads)))
        try:
            for spool, data, _ in parts:
                spool.append(data)
        except OSError:
            self._cut_back(generation, opened)
            raise
        for spool, data, records in parts:
            spool.size += len(data)
            spool.records += records

    def _side_spool(self, generation: _Generation, folder: Literal["items", "files"]) -> _Spool:
        """A record stream beside the generation's page file, named as it is, in ``folder``."""
        assert self.store is not None
        name = generation.pages.key.removeprefix("pages/")
        return _Spool(self.store.spool_dir / f"{folder}-{name}", f"{folder}/{name}")

    def _cut_back(self, generation: _Generation, opened: Sequence[str]) -> None:
        """After a failed batch: every file back to its last whole batch (one this batch
        opened is removed). A file that cannot be cut back marks the generation torn (no
        write, no seal until :meth:`_mend`)."""
        for folder in opened:
            spool = getattr(generation, folder)
            setattr(generation, folder, None)
            try:
                spool.discard()
            except OSError as exc:  # a stray file in the spool folder, never committed
                self._warn("could not remove %s: %s", spool.path, exc)
        try:
            self._mend(generation)
        except OSError as exc:
            self._warn("could not cut %s back after a failed write: %s", generation.pages.key, exc)

    def _mend(self, generation: _Generation) -> None:
        """Cut every file of ``generation`` back to its whole batches; OSError: still torn."""
        generation.torn = True
        for spool in generation.spools:
            spool.cut_back()
        generation.torn = False

    def _write_failed(self, error: OSError) -> OutputWriteError:
        """Count, log and remember a batch the spool refused; the error the caller raises."""
        assert self.store is not None
        path = str(error.filename or self.store.spool_dir)
        failure = OutputWriteError(_errno_name(error), path, error.strerror or str(error))
        self._write_error = failure
        self._write_failures += 1
        delay = _backoff_seconds(self._write_failures, self.retry_max_seconds, self._rng)
        self._write_retry_at = self._clock() + delay
        self._count_write_error(error)
        self._warn(
            "output spool refused a batch (attempt %d), retrying in %.1f s: %s",
            self._write_failures,
            delay,
            failure,
        )
        self._report()
        return failure

    def _warn(self, message: str, *args: object) -> None:
        log.warning(message, *args, extra={"layer": "output", "worker": self.worker})

    def _count_write_error(self, error: OSError) -> None:
        if self.metrics is not None:
            self.metrics.observe_output_write_error(_errno_name(error))

    def _full(self, generation: _Generation) -> bool:
        return (
            generation.size >= self.max_file_bytes
            or generation.records >= self.max_records_per_file
        )

    async def _make_durable(self, generation: _Generation) -> None:
        """Describe, commit (retrying), then hand the generation to ``on_durable`` (retrying)."""
        assert self.store is not None
        store = self.store
        files: list[DurableFile] = []
        written = generation.written
        for spool in generation.spools:
            if spool not in written:  # empty: a generation of file downloads only
                spool.path.unlink(missing_ok=True)

        async def describe() -> None:
            files[:] = await asyncio.to_thread(lambda: [s.describe() for s in written])

        try:
            # A local read: its failure blocks like the destination's, its success says
            # nothing of the destination (only a commit that succeeds does).
            await self._retrying(
                f"reading {generation.pages.key} back", describe, destination=True, clears=False
            )
            for spool in written:
                await self._retrying(
                    f"making {spool.key} durable",
                    lambda spool=spool: store.commit(spool.path, spool.key),  # type: ignore[misc]
                    destination=True,
                )
            if self.metrics is not None:
                self.metrics.observe_output_durable(len(files), sum(f.size for f in files))
            await self._retrying(
                f"completing the pages of {generation.pages.key}",
                lambda: self.on_durable(generation.number, files),
                destination=False,
            )
        finally:
            self._sealed.pop(generation.number, None)
            self._report()

    async def _retrying(
        self,
        what: str,
        action: Callable[[], Awaitable[None]],
        *,
        destination: bool,
        clears: bool = True,
    ) -> None:
        """``action`` until it succeeds, with capped exponential backoff and ±30 % jitter.

        ``destination``: a failure blocks the sink (claims stop); ``clears``: a success
        unblocks it (a commit's does; a local read-back's proves nothing of the store)."""
        attempt = 0
        while True:
            try:
                await action()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                attempt += 1
                delay = _backoff_seconds(attempt, self.retry_max_seconds, self._rng)
                if destination:
                    self._failing = (f"{what} failed: {exc}", self._clock() + delay)
                    if self.metrics is not None:
                        self.metrics.observe_output_failure()
                    self._report()
                self._warn(
                    "%s failed (attempt %d), retrying in %.1f s: %s", what, attempt, delay, exc
                )
                await asyncio.sleep(delay)
            else:
                if destination and clears and self._failing is not None:
                    self._failing = None
                    log.info(
                        "output destination writable again",
                        extra={"layer": "output", "worker": self.worker},
                    )
                    self._report()
                return

    def _report(self) -> None:
        if self.metrics is not None:
            self.metrics.output_pending.set(len(self._sealed))
            self.metrics.output_blocked.set(1 if self.blocked else 0)

    def _warc_batch(
        self, generation: _Generation, pages: Sequence[PageOutput]
    ) -> tuple[_Spool, bytes, int]:
        """The batch's WARC records as bytes (a warcinfo first while the file holds none)."""
        from warcio.warcwriter import WARCWriter

        assert generation.warc is not None
        staged = generation.warc_batch
        staged.seek(0)
        staged.truncate()
        if generation.warc_writer is None:
            generation.warc_writer = WARCWriter(staged, gzip=True)
        writer = generation.warc_writer
        if generation.warc.size == 0:
            info = {
                "software": "crawlfleet",
                "format": "WARC File Format 1.0",
                "crawlfleet-worker": self.worker,
            }
            name = generation.warc.key.rsplit("/", 1)[-1]
            writer.write_record(writer.create_warcinfo_record(name, info))
        archived = sum(_write_warc(writer, page) for page in pages)
        data = staged.getvalue()
        staged.seek(0)
        staged.truncate()
        return generation.warc, data, archived


def _page_lines(pages: Sequence[PageOutput]) -> bytes:
    lines = "".join([page.record.to_json() + "\n" for page in pages])
    return lines.encode("utf-8", errors="replace")


def _item_lines(pages: Sequence[PageOutput]) -> list[bytes]:
    """One line per item, beside the page records of the same generation (durable with them,
    so an acked page's items are never missing)."""
    lines = []
    for page in pages:
        record = page.record
        for item in page.items:
            line = {
                "url": record.url,
                "fetch_id": record.fetch_id,
                "fetched_at": record.fetched_at,
                "source": item.source,
                "position": item.position,
                "fields": item.fields,
            }
            lines.append(_json_line(line))
    return lines


def _write_warc(writer: WARCWriter, page: PageOutput) -> int:
    """A page's request and response (or revisit) records; 0 when it has nothing to archive,
    else 1."""
    record = page.record
    if record.status is None or (page.body is None and page.revisit is None):
        return 0
    uri = record.final_url or record.url
    date = _warc_date(record.fetched_at)
    if page.revisit is not None:
        response = _revisit_record(writer, uri, date, record.status, page)
    else:
        assert page.body is not None
        response = writer.create_warc_record(
            uri,
            "response",
            payload=io.BytesIO(page.body),
            length=len(page.body),
            warc_headers_dict={"WARC-Date": date},
            http_headers=_response_head(record.status, page.response_headers, len(page.body)),
        )
    request = writer.create_warc_record(
        uri,
        "request",
        warc_headers_dict={"WARC-Date": date},
        http_headers=_request_head(uri, page.request_headers),
    )
    writer.write_request_response_pair(request, response)
    return 1


def _warc_date(seconds: float) -> str:
    """A record's ``WARC-Date`` (whole seconds): a revisit's ``WARC-Refers-To-Date`` is made
    the same way from the stored capture second, so the two match exactly."""
    from warcio.timeutils import datetime_to_iso_date

    date: str = datetime_to_iso_date(datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None))
    return date


def _revisit_record(
    writer: WARCWriter, uri: str, date: str, status: int, page: PageOutput
) -> ArcWarcRecord:
    """A ``revisit`` record: the response's head, no payload, and what it refers to (WARC
    1.1 §6.7; ``WARC-Profile`` in the writer's WARC version)."""
    revisit = page.revisit
    assert revisit is not None
    version = "1.1" if writer.warc_version.endswith("1.1") else "1.0"
    headers = {
        "WARC-Date": date,
        "WARC-Profile": f"http://netpreserve.org/warc/{version}/revisit/{revisit.profile}",
        "WARC-Refers-To-Target-URI": revisit.refers_to_uri,
    }
    if revisit.payload_digest is not None:
        headers["WARC-Payload-Digest"] = revisit.payload_digest
    if revisit.refers_to_date is not None:
        headers["WARC-Refers-To-Date"] = _warc_date(revisit.refers_to_date)
    return writer.create_warc_record(
        uri,
        "revisit",
        warc_headers_dict=headers,
        http_headers=_response_head(status, page.response_headers, None),
    )


def _json_line(value: Mapping[str, object]) -> bytes:
    text = _ENCODER.encode(value)
    return (text + "\n").encode("utf-8", errors="replace")


def _response_head(
    status: int, headers: Mapping[str, str] | None, body_length: int | None
) -> StatusAndHeaders:
    """The archived status line and headers, describing the decoded body that follows (None:
    a revisit record's head, which no body follows and whose length is the original's)."""
    from warcio.statusandheaders import StatusAndHeaders

    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    kept = [(k, v) for k, v in (headers or {}).items() if k.lower() not in _WIRE_HEADERS]
    if body_length is not None:
        kept.append(("Content-Length", str(body_length)))
    return StatusAndHeaders(f"{status} {reason}".rstrip(), kept, protocol="HTTP/1.1")


def _request_head(url: str, headers: Mapping[str, str] | None) -> StatusAndHeaders:
    from warcio.statusandheaders import StatusAndHeaders

    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent = list((headers or {}).items())
    if not any(k.lower() == "host" for k, _ in sent):
        sent.insert(0, ("Host", parts.netloc))
    return StatusAndHeaders(f"GET {target} HTTP/1.1", sent, is_http_request=True)
