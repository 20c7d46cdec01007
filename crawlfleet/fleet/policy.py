"""The fleet brain: how many workers a job wants, which are dead, and when it is done.

Pure functions of what was observed, shared by the operator and ``crawlfleet run`` (DESIGN
§5): no I/O here, so every rule is a table test. :mod:`crawlfleet.fleet.steer` observes
(frontier counters, heartbeats, the backend's workers), calls :func:`decide`, and applies
the decision through the backend.

A worker is in one of four states, and each has its rule:

- **starting**: running, no heartbeat yet. Dead once ``startup_grace_seconds`` pass.
- **running**: heartbeating. Dead once its heartbeat is older than ``deadAfterSeconds``:
  replaced, and its leases requeued.
- **draining**: told to stop (scale-down, suspend, completion). It finishes or releases its
  leases itself, so nothing of it is requeued and it is not capacity. Once it has exited its
  leftovers (normally none) are requeued; past its drain deadline it is killed first.
- **exited** without being told to: crashed. Its leases are requeued at once.

A worker that dies at start again and again with the same error (its output destination
refuses the test write, its Redis cannot be reached, its job is invalid) is **failing**: after
``crash_loop_deaths`` quick deaths in a row (``WorkerView.quick_deaths``, counted by the
backend) the decision carries :class:`WorkersFailing` with the worker's own sentence. In a
cluster that is a condition and an Event while the kubelet keeps retrying (the fix -- a
bucket created, a Secret corrected -- needs no restart of anything); ``crawlfleet run``
(``stop_on_crash_loop``) stops there, Failed, instead of starting workers forever.

A job that writes output is complete only once its closing files are written
(``manifest.json``, by the one worker the frontier elects): until then it stays Running with
at least one worker, so whoever sees Succeeded finds the manifest.

A job that **keeps going** (``spec.recrawl`` without a ``schedule``: DESIGN §10) is never
complete by itself: once nothing is queued, delayed or leased it waits for its next due
revisit, Running, with ``minReplicas`` workers (0 allowed) after the usual scale-down delay;
the tick moves due revisits into their queues (``Frontier.promote_due``), where they are
backlog like any other URL, and a revisit due within ``retry_lead_seconds`` asks for one
worker ahead of time, as a delayed retry does.

A heartbeat whose worker the backend does not know (a pod that is gone) is **vanished**.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Final, Literal

from crawlfleet.config import SteeringConfig
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.crawljob.suspension import SuspendOutcome
from crawlfleet.fleet.backend import UnitWaiting
from crawlfleet.fleet.exits import UnitExit
from crawlfleet.frontier.models import (
    Backpressure,
    FrontierLimits,
    FrontierStats,
    PressureLevel,
    ScopeRules,
)

__all__ = [
    "BLOOM_NEARLY_FULL",
    "PRESSURE_CRITICAL",
    "PRESSURE_HIGH",
    "PRESSURE_RELEASE",
    "STALL_LEASE_TTLS",
    "Decision",
    "FleetMemory",
    "FleetPolicy",
    "Observation",
    "OnLoss",
    "Phase",
    "RateLimitPause",
    "Requeue",
    "RequeueReason",
    "SeedAction",
    "Suspension",
    "WorkerView",
    "WorkersFailing",
    "decide",
    "demand",
    "memory_pressure",
    "rate_limit_pause",
    "seed_action",
    "seed_list_hash",
    "stall_after_seconds",
    "suspension",
    "wants_tick",
]

Phase = Literal["Pending", "Running", "Suspended", "Succeeded", "Failed"]
#: Why a worker's leases go back to the queue (also the label of the requeue metric).
RequeueReason = Literal[
    "exited", "no_heartbeat", "stale_heartbeat", "drained", "drain_overrun", "gone"
]
#: What a job does when its frontier is lost (``redis.onLoss``).
OnLoss = Literal["Fail", "Reseed"]
#: The marks of Redis's used memory against its maxmemory, for the frontier's backpressure
#: (HIGH: fewer claims, a budget of new links per page; CRITICAL: no new links; acks, fails
#: and requeues always pass). Up at HIGH and CRITICAL; down only
#: well below (RELEASE, and CRITICAL_RELEASE from Critical to High), so a frontier hovering at
#: a mark does not flap between levels at every tick.
PRESSURE_HIGH: Final = 0.80
PRESSURE_CRITICAL: Final = 0.95
PRESSURE_RELEASE: Final = 0.70
PRESSURE_CRITICAL_RELEASE: Final = 0.90
#: The share of ``dedup.capacity`` seen past which the Bloom filter is nearly full: it grows a
#: layer past capacity, but a crawl that far past its sizing deserves a warning.
BLOOM_NEARLY_FULL: Final = 0.80
#: Lease TTLs a lease may sit in one stage of its worker before the watchdog calls it stalled
#: (with the longest legitimate waits on top: see :func:`stall_after_seconds`).
STALL_LEASE_TTLS: Final = 3


def stall_after_seconds(spec: CrawlJobSpec) -> float:
    """How long a lease may stay in one stage of a live worker (fetching, processing, output)
    before the fleet's watchdog reports it ``Stalled``: ``STALL_LEASE_TTLS`` lease TTLs, plus
    the longest a healthy lease legitimately waits -- a request's whole budget
    (``fetch.totalTimeoutSeconds``) and an output file's age before it is sealed
    (``output.maxFileAgeSeconds``) -- so a slow site or a quiet output file never trips it.

    With the defaults: 3 × 60 + 60 + 30 = 270 s. A lease that passes it is held by a live
    worker (heartbeats keep extending it, so no TTL will ever requeue it) and goes nowhere: a
    hung request, a parser that never returns, an output that never becomes durable.
    """
    return (
        STALL_LEASE_TTLS * spec.lease.ttl_seconds
        + spec.fetch.total_timeout_seconds
        + spec.output.max_file_age_seconds
    )


@dataclass(frozen=True, slots=True)
class FleetPolicy:
    """The knobs that steer one job's fleet, in plain values; build it with :meth:`from_spec`.

    ``pinned_replicas``: a count someone else chose (``crawlfleet run --workers N``, or
    ``workers.autoscale: external`` with ``workers.replicas`` set by kubectl scale or an HPA).
    The brain then runs exactly that many while the job runs, and still zero when it is
    suspended or done.
    """

    min_replicas: int
    max_replicas: int
    target_backlog_per_replica: int
    scale_down_delay_seconds: float
    dead_after_seconds: float
    startup_grace_seconds: float
    completion_grace_seconds: float
    retry_lead_seconds: float
    pinned_replicas: int | None
    #: ``redis.onLoss``: fail the job when its frontier is lost, or re-seed it.
    on_loss: OnLoss = "Fail"
    #: ``dedup.capacity``: the Bloom filter's sizing, against which it is nearly full.
    bloom_capacity: int = 0
    #: The workers seed the job, not the tick (``crawler.scrapy``: a spider's start requests
    #: and ``spec.seeds`` are queued by its processes, which mark the job seeded once they
    #: are, so the job is never complete before them; crawlfleet/scrapy/runtime.py).
    workers_seed: bool = False
    #: Quick deaths in a row, with the same error, that make workers failing.
    crash_loop_deaths: int = 3
    #: Failing workers fail the job (``crawlfleet run``: nobody else would fix them) rather
    #: than only being reported while they are retried (a cluster).
    stop_on_crash_loop: bool = False
    #: The job writes output (``output.format`` is not none): complete only once its
    #: closing files are written.
    writes_output: bool = False
    #: A lease in one stage of a live worker for longer is stalled (:func:`stall_after_seconds`).
    stall_after_seconds: float = math.inf
    #: ``spec.keeps_going``: revisit rules and no schedule, so the job never completes by
    #: itself; drained, it waits for its next due revisit.
    keeps_going: bool = False
    #: ``spec.recrawl`` is set: the tick moves due revisits into their queues.
    revisits: bool = False
    #: The limits the frontier's scripts enforce that a running job may change (perHost,
    #: hostDelaySeconds, the per-host budgets): each tick writes the spec's into the
    #: frontier when they differ (``LimitsChanged``). None: the tick leaves them.
    frontier_limits: FrontierLimits | None = None
    #: ``spec.suspendExpiry``: (seconds, then) -- how long a suspension may last, and
    #: whether the job then resumes or fails (None: it waits).
    suspend_expiry: tuple[float, SuspendOutcome] | None = None
    #: ``spec.autoPause``: (rateLimitedFor, resumeAfter) seconds -- how long every fetch may
    #: be pushed back before the job pauses itself, and when it tries again (None: only by
    #: hand). None: the job never pauses itself.
    auto_pause: tuple[float, float | None] | None = None
    #: ``(scope.include, scope.exclude)``: written into the frontier the same way, for the
    #: workers to follow (``ScopeChanged``). None: the tick leaves them.
    scope_rules: ScopeRules | None = None
    #: ``spec.files`` is set: the tick reads the file counters (one more O(1) read).
    files: bool = False

    @classmethod
    def from_spec(
        cls,
        spec: CrawlJobSpec,
        steering: SteeringConfig,
        *,
        completion_grace_seconds: float,
        pinned_replicas: int | None = None,
        stop_on_crash_loop: bool = False,
    ) -> FleetPolicy:
        """The spec's rules, the process's knobs, and a pin from the command line if any.

        ``workers.autoscale: external`` pins to ``workers.replicas`` (unset: ``minReplicas``);
        an explicit ``pinned_replicas`` (``--workers``) wins over both.
        """
        workers = spec.workers
        if pinned_replicas is None and workers.autoscale == "external":
            pinned_replicas = (
                workers.replicas if workers.replicas is not None else workers.min_replicas
            )
        return cls(
            min_replicas=workers.min_replicas,
            max_replicas=workers.max_replicas,
            target_backlog_per_replica=workers.target_backlog_per_replica,
            scale_down_delay_seconds=workers.scale_down_delay_seconds,
            dead_after_seconds=spec.lease.dead_after_seconds,
            startup_grace_seconds=steering.startup_grace_seconds,
            completion_grace_seconds=completion_grace_seconds,
            retry_lead_seconds=steering.retry_lead_seconds,
            pinned_replicas=pinned_replicas,
            on_loss=spec.redis.on_loss,
            bloom_capacity=spec.dedup.capacity,
            crash_loop_deaths=steering.crash_loop_deaths,
            stop_on_crash_loop=stop_on_crash_loop,
            writes_output=spec.output.format != "none",
            workers_seed=spec.scrapy is not None,
            stall_after_seconds=stall_after_seconds(spec),
            keeps_going=spec.keeps_going,
            revisits=bool(spec.recrawl),
            files=spec.files is not None,
            frontier_limits=FrontierLimits.from_spec(spec),
            scope_rules=(tuple(spec.scope.include), tuple(spec.scope.exclude)),
            suspend_expiry=(
                (spec.suspend_expiry.after, spec.suspend_expiry.then)
                if spec.suspend_expiry is not None
                else None
            ),
            auto_pause=(
                (spec.auto_pause.rate_limited_for, spec.auto_pause.resume_after)
                if spec.auto_pause is not None
                else None
            ),
        )


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One worker as the backend and the heartbeats see it.

    ``worker_id``: the id it heartbeats with (the unit's name until its first heartbeat).
    ``unit``: the backend's name for it (a pod, a local process), for replace and forget.
    ``running``: the process or pod exists and has not exited. ``heartbeat_age_seconds``:
    None when it never heartbeated. ``started_at``: when the backend started it.
    ``drain_deadline``: set once the worker was told to stop; it must be gone by then.
    ``last_exit`` and ``quick_deaths``: how its worker last ended, and how many times in a row
    it died at start so; ``waiting``: why its worker never started
    (:class:`~crawlfleet.fleet.backend.Unit`).
    """

    worker_id: str
    unit: str
    running: bool
    started_at: float
    heartbeat_age_seconds: float | None = None
    drain_deadline: float | None = None
    last_exit: UnitExit | None = None
    quick_deaths: int = 0
    waiting: UnitWaiting | None = None

    @property
    def draining(self) -> bool:
        return self.drain_deadline is not None


