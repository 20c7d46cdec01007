"""The worker's file downloads (``spec.files``, DESIGN §11): from a claimed lease to a stored file.

A lease is a file when a rule says so (``crawler/files/rules.py``): by its URL or its parent's
mark at claim (:meth:`FileDownloads.candidate`), or by its response's content type, which the
page fetch asks about after the headers (:meth:`FileDownloads.stops_for_type`) before the same
lease is downloaded here. :meth:`FileDownloads.download` then, in order:

1. takes one of its host's *file slots* in the frontier (``files.perHost``, default 1). None
   free: it waits a little (:data:`FILE_SLOT_WAIT_SECONDS`) and then gives the lease back
   without an attempt (released to the front of its host's queue; the host's delay spaces the
   next try). The host's page slot is freed once the file slot is held: a download of an hour
   is counted by its file slot, whose expiry the heartbeat pushes on (:meth:`keep_alive`), not
   by the page slot, which a dead worker's lease holds only until its fetch deadline -- a
   download has no fetch deadline (the per-read timeout catches a stall);
2. opens the URL's *part* (``crawler/files/parts.py``: a local ``.part`` or an S3 multipart
   upload) and streams the response into it (``crawler/files/download.py``'s ``fetch_file``),
   resumed with Range from what the part holds, at most ``files.bandwidthBytesPerSecond`` for
   the whole worker. A part that cannot be written (a full disk, a store refusing) is the
   destination's fault, not the URL's: the lease goes back without an attempt, after
   :data:`PART_FAILURE_WAIT_SECONDS`;
3. on success: checks the job's byte budget (below), finishes the part into its content key,
   claims the content in the frontier's index (identical bytes: the record points at the
   first copy, a *duplicate*), settles the reserved bytes and counts the file; the caller
   writes the :class:`~crawlfleet.crawler.worker.sinks.FileRecord` into the ``files/`` stream
   and acks the lease once that record is durable, as for a page;
4. releases the file slot, on every path.

**The byte budget** (``files.maxTotalBytes``): the declared length is not known before the
response, and reserving ``maxBytes`` (4 GiB by default) per download would refuse every file
of a small budget, so nothing is reserved up front. A download is refused before it starts
when the stored and reserved bytes already reach the budget (one O(1) read), and a finished
one reserves its exact size before it is stored: refused, it fails ``file_budget``
(permanent) and its part is dropped. Stored bytes never pass the budget; downloads running at
once near its end may fetch bytes that are then refused.

**SIGTERM** (:meth:`stop`): every running download's ``FileRequest.stop`` is set; it stops at
its next chunk, checkpoints its part and returns ``stopped``; its lease is released (no attempt
counted) and its part kept for whoever claims the URL next.

**The lease meanwhile**: the lease book extends every lease it holds at each heartbeat, so a
long download keeps its lease; and each chunk received tells the book the lease is moving
(:meth:`~crawlfleet.crawler.worker.leases.LeaseBook.moving`), so the fleet's watchdog, which
reports a lease stuck in one stage for minutes, sees a download that progresses as alive.

A failed download writes no record line (a file is not a page): its failure is counted
(``failures_total``, ``crawlfleet_files_total{outcome="failed"}``) and settles its lease
(retried or dead-lettered by its class, ``crawler/fetching/failures.py``).
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from crawlfleet.crawler.fetching.failures import FailureClass, fate
from crawlfleet.crawler.files.download import (
    FileRequest,
    FileResult,
    Throttle,
    fetch_file,
    verify_head,
)
from crawlfleet.crawler.files.parts import (
    PartStore,
    PartWriter,
    ReadBack,
    StoredFile,
    open_parts,
)
from crawlfleet.crawler.files.rules import FileRule, FileRules
from crawlfleet.crawler.files.sniff import HEAD_BYTES
from crawlfleet.crawler.worker.sinks import FileRecord
from crawlfleet.errors import FrontierUnavailable, OutputUnavailable
from crawlfleet.frontier.parents import file_mark, split_parent

if TYPE_CHECKING:
    from crawlfleet.crawler.fetching.fetch import Fetcher, HopCheck
    from crawlfleet.crawler.worker.leases import LeaseBook
    from crawlfleet.crawler.worker.metrics import WorkerMetrics
    from crawlfleet.crawljob import CrawlJobSpec
    from crawlfleet.frontier import Frontier, Lease
    from crawlfleet.output.stores import OutputStore

__all__ = [
    "FILE_SLOT_POLL_SECONDS",
    "FILE_SLOT_WAIT_SECONDS",
    "PART_FAILURE_WAIT_SECONDS",
    "DownloadFailed",
    "Downloaded",
    "FileDownloads",
    "GivenBack",
]

log = logging.getLogger(__name__)

#: How long a download waits for a file slot of its host before its lease is given back, and
#: how often it asks meanwhile: a short wait saves a round of release and claim when the
#: download ahead ends soon, and bounds what a held lease costs when it does not.
FILE_SLOT_WAIT_SECONDS: Final = 2.0
FILE_SLOT_POLL_SECONDS: Final = 0.25
#: The watchdog is told a download moves at most this often (a dict write per chunk is cheap,
#: a clock read per 64 KiB chunk of a 1 Gb/s link is not worth more).
_MOVING_EVERY_SECONDS: Final = 1.0
#: How long a download whose part cannot be written (a full disk, a store refusing) holds its
#: lease before giving it back: a destination that stays broken costs a round of claim and
#: release this often, not as fast as Redis answers.
PART_FAILURE_WAIT_SECONDS: Final = 5.0


@runtime_checkable
class _ReadsBack(Protocol):
    """A part that is hashed by reading it back once complete (an S3 multipart upload)."""

    async def read_back(self) -> ReadBack: ...


class GivenBack(enum.Enum):
    """The lease went back to the frontier without an attempt (no slot free; stopped)."""

    NO_SLOT = "no file slot free on its host"
    STOPPED = "stopped at shutdown; its part is kept"
    NO_PART = "its part could not be written"


@dataclass(frozen=True, slots=True)
class Downloaded:
    """A download that ended in a stored file: its record goes to the ``files/`` stream."""

    result: FileResult
    record: FileRecord


@dataclass(frozen=True, slots=True)
class DownloadFailed:
    """A download that failed (its class decides retry or dead letter)."""

    failure_class: FailureClass
    message: str
    result: FileResult | None = None


FileOutcome = Downloaded | DownloadFailed | GivenBack


class FileDownloads:
    """One worker's file downloads; see the module docstring. Build it with :meth:`from_spec`."""

    def __init__(
        self,
        *,
        rules: FileRules,
        frontier: Frontier,
        leases: LeaseBook,
        fetcher: Fetcher,
        parts: PartStore,
        metrics: WorkerMetrics,
        worker_id: str,
        per_host: int,
        max_total_bytes: int,
        part_size_bytes: int,
        verify_type: bool,
        throttle: Throttle | None,
        slot_ttl_seconds: float,
        task_attempts: int,
    ) -> None:
        self.rules = rules
        self.frontier = frontier
        self.leases = leases
        self.fetcher = fetcher
        self.parts = parts
        self.metrics = metrics
        self.worker_id = worker_id
        self.per_host = per_host
        self.max_total_bytes = max_total_bytes
        self.part_size_bytes = part_size_bytes
        self.verify_type = verify_type
        self.throttle = throttle
        self.slot_ttl_seconds = slot_ttl_seconds
        #: ``retry.taskAttempts``: a failure at the last one is dead-lettered, its part dropped.
        self.task_attempts = task_attempts
        #: The file slots held, lease id -> host (the heartbeat extends them).
        self._slots: dict[str, str] = {}
        #: The running downloads' requests, lease id -> request (SIGTERM stops them).
        self._requests: dict[str, FileRequest] = {}
        self._stopping = False

    @classmethod
    def from_spec(
        cls,
        spec: CrawlJobSpec,
        *,
        frontier: Frontier,
        leases: LeaseBook,
        fetcher: Fetcher,
        store: OutputStore | None,
        metrics: WorkerMetrics,
        worker_id: str,
    ) -> FileDownloads | None:
        """The downloads of a job with ``spec.files``; None without rules or without a
        destination to store them in (a worker with no output store stores nothing)."""
        files = spec.files
        rules = FileRules.from_spec(files)
        if files is None or not rules:
            return None
        if store is None:
            log.warning(
                "spec.files is set but this worker has no output store: files are crawled as pages",
                extra={"layer": "task", "worker": worker_id},
            )
            return None
        bandwidth = files.bandwidth_bytes_per_second
        return cls(
            rules=rules,
            frontier=frontier,
            leases=leases,
            fetcher=fetcher,
            parts=open_parts(store, spec),
            metrics=metrics,
            worker_id=worker_id,
            per_host=files.per_host,
            max_total_bytes=files.max_total_bytes,
            part_size_bytes=files.part_size_bytes,
            verify_type=files.verify_type,
            throttle=Throttle(bandwidth) if bandwidth > 0 else None,
            slot_ttl_seconds=spec.lease.ttl_seconds,
            task_attempts=spec.retry.task_attempts,
        )

    # -- deciding -------------------------------------------------------------------------

    def candidate(self, lease: Lease) -> FileRule | None:
        """The rule a claimed lease is a file candidate of (its parent's mark, else a rule
        whose ``match`` alone takes its URL); None: a page, unless its response's type says
        otherwise (:meth:`stops_for_type`)."""
        return self.rules.for_url(lease.url, file_mark(lease.parent))

    def downloads_at_once(self, candidate: FileRule | None) -> bool:
        """Whether the candidate is downloaded without a page fetch first: its rule does not
        wait for the response's type."""
        return candidate is not None and not self.rules.needs_response_type(candidate)

    def stops_for_type(self, candidate: FileRule | None) -> Callable[[str | None], bool] | None:
        """The page fetch's ``stop_for_type``: True for a content type that makes the lease a
        file (its candidate's types, or a rule of types alone); None when no type can."""
        if candidate is None and not self.rules.response_types_matter:
            return None
        rules = self.rules
        return lambda content_type: rules.for_response(content_type, candidate) is not None

    def rule_for_response(
        self, content_type: str | None, candidate: FileRule | None
    ) -> FileRule | None:
        return self.rules.for_response(content_type, candidate)

    # -- downloading ----------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._requests)

    async def download(
        self,
        lease: Lease,
        rule: FileRule,
        *,
        allow_url: Callable[[str], bool] | None = None,
        check_hop: HopCheck | None = None,
        pace: Callable[[str], Awaitable[None]] | None = None,
    ) -> FileOutcome:
        """Download the lease's URL as a file of ``rule``; see the module docstring. A
        :class:`GivenBack` lease is no longer in the book."""
        if not await self._take_slot(lease):
            return await self._give_back(lease, GivenBack.NO_SLOT)
        # Its file slot counts it now: the host's page slot goes back with the next claim.
        self.leases.fetched(lease.lease_id)
        try:
            if await self._budget_spent():
                return self._failed(
                    FailureClass.FILE_BUDGET,
                    f"the job's files.maxTotalBytes ({self.max_total_bytes} bytes) is reached",
                )
            try:
                part = await self.parts.open(lease.url)
                try:
                    return await self._download(lease, rule, part, allow_url, check_hop, pace)
                finally:
                    await part.close()
            except OutputUnavailable as exc:
                return await self._part_failed(lease, exc)
        finally:
            self._requests.pop(lease.lease_id, None)
            self.metrics.set_file_downloads(len(self._requests))
            await self._give_slot_back(lease)

    async def _download(
        self,
        lease: Lease,
        rule: FileRule,
        part: PartWriter,
        allow_url: Callable[[str], bool] | None,
        check_hop: HopCheck | None,
        pace: Callable[[str], Awaitable[None]] | None,
    ) -> FileOutcome:
        request = FileRequest(
            url=lease.url,
            rule=rule,
            part=part,
            part_size=self.part_size_bytes,
            throttle=self.throttle,
            stop=asyncio.Event(),
            verify_type=self.verify_type,
            on_progress=self._progress(lease.lease_id),
        )
        if self._stopping:
            request.stop.set()
        self._requests[lease.lease_id] = request
        self.metrics.set_file_downloads(len(self._requests))
        result = await fetch_file(
            self.fetcher, lease.url, request, allow_url=allow_url, check_hop=check_hop, pace=pace
        )
        if result.stopped:
            self._count(None, result)
            return await self._give_back(lease, GivenBack.STOPPED)
        if result.failure is None and result.sha256 is None:
            await self._verify_read_back(part, rule, result)
        if result.failure is not None:
            failure_class = FailureClass(result.failure)
            if not fate(failure_class).retryable or lease.attempts + 1 >= self.task_attempts:
                # Never tried again (a permanent class, or the last attempt: the frontier
                # dead-letters it): nothing will resume the part, so nothing keeps it.
                await part.discard()
            # Else the part keeps what can be resumed (fetch_file dropped bytes that failed
            # verification: an error page, a tiny body).
            return self._failed(failure_class, result.message, result)
        return await self._store(lease, rule, part, result)

    async def _verify_read_back(self, part: PartWriter, rule: FileRule, result: FileResult) -> None:
        """A download whose result carries no SHA-256 (resumed on S3, where this process never
        saw the earlier bytes): the part read back (``BucketPart.read_back``: its upload
        completed, then one more read of the whole file from the store) gives the digest and
        the first bytes, whose type and minimum are checked as the download checks a file it
        saw from byte 0 (``download.verify_head``). A failure is set on ``result``, its bytes
        dropped from the part, as the download drops them."""
        read = await _read_back(part)
        verdict = verify_head(
            read.head,
            content_type=part.state.content_type,
            url=result.url,
            size=result.size,
            min_bytes=rule.min_bytes,
            verify_type=self.verify_type,
        )
        result.sniffed = verdict.sniffed
        if verdict.failure is None:
            result.sha256 = read.sha256
            return
        await part.restart()
        result.failure, result.message = verdict.failure, f"read back: {verdict.message}"

    async def _store(
        self, lease: Lease, rule: FileRule, part: PartWriter, result: FileResult
    ) -> FileOutcome:
        """A verified download: within the budget, finished into its content key, claimed in
        the content index, counted; its record."""
        size = result.size
        # Reserved whatever the budget (0: none, always granted): the frontier keeps the job's
        # stored bytes either way, and a download's bytes are never counted twice.
        holder = lease.lease_id
        if not await self.frontier.reserve_file_bytes(
            holder, size, self.max_total_bytes, ttl_seconds=self.slot_ttl_seconds
        ):
            await part.discard()
            return self._failed(
                FailureClass.FILE_BUDGET,
                f"{size} bytes would pass the job's files.maxTotalBytes"
                f" ({self.max_total_bytes} bytes)",
                result,
            )
        try:
            digest = result.sha256
            if digest is None:  # _download read it back, or failed
                raise AssertionError(f"{lease.url}: stored without a digest")
            stored = await part.finish(digest)
            existing = await self.frontier.claim_content(digest, stored.key)
        except BaseException:
            await self.frontier.settle_file_bytes(holder, 0)
            raise
        # The content index decides, not the destination: two downloads of the same bytes
        # finishing at once may each find the other's object, but only one claims the index.
        duplicate = existing is not None
        new_bytes = 0 if duplicate else size
        await self.frontier.settle_file_bytes(holder, new_bytes)
        await self.frontier.count_files(
            stored=0 if duplicate else 1,
            duplicates=1 if duplicate else 0,
            bytes=new_bytes,
            resumed=1 if result.resumed_from else 0,
            restarts=len(result.restarts),
            resumed_bytes=result.resumed_from,
        )
        self._count("duplicate" if duplicate else "stored", result)
        result.stored = StoredFile(existing or stored.key, size, duplicate)
        return Downloaded(result, self._record(lease, rule, result, digest))

    def _record(self, lease: Lease, rule: FileRule, result: FileResult, digest: str) -> FileRecord:
        stored = result.stored
        assert stored is not None
        parent, _ = split_parent(lease.parent)
        return FileRecord(
            url=lease.url,
            final_url=result.final_url,
            status=result.status,
            size=result.size,
            sha256=digest,
            content_type=result.content_type,
            sniffed_type=result.sniffed,
            etag=result.etag,
            last_modified=result.last_modified,
            parent=parent,
            depth=lease.depth,
            rule=rule.index,
            stored=stored.key,
            duplicate=stored.duplicate,
            resumed_from=result.resumed_from,
            restarts=tuple(result.restarts),
            attempt=lease.attempts + 1,
            worker=self.worker_id,
            fetch_id=f"{self.worker_id}-{lease.number}",
            fetched_at=result.fetched_at or time.time(),
        )

    async def _give_back(self, lease: Lease, why: GivenBack) -> GivenBack:
        """Release the lease (no attempt counted), again after the book's backoff while Redis
        does not answer: a lease left in the book would be extended for as long as the worker
        lives. Stopping, it is left to the release of everything at shutdown."""
        while True:
            try:
                await self.leases.release([lease.lease_id], why.value)
            except FrontierUnavailable as exc:
                if self._stopping:
                    return why
                wait = self.leases.outage.failed()
                log.warning(
                    "could not give back %s, again in %.1f s: %s",
                    lease.url,
                    wait,
                    exc,
                    extra={"layer": "task"},
                )
                await asyncio.sleep(wait)
                continue
            self.leases.outage.succeeded()
            return why

    async def _part_failed(self, lease: Lease, error: OutputUnavailable) -> GivenBack:
        """The part could not be written: the destination's fault, not the URL's, so no
        attempt is counted; the lease goes back after :data:`PART_FAILURE_WAIT_SECONDS`."""
        log.warning(
            "download of %s stopped, its lease given back in %.0f s: %s",
            lease.url,
            PART_FAILURE_WAIT_SECONDS,
            error,
            extra={"layer": "output", "worker": self.worker_id},
        )
        if not self._stopping:
            await asyncio.sleep(PART_FAILURE_WAIT_SECONDS)
        return await self._give_back(lease, GivenBack.NO_PART)

    def _failed(
        self, failure_class: FailureClass, message: str, result: FileResult | None = None
    ) -> DownloadFailed:
        self._count("failed", result)
        return DownloadFailed(failure_class, message, result)

    def _count(self, outcome: str | None, result: FileResult | None) -> None:
        """A download that ended (None: stopped, no outcome), with what it received."""
        if result is None:
            self.metrics.observe_file(outcome)
            return
        self.metrics.observe_file(
            outcome,
            received_bytes=max(0, result.size - result.resumed_from),
            resumed_bytes=result.resumed_from,
            restarts=result.restarts,
        )

    def _progress(self, lease_id: str) -> Callable[[int], None]:
        """The request's ``on_progress``: tells the lease book the lease moves (the watchdog
        reads that), at most every :data:`_MOVING_EVERY_SECONDS`."""
        last = 0.0

        def progressed(_bytes_so_far: int) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= _MOVING_EVERY_SECONDS:
                last = now
                self.leases.moving(lease_id)

        return progressed

    async def _budget_spent(self) -> bool:
        """The job's budget is already used up by stored and reserved bytes (one O(1) read)."""
        if not self.max_total_bytes:
            return False
        stats = await self.frontier.file_stats()
        return stats.settled + stats.reserved >= self.max_total_bytes

    # -- slots ----------------------------------------------------------------------------

    async def _take_slot(self, lease: Lease) -> bool:
        """One of the host's file slots, waiting up to :data:`FILE_SLOT_WAIT_SECONDS`."""
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + FILE_SLOT_WAIT_SECONDS
        while True:
            if await self.frontier.acquire_file_slot(
                lease.host, lease.lease_id, self.per_host, self.slot_ttl_seconds
            ):
                self._slots[lease.lease_id] = lease.host
                return True
            if self._stopping or loop.time() + FILE_SLOT_POLL_SECONDS > give_up_at:
                return False
            await asyncio.sleep(FILE_SLOT_POLL_SECONDS)

    async def _give_slot_back(self, lease: Lease) -> None:
        host = self._slots.pop(lease.lease_id, None)
        if host is None:
            return
        try:
            await self.frontier.release_file_slot(host, lease.lease_id)
        except Exception as exc:  # it expires by itself after slot_ttl_seconds
            log.warning(
                "could not free the file slot of %s: %s", lease.url, exc, extra={"layer": "task"}
            )

    async def keep_alive(self) -> None:
        """The heartbeat's part: push on the expiry of every file slot held (one call)."""
        if not self._slots:
            return
        by_host: dict[str, list[str]] = {}
        for lease_id, host in self._slots.items():
            by_host.setdefault(host, []).append(lease_id)
        await self.frontier.extend_file_slots(by_host, self.slot_ttl_seconds)

    # -- shutdown -------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Release the part store (a bucket's threads and client) once no download runs: the
        worker calls it where it closes its output."""
        await self.parts.aclose()

    def stop(self) -> None:
        """SIGTERM: every download stops at its next chunk, keeps its part, gives its lease
        back; none starts any more."""
        self._stopping = True
        for request in self._requests.values():
            request.stop.set()


async def _read_back(part: PartWriter) -> ReadBack:
    """A complete part's digest and first bytes: a bucket's completed upload read back
    (:class:`_ReadsBack`), else its durable bytes hashed."""
    if isinstance(part, _ReadsBack):
        return await part.read_back()
    digest = hashlib.sha256()
    head = bytearray()
    async for chunk in part.durable_bytes():
        digest.update(chunk)
        if len(head) < HEAD_BYTES:
            head += chunk[: HEAD_BYTES - len(head)]
    return ReadBack(digest.hexdigest(), bytes(head))
