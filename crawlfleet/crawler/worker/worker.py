"""The crawl worker: claim a batch → fetch concurrently → classify → extract links → admit
them → ack/fail, batching every Redis round trip it can.

Three layers of fault tolerance (DESIGN §4): the request layer (``fetch.Fetcher``) retries
transient errors with backoff; this task layer decides a URL's fate from its failure class
(permanent → dead letter, retryable → delayed retry with a longer wait for push-back) and
adapts concurrency (AIMD); the flow layer keeps leases alive while fetches run, heartbeats
for the fleet brain, and on SIGTERM stops claiming, finishes or releases what it holds, and
exits 0. A SIGKILL costs only the leases in flight, which expire back into the queue.

Completed fetches wait in a small buffer and are flushed together: one ``enqueue`` of all
new links and one write into the output sink per flush, however many pages it holds. Links this
worker has already settled never reach the ``enqueue`` (``admission.LinkAdmission``). What
happens to each lease -- its host slot freed when its request phase ends, on every path; acked
or failed once the file holding its record is durable (DESIGN §8, ``sinks.py``); extended
meanwhile; released at shutdown -- is the lease book's (``leases.py``), which the Scrapy runtime
shares. The sink's backpressure (a failing destination, too many files waiting) stops claiming.

With ``spec.recrawl`` (DESIGN §10) each claimed batch's revisit states are read in one more
round trip; a URL with validators is fetched conditionally, and ``revisits.py`` judges what the
visit found. A 304 or an unchanged body is an entry only (``change`` in its record, no content,
no items, no links: its links were admitted the first time, so extracting them again is skipped)
with a WARC revisit record; a new or changed page is written as ever. Each tracked lease's ack or
fail carries its :class:`~crawlfleet.frontier.Revisit`. Without rules nothing of this runs: the
one-shot crawl's round trips are unchanged.

With ``scope.sitemaps`` a lease may be a sitemap document (its parent says so,
``frontier/parents.py``): it is fetched like a page, through the same robots check, host slot
and caps, and read by ``crawler/links/sitemaps.py`` in a thread; its entries are admitted with the
batch's other links, so they pass scope, robots and dedup the same way. A response that is an
RSS or Atom feed (by its content type or root element, ``crawler/links/feeds.py``) is read
the same way, whatever its lease: a seed, a page's ``<link rel="alternate">``.

With ``spec.files`` (DESIGN §11) a lease may be a file: by its URL or its parent's mark, it is
downloaded at once; by a rule that waits for the response's type, the page fetch stops after
the headers when the type makes it a file, and the same lease is downloaded. Downloads are
``crawler/worker/files.py``'s (their host's file slot, the part, the budget, dedup); a stored
file's record goes to the sink's ``files/`` stream and its lease is acked when that record is
durable, as a page's. A page's links found in the elements a rule names (``<img>``,
``<video><source>``, ...) are admitted with the rule's mark on their parent, even one level past
``maxDepth``; a marked link replaces the same URL's unmarked copy from the same page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from hashlib import sha256
from typing import cast
from urllib.parse import urljoin

from crawlfleet.crawler.fetching.conditional import Conditional
from crawlfleet.crawler.fetching.failures import FailureClass, backoff_seconds, fate
from crawlfleet.crawler.fetching.fetch import Fetcher, FetchResult
from crawlfleet.crawler.fetching.memory import ByteBudget, Reservation
from crawlfleet.crawler.fetching.safety import AddressGuard
from crawlfleet.crawler.files.rules import FileRule
from crawlfleet.crawler.harvest.harvest import Harvest, Harvester, HarvestInput
from crawlfleet.crawler.links.admission import LinkAdmission, PageLinksToAdmit
from crawlfleet.crawler.links.charset import decode_html
from crawlfleet.crawler.links.feeds import Feed, FeedRefused, is_feed, read_feed
from crawlfleet.crawler.links.links import PageLinks, extract_links
from crawlfleet.crawler.links.scope import Scope, ScopeVerdict
from crawlfleet.crawler.links.sitemaps import (
    DEFAULT_SITEMAP_LIMITS,
    Sitemap,
    SitemapRefused,
    read_sitemap,
)
from crawlfleet.crawler.links.xml_input import DocumentRefused
from crawlfleet.crawler.politeness.concurrency import AdaptiveLimit
from crawlfleet.crawler.politeness.robots import RobotsPolicy
from crawlfleet.crawler.worker.files import (
    Downloaded,
    DownloadFailed,
    FileDownloads,
    FileOutcome,
    GivenBack,
)
from crawlfleet.crawler.worker.flow import (
    WorkerOptions,
    every,
    flush_at_shutdown,
    heartbeat_fields,
    log_unavailable,
    wait_for_wake,
    worker_counters,
    worker_output,
)
from crawlfleet.crawler.worker.gate import Deferred, RequestGate
from crawlfleet.crawler.worker.leases import Backoff, LeaseBook, Stage
from crawlfleet.crawler.worker.metrics import WorkerMetrics
from crawlfleet.crawler.worker.revisits import Visit, judge, rule_of
from crawlfleet.crawler.worker.sinks import DurableFile, FileRecord, PageOutput, PageRecord
from crawlfleet.crawler.worker.spool import LinkSpool
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.crawljob.recrawl import DocumentKind, output_file_age_seconds
from crawlfleet.errors import FrontierUnavailable, OutputWriteError, PartitionsUnavailable
from crawlfleet.frontier import (
    Admission,
    Failure,
    Frontier,
    FrontierStats,
    HeartbeatValue,
    Lease,
    Link,
    PartitionedFrontier,
    Revisit,
    ScopeRules,
    host_of,
    try_canonicalize,
)
from crawlfleet.frontier.parents import (
    SitemapTask,
    file_parent,
    listed_parent,
    sitemap_parent,
    sitemap_task,
    split_parent,
)
from crawlfleet.output.manifest import finish_output, finish_output_once
from crawlfleet.output.stores import OutputStore
from crawlfleet.urls import origin_of

__all__ = ["Worker"]

#: Spooled links enqueued per call when a partition answers again.
_REPLAY_BATCH = 2_000

log = logging.getLogger(__name__)

#: How often an idle worker that keeps running asks whether the job is complete (one read).
_FINISH_CHECK_SECONDS = 1.0

_HTML_TYPES = ("text/html", "application/xhtml+xml")
#: What a page that is not HTML offers: nothing (never mutated).
_NO_LINKS = PageLinks(title=None)


@dataclass(slots=True)
class _Outcome:
    """What became of one lease, waiting to be flushed."""

    lease: Lease
    record: PageRecord
    failure: Failure | None = None
    links: list[str] = field(default_factory=list)
    result: FetchResult | None = None
    #: The body's bytes in the worker's memory budget, given back once the page is flushed.
    reservation: Reservation | None = None
    #: Links the page offered that extraction left out: past the cap, nofollow.
    over_cap: int = 0
    nofollow: int = 0
    #: What a visit of a tracked URL found (``revisits.py``), and what its settlement tells the
    #: frontier about the URL's next visit.
    visit: Visit | None = None
    revisit: Revisit | None = None
    #: The page waits for its content or items (``crawler/harvest/harvest.py``), made at flush time.
    wants_harvest: bool = False
    harvest: Harvest | None = None
    #: Its visible text, read with its links (``content: text``), until it is harvested.
    text: str | None = None
    #: A sitemap's links, each group with its own depth and parent (sitemaps.py, parents.py).
    link_groups: list[PageLinksToAdmit] = field(default_factory=list)
    #: Links the page offered that were left out before admission, by reason.
    refused: dict[str, int] = field(default_factory=dict)
    #: What document the response was, for the revisit rules of its kind (``rule_for``):
    #: None for a page.
    kind: DocumentKind | None = None
    #: A stored file download's record (``spec.files``): written to ``files/``, not ``pages/``.
    file: FileRecord | None = None
    #: Nothing to write (a failed file download): the lease is settled with the batch.
    silent: bool = False
    #: The page's links that ``files`` rules marked as files, one group per rule.
    file_links: list[PageLinksToAdmit] = field(default_factory=list)

    def forget_links(self) -> None:
        """The page's links are admitted and their drops counted: never twice."""
        self.links, self.link_groups, self.refused, self.file_links = [], [], {}, []
        self.over_cap = self.nofollow = 0

    def let_go_of_body(self) -> None:
        """The page is written: its body is no longer held, nor counted in the budget."""
        if self.reservation is not None:
            self.reservation.release()
            self.reservation = None
        if self.result is not None:
            self.result.body = b""