@dataclass(frozen=True, slots=True)
class Observation:
    now: float
    queued: int
    delayed: int
    #: Every lease: completion waits for all of them.
    in_flight: int
    seeded: bool
    suspended: bool = False
    workers: tuple[WorkerView, ...] = ()
    #: Workers the frontier knows (heartbeat table) that the backend does not run any more.
    vanished: tuple[str, ...] = ()
    #: Seconds until the earliest delayed retry is due (<= 0: due now); None: none waits.
    next_retry_in_seconds: float | None = None
    #: Leases whose request is still in progress (the rest were fetched and wait for their
    #: output to become durable, which more workers cannot speed up): the demand's share of
    #: in_flight. None: all of in_flight.
    fetching: int | None = None
    #: Distinct URLs the Bloom filter has taken (for how full it is against its capacity).
    seen: int = 0
    #: Redis's used memory and its maxmemory, in bytes (max 0: no limit); None: not read.
    memory_used_bytes: int | None = None
    memory_max_bytes: int = 0
    #: The backpressure level the frontier holds now (its scripts enforce it).
    pressure: PressureLevel = PressureLevel.NONE
    #: The crawl's recent rate, for the claim rate a pressure level allows; None: unknown.
    pages_per_second: float | None = None
    #: The frontier the job remembers is gone: what was found instead. With ``lost``, the
    #: counters above mean nothing.
    lost: str | None = None
    #: The job's closing files (manifest.json) are written (FrontierStats.output_finished).
    output_finished: bool = False
    #: Seconds until the earliest revisit is due (<= 0: due now); None: none is tracked.
    next_revisit_in_seconds: float | None = None

    @classmethod
    def of(
        cls,
        stats: FrontierStats,
        *,
        now: float,
        suspended: bool,
        workers: tuple[WorkerView, ...],
        vanished: tuple[str, ...],
        memory_used_bytes: int | None = None,
        memory_max_bytes: int = 0,
        pages_per_second: float | None = None,
    ) -> Observation:
        """An observation from the frontier's counters and what the backend sees."""
        return cls(
            now=now,
            queued=stats.queued,
            delayed=stats.delayed,
            in_flight=stats.leased,
            seeded=stats.seeded,
            suspended=suspended,
            workers=workers,
            vanished=vanished,
            next_retry_in_seconds=stats.next_retry_in_seconds,
            fetching=stats.fetching,
            seen=stats.seen,
            memory_used_bytes=memory_used_bytes,
            memory_max_bytes=memory_max_bytes,
            pressure=stats.pressure.level,
            pages_per_second=pages_per_second,
            output_finished=stats.output_finished,
            next_revisit_in_seconds=stats.next_revisit_in_seconds,
        )

    @classmethod
    def of_loss(cls, lost: str, *, now: float) -> Observation:
        """The frontier is gone: nothing of it can be read, only what was found instead."""
        return cls(now=now, queued=0, delayed=0, in_flight=0, seeded=False, lost=lost)

    @property
    def demand_in_flight(self) -> int:
        return self.in_flight if self.fetching is None else min(self.fetching, self.in_flight)


