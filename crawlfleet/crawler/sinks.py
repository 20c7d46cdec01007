"""Crawl output: one JSONL line per fetch, optional WARC archives, and a dead-letter file.

Each worker writes only its own files (names carry its id), so workers never share a file and
never need a lock across processes; the job's output is the union of every worker's files.

* ``pages-<worker>-<n>.jsonl``: one :class:`PageRecord` per fetch attempt that reached the
  output stage (formats ``jsonl`` and ``warc``). Output is *at least once*: a page whose lease
  was lost after it was written is fetched again by another worker, so the same ``url`` may
  appear twice, told apart by ``fetch_id`` (unique per fetch). Readers keep one line per
  ``url`` (e.g. the latest ``fetched_at``): that is what "idempotent by URL" means (DESIGN §4).
* ``warc-<worker>-<n>.warc.gz`` (format ``warc``): a ``warcinfo`` record at the head of each
  file, then a ``request`` + ``response`` pair per fetched page (``WARC-Concurrent-To`` links
  them), one gzip member per record so any file can be read from any record boundary.
* ``failures-<worker>.jsonl``: URLs that reached the dead-letter set, for people to read.
  Format ``none`` writes no file at all (not even this one): a job that asks for no output may
  have no volume to write to, and dead letters stay in the frontier's dead set anyway.

Page files rotate once they pass ``max_file_bytes`` (a record is never split, so a file may
overshoot by one record). Every writer starts a new ``<n>`` after the highest one on disk and
creates it exclusively, so a restarted worker never appends to a file whose last record a
SIGKILL may have cut. Files are opened lazily and flushed after every batch, without fsync:
a crash loses at most the batch being written, which the frontier re-crawls because its
leases were never acknowledged.

Methods block (plain file I/O, gzip for WARC): call them from a thread
(``asyncio.to_thread``) when bodies are large; calls are serialised by an internal lock.
"""

from __future__ import annotations

import dataclasses
import http
import io
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Final, Literal, Self
from urllib.parse import urlsplit

from crawlfleet.crawljob import OutputSpec

if TYPE_CHECKING:  # warcio is imported on the first WARC record, not by every worker
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

__all__ = ["OutputFormat", "OutputWriter", "PageOutput", "PageRecord", "safe_file_token"]

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
    :class:`~crawlfleet.crawler.failures.FailureClass` value or None on success; ``parent`` is
    the page the URL was found on ("" for seeds); ``fetched_at`` is seconds since the epoch.
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

    def to_json(self) -> str:
        # Field by field: dataclasses.asdict deep-copies and was a visible cost per page.
        fields = {name: getattr(self, name) for name in _RECORD_FIELDS}
        return _ENCODER.encode(fields)


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(PageRecord))
# One encoder for every line: json.dumps with options builds a new one per call.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class PageOutput:
    """A page for :meth:`OutputWriter.write_pages`: its record plus what a WARC archives.

    ``body`` is the decoded body as the crawler read it; without a body or a status the page
    gets no WARC records (there is nothing to archive), only its JSONL line.
    """

    record: PageRecord
    request_headers: Mapping[str, str] | None = None
    response_headers: Mapping[str, str] | None = None
    body: bytes | None = None


class _RotatingFile:
    """``<stem>-<n><suffix>`` files of one kind, rotated by size and created exclusively."""

    def __init__(self, directory: Path, stem: str, suffix: str, max_bytes: int) -> None:
        self.directory = directory
        self.stem = stem
        self.suffix = suffix
        self.max_bytes = max_bytes
        self.file: IO[bytes] | None = None
        self.path: Path | None = None
        self.paths: list[Path] = []
        self._pattern = re.compile(rf"^{re.escape(stem)}-(\d+){re.escape(suffix)}$")
        self._next: int | None = None

    def open(self) -> tuple[IO[bytes], bool]:
        """The current file, opened if needed; True when it was just created."""
        if self.file is not None:
            return self.file, False
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._next is None:
            numbers = (self._pattern.match(p.name) for p in self.directory.iterdir())
            self._next = max((int(m.group(1)) + 1 for m in numbers if m), default=0)
        while True:
            path = self.directory / f"{self.stem}-{self._next:05d}{self.suffix}"
            self._next += 1
            try:
                self.file = path.open("xb")
            except FileExistsError:
                continue  # a file left by an earlier run of this worker id: never append to it
            self.path = path
            self.paths.append(path)
            return self.file, True

    def rotate_if_full(self) -> None:
        if self.file is not None and self.file.tell() >= self.max_bytes:
            self.close()

    def flush(self) -> None:
        if self.file is not None:
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
            self.path = None


