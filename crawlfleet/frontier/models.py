"""Value types that cross the frontier's API: what goes in, what comes out."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Final, NamedTuple, TypeVar

from crawlfleet.frontier.bloom import BloomBackend
from crawlfleet.urls import CanonicalURL, host_of

if TYPE_CHECKING:
    from crawlfleet.crawljob import CrawlJobSpec

_T = TypeVar("_T")

__all__ = [
    "LAG_BUCKETS_SECONDS",
    "Admission",
    "Backpressure",
    "DeadLetter",
    "FailOutcome",
    "Failure",
    "FileStats",
    "FrontierSettings",
    "FrontierStats",
    "FrontierWaits",
    "HeartbeatValue",
    "LagHistogram",
    "Lease",
    "Link",
    "MemoryState",
    "Outcomes",
    "PressureLevel",
    "Requeued",
    "Revisit",
    "RevisitState",
    "RunStart",
    "Validators",
    "WorkerHeartbeat",
]


class Admission(IntEnum):
    """What ``enqueue`` did with one link (the script's return codes).

    ``OVER_LIMIT`` (``maxPages`` reached) and ``OVER_BUDGET`` (memory pressure: the page
    already added its budget of new links, or Redis is past ``maxmemory``) are not added to
    the Bloom filter, so the same link can still be admitted when met again later.
    """

    SEEN = 0
    NEW = 1
    OVER_LIMIT = 2
    OVER_BUDGET = 3
    #: Its host's budget is spent (``scope.maxQueuedPerHost``: that many queued now;
    #: ``scope.maxPagesPerHost``: that many admitted): not added to the filter either.
    OVER_HOST_BUDGET = 5


class PressureLevel(IntEnum):
    """How hard the fleet is holding the crawl back because Redis's memory is filling."""

    NONE = 0
    HIGH = 1
    CRITICAL = 2


#: New links one page may add under HIGH pressure: a queue that grows by a few URLs per
#: page fills memory slowly, and the crawl still reaches new pages.
HIGH_PRESSURE_LINKS_PER_PAGE = 4


@dataclass(frozen=True, slots=True)
class Backpressure:
    """What the scripts hold back while Redis's memory fills (``Frontier.set_pressure``).

    ``links_per_page``: new links admitted per page (None: no budget; 0: none, the queues
    only shrink). ``claims_per_second``: claims for the whole job (None: no limit). Acks,
    fails, releases and requeues are never held back: finishing work is what frees memory,
    which is also why claims are slowed and never stopped.
    """

    level: PressureLevel = PressureLevel.NONE
    links_per_page: int | None = None
    claims_per_second: float | None = None

    @classmethod
    def at(cls, level: PressureLevel, *, claims_per_second: float | None = None) -> Backpressure:
        """The default budget of a level: HIGH admits a few links per page, CRITICAL none."""
        budget = {
            PressureLevel.NONE: None,
            PressureLevel.HIGH: HIGH_PRESSURE_LINKS_PER_PAGE,
            PressureLevel.CRITICAL: 0,
        }[level]
        return cls(level, budget, claims_per_second)


@dataclass(frozen=True, slots=True)
class MemoryState:
    """Redis's memory as INFO reports it: what the fleet's backpressure watches."""

    #: ``used_memory`` less what Redis does not count against maxmemory (its replication and
    #: AOF buffers): the figure Redis compares with maxmemory before refusing a write.
    used_bytes: int
    #: ``maxmemory``; 0 when Redis has no limit.
    max_bytes: int
    #: ``maxmemory-policy`` ('' when Redis did not say).
    policy: str

    @property
    def ratio(self) -> float:
        """Used memory as a fraction of ``maxmemory``; 0.0 when there is no limit."""
        return self.used_bytes / self.max_bytes if self.max_bytes > 0 else 0.0


class FailOutcome(IntEnum):
    """What ``fail`` did with one lease (the script's return codes)."""

    NOT_OWNER = 0
    RETRY = 1
    DEAD = 2


class Outcomes(list[_T]):
    """Per-item results of one batch, plus the server time (seconds) it was applied at."""

    at: float = 0.0

    @classmethod
    def of(cls, at_ms: int, items: Iterable[_T]) -> Outcomes[_T]:
        result = cls(items)
        result.at = at_ms / 1000.0
        return result


class Requeued(NamedTuple):
    """What a requeue did: URLs back in their queues, URLs dead-lettered, server time, and
    tracked URLs past their attempts scheduled again instead of dead-lettered."""

    requeued: int
    dead: int
    at: float
    rescheduled: int = 0

    @property
    def total(self) -> int:
        return self.requeued + self.dead + self.rescheduled


class Link(NamedTuple):
    """A discovered URL to admit: where it was found and how deep."""

    url: CanonicalURL
    depth: int
    parent: str = ""


@dataclass(frozen=True, slots=True)
class Lease:
    """One URL handed to one worker until ``expires_at`` (server time, seconds).

    ``lease_id`` is the lease's token, opaque to callers: completing a lease removes exactly
    that token, so a lease that was requeued and handed out again cannot be completed twice.
    """

    lease_id: str
    url: CanonicalURL
    depth: int
    attempts: int
    parent: str
    claimed_at: float
    expires_at: float
    #: The last moment (server time, seconds) the worker may send a request for this lease:
    #: the claim plus the job's fetch budget. The frontier counts a dead worker's slot on the
    #: host until then; 0.0: no deadline (a token from before deadlines).
    fetch_deadline_at: float = 0.0

    @property
    def number(self) -> str:
        """The lease's sequence number: short, unique per job, for logs and fetch ids."""
        return self.lease_id.split("\t", 1)[0]

    @property
    def host(self) -> str:
        """The frontier's host key of the URL (``host[:port]``), the unit of politeness."""
        return host_of(self.url)


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed attempt reported for one lease. ``delay_seconds`` postpones the retry."""

    lease_id: str
    failure_class: str
    message: str
    retryable: bool
    delay_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A URL that will not be retried, with why."""

    url: str
    failure_class: str
    message: str
    attempts: int
    depth: int
    parent: str
    at: float


#: One field of a heartbeat: a counter, or a few words (``output_blocked_reason``).
HeartbeatValue = float | str


@dataclass(frozen=True, slots=True)
class WorkerHeartbeat:
    """A worker's last heartbeat and the fields it reported: counters, the account of its
    leases (``leases_<stage>``, ``oldest_<stage>_seconds``), and short strings such as
    ``output_blocked_reason``."""

    worker: str
    last_seen: float
    age_seconds: float
    counters: dict[str, HeartbeatValue] = field(default_factory=dict)

    def number(self, name: str) -> float:
        """A numeric field (0 when it is missing or not a number: an older worker's beat)."""
        value = self.counters.get(name, 0)
        return float(value) if isinstance(value, int | float) else 0.0

    def text(self, name: str) -> str:
        """A string field ('' when it is missing or not a string)."""
        value = self.counters.get(name)
        return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class FrontierSettings:
    """The knobs the frontier enforces, in plain values; build them with :meth:`from_spec`.

    No defaults and no checks of their own: the CrawlJob model (``crawlfleet.crawljob``) holds both,
    so a value the frontier would refuse is refused there first, with its field's path.
    ``bloom_backend`` None means native when the server has it.
    """

    job_id: str
    capacity: int
    error_rate: float
    per_host: int
    host_delay_seconds: float
    lease_ttl_seconds: float
    task_attempts: int
    max_pages: int
    bloom_backend: BloomBackend | None
    #: ``scope.maxPagesPerHost`` and ``scope.maxQueuedPerHost`` (0: no budget).
    max_pages_per_host: int = 0
    max_queued_per_host: int = 0
    #: ``scope.maxPagesPerDomain`` and ``scope.maxQueuedPerDomain`` (0: no budget): with
    #: either, each batch of links carries its hosts' registrable domains.
    max_pages_per_domain: int = 0
    max_queued_per_domain: int = 0
    #: How long after its claim a worker may still send requests for a lease (the fetch's
    #: total timeout): a dead worker's host slots stay counted that long (docs/frontier.md).
    fetch_budget_seconds: float = 0.0
    #: ``scope.sitemaps``: seeding also queues each seed host's ``/sitemap.xml`` (parents.py).
    sitemaps: bool = False
    #: ``frontier.shards``: partitions of the job's frontier by host (keys.partition_of);
    #: past 1, :meth:`Frontier.open` gives a :class:`~crawlfleet.frontier.partitions.
    #: PartitionedFrontier`. Fixed at creation (the home's meta records it).
    shards: int = 1
    #: ``frontier.waitReplicas``: replicas that must have a partition's new links before
    #: their parent page is acked (replicas.py); 0: no wait.
    wait_replicas: int = 0

    @property
    def limits(self) -> FrontierLimits:
        return FrontierLimits(
            self.per_host,
            self.host_delay_seconds,
            self.max_pages_per_host,
            self.max_queued_per_host,
            self.max_pages_per_domain,
            self.max_queued_per_domain,
        )

    @classmethod
    def from_spec(
        cls, job_id: str, spec: CrawlJobSpec, *, bloom_backend: BloomBackend | None = None
    ) -> FrontierSettings:
        """The frontier's share of a CrawlJob spec (``bloom_backend``: force one backend)."""
        return cls(
            job_id=job_id,
            capacity=spec.dedup.capacity,
            error_rate=spec.dedup.error_rate,
            per_host=spec.concurrency.per_host,
            host_delay_seconds=spec.concurrency.host_delay_seconds,
            lease_ttl_seconds=spec.lease.ttl_seconds,
            task_attempts=spec.retry.task_attempts,
            max_pages=spec.scope.max_pages,
            bloom_backend=bloom_backend,
            max_pages_per_host=spec.scope.max_pages_per_host,
            max_queued_per_host=spec.scope.max_queued_per_host,
            max_pages_per_domain=spec.scope.max_pages_per_domain,
            max_queued_per_domain=spec.scope.max_queued_per_domain,
            fetch_budget_seconds=spec.fetch.total_timeout_seconds,
            sitemaps=spec.scope.sitemaps,
            shards=spec.frontier.shards,
            wait_replicas=spec.frontier.wait_replicas,
        )


#: The limits a running job may change (``kubectl edit``, an edited job file), by the meta
#: field the scripts read, with the spec's name for each and how a value is written there.
LIMIT_FIELDS: Final[dict[str, str]] = {
    "per_host": "concurrency.perHost",
    "host_delay_ms": "concurrency.hostDelaySeconds",
    "max_pages_per_host": "scope.maxPagesPerHost",
    "max_queued_per_host": "scope.maxQueuedPerHost",
    "max_pages_per_domain": "scope.maxPagesPerDomain",
    "max_queued_per_domain": "scope.maxQueuedPerDomain",
}


@dataclass(frozen=True, slots=True)
class FrontierLimits:
    """What the scripts enforce that a running job may change: read by every claim and
    enqueue from the job's meta, so writing them there (:meth:`Frontier.retune`) takes
    effect at the next claim or batch of links, without a restart."""

    per_host: int
    host_delay_seconds: float
    max_pages_per_host: int = 0
    max_queued_per_host: int = 0
    max_pages_per_domain: int = 0
    max_queued_per_domain: int = 0

    @property
    def by_domain(self) -> bool:
        """Whether links must carry their hosts' registrable domains (a domain budget)."""
        return self.max_pages_per_domain > 0 or self.max_queued_per_domain > 0

    @classmethod
    def from_spec(cls, spec: CrawlJobSpec) -> FrontierLimits:
        return cls(
            per_host=spec.concurrency.per_host,
            host_delay_seconds=spec.concurrency.host_delay_seconds,
            max_pages_per_host=spec.scope.max_pages_per_host,
            max_queued_per_host=spec.scope.max_queued_per_host,
            max_pages_per_domain=spec.scope.max_pages_per_domain,
            max_queued_per_domain=spec.scope.max_queued_per_domain,
        )

    def to_meta(self) -> dict[str, str]:
        """The meta fields (:data:`LIMIT_FIELDS`' keys) as the scripts read them."""
        return {
            "per_host": str(self.per_host),
            "host_delay_ms": str(round(self.host_delay_seconds * 1000)),
            "max_pages_per_host": str(self.max_pages_per_host),
            "max_queued_per_host": str(self.max_queued_per_host),
            "max_pages_per_domain": str(self.max_pages_per_domain),
            "max_queued_per_domain": str(self.max_queued_per_domain),
        }


#: ``(scope.include, scope.exclude)``: the URL patterns a running job may change.
ScopeRules = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class LimitChange:
    """One limit a :meth:`Frontier.retune` changed: its spec name, the values as the spec
    spells them."""

    field: str
    before: str
    after: str

    def __str__(self) -> str:
        return f"{self.field} {self.before} -> {self.after}"


@dataclass(frozen=True, slots=True)
class FrontierWaits:
    """What holds hosts back from being claimed, read beside the counters (O(1) reads): how
    many, and when the first of each changes (seconds from now on the server's clock; <= 0:
    due already, waiting for a claim to notice).

    ``robots_hosts``: hosts held until their robots.txt is asked again (it could not be read:
    RFC 9309's "wait"), ``robots_status`` the last HTTP status of the one asked next (None: no
    answer came). ``ready_hosts``: hosts with work queued and room under ``perHost``, placed at
    their next allowed time (robots.txt waits among them); ``next_ready_in_seconds`` > 0 means
    none may be fetched yet: every one waits for its delay (``hostDelaySeconds``, a
    Crawl-delay, or a robots.txt wait). ``held_slots``: host slots still counted for dead
    workers' requests that may be on the wire until their fetch deadline.
    """

    robots_hosts: int = 0
    robots_next_try_in_seconds: float | None = None
    robots_status: int | None = None
    ready_hosts: int = 0
    next_ready_in_seconds: float | None = None
    held_slots: int = 0
    next_held_release_in_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Validators:
    """What a server said about a page's version, sent back on the next visit.

    ``etag`` and ``last_modified`` are the response headers as received (``If-None-Match`` /
    ``If-Modified-Since`` on the revisit); ``digest`` is the hex text of the body's hash, kept
    so a 200 to a server without validators (or one that ignores them) can still be judged
    unchanged. The frontier keeps them packed (revisits.py); an ETag too long to keep is
    dropped there, so the server is then asked without it rather than with a wrong one.
    """

    etag: str | None = None
    last_modified: str | None = None
    digest: str | None = None
    #: When the body ``digest`` describes was fetched (whole seconds since the epoch): the
    #: ``WARC-Date`` of its response record, which a WARC revisit record refers to. Kept
    #: through unchanged and not-modified visits; None: unknown (no date is then claimed).
    captured_at: int | None = None


@dataclass(frozen=True, slots=True)
class RevisitState:
    """A tracked URL's revisit state as the frontier keeps it (``Frontier.revisit_states``).

    ``due_at``: the server time (seconds) it became due, so the worker can report the lag
    between due and fetched; ``visits``: completed visits so far.
    """

    url: CanonicalURL
    interval_seconds: float
    validators: Validators
    due_at: float
    visits: int


@dataclass(frozen=True, slots=True)
class Revisit:
    """What a worker tells the frontier about a tracked URL it completed (ack or fail).

    The URL is scheduled again at now + ``interval_seconds`` with ``validators`` in the same
    script as the ack; ``change`` is one of ``crawljob.recrawl.Change`` ("gone" forgets the URL:
    it is not revisited). ``lag_seconds``: fetched minus due (None: a first visit).
    ``fetched_at``: when the visit's response arrived (the worker's clock, seconds since the
    epoch): the next visit is due an interval after it, however long the output took to make
    the record durable before the ack (None: an interval after the ack).
    """

    interval_seconds: float
    validators: Validators
    change: str
    lag_seconds: float | None = None
    fetched_at: float | None = None


#: Upper bounds (seconds) of the revisit-lag histogram's buckets, the last one open; fixed so
#: the scripts keep it with one HINCRBY per revisit and a read stays O(1).
LAG_BUCKETS_SECONDS: tuple[float, ...] = (
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class LagHistogram:
    """Revisit lag (due → fetched) counted in :data:`LAG_BUCKETS_SECONDS` buckets.

    ``counts`` has one more entry than the bounds: lags above the last bound.
    """

    counts: tuple[int, ...] = (0,) * (len(LAG_BUCKETS_SECONDS) + 1)

    @property
    def total(self) -> int:
        return sum(self.counts)

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the ``q`` quantile (None: no revisit yet);
        the open last bucket answers its lower bound."""
        total = self.total
        if total == 0:
            return None
        rank = max(1, math.ceil(q * total))
        seen = 0
        index = 0
        while seen + self.counts[index] < rank:
            seen += self.counts[index]
            index += 1
        return LAG_BUCKETS_SECONDS[min(index, len(LAG_BUCKETS_SECONDS) - 1)]


@dataclass(frozen=True, slots=True)
class RunStart:
    """What ``Frontier.begin_run`` found: the committed run it restored (None: none, the run
    starts empty) and how many tracked URLs that run carried."""

    run_id: str
    restored_from: str | None
    tracked: int


@dataclass(frozen=True, slots=True)
class FileStats:
    """The file downloads' counters (``Frontier.file_stats``): two O(1) reads.

    ``stored``, ``duplicates``, ``bytes``, ``resumed``, ``restarts`` and ``resumed_bytes``
    are what workers reported with ``Frontier.count_files`` in this run (``begin_run``
    resets them, as it resets the page counters). ``reserved`` and ``settled`` are the byte
    budget's (``reserve_file_bytes`` / ``settle_file_bytes``): bytes of downloads in flight,
    and bytes stored over the job's life, every run's (the stored files stay, and so does
    what they count against ``files.maxTotalBytes``).
    """

    #: Files stored (new content).
    stored: int = 0
    #: Files whose bytes were stored already (the content index named an earlier copy).
    duplicates: int = 0
    #: Bytes of the files stored (new content only).
    bytes: int = 0
    #: Bytes reserved by downloads in flight.
    reserved: int = 0
    #: Downloads that went on from a part an earlier attempt left (Range).
    resumed: int = 0
    #: Downloads that dropped their part and began again from zero.
    restarts: int = 0
    #: Bytes not fetched again thanks to resumes.
    resumed_bytes: int = 0
    #: Bytes stored, counted against the budget: the job's, over every run.
    settled: int = 0


@dataclass(frozen=True, slots=True)
class FrontierStats:
    """Counters the scripts keep incrementally: one HGETALL, whatever the crawl's size.

    ``failed`` counts failed attempts (retries included); ``dead`` counts URLs that ended in
    the dead-letter set. ``leased`` is the number of URLs in flight: being fetched, or
    ``fetched`` (their response arrived) and waiting for their worker to make the output file
    that holds their record durable before it acks them (DESIGN §8).
    """

    queued: int = 0
    delayed: int = 0
    leased: int = 0
    fetched: int = 0
    crawled: int = 0
    failed: int = 0
    dead: int = 0
    seen: int = 0
    duplicates: int = 0
    requeued: int = 0
    released: int = 0
    over_limit: int = 0
    #: Links refused under memory pressure (over a page's budget, or Redis past maxmemory).
    over_budget: int = 0
    #: Links refused because their host's budget was spent (scope.maxPagesPerHost,
    #: scope.maxQueuedPerHost): each time one was met.
    host_budget: int = 0
    seeded: bool = False
    bloom_backend: str = ""
    #: Filled share of the newest Bloom layer (items / its capacity); at 1.0 the next new URL
    #: adds a layer.
    bloom_fill_ratio: float = 0.0
    #: Estimated chance that a URL never seen is taken for seen now, over every layer (an
    #: upper bound: the sum of the layers' rates); stays at or below ``dedup.errorRate``.
    bloom_false_positive_rate: float = 0.0
    #: Layers the filter has grown to (1 until the first layer is full).
    bloom_layers: int = 1
    #: URLs the layers that exist hold at their target rates (``dedup.capacity`` for one).
    bloom_capacity: int = 0
    #: The backpressure in force (``Frontier.set_pressure``).
    pressure: Backpressure = field(default_factory=Backpressure)
    #: Seconds until the earliest delayed retry is due, on the server's clock (<= 0: due
    #: already, waiting for a claim to promote it); None when no retry waits.
    next_retry_in_seconds: float | None = None
    #: The output's closing files (manifest.json, dead-letters.jsonl) are written
    #: (:meth:`~crawlfleet.frontier.Frontier.mark_output_finished`).
    output_finished: bool = False
    #: What holds hosts back from being claimed (robots.txt waits, delays, held slots).
    waits: FrontierWaits = field(default_factory=FrontierWaits)
    #: URLs with revisit state (a recrawl rule matched them).
    tracked: int = 0
    #: Tracked URLs due and promoted into their host queues but not yet settled (acked or
    #: failed): "due but not fetched".
    revisits_due: int = 0
    #: Seconds until the earliest tracked URL is due (<= 0: due already, waiting for a claim
    #: or ``promote_due``); None when nothing is tracked at rest.
    next_revisit_in_seconds: float | None = None
    #: Completed visits of tracked URLs by what the worker found (crawljob.recrawl.Change).
    changed: int = 0
    unchanged: int = 0
    not_modified: int = 0
    gone: int = 0
    new_tracked: int = 0
    #: Tracked URLs whose failure was final, scheduled again instead of dead-lettered.
    revisit_failures: int = 0
    #: Tracked URLs acked without a revisit (no rule matches them any more): forgotten.
    untracked: int = 0
    #: Tracked URLs due (by the recurring run's start, in a run) and not yet promoted into
    #: their queues: work, though nothing is queued yet (a claim or ``promote_due`` moves them).
    revisits_waiting: bool = False
    #: Revisit lag (due → fetched) of completed revisits.
    revisit_lag: LagHistogram = field(default_factory=LagHistogram)
    #: Since when (server time, seconds) every fetch that settled was pushed back by its site
    #: (429, 403, a soft block) with no page acked in between; None while pages come through
    #: (``spec.autoPause``). ``last_pushed_back``: the latest such failure.
    pushed_back_since: float | None = None
    last_pushed_back: float | None = None

    @property
    def in_flight(self) -> int:
        return self.leased

    @property
    def fetching(self) -> int:
        """Leases whose request is still in progress: what more workers could help with."""
        return max(0, self.leased - self.fetched)

    @property
    def pending(self) -> int:
        """Work not finished yet: queued, waiting for a retry, or in flight."""
        return self.queued + self.delayed + self.leased

    @property
    def complete(self) -> bool:
        return self.seeded and self.pending == 0 and not self.revisits_waiting