def _earliest(*seconds: float | None) -> float | None:
    known = [each for each in seconds if each is not None]
    return min(known) if known else None


@dataclass(frozen=True, slots=True)
class FleetMemory:
    """What the brain remembers between ticks: durable, so a restart resumes its decisions.

    Kept in the CrawlJob's ``status.fleet`` in a cluster and in the run's ``state.json``
    locally (both through :meth:`to_mapping`): an operator restart must not forget that demand
    has been low for 50 of the 60 seconds of the scale-down delay, nor restart the count.
    Times are wall-clock seconds, so they mean the same to the next process.
    """

    replicas: int = 0
    low_demand_since: float | None = None
    idle_since: float | None = None
    #: The BloomNearlyFull warning was given (once per filter).
    bloom_nearly_full: bool = False
    #: Pages a second when memory pressure began: claims are slowed to shares of it, not of
    #: a rate the slowing itself lowered. None while there is no pressure.
    pressure_base_rate: float | None = None
    #: The failing workers' error the Event was given for (``Reason: message``; once per
    #: error). None while no worker is failing.
    workers_failing: str | None = None
    #: The epoch of the frontier this job runs on (None until the first tick adopts one).
    #: Kept beside the rest by the callers (``status.frontierEpoch``, state.json's
    #: ``frontierEpoch``), not in :meth:`to_mapping`: it is the frontier's identity, for
    #: people too, not a clock of the brain's.
    frontier_epoch: str | None = None
    #: The digest (:func:`seed_list_hash`) of the seed list last queued; None before the
    #: first seeding, and for a job seeded before digests were kept.
    seeds_hash: str | None = None
    #: What the crawl waits for, as last announced (a ``Waiting`` Event's reason); None while
    #: it moves. ``moving_since``: since when it has had nothing to wait for while a wait is
    #: still announced (the wait ends once that has lasted; crawlfleet.fleet.waiting).
    waiting: str | None = None
    moving_since: float | None = None
    #: The watchdog's last ``Stalled`` reason (None: no lease is stalled).
    stalled: str | None = None
    #: When the job was first seen suspended (None: it runs), and whether the suspension
    #: outlasted ``spec.suspendExpiry`` (:func:`suspension`).
    suspended_since: float | None = None
    suspend_expired: bool = False
    #: When the job paused itself for pushback (:func:`rate_limit_pause`; None: it did not),
    #: and the earliest pushback that counts (when it was last resumed).
    rate_limited_pause_since: float | None = None
    pushback_counted_from: float | None = None

    def to_mapping(self) -> dict[str, int | str | bool]:
        """camelCase, times as RFC 3339 with microseconds (``status.fleet``'s shape)."""
        out: dict[str, int | str | bool] = {"replicas": self.replicas}
        if self.low_demand_since is not None:
            out["lowDemandSince"] = _timestamp(self.low_demand_since)
        if self.idle_since is not None:
            out["idleSince"] = _timestamp(self.idle_since)
        if self.bloom_nearly_full:
            out["bloomNearlyFull"] = True
        if self.pressure_base_rate is not None:
            out["pressureBaseRate"] = str(self.pressure_base_rate)
        if self.workers_failing is not None:
            out["workersFailing"] = self.workers_failing
        if self.seeds_hash is not None:
            out["seedsHash"] = self.seeds_hash
        if self.waiting is not None:
            out["waiting"] = self.waiting
        if self.moving_since is not None:
            out["movingSince"] = _timestamp(self.moving_since)
        if self.stalled is not None:
            out["stalled"] = self.stalled
        if self.suspended_since is not None:
            out["suspendedSince"] = _timestamp(self.suspended_since)
        if self.suspend_expired:
            out["suspendExpired"] = True
        if self.rate_limited_pause_since is not None:
            out["rateLimitedPauseSince"] = _timestamp(self.rate_limited_pause_since)
        if self.pushback_counted_from is not None:
            out["pushbackCountedFrom"] = _timestamp(self.pushback_counted_from)
        return out

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object] | None) -> FleetMemory | None:
        """The memory :meth:`to_mapping` wrote; None when there is none or it is unreadable."""
        if not raw:
            return None
        try:
            replicas = raw.get("replicas", 0)
            if not isinstance(replicas, int) or replicas < 0:
                return None
            return cls(
                replicas=replicas,
                low_demand_since=_seconds(raw.get("lowDemandSince")),
                idle_since=_seconds(raw.get("idleSince")),
                bloom_nearly_full=raw.get("bloomNearlyFull") is True,
                pressure_base_rate=_rate(raw.get("pressureBaseRate")),
                workers_failing=_text(raw.get("workersFailing")),
                seeds_hash=_text(raw.get("seedsHash")),
                waiting=_text(raw.get("waiting")),
                moving_since=_seconds(raw.get("movingSince")),
                stalled=_text(raw.get("stalled")),
                suspended_since=_seconds(raw.get("suspendedSince")),
                suspend_expired=raw.get("suspendExpired") is True,
                rate_limited_pause_since=_seconds(raw.get("rateLimitedPauseSince")),
                pushback_counted_from=_seconds(raw.get("pushbackCountedFrom")),
            )
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class Suspension:
    """What ``spec.suspend`` means this tick (:func:`suspension`)."""

    #: The job waits (workers at 0): suspended and not expired, or expired with ``Fail``.
    suspended: bool
    memory: FleetMemory
    #: The expiry's outcome once the suspension outlasted it (None: it has not).
    expired: SuspendOutcome | None = None
    #: It expired at this tick (announce it once).
    newly_expired: bool = False