class OutputWriter:
    """Writes one worker's pages, WARC records and dead letters; see the module docstring.

    Build it with :meth:`from_spec`: the format and the rotation size have no defaults and no
    checks here, the CrawlJob model holds both.
    """

    def __init__(
        self, directory: Path, worker: str, *, format: OutputFormat, max_file_bytes: int
    ) -> None:
        self.directory = Path(directory)
        self.worker = worker
        self.format: OutputFormat = format
        token = safe_file_token(worker)
        self._pages = _RotatingFile(self.directory, f"pages-{token}", ".jsonl", max_file_bytes)
        self._warc = _RotatingFile(self.directory, f"warc-{token}", ".warc.gz", max_file_bytes)
        self._warc_writer: WARCWriter | None = None
        self._failures_path = self.directory / f"failures-{token}.jsonl"
        self._failures: IO[bytes] | None = None
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_spec(cls, directory: Path, worker: str, output: OutputSpec) -> OutputWriter:
        """The writer a CrawlJob's ``output`` section asks for."""
        return cls(directory, worker, format=output.format, max_file_bytes=output.max_file_bytes)

    @property
    def files(self) -> list[Path]:
        """Every file this writer created or appended to, in the order it opened them."""
        failures = [self._failures_path] if self._failures is not None else []
        return [*self._pages.paths, *self._warc.paths, *failures]

    # -- writing --------------------------------------------------------------------------

    def write_pages(self, pages: Sequence[PageOutput]) -> None:
        """Write a batch of pages, then flush once: the unit a crash may lose."""
        with self._lock:
            self._check_open()
            if self.format == "none" or not pages:
                return
            for page in pages:
                self._write_line(page.record)
                if self.format == "warc":
                    self._write_warc(page)
            self._pages.flush()
            self._warc.flush()

    def write_dead_letter(
        self,
        url: str,
        failure_class: str,
        message: str,
        attempts: int,
        depth: int,
        parent: str,
    ) -> None:
        """Record a URL that will not be tried again (flushed at once: these are rare)."""
        with self._lock:
            self._check_open()
            if self.format == "none":
                return
            line = {
                "url": url,
                "failure_class": failure_class,
                "message": message,
                "attempts": attempts,
                "depth": depth,
                "parent": parent,
                "worker": self.worker,
                "failed_at": time.time(),
            }
            out = self._open_failures()
            out.write(_json_line(line))
            out.flush()

    def flush(self) -> None:
        """Hand buffered lines to the OS (no fsync: the frontier re-crawls what a crash loses)."""
        with self._lock:
            self._pages.flush()
            self._warc.flush()
            if self._failures is not None:
                self._failures.flush()

    def close(self) -> None:
        """Flush and close every file; later writes raise ``ValueError``. Idempotent."""
        with self._lock:
            self._closed = True
            self._pages.close()
            self._close_warc()
            if self._failures is not None:
                self._failures.close()
                self._failures = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("OutputWriter is closed")

    def _write_line(self, record: PageRecord) -> None:
        out, _ = self._pages.open()
        out.write((record.to_json() + "\n").encode("utf-8", errors="replace"))
        self._pages.rotate_if_full()

    def _write_warc(self, page: PageOutput) -> None:
        record = page.record
        if page.body is None or record.status is None:
            return
        from warcio.timeutils import datetime_to_iso_date
        from warcio.warcwriter import WARCWriter

        out, created = self._warc.open()
        if created or self._warc_writer is None:
            self._warc_writer = WARCWriter(out, gzip=True)
            assert self._warc.path is not None
            info = {
                "software": "crawlfleet",
                "format": "WARC File Format 1.0",
                "crawlfleet-worker": self.worker,
            }
            self._warc_writer.write_record(
                self._warc_writer.create_warcinfo_record(self._warc.path.name, info)
            )
        writer = self._warc_writer
        uri = record.final_url or record.url
        date = datetime_to_iso_date(
            datetime.fromtimestamp(record.fetched_at, UTC).replace(tzinfo=None)
        )
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
        self._warc.rotate_if_full()
        if self._warc.file is None:
            self._warc_writer = None

    def _close_warc(self) -> None:
        self._warc.close()
        self._warc_writer = None

    def _open_failures(self) -> IO[bytes]:
        if self._failures is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            out = self._failures_path.open("ab")
            # A line cut by a SIGKILL of an earlier run must not swallow our first line.
            if out.tell() > 0:
                with self._failures_path.open("rb") as previous:
                    previous.seek(-1, io.SEEK_END)
                    if previous.read(1) != b"\n":
                        out.write(b"\n")
            self._failures = out
        return self._failures


def _json_line(value: Mapping[str, object]) -> bytes:
    text = _ENCODER.encode(value)
    return (text + "\n").encode("utf-8", errors="replace")


def _response_head(
    status: int, headers: Mapping[str, str] | None, body_length: int
) -> StatusAndHeaders:
    """The archived status line and headers, describing the decoded body that follows."""
    from warcio.statusandheaders import StatusAndHeaders

    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    kept = [(k, v) for k, v in (headers or {}).items() if k.lower() not in _WIRE_HEADERS]
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