class Worker:
    """One crawl worker process's loop over a shared frontier."""

    def __init__(
        self,
        *,
        spec: CrawlJobSpec,
        frontier: Frontier,
        fetcher: Fetcher,
        robots: RobotsPolicy,
        store: OutputStore | None,
        metrics: WorkerMetrics,
        options: WorkerOptions,
        guard: AddressGuard | None = None,
        memory: ByteBudget | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.spec = spec
        self.frontier = frontier
        self.fetcher = fetcher
        self.robots = robots
        self.metrics = metrics
        self.options = options
        self.store = store
        self._output_finished = store is None or not options.finish_output
        self._finish_checked_at = 0.0
        #: The bytes of bodies in flight and in the done buffer (crawler/fetching/memory.py).
        self.memory = memory if memory is not None else ByteBudget(None)
        self.worker_id = options.worker_id
        self.scope = Scope.from_spec(spec.scope)
        self.limit = AdaptiveLimit(maximum=spec.concurrency.per_worker)
        #: None when the job wants neither content nor items: its pages cost nothing more.
        self.harvester = Harvester.from_spec(spec)
        self._read_sitemaps = spec.scope.sitemaps
        #: The job's recrawl rules; empty: a one-shot crawl, no revisit state read or sent.
        self._recrawl = spec.recrawl
        self._admission = LinkAdmission(
            self.scope, generation_size=options.link_cache_generation_size
        )
        #: The include/exclude in force: the spec's, until the fleet writes others into the
        #: frontier (a running job's scope edited); then claimed URLs are checked against them.
        self._scope_rules: ScopeRules = (tuple(spec.scope.include), tuple(spec.scope.exclude))
        self._scope_changed = False
        #: Links a partition that is down could not take (``spool.py``); None: one partition.
        self.spool = (
            LinkSpool(options.link_spool_dir, max_bytes=options.link_spool_bytes)
            if isinstance(frontier, PartitionedFrontier)
            else None
        )
        self._rng = rng or random.Random()
        #: The fetch task of each lease in its fetching stage.
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._done: list[_Outcome] = []
        self._wake = asyncio.Event()
        self._stopping = False
        self._closed = asyncio.Event()
        self._flush_wanted = asyncio.Event()
        self._flushes_done = False  # draining: the flush loop ends, run() flushes the rest
        self.counters = worker_counters()
        self.leases = LeaseBook(frontier, self.worker_id, metrics=metrics, counters=self.counters)
        #: The address guard and robots.txt, before any request (with allowPrivateNetworks the
        #: guard still refuses cloud metadata addresses).
        self.gate = RequestGate.from_spec(spec, self.leases, robots=robots, guard=guard)
        #: File downloads (``spec.files``); None: every lease is a page.
        self.files = FileDownloads.from_spec(
            spec,
            frontier=frontier,
            leases=self.leases,
            fetcher=fetcher,
            store=store,
            metrics=metrics,
            worker_id=self.worker_id,
        )
        self._file_contexts = self.files.rules.contexts if self.files else frozenset[str]()
        file_age = output_file_age_seconds(spec.recrawl, spec.output.max_file_age_seconds)
        self.output = worker_output(
            store,
            options,
            spec.output.model_copy(update={"max_file_age_seconds": file_age}),
            on_durable=self._settle_generation,
            metrics=metrics,
        )

    # -- control ------------------------------------------------------------------------

    def request_stop(self) -> None:
        """SIGTERM: stop claiming; in-flight URLs finish or are released within the grace."""
        if not self._stopping:
            log.info("stop requested", extra={"layer": "flow", "worker": self.worker_id})
        self._stopping = True
        if self.files is not None:
            self.files.stop()  # each download stops at its next chunk and keeps its part
        self._wake.set()

    async def run(self) -> int:
        """Crawl until the job is complete (or stop is requested); returns the exit code."""
        flushing = asyncio.create_task(self._flush_loop())
        background = [
            asyncio.create_task(
                self._every(self.spec.lease.heartbeat_seconds, self._heartbeat_once)
            ),
            flushing,
        ]
        try:
            await self._heartbeat_once()
            await self._claim_loop()
            await self._drain()
            # The flush loop ends after the batch it has in hand; the last pages go into the
            # sink, then their files are made durable and acked, while the heartbeat still
            # extends the leases that wait for them.
            self._flushes_done = True
            self._flush_wanted.set()
            await asyncio.wait([flushing], timeout=self.options.settle_seconds)
            await flush_at_shutdown(self._flush)
            await self._drain_output()
            await self._finish_output_if_complete()
        finally:
            # Loops end on this event, not on cancel(): a cancellation that lands inside a
            # Redis call can surface as a connection error and be lost.
            self._closed.set()
            self._flush_wanted.set()  # the flush loop may be waiting for work: let it end now
            _, stuck = await asyncio.wait(background, timeout=self.options.settle_seconds)
            for task in stuck:
                task.cancel()
            await flush_at_shutdown(self._flush)
            await self.output.aclose()
            if self.files is not None:
                await self.files.aclose()
            if self.harvester is not None:
                await asyncio.to_thread(self.harvester.close)
            await self._release_unsaved()
            if self.spool is not None:
                self.spool.close()
            with contextlib.suppress(Exception):
                await self.frontier.forget_worker(self.worker_id)
        return 0

    # -- claiming -----------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while not self._stopping:
            room = self.limit.limit - len(self._inflight)
            if (
                room <= 0
                or len(self._done) >= self.options.max_buffered
                or self.output.blocked
                or self.memory.exhausted
                or (self.spool is not None and self.spool.full)
            ):
                await self._wait(self.options.idle_poll_seconds)  # backpressure
                continue
            if self._inflight and room < max(1, self.limit.limit // 4):
                # Claim in batches: one round trip per page finished would cost more Redis
                # time than the fetches save. A little more room comes within milliseconds.
                await self._wait(self.options.claim_batch_wait_seconds)
                room = self.limit.limit - len(self._inflight)
            # Before the claim is sent, so each lease's deadline on this clock falls no later
            # than the frontier's (which counts the host slot of a dead worker until then).
            sent_at = asyncio.get_running_loop().time()
            leases = await self.leases.claim(room)
            if leases is None:
                # Redis restarting or failing over: wait it out; leases we hold stay ours
                # until their ttl, and heartbeats extend them once Redis is back.
                await self._wait(self.leases.retry_in_seconds)
                continue
            if not leases:
                if not self._inflight and not self._done and await self._complete_if_known():
                    log.info("job complete", extra={"layer": "flow"})
                    return
                await self._wait(self.options.idle_poll_seconds)
                continue
            if self._recrawl and not await self._read_revisit_states(leases):
                return  # stopping with Redis away: the book releases them at shutdown
            for lease in leases:
                deadline = (
                    sent_at + lease.fetch_deadline_at - lease.claimed_at
                    if lease.fetch_deadline_at
                    else None
                )
                self._inflight[lease.lease_id] = asyncio.create_task(self._process(lease, deadline))
            self.metrics.set_in_flight(len(self._inflight))

    async def _read_revisit_states(self, leases: list[Lease]) -> bool:
        """The batch's revisit states (one round trip), retried while Redis is away: a tracked
        URL fetched without its state would be judged new and asked unconditionally. False
        when stop was requested before Redis answered."""
        while True:
            try:
                await self.leases.read_revisit_states(leases)
            except FrontierUnavailable as exc:
                if self._stopping:
                    return False
                wait = self.leases.outage.failed()
                log.warning(
                    "reading revisit states failed, retrying in %.1f s: %s",
                    wait,
                    exc,
                    extra={"layer": "flow"},
                )
                await self._wait(wait)
                continue
            self.leases.outage.succeeded()
            return True

    async def _complete_if_known(self) -> bool:
        """:meth:`_idle_and_complete`, False while Redis does not answer it: a claim that
        came back empty does not mean every partition answered (one on a node that is down
        costs only its share of the claim), and a worker must not die of the counters' read
        that follows it (as one did when a cluster master was stopped for 20 s)."""
        try:
            return await self._idle_and_complete()
        except FrontierUnavailable as exc:
            log_unavailable("checking whether the job is complete", exc)
            return False

    async def _idle_and_complete(self) -> bool:
        """Nothing to claim and nothing in hand: seal the open output file if the frontier has
        nothing left to hand out either (so the crawl's last pages need not wait for the file's
        age), and say whether the job is complete (only a worker that exits when done asks)."""
        stats = None
        if self.output.open_records:
            stats = await self.frontier.stats()
            if stats.queued == 0 and stats.delayed == 0:
                self.output.rotate()
        if self.leases.generations or self.spec.keeps_going:
            return False  # a job that keeps going is never complete: its revisits come due
        if not self.options.exit_when_done:
            if time.monotonic() - self._finish_checked_at >= _FINISH_CHECK_SECONDS:
                self._finish_checked_at = time.monotonic()
                await self._finish_output_if_complete(stats)
            return False
        return (stats or await self.frontier.stats()).complete

    async def _finish_output_if_complete(self, stats: FrontierStats | None = None) -> None:
        """The job is complete: write manifest.json and dead-letters.jsonl, unless another
        worker does or did (one claim in Redis elects the writer; see output/manifest.py)."""
        if self._output_finished or self.store is None or len(self.leases):
            return
        stats = stats or await self.frontier.stats()
        if self.spec.keeps_going:
            await self._snapshot_output(stats)
            return
        if not stats.complete:
            return
        job_id = self.frontier.keys.job_id
        run = await self.frontier.current_run() if self.spec.schedule is not None else None
        counts = await finish_output_once(
            self.frontier, self.store, job_id, self.spec, stats, writer=self.worker_id, run_id=run
        )
        if counts is None:
            return  # another worker holds the claim and writes them
        log.info(
            "output complete: %d files, %d page records",
            counts["files"],
            counts["pageRecords"],
            extra={"layer": "output", "worker": self.worker_id},
        )
        self._output_finished = True

    async def _snapshot_output(self, stats: FrontierStats) -> None:
        """A job that keeps going never completes, so its closing files are a snapshot, written
        by a worker that drains (suspend, delete, Ctrl-C, a scale-down while the job waits for
        its revisits) once no lease is held anywhere: every acked page's file is listed. Not
        elected nor marked: the next drain writes a newer one over it."""
        if not self._stopping or stats.leased:
            return
        assert self.store is not None
        job_id = self.frontier.keys.job_id
        manifest = await finish_output(self.frontier, self.store, job_id, self.spec, stats)
        log.info(
            "output snapshot: %d files, %d page records",
            manifest["counts"]["files"],
            manifest["counts"]["pageRecords"],
            extra={"layer": "output", "worker": self.worker_id},
        )

    async def _wait(self, seconds: float) -> None:
        await wait_for_wake(self._wake, seconds)

    # -- one URL ------------------------------------------------------------------------

    async def _process(self, lease: Lease, deadline: float | None) -> None:
        try:
            outcome = await self._fetch_waiting_out_redis(lease, deadline)
        except Exception as exc:  # a bug or a hostile input we did not foresee: one URL
            log.exception("processing %s failed", lease.url, extra={"layer": "task"})
            outcome = self._failed(lease, None, FailureClass.PROTOCOL_ERROR, repr(exc)[:500])
        finally:
            self._inflight.pop(lease.lease_id, None)
            # Whatever ended it -- a response, a refusal before any request, an error -- its
            # request phase is over: its host slot goes back with the next claim.
            self.leases.fetched(lease.lease_id)
        if outcome is None:  # deferred: the lease went back (gate.py)
            self._wake.set()
            return
        self._done.append(outcome)
        self._wake.set()
        self._flush_wanted.set()

    async def _fetch_waiting_out_redis(
        self, lease: Lease, deadline: float | None
    ) -> _Outcome | None:
        """The lease's outcome, the frontier's outages waited out on the way.

        A fetch asks the frontier before its request (robots.txt's fleet-wide lock and
        answer) and during it (pacing a redirect's hop): Redis away then, or the partition of
        the URL's host, is no failure of the URL, whose attempt it would cost (and, taken for
        a protocol error, the retry backoff: a chaos test's two seeds waited a minute). So it
        is asked again once Redis answers, the lease kept; a worker that stops meanwhile
        leaves it to the book, which gives it back at shutdown (None: as a deferral)."""
        backoff = Backoff()
        while True:
            try:
                return await self._fetch_and_classify(lease, deadline)
            except FrontierUnavailable as exc:
                if self._stopping:
                    return None
                wait = backoff.failed()
                log.warning(
                    "processing %s waits for Redis, again in %.1f s: %s",
                    lease.url,
                    wait,
                    exc,
                    extra={"layer": "task"},
                )
                await self._wait(wait)  # a stop wakes it

    async def _pace(self, url: str, home: str) -> None:
        """Keep a fetch's extra requests (retries, redirect hops) in their host's schedule.

        ``home`` is the lease's host, whose delay the claim already applied: with no job-wide
        delay only a hop to another host is paced (by that host's robots Crawl-delay).
        """
        canonical = try_canonicalize(url)
        if canonical is None:
            return
        host = host_of(canonical)
        if self.spec.concurrency.host_delay_seconds > 0 or host != home:
            await self.frontier.pace(host)

    async def _fetch_and_classify(self, lease: Lease, deadline: float | None) -> _Outcome | None:
        """The lease's outcome; None when it was deferred (given back, see gate.py)."""
        # A sitemap document is fetched like a page; only what is read from it differs.
        sitemap = sitemap_task(lease.parent) if self._read_sitemaps else None
        if self._scope_changed:
            verdict = self.scope.check(lease.url, lease.depth)
            if verdict in (ScopeVerdict.EXCLUDED, ScopeVerdict.NOT_INCLUDED):
                message = f"out of the scope changed while the job ran ({verdict})"
                return self._failed(
                    lease, None, FailureClass.EXCLUDED_LIVE, message, retryable=False
                )
        decision = await self.gate.before_request(lease)
        if isinstance(decision, Deferred):
            return None
        if decision is not None:
            refused = self._failed(
                lease, None, decision.failure_class, decision.message, retryable=decision.retryable
            )
            if (
                decision.failure_class is FailureClass.ROBOTS_DISALLOWED
                and sitemap is not None
                and sitemap.root
            ):
                await self._add_robots_sitemaps(lease, refused)  # robots.txt may still name some
            return refused
        depth, home = lease.depth, lease.host
        files = self.files
        candidate = files.candidate(lease) if files is not None else None
        if candidate is not None and self.scope.max_depth is not None:
            depth = min(depth, self.scope.max_depth)  # a file may lie one level past maxDepth
        if files is not None and candidate is not None and files.downloads_at_once(candidate):
            return await self._download(lease, candidate, depth)
        state = self.leases.state_of(lease.lease_id)
        reservation = self.memory.reservation()
        try:
            result = await self.fetcher.fetch(
                lease.url,
                allow_url=lambda url: self.scope.check(url, depth) is None,
                check_hop=self.gate.check_hop,
                min_retry_delay_seconds=self.spec.concurrency.host_delay_seconds,
                pace=lambda url: self._pace(url, home),
                reservation=reservation,
                deadline=deadline,
                conditional=(
                    Conditional(state.validators.etag, state.validators.last_modified)
                    if state is not None
                    else None
                ),
                stop_for_type=files.stops_for_type(candidate) if files is not None else None,
            )
        except BaseException:
            reservation.release()
            raise
        self.leases.fetched(lease.lease_id)  # the response is in: the slot goes back now
        if files is not None and result.file_type is not None:
            file_rule = files.rule_for_response(result.file_type, candidate)
            if file_rule is not None:
                reservation.release()  # nothing was read: the download streams to its part
                return await self._download(lease, file_rule, depth)
        if not self._recrawl:
            return await self._read_response(lease, result, reservation, sitemap)
        visit = judge(
            state=state,
            status=result.status,
            succeeded=result.failure is None,
            body=result.body,
            headers=result.headers,
            url=result.final_url,
            fetched_at=result.fetched_at,
            whole_digest=self.spec.output.format == "warc",
        )
        if visit is not None and visit.entry_only:
            reservation.release()
            outcome = self._revisited(lease, result, visit)
        else:
            outcome = await self._read_response(lease, result, reservation, sitemap)
        if sitemap is not None:
            outcome.kind = "sitemap"
        rule = rule_of(self._recrawl, lease.url, outcome.kind, tracked=state is not None)
        if visit is not None and (rule is not None or state is not None):
            outcome.visit = visit
            outcome.record = replace(outcome.record, change=visit.change)
            # A gone URL is forgotten: by its fail, or (a host's guessed sitemap root, whose
            # 404 is no failure) by an ack without a revisit.
            if visit.change != "gone" or outcome.failure is not None:
                outcome.revisit = visit.revisit(rule, fetched_at=result.fetched_at)
        return outcome

    async def _download(self, lease: Lease, rule: FileRule, depth: int) -> _Outcome | None:
        """The lease downloaded as a file of ``rule`` (``files.py``); None when its lease went
        back (no file slot free, or stopped at shutdown)."""
        assert self.files is not None
        home = lease.host
        outcome: FileOutcome = await self.files.download(
            lease,
            rule,
            allow_url=lambda url: self.scope.check(url, depth) is None,
            check_hop=self.gate.check_hop,
            pace=lambda url: self._pace(url, home),
        )
        if isinstance(outcome, GivenBack):
            return None
        if isinstance(outcome, DownloadFailed):
            self.limit.record(False)
            retry_after = outcome.result.retry_after_seconds if outcome.result else None
            failed = self._failed(
                lease, None, outcome.failure_class, outcome.message, retry_after=retry_after
            )
            failed.silent = True  # a file is not a page: no line in pages/
            return failed
        assert isinstance(outcome, Downloaded)
        self.limit.record(True)
        return _Outcome(
            lease=lease,
            record=self._record(lease, None, None, None, 0),
            file=outcome.record,
        )

    def _revisited(self, lease: Lease, result: FetchResult, visit: Visit) -> _Outcome:
        """A tracked page found as it was (a 304, or the same body): an entry only. Its links
        and items were taken the first time: nothing is extracted again."""
        self.limit.record(True)
        record = self._record(lease, result, None, None, 0)
        result.body = b""  # the digest is all an unchanged body was read for
        return _Outcome(lease=lease, record=record, result=result)

    async def _read_response(
        self,
        lease: Lease,
        result: FetchResult,
        reservation: Reservation,
        sitemap: SitemapTask | None,
    ) -> _Outcome:
        """The outcome of a response read as a sitemap or a page (links, content, items)."""
        if sitemap is not None:
            self.limit.record(result.failure is None)
            return await self._sitemap_outcome(lease, sitemap, result, reservation)
        if result.failure is not None:
            reservation.release()
            self.limit.record(False)
            return self._failed(lease, result, result.failure, result.message)
        self.limit.record(True)
        if is_feed(result.content_type, result.body):
            return await self._feed_outcome(lease, result, reservation)
        page = _NO_LINKS
        wants_harvest = False
        if _is_html(result.content_type):
            harvester = self.harvester
            wants_harvest = harvester is not None and harvester.wants(result.final_url)
            html, encoding = decode_html(result.body, result.content_type)
            page = extract_links(
                html,
                result.final_url,
                respect_nofollow=self.spec.scope.respect_nofollow,
                max_links=self.spec.scope.max_links_per_page,
                encoding=encoding,
                text=wants_harvest and self.spec.output.content == "text",
                file_contexts=self._file_contexts,
            )
            self.metrics.observe_feed_links(page.feeds)
        links, file_links = self._mark_file_links(lease, result, page)
        return _Outcome(
            lease=lease,
            record=self._record(lease, result, None, page.title, len(page.links)),
            links=links,
            file_links=file_links,
            result=result,
            reservation=reservation,
            over_cap=page.over_cap,
            nofollow=page.nofollow,
            wants_harvest=wants_harvest,
            text=page.text,
        )

    def _mark_file_links(
        self, lease: Lease, result: FetchResult, page: PageLinks
    ) -> tuple[list[str], list[PageLinksToAdmit]]:
        """The page's links, and those ``files`` rules take by their element, grouped by rule
        with the rule's mark on their parent, admitted even one level past maxDepth. A link
        marked as a file leaves the page's plain links: one URL, one way to fetch it."""
        if self.files is None or not page.embedded:
            return page.links, []
        by_rule: dict[int, list[str]] = {}
        for url, element in page.embedded:
            rule = self.files.rules.for_link(url, element)
            if rule is not None:
                by_rule.setdefault(rule.index, []).append(url)
        if not by_rule:
            return page.links, []
        marked = {url for urls in by_rule.values() for url in urls}
        found_in = result.final_url
        groups = [
            PageLinksToAdmit(
                list(dict.fromkeys(urls)),
                lease.depth + 1,
                file_parent(found_in, index),
                past_max_depth=True,
            )
            for index, urls in by_rule.items()
        ]
        return [url for url in page.links if url not in marked], groups

    async def _sitemap_outcome(
        self, lease: Lease, task: SitemapTask, result: FetchResult, reservation: Reservation
    ) -> _Outcome:
        """A fetched sitemap document: its entries become links, grouped by what they are.

        An index's entries are sitemap documents one level down (not followed past
        ``MAX_SITEMAP_INDEX_DEPTH``); a urlset's are pages, one group per ``<lastmod>`` so
        that each carries its own in its parent. Both keep the sitemap's depth: a sitemap is
        the site's own list of entry points, so ``maxDepth`` counts clicks from its pages as
        it does from seeds. A refused document fails as its reason (``sitemap_too_large``,
        ``sitemap_invalid``), a dead letter with the message, and a log line. A host's root
        (its guessed ``/sitemap.xml``) also brings its robots.txt ``Sitemap:`` lines, and a
        404 or 410 there is no failure: the guess was wrong, nothing is lost.
        """
        limits = DEFAULT_SITEMAP_LIMITS
        if result.failure is not None:
            reservation.release()
            if task.root and result.status in (404, 410):
                outcome = _Outcome(lease, self._record(lease, result, None, None, 0), result=result)
            else:
                outcome = self._failed(lease, result, result.failure, result.message)
            if task.root:
                await self._add_robots_sitemaps(lease, outcome)
            return outcome
        try:
            document, by_lastmod = await asyncio.to_thread(_read_grouped, result.body)
        except SitemapRefused as refused:
            outcome = self._refused_document(lease, result, reservation, refused, "sitemap")
            if task.root:
                await self._add_robots_sitemaps(lease, outcome)
            return outcome
        outcome = _Outcome(
            lease=lease,
            record=self._record(lease, result, None, None, len(document.urls)),
            result=result,
            reservation=reservation,
            kind="sitemap",
        )
        found_in = lease.url  # canonical, so no '#' of its own before a mark (parents.py)
        if document.kind == "sitemapindex":
            level = task.level + 1
            if level > limits.max_index_depth:
                outcome.refused["sitemap_depth"] = len(document.urls) + document.over_cap
                log.info(
                    "sitemap index %s is nested %d deep: its %d sitemaps are not read",
                    lease.url,
                    level,
                    len(document.urls),
                    extra={"layer": "task"},
                )
            else:
                parent = sitemap_parent(found_in, level)
                outcome.link_groups.append(PageLinksToAdmit(document.urls, lease.depth, parent))
                if document.over_cap:
                    outcome.refused["sitemap_count"] = document.over_cap
        else:
            outcome.link_groups.extend(
                PageLinksToAdmit(urls, lease.depth, listed_parent(found_in, lastmod))
                for lastmod, urls in by_lastmod.items()
            )
            if document.over_cap:
                outcome.refused["sitemap_url_cap"] = document.over_cap
        if task.root:
            await self._add_robots_sitemaps(lease, outcome)
        return outcome

    async def _feed_outcome(
        self, lease: Lease, result: FetchResult, reservation: Reservation
    ) -> _Outcome:
        """A fetched RSS or Atom feed: read like a urlset. Its entries become links, one group
        per date (the entry's updated, else published date) carried in their parent as a
        sitemap's lastmod is, so each page's record has it. They keep the feed's depth: a feed
        is the site's own list of what is new, as a sitemap is of what it holds. A refused
        feed fails as its reason (``feed_too_large``, ``feed_invalid``), a dead letter.
        """
        try:
            feed, by_date = await asyncio.to_thread(_read_feed_grouped, result)
        except FeedRefused as refused:
            return self._refused_document(lease, result, reservation, refused, "feed")
        outcome = _Outcome(
            lease=lease,
            record=self._record(lease, result, None, feed.title, len(feed.entries)),
            result=result,
            reservation=reservation,
            kind="feed",
        )
        found_in = lease.url  # canonical, so no '#' of its own before a mark (parents.py)
        outcome.link_groups.extend(
            PageLinksToAdmit(urls, lease.depth, listed_parent(found_in, date))
            for date, urls in by_date.items()
        )
        if feed.over_cap:
            outcome.refused["feed_entry_cap"] = feed.over_cap
        return outcome

    def _refused_document(
        self,
        lease: Lease,
        result: FetchResult,
        reservation: Reservation,
        refused: DocumentRefused,
        kind: DocumentKind,
    ) -> _Outcome:
        """A sitemap or feed its reader refused: failed as its reason, with a log line."""
        reservation.release()
        log.warning(
            "%s %s refused (%s): %s",
            kind,
            lease.url,
            refused.failure_class,
            refused.message,
            extra={"layer": "task"},
        )
        failure_class = FailureClass(refused.failure_class)
        outcome = self._failed(lease, result, failure_class, refused.message)
        outcome.kind = kind
        return outcome

    async def _add_robots_sitemaps(self, lease: Lease, outcome: _Outcome) -> None:
        """The ``Sitemap:`` lines of the lease's host's robots.txt, as links of ``outcome``."""
        origin = origin_of(lease.url)
        robots_url = origin + "/robots.txt"
        listed = [urljoin(robots_url, url) for url in await self.robots.sitemaps(origin)]
        cap = DEFAULT_SITEMAP_LIMITS.max_sitemaps
        if len(listed) > cap:
            outcome.refused["sitemap_count"] = len(listed) - cap
        if listed:
            parent = sitemap_parent(robots_url, 0)
            outcome.link_groups.append(PageLinksToAdmit(listed[:cap], lease.depth, parent))

    def _failed(
        self,
        lease: Lease,
        result: FetchResult | None,
        failure_class: FailureClass,
        message: str,
        *,
        retryable: bool | None = None,
        retry_after: float | None = None,
    ) -> _Outcome:
        """A failed outcome; ``retryable`` overrides the class's fate (a host given up);
        ``retry_after`` (seconds) is the server's word when no page result carries it."""
        verdict = fate(failure_class)
        if retryable is not None and retryable != verdict.retryable:
            verdict = replace(verdict, retryable=retryable)
        delay = 0.0
        if verdict.retryable:
            retry = self.spec.retry
            delay = backoff_seconds(
                lease.attempts + 1,
                retry.backoff_base_seconds,
                retry.backoff_factor,
                retry.backoff_max_seconds,
                verdict.backoff_multiplier,
                self._rng,
            )
            if result is not None and result.retry_after_seconds is not None:
                retry_after = result.retry_after_seconds
            if retry_after is not None:
                delay = max(delay, min(retry_after, retry.backoff_max_seconds))
        self.metrics.observe_failure(failure_class, retried=verdict.retryable)
        return _Outcome(
            lease=lease,
            record=self._record(lease, result, failure_class, None, 0),
            failure=Failure(lease.lease_id, str(failure_class), message, verdict.retryable, delay),
            result=result,
        )

    def _record(
        self,
        lease: Lease,
        result: FetchResult | None,
        failure_class: FailureClass | None,
        title: str | None,
        outlinks: int,
    ) -> PageRecord:
        body = result.body if result is not None else b""
        parent, lastmod = split_parent(lease.parent)
        return PageRecord(
            url=lease.url,
            final_url=result.final_url if result is not None else lease.url,
            status=result.status if result is not None else None,
            depth=lease.depth,
            parent=parent,
            fetched_at=result.fetched_at if result is not None else time.time(),
            content_type=result.content_type if result is not None else None,
            length=len(body),
            sha256=sha256(body).hexdigest() if body else None,
            title=title,
            outlinks=outlinks,
            failure_class=str(failure_class) if failure_class else None,
            attempt=lease.attempts + 1,
            worker=self.worker_id,
            fetch_id=f"{self.worker_id}-{lease.number}",
            lastmod=lastmod,
        )

    # -- flushing -----------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        """Flush soon after pages finish: outputs and new links should not wait for a tick."""
        while not (self._closed.is_set() or self._flushes_done):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await self._flush_wanted.wait()
            self._flush_wanted.clear()
            if self._closed.is_set() or self._flushes_done:
                return
            self.output.tick()  # seal an output file that is full or old (never raises)
            if self.output.write_backoff_seconds > 0:
                continue  # a batch the spool refused waits in _done for the sink's backoff
            await asyncio.sleep(self.options.flush_linger_seconds)  # let a batch gather
            try:
                await self._replay_spooled()
                flushed = await self._flush()
            except OutputWriteError:
                continue  # counted and logged by the sink; the batch is kept, claims stop
            except FrontierUnavailable as exc:
                log_unavailable("flush", exc)  # the batch is kept for the next flush
                await asyncio.sleep(0.5)
                continue
            except Exception:
                log.exception("flush failed", extra={"layer": "flow"})
                await asyncio.sleep(0.5)
                continue
            if flushed:
                # New links may be queued now: a claim loop idling after an empty claim (the
                # start of a crawl, a thin frontier) claims them now, not at its next poll.
                self._wake.set()

    async def _every(self, seconds: float, action: Callable[[], Awaitable[None]]) -> None:
        """Run ``action`` every ``seconds`` until the worker closes; log, never die, on errors."""
        await every(seconds, action, self._closed)

    async def _flush(self) -> int:
        """Admit new links and spool the pages: two steps, one round trip.

        Links go in and pages are written before any page is acked (which waits for the
        file to become durable, see ``_settle_generation``): a crash in between re-fetches
        the page (output is at least once), and the Bloom filter makes its links a no-op the
        second time. Returns the pages flushed.
        """
        batch, self._done = self._done, []
        if not batch:
            return 0
        try:
            await self._complete(batch)
        except Exception:
            self._done[:0] = batch  # try again next flush; the leases are still ours
            raise
        return len(batch)

    async def _harvest(self, batch: list[_Outcome]) -> None:
        """Content and items of the batch's pages that want them, for the whole batch at once,
        in the harvester's thread under its time bound (``crawler/harvest/harvest.py``); a page
        whose extraction failed becomes a ``parser_error`` failure with the message. Done once: a
        retried flush keeps it."""
        waiting = [
            outcome
            for outcome in batch
            if outcome.wants_harvest and outcome.harvest is None and outcome.result is not None
        ]
        if self.harvester is None or not waiting:
            return
        inputs = [
            HarvestInput(
                result.body,
                result.content_type,
                result.final_url,
                status=result.status or 0,
                headers=result.headers,
                depth=outcome.lease.depth,
                text=outcome.text,
            )
            for outcome in waiting
            if (result := outcome.result) is not None
        ]
        # A big batch may take longer than a lease lives: the book extends every lease it
        # holds, these too, until they are settled.
        harvests = await self.harvester.harvest_batch_bounded(inputs)
        for outcome, harvest in zip(waiting, harvests, strict=True):
            outcome.harvest = harvest
            outcome.text = None  # in the harvest's content now
            if harvest.error is not None:
                failure_class = FailureClass.PARSER_ERROR
                self.metrics.observe_failure(failure_class, retried=False)
                outcome.failure = Failure(
                    outcome.lease.lease_id, str(failure_class), harvest.error, False, 0.0
                )
                outcome.record = replace(outcome.record, failure_class=str(failure_class))
                continue
            if harvest.content is not None:
                outcome.record = replace(
                    outcome.record,
                    content=harvest.content,
                    content_truncated=harvest.content_truncated,
                )
            if harvest.links:  # the parser's: they pass scope, robots and dedup like the rest
                base = outcome.record.final_url
                outcome.links.extend(urljoin(base, link) for link in harvest.links)

    async def _complete(self, batch: list[_Outcome]) -> None:
        await self._harvest(batch)
        # Marked file links first: a URL one page offers as a file and another as a page is
        # queued as the file (the first copy in a batch is the one admitted).
        pages = [group for outcome in batch for group in outcome.file_links]
        pages += (
            PageLinksToAdmit(outcome.links, outcome.lease.depth + 1, outcome.record.final_url)
            for outcome in batch
            if outcome.links
        )
        pages += (group for outcome in batch for group in outcome.link_groups)
        pending = self._admission.prepare(pages)
        admitted: list[Admission | None] = []
        if pending.links:
            try:
                admitted = list(await self.frontier.enqueue(pending.links))
            except PartitionsUnavailable as error:
                admitted = self._spool_unanswered(batch, pending.links, error)
            else:
                if self.spool is not None:
                    self.spool.passed()
            answered = [code for code in admitted if code is not None]
            self.counters["links_new"] += sum(1 for code in answered if code == 1)
            self.metrics.observe_bloom(code == 1 for code in answered)
        self._admission.settle(pending, admitted)
        # Counted once the enqueue answered: a batch whose enqueue failed is prepared again.
        self.counters["links_local_hits"] += pending.local_hits
        self.counters["links_remote_checks"] += pending.remote_checks
        self.metrics.observe_link_checks(pending.local_hits, pending.remote_checks)
        self.metrics.observe_dropped_links(
            _dropped_links(batch, pending.dropped, [c for c in admitted if c is not None])
        )
        for outcome in batch:  # a batch the output refuses is written again, not admitted again
            outcome.forget_links()
        generation = self.output.write(
            [_page_output(outcome) for outcome in batch if not outcome.silent]
        )
        # Metrics per batch, not per page: each update takes a lock and a label lookup.
        self.metrics.observe_fetches(
            (result.status, result.elapsed_seconds, result.wire_bytes)
            for outcome in batch
            if (result := outcome.result) is not None
        )
        for outcome in batch:
            outcome.let_go_of_body()
        self.metrics.set_concurrency_limit(self.limit.limit)
        self.metrics.set_in_flight(len(self._inflight))
        self.metrics.set_memory(self.memory)
        self.metrics.set_robots_cache(*self.robots.cache_states())
        if self._recrawl:
            self.metrics.observe_revisits(
                (outcome.visit.change, outcome.visit.lag_seconds)
                for outcome in batch
                if outcome.visit is not None
            )
        for outcome in batch:
            if outcome.failure is not None:
                self.leases.fail_later(outcome.lease.lease_id, outcome.failure)
            if outcome.revisit is not None:
                self.leases.revisit_later(outcome.lease.lease_id, outcome.revisit)
        if not self._inflight and not self._done:
            await self._beat_before_idle()
        # Settled once ``generation`` is durable (now, when nothing was written: format none).
        await self.leases.written([outcome.lease.lease_id for outcome in batch], generation)
        self._report_output()

    def _spool_unanswered(
        self, batch: Sequence[_Outcome], links: Sequence[Link], error: PartitionsUnavailable
    ) -> list[Admission | None]:
        """The links of the partitions that did not answer go to the spool, and the batch's
        pages that offered links are held until those partitions take them (``spool.py``);
        the answers of the others, None where there is none. Raises ``error`` when the spool
        is full: the batch is kept and flushed again (its answered links are then seen)."""
        if self.spool is None or not isinstance(self.frontier, PartitionedFrontier):
            raise error  # only a partitioned frontier answers in part
        admitted: list[Admission | None] = [
            cast("Admission | None", code) for code in error.answered
        ]
        admitted += [None] * (len(links) - len(admitted))
        by_partition: dict[int, list[Link]] = {}
        for link, code in zip(links, admitted, strict=True):
            if code is None:
                by_partition.setdefault(self.frontier.index_of(link.url), []).append(link)
        holders = [
            outcome.lease.lease_id
            for outcome in batch
            if outcome.links or outcome.file_links or outcome.link_groups
        ]
        if not self.spool.add(by_partition, holders):
            log.warning(
                "link spool full (%d links, %d bytes): the batch waits for partition(s) %s",
                self.spool.links,
                self.spool.bytes,
                ", ".join(map(str, error.partitions)),
                extra={"layer": "flow"},
            )
            raise error
        self.leases.hold(holders)
        spooled = sum(len(group) for group in by_partition.values())
        self.counters["links_spooled"] += spooled
        log.warning(
            "%s: %d link(s) spooled, %d page(s) held until it takes them",
            error,
            spooled,
            len(holders),
            extra={"layer": "flow"},
        )
        return admitted

    async def _replay_spooled(self) -> None:
        """Each partition's spooled links, enqueued again once it answers (backing off while
        it does not); the pages no partition owes links any more are settled."""
        spool = self.spool
        now = time.monotonic()
        if spool is None or not spool.partitions or not spool.backoff.due(now):
            return
        for partition in spool.partitions:
            links = spool.read(partition)
            try:
                for start in range(0, len(links), _REPLAY_BATCH):
                    codes = await self.frontier.enqueue(links[start : start + _REPLAY_BATCH])
                    self.counters["links_new"] += sum(1 for code in codes if code == 1)
            except FrontierUnavailable as error:
                wait = spool.backoff.missed(now)
                log.info("spooled links not replayed yet (%s); next try in %.0f s", error, wait,
                         extra={"layer": "flow"})  # fmt: skip
                return
            self.counters["links_replayed"] += len(links)
            released = spool.replayed(partition)
            log.info(
                "replayed %d spooled link(s) into partition %d; %d page(s) released",
                len(links),
                partition,
                len(released),
                extra={"layer": "flow"},
            )
            await self.leases.unhold(released)
        spool.backoff.answered()

    async def _settle_generation(self, generation: int, files: Sequence[DurableFile]) -> None:
        """The sink's callback: every file of ``generation`` is durable. The book records the
        files for the manifest, then acks and fails the leases whose records they hold.
        Raising makes the sink call again; the steps already done are not repeated."""
        await self.leases.durable(generation, files)
        self._report_output()

    def _report_output(self) -> None:
        waiting = self.leases.count(Stage.OUTPUT)
        self.metrics.set_output_state(
            pending_files=self.output.pending_files,
            waiting_pages=waiting,
            blocked=self.output.blocked,
        )

    # -- flow: heartbeats, lease extension, shutdown ------------------------------------

    def _heartbeat_fields(self) -> dict[str, HeartbeatValue]:
        return heartbeat_fields(
            self.counters,
            self.leases,
            self.output,
            in_flight=len(self._inflight),
            limit=self.limit.limit,
            file_downloads=self.files.in_flight if self.files is not None else 0,
            spool=self.spool,
        )

    async def _heartbeat_once(self) -> None:
        await self.frontier.heartbeat(self.worker_id, self._heartbeat_fields())
        await self.leases.keep_alive()
        if self.files is not None:
            await self.files.keep_alive()
        await self._follow_scope()

    async def _follow_scope(self) -> None:
        """Take the scope's include/exclude the fleet wrote (a running job's edited): links
        found from now on are judged by them, and claimed URLs out of them are dropped."""
        found = await self.frontier.scope_rules()
        if found is None:
            return
        rules, changed = found
        # a worker started with the new spec still claims URLs queued under the old one
        self._scope_changed = self._scope_changed or changed
        if rules == self._scope_rules:
            return
        include, exclude = rules
        spec = self.spec.scope.model_copy(update={"include": include, "exclude": exclude})
        self.scope = Scope.from_spec(spec)
        self._admission = LinkAdmission(
            self.scope, generation_size=self.options.link_cache_generation_size
        )
        self._scope_rules = rules
        self._scope_changed = True
        log.info(
            "the job's scope changed: include %d pattern(s), exclude %d",
            len(include),
            len(exclude),
            extra={"layer": "flow"},
        )

    async def _beat_before_idle(self) -> None:
        """A heartbeat now, before the acks of a batch that leaves nothing in flight: if these
        were the crawl's last pages, the fleet sees the job complete with this worker's final
        counters already in its heartbeat (the local run's summary sums them), not up to a
        heartbeat interval older. A busy worker never gets here; one that fails only costs
        the counters their freshness, so it is not raised (the batch must not be flushed
        twice)."""
        try:
            await self.frontier.heartbeat(self.worker_id, self._heartbeat_fields())
        except FrontierUnavailable as error:
            log.debug("heartbeat before idle failed: %s", error, extra={"layer": "flow"})

    async def _drain(self) -> None:
        """Give in-flight fetches the grace period, then release what is left."""
        if not self._inflight:
            return
        _, pending = await asyncio.wait(self._inflight.values(), timeout=self.options.grace_seconds)
        if not pending:
            return
        unfinished = [lease_id for lease_id, task in self._inflight.items() if task in pending]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        with contextlib.suppress(FrontierUnavailable):  # else they expire back by themselves
            await self.leases.release(unfinished, "in flight past the grace at shutdown")

    async def _drain_output(self) -> None:
        """Seal the open output file and wait for every file to be durable and acked."""
        waiting = await self.output.drain(self.options.output_drain_seconds)
        if waiting:
            log.warning(
                "%d output file generation(s) not durable after %.0f s; their pages are"
                " released to be crawled again",
                len(waiting),
                self.options.output_drain_seconds,
                extra={"layer": "output", "worker": self.worker_id},
            )

    async def _release_unsaved(self) -> None:
        """Give back every lease not settled (no attempt counted): pages whose file never
        became durable, and any other the book still holds. Another worker crawls them now
        instead of after their lease expires."""
        for outcome in self._done:
            outcome.let_go_of_body()
        self._done.clear()
        await self.leases.release_all("not durable at shutdown")


def _page_output(outcome: _Outcome) -> PageOutput:
    """What the sink writes of an outcome: a tracked page found as it was is an entry and, in
    a WARC, a revisit record (no body); the rest as ever."""
    result = outcome.result
    visit = outcome.visit
    if outcome.file is not None:
        return PageOutput(outcome.record, file=outcome.file)
    if visit is not None and visit.entry_only:
        return PageOutput(
            outcome.record,
            response_headers=result.headers if result else None,
            revisit=visit.warc,
        )
    return PageOutput(
        outcome.record,
        response_headers=result.headers if result else None,
        body=result.body if result else None,
        items=outcome.harvest.items if outcome.harvest else (),
    )


def _dropped_links(
    batch: Sequence[_Outcome], refused: dict[str, int], admitted: Sequence[Admission]
) -> dict[str, int]:
    """Every link a flush left out, by reason: at extraction, at admission, in the frontier."""
    dropped = dict(refused)
    for outcome in batch:
        for reason, count in outcome.refused.items():
            dropped[reason] = dropped.get(reason, 0) + count
    over_cap = sum(outcome.over_cap for outcome in batch)
    nofollow = sum(outcome.nofollow for outcome in batch)
    if over_cap:
        dropped["link_cap"] = over_cap
    if nofollow:
        dropped["nofollow"] = nofollow
    for code in admitted:
        if code is Admission.OVER_LIMIT:
            dropped["max_pages"] = dropped.get("max_pages", 0) + 1
        elif code is Admission.OVER_HOST_BUDGET:
            dropped["host_budget"] = dropped.get("host_budget", 0) + 1
        elif code not in (Admission.NEW, Admission.SEEN):
            dropped["memory_pressure"] = dropped.get("memory_pressure", 0) + 1
    return dropped


def _read_grouped(body: bytes) -> tuple[Sitemap, dict[str | None, list[str]]]:
    """A sitemap's entries and its URLs by lastmod: both in the worker thread, off the loop."""
    document = read_sitemap(body)
    return document, _by_date(zip(document.urls, document.lastmods, strict=True))


def _read_feed_grouped(result: FetchResult) -> tuple[Feed, dict[str | None, list[str]]]:
    """A feed's entries (relative to the URL it came from) and their URLs by date, off the loop."""
    feed = read_feed(result.body, result.final_url)
    return feed, _by_date((entry.url, entry.lastmod) for entry in feed.entries)


def _by_date(entries: Iterable[tuple[str, str | None]]) -> dict[str | None, list[str]]:
    """URLs grouped by their date, first-seen order: one parent per date (parents.py)."""
    by_date: dict[str | None, list[str]] = {}
    for url, date in entries:
        by_date.setdefault(date, []).append(url)
    return by_date


def _is_html(content_type: str | None) -> bool:
    if not content_type:
        return True
    return content_type.split(";", 1)[0].strip().lower() in _HTML_TYPES