def suspension(
    policy: FleetPolicy, memory: FleetMemory, *, suspended: bool, now: float
) -> Suspension:
    """``spec.suspend`` against ``spec.suspendExpiry``: the clock starts at the first tick
    that sees the job suspended and stops when it runs again; past the expiry a ``Resume``
    job runs although ``suspend`` still says true, a ``Fail`` job stays at 0 workers and
    fails (the caller ends it)."""
    if not suspended:
        if memory.suspended_since is None and not memory.suspend_expired:
            return Suspension(False, memory)
        return Suspension(False, replace(memory, suspended_since=None, suspend_expired=False))
    since = memory.suspended_since if memory.suspended_since is not None else now
    if since != memory.suspended_since:
        memory = replace(memory, suspended_since=since)
    expiry = policy.suspend_expiry
    if expiry is None or now - since < expiry[0]:
        return Suspension(True, memory)
    then = expiry[1]
    newly = not memory.suspend_expired
    if newly:
        memory = replace(memory, suspend_expired=True)
    return Suspension(then == "Fail", memory, then, newly)


@dataclass(frozen=True, slots=True)
class RateLimitPause:
    """What ``spec.autoPause`` means this tick (:func:`rate_limit_pause`)."""

    #: The job waits with 0 workers, paused by itself.
    paused: bool
    memory: FleetMemory
    #: It paused at this tick, or resumed by itself at this tick (announce each once).
    newly_paused: bool = False
    newly_resumed: bool = False


