"""The runtime: one Scrapy process's leases, from claim to ack, over the job's frontier.

Scrapy's engine asks the scheduler (``scheduler.py``) for requests; the spider and downloader
middlewares (``middlewares.py``) and the item signals tell this runtime what became of each.
It runs on the asyncio loop under Twisted's asyncio reactor, as three loops, each batching its
Redis round trips: **claim** (one ``claim`` per batch of up to ``concurrency.perWorker`` leases,
freeing the host slots of the responses that arrived since, decoded into requests in a local
priority heap), **flush** (one ``enqueue`` for every request the callbacks yielded since the
last flush, then one ``write`` into the output sink of every lease whose output is consumed),
**heartbeat** (the same worker id and counters as crawlfleet's own worker, one ``extend`` of
every lease held, one ``requeue_expired``). What happens to each lease -- its slot freed once
when its request phase ends, settled exactly once, extended meanwhile, released at shutdown,
Redis outages waited out -- is the lease book's (``crawlfleet.crawler.worker.leases``), the same
object crawlfleet's own worker uses; this runtime keeps only what Scrapy adds (callback
outputs, items, children).

When a lease is acked: its callback's output iterated to its end (``LeaseSpiderMiddleware``),
every item it yielded through the item pipelines (``item_scraped``, ``item_dropped`` or
``item_error`` received: Scrapy awaits those handlers after the last pipeline), every request it
yielded admitted by the frontier (enqueue returned), and its page record and items durable in
the destination (the sink's ``on_durable``). No other path acks: a lease that loses its process
before that expires back into the queue, and the page is fetched again (items are idempotent by
``url``/``source``/``position``, as crawlfleet's are, so readers keep one).

Failures and the two retry layers: Scrapy's RetryMiddleware retries a request inside its lease
(``RETRY_TIMES``, the request layer: its retries and redirects carry the lease in their meta
and stay in this process); what it gives up on reaches ``LeaseDownloaderMiddleware`` and fails
the lease with crawlfleet's failure class (``timeout``, ``connect_error``, ``http_5xx`` ...),
and the frontier retries it after a backoff, in any process, up to ``retry.taskAttempts`` (the
task layer). A callback that raises fails its lease as ``callback_error:<ExceptionClass>``,
retryable, so after ``taskAttempts`` it is a dead letter with that class; a 404 or 410
Scrapy's HttpErrorMiddleware filtered is permanent at once. An errback that handles a download
error does not save the lease: its output is used, and the lease still fails.

What holds for politeness and order: the claim is the fleet's politeness (a host gives at most
``perHost`` leases at a time over every process, ``hostDelaySeconds`` apart); a lease's host
slot is freed when its response (or final failure) arrives, reported with the next claim, so
``perHost`` bounds requests in progress fleet-wide; Scrapy's own per-domain slots keep working
below it. Retries and redirect hops inside a lease are not paced by the frontier. Priority:
the frontier hands out a host's tasks shallowest depth first; within a claimed batch requests go
to Scrapy highest ``priority`` first (FIFO among equals). Priority across batches and hosts is
not kept.

Scope (``scope.*``): ``allowedDomains`` (when set, or defaulted from seeds), ``maxDepth``,
``include``/``exclude`` and the trap rules filter every yielded request before it is queued,
each refusal counted by reason in the ``dropped links`` metric; ``maxPages`` is the frontier's
(counted ``max_pages``); the address guard refuses private addresses before the download
(``forbidden_address``, a dead letter) unless ``allowPrivateNetworks``, refuses a URL it cannot
judge (``bad_scheme``, ``invalid_url``: failing closed), and is the reactor's name resolution,
so the connection goes to the addresses it approved (``resolver.py``). The spider's own
``allowed_domains`` and Scrapy's DepthMiddleware work as they do in Scrapy, before these.

Completion: a process's start requests (``spec.seeds`` as requests to the spider's default
callback, then its ``start()``) go through the frontier's dedup, ``dont_filter`` or not
(Scrapy's start_urls are, and every process of the fleet runs them; a callback's
``dont_filter`` request skips the filter, as in Scrapy); once its start is exhausted and
queued, the next enqueue marks the job seeded, so the job is never complete before them.
``has_pending_requests`` stays true until the frontier says complete (then a
process that exits when done closes its spider, reason ``finished``; one that keeps running
writes the output's closing files and waits). An item a spider's ``start()`` yields has no
page to be written with: it is logged and counted dropped (``scrapy_start_item``).

SIGTERM releases every lease not yet handed to Scrapy at once, lets those in flight finish for
the drain budget (``--grace-seconds``), makes their output durable and acks them, releases the
rest and closes the spider (reason ``shutdown``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from hashlib import sha256
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from crawlfleet.crawler.fetching.failures import FailureClass, backoff_seconds, fate
from crawlfleet.crawler.harvest.extract import Item
from crawlfleet.crawler.links.scope import Scope
from crawlfleet.crawler.worker.flow import (
    every,
    flush_at_shutdown,
    heartbeat_fields,
    wait_for_wake,
    worker_counters,
    worker_output,
)
from crawlfleet.crawler.worker.gate import Deferred, Refused, RequestGate
from crawlfleet.crawler.worker.leases import LeaseBook, Stage
from crawlfleet.crawler.worker.sinks import DurableFile, PageOutput, PageRecord
from crawlfleet.errors import FetchError, FrontierUnavailable, OutputWriteError
from crawlfleet.frontier import Admission, Failure, Frontier, Lease, Link, try_canonicalize
from crawlfleet.output.manifest import finish_output_once
from crawlfleet.scrapy.payload import (
    LEASE_KEY,
    PARENT_KEY,
    Unserializable,
    decode_request,
    encode_request,
    found_on,
)

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawlfleet.crawler.fetching.safety import AddressGuard
    from crawlfleet.crawler.politeness.robots import RobotsPolicy
    from crawlfleet.crawler.worker.flow import WorkerOptions
    from crawlfleet.crawler.worker.metrics import WorkerMetrics
    from crawlfleet.crawljob import CrawlJobSpec
    from crawlfleet.output.stores import OutputStore
    from crawlfleet.scrapy.resolver import GuardNameResolver

__all__ = ["Runtime"]

log = logging.getLogger(__name__)

#: How long a flush waits for more work to gather once some arrived.
_FLUSH_LINGER_SECONDS: Final = 0.05
#: Callback errors are retried as the frontier retries a fetch (attempts, backoff).
CALLBACK_ERROR: Final = "callback_error"
_ITEM_ERROR: Final = "item_pipeline_error"
_FAILURE_CLASSES: Final = frozenset(str(value) for value in FailureClass)


@dataclass(slots=True)
class _Held:
    """What Scrapy adds to one lease of this process (its stage is the lease book's)."""

    lease: Lease
    #: The callback's output was iterated to its end.
    exhausted: bool = False
    #: Outputs yielded and not settled yet: requests the engine has not scheduled (or
    #: dropped), items not through the pipelines.
    outstanding: int = 0
    #: Requests it yielded that wait for the next enqueue.
    children_pending: int = 0
    children: int = 0
    items: list[Item] = field(default_factory=list)
    #: Items yielded and still in the pipelines, by object id: their place in the output.
    positions: dict[int, int] = field(default_factory=dict)
    yielded_items: int = 0
    failure: Failure | None = None
    record: PageRecord | None = None
    headers: dict[str, str] | None = None
    body: bytes | None = None
    #: Seconds the final download took (Scrapy's ``download_latency``).
    latency_seconds: float = 0.0
    #: Its page and items were handed to the output sink (its lease waits for them there).
    written: bool = False


@dataclass(frozen=True, slots=True)
class _Pending:
    """A request to admit: its task, whether it skips the filter, the lease that yielded it."""

    link: Link
    dont_filter: bool
    parent: str | None


class Runtime:
    """See the module docstring. Built by ``process.py``; Scrapy's components reach it through
    ``crawler.crawlfleet_runtime`` (Scrapy deep-copies settings, so it cannot ride in them)."""

    def __init__(
        self,
        *,
        spec: CrawlJobSpec,
        frontier: Frontier,
        store: OutputStore | None,
        metrics: WorkerMetrics,
        options: WorkerOptions,
        guard: AddressGuard | None,
        robots: RobotsPolicy,
        names: GuardNameResolver | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.spec = spec
        self.frontier = frontier
        self.store = store
        self.metrics = metrics
        self.options = options
        self.worker_id = options.worker_id
        self.guard = guard
        #: The reactor's name resolution (``resolver.py``), for the refusals it kept.
        self.names = names
        self.scope = Scope.from_spec(spec.scope)
        self._rng = rng or random.Random()
        self._spider: Spider | None = None
        self._crawler: Crawler | None = None
        self._held: dict[str, _Held] = {}
        self._ready: list[tuple[int, int, Request, str]] = []
        self._order = itertools.count()
        self._pending: list[_Pending] = []
        #: Retries and redirects announced (request_scheduled) and not yet scheduled, by id.
        self._continuations: dict[int, str] = {}
        self._wake = asyncio.Event()
        self._flush_wanted = asyncio.Event()
        #: Set whenever leases are written: a drain waits on it.
        self._progress = asyncio.Event()
        self._closed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._draining: asyncio.Task[None] | None = None
        self.start_done = False
        self._seeded = False
        #: The frontier said complete (a process that exits when done then closes its spider).
        self.complete = False
        self.stopping = False
        self._output_finished = store is None or not options.finish_output
        self.counters = worker_counters()
        self.leases = LeaseBook(frontier, self.worker_id, metrics=metrics, counters=self.counters)
        #: The address guard and robots.txt before every request of a lease (Scrapy's own
        #: RobotsTxtMiddleware is off: the job's robots.txt handling serves every worker).
        self.gate = RequestGate.from_spec(spec, self.leases, robots=robots, guard=guard)
        self.output = worker_output(
            store, options, spec.output, on_durable=self._settle_generation, metrics=metrics
        )

    # -- the engine's side (scheduler.py) -------------------------------------------------

    def open(self, crawler: Crawler, spider: Spider) -> None:
        """The spider is open: start claiming, flushing and heartbeating."""
        self._crawler, self._spider = crawler, spider
        self.metrics.set_concurrency_limit(self.spec.concurrency.per_worker)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._claim_loop()),
            loop.create_task(self._flush_loop()),
            loop.create_task(
                every(self.spec.lease.heartbeat_seconds, self._heartbeat_once, self._closed)
            ),
        ]

    @property
    def finished(self) -> bool:
        """Nothing more for this process: the job is complete, or its drain is over."""
        return (self.complete and self.options.exit_when_done) or (
            self.stopping and not self._held and not self._ready
        )

    def start_finished(self) -> None:
        """The spider's start is exhausted: the next flush queues its last requests and marks
        the job seeded."""
        self.start_done = True
        self._flush_wanted.set()

    def buffered(self) -> int:
        return len(self._ready)

    def next_request(self) -> Request | None:
        while self._ready:
            _, _, request, lease_id = heapq.heappop(self._ready)
            if lease_id in self._held:
                return request
            # else released meanwhile (SIGTERM): its new owner fetches it
        return None

    def enqueue(self, request: Request) -> bool:
        """A request reached the scheduler: a callback's (queued at the next flush), a retry or
        redirect of a lease (kept in this process, same lease), or a start request."""
        meta = request.meta
        parent = meta.pop(PARENT_KEY, None)
        if parent is None and LEASE_KEY in meta:
            lease_id = str(meta[LEASE_KEY])
            self._continuations.pop(id(request), None)
            held = self._held.get(lease_id)
            if held is None:
                return False  # released or lost: its lease's new owner fetches it
            self._push(request, lease_id)
            return True
        holder = self._held.get(str(parent)) if parent is not None else None
        found = holder.lease.url if holder is not None else ""
        depth = int(meta.get("depth", holder.lease.depth + 1 if holder is not None else 0))
        try:
            encoded = encode_request(request, self._spider_or_fail(), found)
        except Unserializable as exc:
            log.warning("request not queued: %s", exc, extra={"layer": "task"})
            self.metrics.observe_dropped_links({"scrapy_unserializable": 1})
            self._maybe_done(holder)
            return False
        if encoded is None:
            self.metrics.observe_dropped_links({"invalid_url": 1})
            self._maybe_done(holder)
            return False
        url, task_parent = encoded
        # A start request always goes through the filter: every process of the fleet runs the
        # spider's start(), and Scrapy's start_urls are dont_filter (once per process).
        dont_filter = request.dont_filter and holder is not None
        self._pending.append(
            _Pending(Link(url, depth, task_parent), dont_filter, str(parent) if holder else None)
        )
        if holder is not None:
            holder.children_pending += 1
            holder.children += 1
        self._flush_wanted.set()
        return True

    # -- what became of a lease (middlewares.py, signals) -----------------------------------

    def held(self, lease_id: object) -> _Held | None:
        """The lease's Scrapy side, while the lease is this process's (a lease the book found
        lost is forgotten here too: its new owner fetches it)."""
        if not isinstance(lease_id, str):
            return None
        if lease_id not in self.leases:
            self._held.pop(lease_id, None)
            return None
        return self._held.get(lease_id)

    def on_response(self, lease_id: object, response: Response) -> None:
        """A lease's final response arrived: its host slot is free (at the next claim)."""
        held = self.held(lease_id)
        if held is None:
            return
        self._mark_fetched(held)
        body = response.body
        content_type = response.headers.get(b"Content-Type")
        held.body = body
        held.latency_seconds = float(response.meta.get("download_latency") or 0.0)
        held.headers = {
            k.decode("latin-1"): b", ".join(v).decode("latin-1")
            for k, v in response.headers.items()
        }
        held.record = self._record(
            held.lease,
            final_url=response.url,
            status=response.status,
            content_type=content_type.decode("latin-1") if content_type else None,
            body=body,
        )

    def on_request_scheduled(self, request: Request) -> None:
        """A callback's request reached the engine (``request_scheduled``, sent before the
        scheduler is asked): it is no longer outstanding for its page, whether the scheduler
        then queues it or a handler of that signal drops it (Scrapy's OffsiteMiddleware does,
        and the scheduler never hears of it)."""
        meta = request.meta
        held = self.held(meta.get(PARENT_KEY))
        if held is not None:
            held.outstanding -= 1
            self._maybe_done(held)
            return
        continued = self.held(meta.get(LEASE_KEY))
        if continued is not None:
            # A retry or a redirect of a lease. The scheduler hears of it right after this
            # signal, in the same call, unless a handler dropped it (an offsite redirect):
            # checked once that call is over, or the lease would wait for it forever.
            self._continuations[id(request)] = continued.lease.lease_id
            asyncio.get_running_loop().call_soon(self._continuation_dropped, id(request))

    def _continuation_dropped(self, key: int) -> None:
        held = self.held(self._continuations.pop(key, None))
        if held is not None:
            self._mark_fetched(held)
            self.fail(
                held,
                str(FailureClass.OUT_OF_SCOPE),
                "its redirect or retry was dropped before it was scheduled (offsite?)",
            )

    def count_output(self, lease_id: object, item: object | None) -> None:
        """One more output of the lease's callback to wait for. An item's position is its
        place among the callback's items (as yielded, not as the pipelines finish), so a page
        crawled twice names its items alike (``url``, ``source``, ``position``)."""
        held = self.held(lease_id)
        if held is None:
            return
        held.outstanding += 1
        if item is not None:  # else a request
            held.positions[id(item)] = held.yielded_items
            held.yielded_items += 1

    def on_exhausted(self, lease_id: object) -> None:
        held = self.held(lease_id)
        if held is not None:
            held.exhausted = True
            self._maybe_done(held)

    def on_item(self, lease_id: object, item: object, *, passed: bool) -> None:
        """An item of the lease came out of the pipelines (``passed``) or was dropped."""
        held = self.held(lease_id)
        if held is None:
            if lease_id is None and passed:
                log.warning("an item with no response (from start()) is not written")
                self.metrics.observe_dropped_links({"scrapy_start_item": 1})
            return
        position = held.positions.pop(id(item), None)
        if passed:
            if position is None:  # a pipeline returned another object: its arrival order
                position = held.yielded_items + len(held.items)
            held.items.append(Item(self._spider_or_fail().name, position, _fields(item)))
        held.outstanding -= 1
        self._maybe_done(held)

    def on_item_error(self, lease_id: object, exc: BaseException | None) -> None:
        held = self.held(lease_id)
        if held is not None:
            held.outstanding -= 1
            self.fail(held, f"{_ITEM_ERROR}:{type(exc).__name__}", str(exc), retryable=True)

    async def before_request(self, request: Request) -> str | None:
        """A request is about to be downloaded: None to send it, else why it is not (the
        lease failed, or was deferred and given back). A lease's own URL passes the gate's
        check before its request; any other URL of the lease (a redirect's target) the
        hop check; a request of no lease of this process (one it lost, or one a pipeline or
        a callback downloads itself, as Scrapy's FilesPipeline does) the guard's check,
        counted as a failure of its class when refused. Every one fails closed: a URL the
        guard cannot judge (another scheme, past 8,192 characters, malformed) is not sent."""
        lease_id = request.meta.get(LEASE_KEY)
        held = self.held(lease_id)
        unguarded = self._unguarded(request)
        if held is None:
            checked = unguarded or await self.gate.check_address(request.url)
            if not isinstance(checked, Refused):
                return None
            self.metrics.observe_failure(checked.failure_class, retried=False)
            log.info("not requested: %s", checked.message, extra={"layer": "task"})
            return checked.message
        decision: Refused | Deferred | None
        if unguarded is not None:
            decision = unguarded
        elif try_canonicalize(request.url) == held.lease.url:
            decision = await self.gate.before_request(held.lease)
        else:
            decision = await self.gate.before_hop(request.url)
        if decision is None:
            return None
        if isinstance(decision, Deferred):
            self._held.pop(held.lease.lease_id, None)
            return "deferred: its host's robots.txt cannot be read yet"
        self.fail(held, str(decision.failure_class), decision.message, retryable=decision.retryable)
        return decision.message

    def _unguarded(self, request: Request) -> Refused | None:
        """A request whose connection the guard could not pin: one through a proxy (the proxy
        resolves the name; ``meta["proxy"]``, Scrapy's way to ask for one), or any request once
        the reactor resolves names by another resolver than the guard's (an extension of the
        project installed its own)."""
        if request.meta.get("proxy"):
            return Refused(
                FailureClass.FORBIDDEN_ADDRESS,
                "through a proxy (meta['proxy']): the proxy would resolve the name, unchecked",
                retryable=False,
            )
        if self.names is not None and not self.names.is_installed():
            return Refused(
                FailureClass.FORBIDDEN_ADDRESS,
                "the reactor no longer resolves names through the address guard",
                retryable=False,
            )
        return None

    def on_download_error(self, lease_id: object, exc: BaseException, url: str = "") -> None:
        """What the retries gave up on, or a request a downloader middleware refused. A name
        the guard refused at connect time reaches here as Twisted's DNS error: the lease fails
        with the guard's class (``names`` kept the refusal of ``url``'s host); for a download
        of no lease, that refusal is counted, as the check before it counts its own."""
        if isinstance(exc, FetchError):
            failure_class = FailureClass(exc.failure_class)
        else:
            failure_class = _download_failure_class(exc)
        message = f"{type(exc).__name__}: {exc}"
        if failure_class is FailureClass.DNS_ERROR and self.names is not None:
            refusal = self.names.refusal(urlsplit(url).hostname or "")
            if refusal is not None:
                failure_class = FailureClass(refusal.failure_class)
                message = f"at connect time: {refusal.message}"
        held = self.held(lease_id)
        if held is None:
            if failure_class is FailureClass.FORBIDDEN_ADDRESS:  # a download of no lease
                self.metrics.observe_failure(failure_class, retried=False)
            return
        self._mark_fetched(held)
        self.fail(held, str(failure_class), message)

    def on_http_error(self, lease_id: object, status: int) -> None:
        """Scrapy's HttpErrorMiddleware filtered the response (a status the spider does not
        handle; it sits before this runtime's spider middleware, so ``on_response`` never
        saw it): the lease fails with the status's class, its host slot freed by the fail."""
        held = self.held(lease_id)
        if held is not None:
            self.fail(held, str(_status_failure_class(status)), f"HTTP {status}")

    def on_callback_error(self, lease_id: object, exc: BaseException | None) -> None:
        held = self.held(lease_id)
        if held is not None:
            name = f"{CALLBACK_ERROR}:{type(exc).__name__}"
            self.fail(held, name, f"{type(exc).__name__}: {exc}"[:2000], retryable=True)

    def fail(
        self, held: _Held, failure_class: str, message: str, *, retryable: bool | None = None
    ) -> None:
        if held.failure is not None or held.written:
            return
        if retryable is None:
            retryable = fate(failure_class).retryable
            multiplier = fate(failure_class).backoff_multiplier
        else:
            multiplier = 1.0
        delay = 0.0
        if retryable:
            retry = self.spec.retry
            delay = backoff_seconds(
                held.lease.attempts + 1,
                retry.backoff_base_seconds,
                retry.backoff_factor,
                retry.backoff_max_seconds,
                multiplier,
                self._rng,
            )
        held.failure = Failure(held.lease.lease_id, failure_class, message, retryable, delay)
        # A lease that fails has no request on the wire any more, whatever failed it.
        self.leases.fetched(held.lease.lease_id)
        self.leases.fail_later(held.lease.lease_id, held.failure)
        if failure_class in _FAILURE_CLASSES:  # callback and pipeline errors have no label
            self.metrics.observe_failure(failure_class, retried=retryable)
        if held.record is None:
            held.record = self._record(held.lease, failure_class=failure_class)
        else:
            held.record = _with_failure(held.record, failure_class)
        self._flush_wanted.set()

    # -- internals -------------------------------------------------------------------------

    def _spider_or_fail(self) -> Spider:
        if self._spider is None:
            raise RuntimeError("the spider is not open")
        return self._spider

    def _push(self, request: Request, lease_id: str) -> None:
        heapq.heappush(self._ready, (-request.priority, next(self._order), request, lease_id))

    def _mark_fetched(self, held: _Held) -> None:
        self.leases.fetched(held.lease.lease_id)

    def _maybe_done(self, held: _Held | None) -> None:
        if held is not None and held.exhausted and held.outstanding <= 0:
            self._flush_wanted.set()

    def _ready_to_write(self, held: _Held) -> bool:
        if held.written:
            return False
        if held.failure is not None:
            return True  # failing waits for nothing: a retry yields the same output again
        return held.exhausted and held.outstanding <= 0 and held.children_pending == 0

    def _wake_engine(self) -> None:
        engine = getattr(self._crawler, "engine", None)
        slot = getattr(engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def _record(
        self,
        lease: Lease,
        *,
        final_url: str | None = None,
        status: int | None = None,
        content_type: str | None = None,
        body: bytes = b"",
        failure_class: str | None = None,
    ) -> PageRecord:
        return PageRecord(
            url=lease.url,
            final_url=final_url or lease.url,
            status=status,
            depth=lease.depth,
            parent=found_on(lease.parent),
            fetched_at=time.time(),
            content_type=content_type,
            length=len(body),
            sha256=sha256(body).hexdigest() if body else None,
            title=None,
            outlinks=0,
            failure_class=failure_class,
            attempt=lease.attempts + 1,
            worker=self.worker_id,
            fetch_id=f"{self.worker_id}-{lease.number}",
        )

    # -- claiming --------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        limit = self.spec.concurrency.per_worker
        while not (self.stopping or self._closed.is_set()):
            fetching = self.leases.count(Stage.FETCHING)
            room = limit - fetching
            if room <= 0 or self.output.blocked:
                await self._wait(self.options.idle_poll_seconds)
                continue
            if fetching and room < max(1, limit // 4):
                await self._wait(self.options.claim_batch_wait_seconds)
                continue
            leases = await self.leases.claim(room)
            if leases is None:  # Redis did not answer: the book's backoff says how long
                await self._wait(self.leases.retry_in_seconds)
                continue
            if not leases:
                if await self._idle_and_complete():
                    self.complete = True
                    self._wake_engine()
                    if self.options.exit_when_done:
                        log.info("job complete", extra={"layer": "flow"})
                        return
                await self._wait(self.options.idle_poll_seconds)
                continue
            spider = self._spider_or_fail()
            for lease in leases:
                held = _Held(lease)
                self._held[lease.lease_id] = held
                try:
                    request = decode_request(
                        lease.url,
                        lease.parent,
                        spider,
                        **{LEASE_KEY: lease.lease_id, "depth": lease.depth},
                    )
                except (ValueError, KeyError, TypeError) as exc:  # not a request of this spider
                    self.fail(held, "scrapy_undecodable", str(exc)[:500], retryable=False)
                    continue
                self._push(request, lease.lease_id)
            self._wake_engine()

    async def _idle_and_complete(self) -> bool:
        """Nothing claimed: seal the open output file, and say whether the job is complete
        (never before this process's start requests are queued and its leases settled)."""
        if self._pending or not self.start_done:
            return False
        if self.output.open_records and all(held.written for held in self._held.values()):
            # Only pages waiting for their file: seal it now if nothing is left to hand out,
            # so the crawl's last pages need not wait for the file's age.
            stats = await self.frontier.stats()
            if stats.queued == 0 and stats.delayed == 0:
                self.output.rotate()
        if self._held or not self._seeded:
            return False
        stats = await self.frontier.stats()
        if self.leases.generations or not stats.complete:
            return False
        if not self.options.exit_when_done:
            await self._finish_output_if_complete()
        return True

    async def _finish_output_if_complete(self) -> None:
        if self._output_finished or self.store is None or len(self.leases):
            return
        stats = await self.frontier.stats()
        if not stats.complete:
            return
        counts = await finish_output_once(
            self.frontier, self.store, self.frontier.keys.job_id, self.spec, stats,
            writer=self.worker_id,
        )  # fmt: skip
        if counts is not None:
            self._output_finished = True

    async def _wait(self, seconds: float) -> None:
        await wait_for_wake(self._wake, seconds)

    # -- flushing --------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while not self._closed.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await self._flush_wanted.wait()
            self._flush_wanted.clear()
            if self._closed.is_set():
                return
            self.output.tick()  # never raises
            if self.output.write_backoff_seconds > 0:
                continue  # leases the spool refused stay unwritten until the sink's backoff
            await asyncio.sleep(_FLUSH_LINGER_SECONDS)
            try:
                await self.flush()
            except OutputWriteError:
                continue  # counted and logged by the sink; claims stop while it is blocked
            except Exception:
                log.exception("flush failed", extra={"layer": "flow"})
                await asyncio.sleep(0.5)

    async def flush(self) -> None:
        """Admit the pending requests (one enqueue), then write the leases that are done."""
        await self._admit()
        done = [held for held in self._held.values() if self._ready_to_write(held)]
        if not done:
            return
        for held in done:
            if held.record is not None:
                held.record = _with_outlinks(held.record, held.children)
        outputs = [
            PageOutput(
                held.record or self._record(held.lease),
                response_headers=held.headers,
                body=held.body,
                items=held.items,
            )
            for held in done
        ]
        generation = self.output.write(outputs)  # OutputWriteError: unwritten, written again
        for held in done:
            held.written = True
        # Metrics per batch, as crawlfleet's worker keeps them (one lock and lookup per batch).
        self.metrics.observe_fetches(
            (record.status, held.latency_seconds, record.length)
            for held in done
            if (record := held.record) is not None and record.status is not None
        )
        self.metrics.set_in_flight(self.leases.count(Stage.FETCHING))
        for held in done:
            held.body = None
        # Settled once ``generation`` is durable (now, when nothing was written: format none).
        settled = await self.leases.written([held.lease.lease_id for held in done], generation)
        self._forget(settled.lease_ids)
        self._progress.set()
        self._wake.set()  # room to claim

    async def _admit(self) -> None:
        batch, self._pending = self._pending, []
        mark_seeded = self.start_done and not self._seeded
        if not batch and not mark_seeded:
            return
        kept: list[_Pending] = []
        dropped: dict[str, int] = {}
        for pending in batch:
            verdict = self.scope.check(pending.link.url, pending.link.depth)
            if verdict is None:
                kept.append(pending)
            else:
                dropped[str(verdict)] = dropped.get(str(verdict), 0) + 1
        try:
            codes = await self.frontier.enqueue(
                [p.link for p in kept],
                seeding=mark_seeded,
                unfiltered=[p.dont_filter for p in kept],
            )
        except BaseException:
            self._pending[:0] = batch
            raise
        if mark_seeded:
            self._seeded = True
        new = sum(1 for code in codes if code is Admission.NEW)
        self.counters["links_new"] += new
        # No local cache here (Scrapy's own dupefilter is off on the fleet): every check is
        # the frontier's, and the fleet's local_dedup_hit_rate counts them as such.
        self.counters["links_remote_checks"] += len(kept)
        self.metrics.observe_link_checks(0, len(kept))
        for code in codes:
            if code is Admission.OVER_LIMIT:
                dropped["max_pages"] = dropped.get("max_pages", 0) + 1
            elif code is Admission.OVER_HOST_BUDGET:
                dropped["host_budget"] = dropped.get("host_budget", 0) + 1
            elif code is Admission.OVER_BUDGET:
                dropped["memory_pressure"] = dropped.get("memory_pressure", 0) + 1
        if dropped:
            self.metrics.observe_dropped_links(dropped)
        for pending in batch:
            holder = self._held.get(pending.parent) if pending.parent is not None else None
            if holder is not None:
                holder.children_pending -= 1

    async def _settle_generation(self, generation: int, files: Sequence[DurableFile]) -> None:
        """The sink's callback: ``generation`` is durable. Record its files for the manifest
        (once), then settle its leases (the book's; raising makes the sink call again)."""
        settled = await self.leases.durable(generation, files)
        self._forget(settled.lease_ids)
        self._progress.set()

    def _forget(self, lease_ids: Sequence[str]) -> None:
        """Leases the book settled: nothing of them is left here."""
        for lease_id in lease_ids:
            self._held.pop(lease_id, None)
        if lease_ids and (self.stopping or self.complete):
            self._wake_engine()

    # -- flow ------------------------------------------------------------------------------

    async def _heartbeat_once(self) -> None:
        fields = heartbeat_fields(
            self.counters,
            self.leases,
            self.output,
            in_flight=self.leases.count(Stage.FETCHING),
            limit=self.spec.concurrency.per_worker,
        )
        await self.frontier.heartbeat(self.worker_id, fields)
        await self.leases.keep_alive()
        for lease_id in [i for i in self._held if i not in self.leases]:  # lost meanwhile
            del self._held[lease_id]

    def request_stop(self) -> None:
        """SIGTERM: stop claiming, give back at once what Scrapy has not started."""
        if self.stopping:
            return
        self.stopping = True
        self._wake.set()
        self._draining = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        unstarted = [lease_id for _, _, _, lease_id in self._ready]
        self._ready.clear()
        for lease_id in unstarted:
            self._held.pop(lease_id, None)
        with contextlib.suppress(FrontierUnavailable):  # else they expire back by themselves
            await self.leases.release(unstarted, "not started at shutdown")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.grace_seconds
        while loop.time() < deadline and any(not h.written for h in self._held.values()):
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await self._progress.wait()
        await flush_at_shutdown(self.flush)
        waiting = await self.output.drain(self.options.output_drain_seconds)
        if waiting:
            log.warning("%d output generations not durable at shutdown", len(waiting))
        self._held.clear()
        await self.leases.release_all("in flight past the drain budget, or not durable")
        self._wake_engine()
        engine = getattr(self._crawler, "engine", None)
        if engine is not None and getattr(engine, "spider", None) is not None:
            await engine.close_spider_async(reason="shutdown")

    async def aclose(self) -> None:
        """The spider closed: stop the loops, make the output durable, give back the rest."""
        if self._draining is not None:  # the spider may close itself once the drain settled
            await asyncio.wait([self._draining], timeout=self.options.settle_seconds)
        else:
            await flush_at_shutdown(self.flush)
            await self.output.drain(self.options.output_drain_seconds)
        self._closed.set()
        self._wake.set()
        self._flush_wanted.set()
        _, stuck = (
            await asyncio.wait(self._tasks, timeout=self.options.settle_seconds)
            if (self._tasks)
            else (set(), set())
        )
        for task in stuck:
            task.cancel()
        await self.output.aclose()
        self._held.clear()
        await self.leases.release_all("unsettled at close")
        with contextlib.suppress(Exception):
            await self.frontier.forget_worker(self.worker_id)


def _fields(item: object) -> dict[str, Any]:
    """An item's fields as JSON values (a value JSON lacks, such as a Decimal, as its text)."""
    from itemadapter import ItemAdapter

    fields = ItemAdapter(item).asdict() if ItemAdapter.is_item(item) else {"value": item}
    result: dict[str, Any] = json.loads(json.dumps(fields, default=str))
    return result


def _with_failure(record: PageRecord, failure_class: str) -> PageRecord:
    from dataclasses import replace

    return replace(record, failure_class=failure_class)


def _with_outlinks(record: PageRecord, outlinks: int) -> PageRecord:
    from dataclasses import replace

    return replace(record, outlinks=outlinks)


def _status_failure_class(status: int) -> FailureClass:
    known = {403: FailureClass.HTTP_403, 404: FailureClass.HTTP_404, 410: FailureClass.HTTP_410}
    if status in known:
        return known[status]
    if status == 429:
        return FailureClass.HTTP_429
    return FailureClass.HTTP_5XX if status >= 500 else FailureClass.HTTP_4XX


def _download_failure_class(exc: BaseException) -> FailureClass:
    """Twisted's and Scrapy's download errors, by name (their modules differ by version)."""
    name = type(exc).__name__
    if "Timeout" in name or "TimedOut" in name:
        return FailureClass.TIMEOUT
    if "DNS" in name or "Resolve" in name:  # Scrapy 2.19: CannotResolveHostError
        return FailureClass.DNS_ERROR
    if "Refused" in name or ("Connect" in name and "Lost" not in name):
        return FailureClass.CONNECT_ERROR
    if name == "IgnoreRequest":
        robots = "robots" in str(exc).lower()
        return FailureClass.ROBOTS_DISALLOWED if robots else FailureClass.OUT_OF_SCOPE
    return FailureClass.PROTOCOL_ERROR