def rate_limit_pause(
    policy: FleetPolicy,
    memory: FleetMemory,
    *,
    pushed_back_since: float | None,
    pending: int,
    suspended: bool,
    resumed: bool,
    now: float,
) -> RateLimitPause:
    """``spec.autoPause`` against the frontier's pushback run: a job with work left whose
    every fetch has been pushed back (``pushed_back_since``, nothing acked since) for
    ``rateLimitedFor`` pauses itself; with ``resumeAfter`` it tries again that long after.
    Suspending by hand ends the pause, and resuming (``resumed``: this tick) is how a person
    says "try again": either way pushback counts only from the resumption on."""
    if policy.auto_pause is None or suspended:
        if memory.rate_limited_pause_since is None:
            return RateLimitPause(False, memory)
        return RateLimitPause(False, replace(memory, rate_limited_pause_since=None))
    if resumed:
        memory = replace(memory, rate_limited_pause_since=None, pushback_counted_from=now)
    limited_for, resume_after = policy.auto_pause
    paused_at = memory.rate_limited_pause_since
    if paused_at is not None:
        if resume_after is not None and now - paused_at >= resume_after:
            again = replace(memory, rate_limited_pause_since=None, pushback_counted_from=now)
            return RateLimitPause(False, again, newly_resumed=True)
        return RateLimitPause(True, memory)
    if pushed_back_since is None or pending == 0:
        return RateLimitPause(False, memory)
    start = max(pushed_back_since, memory.pushback_counted_from or pushed_back_since)
    if now - start < limited_for:
        return RateLimitPause(False, memory)
    return RateLimitPause(True, replace(memory, rate_limited_pause_since=now), newly_paused=True)


#: What a tick does with the job's seed list (:func:`seed_action`).
SeedAction = Literal["seed", "reseed", "catch_up", "adopt", "none"]


def seed_list_hash(seeds: Iterable[str], source: str = "") -> str:
    """The digest that says a seed list changed: of its URLs in order, and of ``source``
    (where a list kept outside the spec comes from, and its version, when the caller has one)."""
    digest = hashlib.sha256(source.encode())
    for seed in seeds:
        digest.update(b"\n" + seed.encode())
    return digest.hexdigest()[:32]


def seed_action(
    *,
    seeded: bool,
    suspended: bool,
    remembered: str | None,
    current: str | None,
    workers_seed: bool = False,
) -> SeedAction:
    """Whether a tick queues the job's seeds, given what the frontier and the memory say.

    ``seed``: the frontier is not seeded yet. ``reseed``: it is, but the list changed since
    (seeds added to a running job): the whole list goes through the Bloom filter again, so
    only the new URLs are queued, and this once per change, since the digest is remembered.
    ``adopt``: seeded with no digest remembered (a job seeded before digests were kept):
    remember this one without queuing anything. A suspended job waits: its seeds are queued
    when it resumes. ``current`` None: the caller does not track the list (never reseeds).

    ``workers_seed`` (a Scrapy job: its processes queue spec.seeds with their start requests)
    leaves the first seeding to them; the first digest seen once they have is ``catch_up``: the
    list goes through the filter like a ``reseed``, said only when something was new, so a list
    edited while they seeded loses nothing. Later changes are ``reseed`` as for any job.
    """
    if suspended:
        return "none"
    if not seeded:
        return "none" if workers_seed else "seed"
    if current is None or remembered == current:
        return "none"
    if remembered is None:
        return "catch_up" if workers_seed else "adopt"
    return "reseed"


def _rate(value: object) -> float | None:
    """A rate kept as a string (status fields are typed; a float field would round-trip
    through the API server's JSON as an int when whole)."""
    return None if value is None else float(str(value))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):  # a status model parsed it already
        moment = value
    elif isinstance(value, str):
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    else:
        raise TypeError(f"not a timestamp: {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True, slots=True)
class Requeue:
    """One worker whose leases go back to the queue now, and why."""

    worker_id: str
    reason: RequeueReason


@dataclass(frozen=True, slots=True)
class WorkersFailing:
    """Workers that die at start, again and again, with the same error: what the last said.

    ``reason`` is the worker's own (``OutputUnavailable``, ``RedisUnavailable``,
    ``InvalidConfig``, ``WorkerCrashed``, or ``WorkerExited`` when it said nothing);
    ``message`` its sentence; ``code`` its exit code.
    """

    unit: str
    deaths: int
    reason: str
    message: str
    code: int

    @property
    def key(self) -> str:
        """What "the same error" is, as remembered between ticks (``Reason: message``)."""
        return f"{self.reason}: {self.message}"

    @property
    def summary(self) -> str:
        """One sentence for a condition, an Event and the terminal."""
        return (
            f"{self.deaths} workers in a row died at start ({self.unit} last, exit code"
            f" {self.code}): {self.message}"
        )


@dataclass(frozen=True, slots=True)
class Decision:
    desired_replicas: int
    phase: Phase
    complete: bool = False
    #: Workers whose leases go back to the queue now (gone, dead, or drained and exited).
    requeues: tuple[Requeue, ...] = ()
    #: Units still running but dead (no heartbeat, or past their drain deadline): kill them.
    replace: tuple[str, ...] = ()
    #: Units that exited: the backend may drop them from its books.
    forget: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default_factory=tuple)
    #: The frontier's memory pressure level now (the observed one, or a new one).
    pressure: PressureLevel = PressureLevel.NONE
    #: A new backpressure for the frontier to enforce (None: the level stays).
    set_pressure: Backpressure | None = None
    #: More URLs seen than BLOOM_NEARLY_FULL of the filter's capacity.
    bloom_nearly_full: bool = False
    #: The frontier is lost (what was found instead): the job fails, or with ``reopen`` is
    #: re-created (``redis.onLoss: Reseed``) when the caller next opens it.
    lost: str | None = None
    reopen: bool = False
    #: Workers that keep dying at start (None: none do).
    workers_failing: WorkersFailing | None = None

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)

    @property
    def requeue_owners(self) -> tuple[str, ...]:
        return tuple(r.worker_id for r in self.requeues)


def _fate(worker: WorkerView, now: float, policy: FleetPolicy) -> RequeueReason | None:
    """Why this worker's leases must go back now, or None while it is fine (or draining)."""
    if worker.draining:
        if not worker.running:
            return "drained"
        return "drain_overrun" if now > (worker.drain_deadline or 0.0) else None
    if not worker.running:
        return "exited"
    if worker.heartbeat_age_seconds is None:
        if worker.quick_deaths:
            return None  # restarted in place and backing off: a new pod would die alike
        if worker.waiting is not None:
            # Never started (unschedulable, no image): not dead, and a new pod would wait
            # alike; the fleet reports it as what the crawl waits for (fleet/waiting.py).
            return None
        startup = max(policy.dead_after_seconds, policy.startup_grace_seconds)
        return "no_heartbeat" if now - worker.started_at > startup else None
    return "stale_heartbeat" if worker.heartbeat_age_seconds > policy.dead_after_seconds else None


def _fresh(heartbeat_age_seconds: float | None, policy: FleetPolicy) -> bool:
    return heartbeat_age_seconds is not None and heartbeat_age_seconds <= policy.dead_after_seconds


def demand(
    policy: FleetPolicy, queued: int, in_flight: int, next_retry_in_seconds: float | None = None
) -> int:
    """Replicas the backlog asks for, before stabilisation: DESIGN §5's formula.

    ``in_flight`` counts the requests in progress: a page fetched and waiting for its output
    file to become durable (DESIGN §8) needs no worker, so it asks for none.

    Delayed retries are demand too, but at most one worker's worth, and only once the earliest
    is due within ``retry_lead_seconds``: a worker claims them as they come due (a claim moves
    due retries into their queues), and then they count as queued like any other URL. Without
    this, ``minReplicas: 0`` with only retries left would wait for them forever. A revisit
    due soon wakes a worker ahead of its time the same way (``next_retry_in_seconds`` is then
    the earlier of the two: see ``_due_in``).
    """
    wanted = math.ceil((queued + in_flight) / max(1, policy.target_backlog_per_replica))
    if next_retry_in_seconds is not None and next_retry_in_seconds <= policy.retry_lead_seconds:
        wanted = max(wanted, 1)
    return max(policy.min_replicas, min(policy.max_replicas, wanted))


def _due_in(policy: FleetPolicy, seen: Observation, memory: FleetMemory) -> float | None:
    """When work comes due, for the lead that wakes a worker ahead of it. A fleet still up
    keeps its worker for a revisit due within the scale-down delay (besides the lead): it
    would be stopped only to be started again, which the delay is there to prevent."""
    revisit_in = seen.next_revisit_in_seconds
    if revisit_in is not None and memory.replicas > 0:
        revisit_in -= policy.scale_down_delay_seconds
    return _earliest(seen.next_retry_in_seconds, revisit_in)


def _wanted(policy: FleetPolicy, queued: int, in_flight: int, retry_in: float | None) -> int:
    if policy.pinned_replicas is not None:
        return policy.pinned_replicas
    return demand(policy, queued, in_flight, retry_in)


def wants_tick(
    policy: FleetPolicy, stats: FrontierStats, memory: FleetMemory, *, suspended: bool
) -> bool:
    """Whether one read of the counters calls for a full tick before the next is due.

    The cheap check between ticks: the crawl is done or a moment from it (completion should
    not wait a tick), or the fleet is smaller than the backlog (or the pin) asks for.
    Shrinking waits for the stabilisation delay anyway, so it waits for a tick too.
    """
    if suspended:
        return memory.replicas != 0
    due_in = _earliest(stats.next_retry_in_seconds, stats.next_revisit_in_seconds)
    if policy.keeps_going and stats.pending == 0:
        # Waiting for its next revisit: a tick moves a due one into its queue.
        revisit_in = stats.next_revisit_in_seconds
        if revisit_in is not None and revisit_in <= 0:
            return True
    elif stats.pending == 0:
        # Crawled out: complete now, unless a worker is still writing the closing files
        # (then only a fleet of none needs the tick, to start one that writes them).
        closing = policy.writes_output and stats.seeded and not stats.output_finished
        return not closing or memory.replicas == 0
    wanted = _wanted(policy, stats.queued, stats.fetching, due_in)
    if policy.pinned_replicas is not None:
        return wanted != memory.replicas
    return wanted > memory.replicas


def memory_pressure(
    current: PressureLevel, used_bytes: int | None, max_bytes: int
) -> PressureLevel:
    """The pressure level for Redis's used memory, with hysteresis (see PRESSURE_*).

    No maxmemory (0) or no reading: nothing to measure against, so the level stays.
    """
    if used_bytes is None or max_bytes <= 0:
        return current
    share = used_bytes / max_bytes
    if share >= PRESSURE_CRITICAL:
        return PressureLevel.CRITICAL
    if share < PRESSURE_RELEASE:
        return PressureLevel.NONE
    if current == PressureLevel.CRITICAL:
        return PressureLevel.HIGH if share < PRESSURE_CRITICAL_RELEASE else current
    if current == PressureLevel.HIGH or share >= PRESSURE_HIGH:
        return PressureLevel.HIGH
    return PressureLevel.NONE


#: The share of the crawl's rate (when pressure began) that claims keep at each level. A page
#: crawled under pressure has links held back (admitted only when met again), so fewer pages
#: are crawled meanwhile; never none, since finishing work is what frees memory.
CLAIM_SHARE: Final = {PressureLevel.HIGH: 0.75, PressureLevel.CRITICAL: 0.5}


def backpressure(level: PressureLevel, base_rate: float | None) -> Backpressure:
    """What the frontier holds back at ``level``: its link budget, and claims at a share of
    ``base_rate``, the pages a second before pressure began (unknown: claims unlimited)."""
    share = CLAIM_SHARE.get(level)
    rate = None
    if share is not None and base_rate:
        rate = max(1.0, round(base_rate * share, 1))
    return Backpressure.at(level, claims_per_second=rate)


def _lost(
    policy: FleetPolicy, seen: Observation, memory: FleetMemory, lost: str
) -> tuple[Decision, FleetMemory]:
    """The frontier the job remembers is gone. Never silent: fail, or re-seed on purpose."""
    if policy.on_loss == "Reseed":
        reason = f"frontier lost ({lost}): re-created and re-seeded (redis.onLoss: Reseed)"
        return Decision(
            memory.replicas, "Pending", lost=lost, reopen=True, reasons=(reason,)
        ), memory
    reason = f"frontier lost ({lost}): the job fails (redis.onLoss: Fail)"
    return Decision(0, "Failed", lost=lost, reasons=(reason,)), replace(
        memory, replicas=0, low_demand_since=None, idle_since=None
    )


def decide(
    policy: FleetPolicy, seen: Observation, memory: FleetMemory
) -> tuple[Decision, FleetMemory]:
    """One tick of the brain."""
    if seen.lost is not None:
        return _lost(policy, seen, memory, seen.lost)
    decision, memory = _steer(policy, seen, memory)
    level = memory_pressure(seen.pressure, seen.memory_used_bytes, seen.memory_max_bytes)
    if decision.complete:
        level = PressureLevel.NONE  # nothing left to hold back: the condition ends with the job
    capacity = policy.bloom_capacity
    nearly_full = capacity > 0 and seen.seen >= BLOOM_NEARLY_FULL * capacity
    base = memory.pressure_base_rate
    if level == PressureLevel.NONE:
        base = None
    elif seen.pressure == PressureLevel.NONE or base is None:
        base = seen.pages_per_second
    changed = backpressure(level, base) if level != seen.pressure else None
    failing = _failing(policy, seen.workers)
    if failing is not None and policy.stop_on_crash_loop and decision.phase != "Succeeded":
        decision = replace(
            decision,
            desired_replicas=0,
            phase="Failed",
            reasons=(*decision.reasons, f"workers failing: {failing.summary}"),
        )
        memory = replace(memory, replicas=0, low_demand_since=None, idle_since=None)
    return replace(
        decision,
        pressure=level,
        set_pressure=changed,
        bloom_nearly_full=nearly_full,
        workers_failing=failing,
    ), replace(
        memory,
        bloom_nearly_full=nearly_full,
        pressure_base_rate=base,
        workers_failing=failing.key if failing is not None else None,
    )


def _failing(policy: FleetPolicy, workers: tuple[WorkerView, ...]) -> WorkersFailing | None:
    """The worker that died at start most often in a row, once that is ``crash_loop_deaths``.

    One that runs and heartbeats again has started (the fix came: a bucket created), however
    young its run.
    """
    worst = max(
        (
            w
            for w in workers
            if w.last_exit is not None
            and w.quick_deaths > 0
            and not (w.running and _fresh(w.heartbeat_age_seconds, policy))
        ),
        key=lambda w: w.quick_deaths,
        default=None,
    )
    if worst is None or worst.last_exit is None or worst.quick_deaths < policy.crash_loop_deaths:
        return None
    last = worst.last_exit
    return WorkersFailing(worst.unit, worst.quick_deaths, last.reason, last.message, last.code)


def _steer(
    policy: FleetPolicy, seen: Observation, memory: FleetMemory
) -> tuple[Decision, FleetMemory]:
    """Replicas, requeues, replacements and the phase: the brain's first job."""
    requeues: list[Requeue] = []
    replace_units: list[str] = []
    forget_units: list[str] = []
    for worker in seen.workers:
        reason = _fate(worker, seen.now, policy)
        if reason is None:
            continue
        requeues.append(Requeue(worker.worker_id, reason))
        if not worker.running:
            forget_units.append(worker.unit)
        elif not worker.quick_deaths:  # one restarted in place and backing off stays
            replace_units.append(worker.unit)
    requeues += [Requeue(worker, "gone") for worker in sorted(set(seen.vanished))]
    requeues.sort(key=lambda r: r.worker_id)
    reasons: list[str] = []
    if requeues:
        reasons.append(f"requeue leases of {', '.join(r.worker_id for r in requeues)}")

    def made(desired: int, phase: Phase, *, complete: bool = False) -> Decision:
        return Decision(
            desired,
            phase,
            complete=complete,
            requeues=tuple(requeues),
            replace=tuple(replace_units),
            forget=tuple(forget_units),
            reasons=tuple(reasons),
        )

    if seen.suspended:
        reasons.append("suspended")
        return made(0, "Suspended"), replace(
            memory, replicas=0, low_demand_since=None, idle_since=None
        )

    pending = seen.queued + seen.delayed + seen.in_flight
    closing = False  # crawled out, but the output's closing files are not written yet
    if policy.keeps_going:
        idle_since = None  # never complete by itself: it waits for its next revisit
    elif seen.seeded and pending == 0:
        idle_since = memory.idle_since if memory.idle_since is not None else seen.now
        if policy.writes_output and not seen.output_finished:
            # A worker writes them (the one the frontier elects): keep one to do it, and say
            # Succeeded only once they are there.
            closing = True
            reasons.append("nothing left to crawl: waiting for the output's manifest.json")
        elif seen.now - idle_since >= policy.completion_grace_seconds:
            reasons.append("nothing queued, delayed or in flight: complete")
            return made(0, "Succeeded", complete=True), replace(
                memory, replicas=0, idle_since=idle_since
            )
    else:
        idle_since = None

    wanted = _wanted(policy, seen.queued, seen.demand_in_flight, _due_in(policy, seen, memory))
    if closing:
        wanted = max(wanted, 1)
    current = memory.replicas
    low_since = memory.low_demand_since
    if policy.pinned_replicas is not None:
        desired, low_since = wanted, None
        if wanted != current:
            reasons.append(f"pinned at {wanted} (--workers, or workers.replicas when external)")
    elif wanted >= current:
        desired, low_since = wanted, None
        if wanted > current:
            reasons.append(
                f"scale up {current} -> {wanted}: backlog {seen.queued + seen.demand_in_flight}"
                + (f", {seen.delayed} delayed" if seen.delayed else "")
            )
    else:  # HPA-style stabilisation: shrink only after the delay of lower demand
        low_since = low_since if low_since is not None else seen.now
        if seen.now - low_since >= policy.scale_down_delay_seconds:
            desired, low_since = wanted, None
            reasons.append(f"scale down {current} -> {wanted} after the stabilisation delay")
        else:
            desired = current
    phase: Phase = "Running" if seen.seeded else "Pending"
    return made(desired, phase), replace(
        memory, replicas=desired, low_demand_since=low_since, idle_since=idle_since
    )
