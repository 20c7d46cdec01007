"""The one steering tick: observe -> decide -> apply, for ``crawlfleet run`` and the operator.

::

    observe   backend.observe()           units (pods / processes), replicas, ready
              frontier.epoch              the frontier's identity, against the remembered one
              frontier.stats()            counters, earliest retry, what holds hosts back
                                          (robots.txt waits, delays, held slots): one pipeline
              frontier.workers()          heartbeats: one pipeline
              frontier.memory()           Redis's used memory and maxmemory: one INFO
              (frontier.file_stats(), for a job with spec.files: files stored, bytes,
              duplicates: two O(1) reads in one pipeline)
              (frontier.seed() once, if the job is not seeded yet, and once more each
              time its seed list changes: policy.seed_action)
              (frontier.promote_due(), when the counters say a revisit is due: due
              revisits become queued backlog, which wakes a fleet scaled to zero)
    decide    policy.decide()             pure: desired replicas, requeues, replacements,
                                          memory pressure, Bloom fill, a lost frontier
              waiting.assess()            pure: what the crawl waits for, when URLs are
                                          queued and none is fetched (frontier waits,
                                          heartbeats, the units' own reasons)
              watchdog.stalled()          pure: leases stuck in a stage of a live worker
    apply     frontier.set_pressure()     when the pressure level changes
              backend.replace(unit)       dead but running: kill it
              frontier.requeue_owner()    leases of dead, gone and drained workers
              backend.forget(unit)        exited units
              frontier.requeue_expired()  leases whose ttl ran out
              backend.scale(n)            when the desired count differs
              backend.record(event)       one per decision applied (WorkersFailing once per error;
                                          Waiting/WaitEnded, Stalled/StallEnded on change)

A tick is O(1) Redis round trips per job (four, plus two per worker found dead and one more
read of the counters when anything was requeued, two when revisits came due, one for a job
with files), however big the crawl. Between ticks the callers make one cheap :func:`check`
(one read of the counters) that brings the next tick forward when the crawl ends, the
backlog outgrows the fleet, or a revisit comes due.

The memory (:class:`~crawlfleet.fleet.policy.FleetMemory`) goes in and comes out: the caller
keeps it durable (status in a cluster, state.json locally).

**Silence while Redis was away** is no sign of death: a worker cannot heartbeat into a Redis
that does not answer, so when the frontier comes back after an outage longer than
``lease.deadAfterSeconds`` every heartbeat is older than that, and a tick that took them at
their word would kill every live worker and requeue (fetch again) every page in flight.
Callers pass ``reachable_since`` (when the frontier last came back for them, or "now" on the
tick that first reaches it again) and a heartbeat's age counts only from then
(:func:`heard_while_reachable`): a worker that really died is found ``deadAfterSeconds``
later instead.

**A lost frontier** (DESIGN §3, durability) is the tick's to judge, like everything else.
Callers open the frontier with :func:`open_frontier`, which asks for the epoch the job
remembers: with ``redis.onLoss: Fail`` a frontier found lost there raises ``FrontierLost``,
which the caller hands to :func:`frontier_lost` (the job fails, an Event says what was
found); with ``Reseed`` a new frontier is made in its place, and the tick that first sees
its new epoch records ``FrontierReseeded`` and queues the seeds. Any call of a tick may find
the frontier gone mid-run: the tick records ``FrontierLost`` and fails the job, or (Reseed)
asks the caller to open it again (``Decision.reopen``). Nothing is re-seeded without an
Event saying so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from crawlfleet.crawljob.durations import format_duration
from crawlfleet.errors import FrontierLost, FrontierUnavailable, PartitionsUnavailable
from crawlfleet.fleet.backend import FleetBackend, FleetEvent, FleetView, unit_of
from crawlfleet.fleet.link_checks import LinkChecks, live_link_checks
from crawlfleet.fleet.policy import (
    Decision,
    FleetMemory,
    FleetPolicy,
    Observation,
    RateLimitPause,
    RequeueReason,
    Suspension,
    WorkerView,
    decide,
    rate_limit_pause,
    seed_action,
    suspension,
    wants_tick,
)
from crawlfleet.fleet.waiting import Waiting, assess, track
from crawlfleet.fleet.watchdog import Stall, stalled
from crawlfleet.frontier import (
    Backpressure,
    FileStats,
    Frontier,
    FrontierLimits,
    FrontierSettings,
    FrontierStats,
    MemoryState,
    PartitionedFrontier,
    PressureLevel,
    ScopeRules,
    WorkerHeartbeat,
)

__all__ = [
    "PartitionOutage",
    "Seeds",
    "Tick",
    "check",
    "frontier_lost",
    "heard_while_reachable",
    "join",
    "open_frontier",
    "output_event",
    "partition_outage",
    "requeue_unit",
    "tick",
]


@dataclass(frozen=True, slots=True)
class PartitionOutage:
    """Some partitions of a partitioned frontier do not answer; the others do."""

    #: The partitions that do not answer (never the home: without it nothing answers).
    partitions: tuple[int, ...]
    #: Workers whose link spool is full (they stopped claiming until a replay frees room).
    spool_full: int
    #: What it is, in a sentence: which partitions, why, what the workers do meanwhile.
    message: str


async def partition_outage(
    frontier: Frontier, error: FrontierUnavailable
) -> PartitionOutage | None:
    """What a tick that failed with ``error`` waits for, when it is some partitions of a
    partitioned frontier (the others answer): which, why, and what the workers do meanwhile,
    with the links they spooled (their heartbeats, in the home partition); None when it is
    Redis as a whole (or the home partition, which every worker needs)."""
    if not isinstance(frontier, PartitionedFrontier):
        return None
    if not isinstance(error, PartitionsUnavailable):
        error = await frontier.which_unavailable(error)
    if not isinstance(error, PartitionsUnavailable) or 0 in error.partitions:
        return None
    names = ", ".join(f"{k} ({frontier.partitions[k].keys.tag})" for k in error.partitions)
    cause = str(error.__cause__ or error).split(": ", 1)[-1]
    spooled, full = 0, 0
    try:
        for beat in await frontier.workers():
            spooled += int(beat.number("spooled_links"))
            full += 1 if beat.number("link_spool_full") else 0
    except FrontierUnavailable:
        pass
    then = (
        f"{full} worker(s) have a full link spool and stopped claiming until it answers"
        if full
        else "the workers go on crawling the other partitions' hosts"
    )
    which = "partitions" if len(error.partitions) > 1 else "partition"
    return PartitionOutage(
        error.partitions,
        full,
        f"frontier {which} {names} of {frontier.shards} unavailable ({cause}): {then};"
        f" {spooled} link(s) bound for it spooled, replayed when it answers again",
    )


#: The seeds a tick queues when the frontier is not seeded yet: the URLs, or how to read them
#: (a seedsFrom list is read only then, not at every tick).
Seeds = Sequence[str] | Callable[[], Awaitable[Sequence[str]]]


@dataclass(frozen=True, slots=True)
class Tick:
    """What one tick saw and did."""

    #: None when the frontier was lost: nothing of it could be read.
    stats: FrontierStats | None
    view: FleetView
    decision: Decision
    memory: FleetMemory
    #: How many seed URLs this tick queued (None: the job was seeded already, or suspended).
    seeded: int | None
    #: The backend was asked for a different count this tick.
    scaled: bool
    #: Workers (fresh heartbeats) that claim nothing because their output destination is
    #: failing or too many of their files wait for it (DESIGN §8): the callers turn a change
    #: into an Event, the operator into a condition.
    output_blocked: tuple[str, ...] = ()
    #: Redis's memory as this tick read it (None: not read, the frontier being lost).
    frontier_memory: MemoryState | None = None
    #: The Event of a changed seed list queued again (SeedsAdded), None when there was none.
    seeds_added: FleetEvent | None = None
    #: What the crawl waits for, URLs being queued and none fetched (None: it moves, or
    #: only paces itself): crawlfleet.fleet.waiting.
    waiting: Waiting | None = None
    #: Leases of live workers that stopped moving (None: none): crawlfleet.fleet.watchdog.
    stall: Stall | None = None
    #: The Events of this tick about the spec's changes it applied (LimitsChanged,
    #: ScopeChanged, SuspendExpired), waits and stalls (Waiting, WaitEnded, Stalled,
    #: StallEnded), recorded already; callers echo them (the local run prints them).
    news: tuple[FleetEvent, ...] = ()
    #: The file counters (a job with spec.files; None for the others, or when not read).
    files: FileStats | None = None
    #: The live workers' links answered locally and checked by the filter (their heartbeats'
    #: sum: crawlfleet.fleet.link_checks), whose share is status.localDedupHitRate.
    link_checks: LinkChecks = field(default_factory=LinkChecks)
    #: The heartbeats this tick read (the local run remembers each worker's last counters).
    beats: tuple[WorkerHeartbeat, ...] = ()


async def open_frontier(
    url: str, settings: FrontierSettings, *, policy: FleetPolicy, memory: FleetMemory
) -> Frontier:
    """Open the job's frontier: the one of the remembered epoch, or, lost, as policy says.

    ``FrontierLost`` (with what was found) when it is lost and ``redis.onLoss`` is Fail; with
    Reseed a new, unseeded frontier (``Frontier.reseeded`` says why), which the next tick
    seeds and reports. A new job (no epoch remembered) opens or creates it.
    """
    return await Frontier.connect(
        url, settings, expect_epoch=memory.frontier_epoch, reseed=policy.on_loss == "Reseed"
    )


def heard_while_reachable(
    beats: Sequence[WorkerHeartbeat], *, now: float, reachable_since: float | None
) -> list[WorkerHeartbeat]:
    """The heartbeats, none older than the time since the frontier came back
    (``reachable_since``; None: it was not away): a worker's silence counts only while it
    could have been heard."""
    if reachable_since is None:
        return list(beats)
    heard_for = max(0.0, now - reachable_since)
    return [
        beat if beat.age_seconds <= heard_for else replace(beat, age_seconds=heard_for)
        for beat in beats
    ]


def join(
    view: FleetView, beats: Sequence[WorkerHeartbeat]
) -> tuple[tuple[WorkerView, ...], tuple[str, ...]]:
    """One worker view per unit, and the worker ids the backend has no unit for.

    A unit's freshest heartbeat stands for it; older incarnations of the same unit (a
    container that crashed and restarted keeps its pod's name) are gone, as are heartbeats
    of this backend's workers whose unit no longer exists.
    """
    by_unit: dict[str, list[tuple[float, str]]] = {}
    for beat in beats:
        by_unit.setdefault(unit_of(beat.worker), []).append((beat.age_seconds, beat.worker))
    views: list[WorkerView] = []
    gone: list[str] = []
    for unit in view.units:
        incarnations = sorted(by_unit.pop(unit.name, ()))
        gone += [worker for _, worker in incarnations[1:]]
        views.append(
            WorkerView(
                worker_id=incarnations[0][1] if incarnations else unit.name,
                unit=unit.name,
                running=unit.running,
                started_at=unit.started_at,
                heartbeat_age_seconds=incarnations[0][0] if incarnations else None,
                drain_deadline=unit.drain_deadline,
                last_exit=unit.last_exit,
                quick_deaths=unit.quick_deaths,
                waiting=unit.waiting,
            )
        )
    for name, incarnations in by_unit.items():
        if name.startswith(view.owns):
            gone += [worker for _, worker in incarnations]
    return tuple(views), tuple(sorted(gone))


async def check(
    frontier: Frontier, policy: FleetPolicy, memory: FleetMemory, *, suspended: bool
) -> bool:
    """One read of the counters: is a full tick due before its time?

    A frontier found lost calls for the tick at once: judging that is the tick's.
    """
    try:
        stats = await frontier.stats()
    except FrontierLost:
        return True
    return wants_tick(policy, stats, memory, suspended=suspended)


async def tick(
    frontier: Frontier,
    backend: FleetBackend,
    policy: FleetPolicy,
    memory: FleetMemory,
    *,
    now: float,
    suspended: bool,
    seeds: Seeds,
    seeds_hash: str | None = None,
    pages_per_second: float | None = None,
    reachable_since: float | None = None,
) -> Tick | None:
    """Observe, decide, apply, once; None when the backend cannot see its fleet yet.

    ``reachable_since``: when the frontier last came back after not answering this caller
    (wall-clock seconds, as ``now``); heartbeats are not older than that
    (:func:`heard_while_reachable`). None: it has not been away.

    ``seeds_hash``: the digest of the seed list (:func:`~crawlfleet.fleet.policy.seed_list_hash`)
    whose change on a running job queues the seeds again; None: the list is not tracked.

    ``pages_per_second``: the crawl's recent rate, which a memory pressure level slows
    claims to a share of.
    """
    view = await backend.observe()
    if view is None:
        return None
    remembered = memory.frontier_epoch
    if remembered is None:
        memory = replace(memory, frontier_epoch=frontier.epoch)
    elif frontier.epoch != remembered:
        found = frontier.reseeded or f"Redis holds the frontier of epoch {frontier.epoch}"
        found = f"{found} (the job's epoch was {remembered})"
        if policy.on_loss != "Reseed" or frontier.reseeded is None:
            return await _loss(backend, policy, memory, view, found, now=now)
        memory = replace(memory, frontier_epoch=frontier.epoch, bloom_nearly_full=False)
        await backend.record(
            FleetEvent(
                "FrontierReseeded",
                f"frontier lost: {found}; a new one (epoch {frontier.epoch}) starts from the"
                " seeds again (redis.onLoss: Reseed): pages crawled before the loss are"
                " crawled again",
                warning=True,
                fields={"epoch": frontier.epoch},
            )
        )
    try:
        return await _tick(
            frontier, backend, policy, memory, view, now=now, suspended=suspended, seeds=seeds,
            seeds_hash=seeds_hash, pages_per_second=pages_per_second,
            reachable_since=reachable_since,
        )  # fmt: skip
    except FrontierLost as error:
        return await _loss(backend, policy, memory, view, str(error), now=now)


async def frontier_lost(
    backend: FleetBackend, policy: FleetPolicy, memory: FleetMemory, found: str, *, now: float
) -> Tick | None:
    """The decision for a frontier found lost outside a tick, applied as a tick would."""
    view = await backend.observe()
    if view is None:
        return None
    return await _loss(backend, policy, memory, view, found, now=now)


async def _loss(
    backend: FleetBackend,
    policy: FleetPolicy,
    memory: FleetMemory,
    view: FleetView,
    found: str,
    *,
    now: float,
) -> Tick:
    decision, memory = decide(policy, Observation.of_loss(found, now=now), memory)
    if decision.reopen:
        then = "it is opened anew and the seeds queued again (redis.onLoss: Reseed)"
    else:
        then = (
            "the job fails (redis.onLoss: Fail) rather than crawl again or skip pages"
            " unseen; set redis.onLoss: Reseed to start it over"
        )
    await backend.record(
        FleetEvent("FrontierLost", f"frontier lost: {found}; {then}", warning=True)
    )
    scaled = decision.desired_replicas != view.replicas
    if scaled:
        await backend.scale(decision.desired_replicas)
    return Tick(None, view, decision, memory, None, scaled)


async def _tick(
    frontier: Frontier,
    backend: FleetBackend,
    policy: FleetPolicy,
    memory: FleetMemory,
    view: FleetView,
    *,
    now: float,
    suspended: bool,
    seeds: Seeds,
    seeds_hash: str | None,
    pages_per_second: float | None,
    reachable_since: float | None,
) -> Tick:
    # The spec's changes this tick applies, said (recorded, and echoed by the callers).
    applied: list[FleetEvent] = []
    if policy.frontier_limits is not None:
        applied += await _retune(frontier, policy.frontier_limits)
    if policy.scope_rules is not None:
        applied += await _rescope(frontier, policy.scope_rules)
    held = suspension(policy, memory, suspended=suspended, now=now)
    resumed = memory.suspended_since is not None and held.memory.suspended_since is None
    memory, suspended = held.memory, held.suspended
    if held.newly_expired:
        applied.append(_suspend_expired(policy, held))
    for said in applied:
        await backend.record(said)
    stats = await frontier.stats()
    seeded: int | None = None
    seeds_added: FleetEvent | None = None
    action = seed_action(
        seeded=stats.seeded,
        suspended=suspended,
        remembered=memory.seeds_hash,
        current=seeds_hash,
        workers_seed=policy.workers_seed,
    )
    if action in ("seed", "reseed", "catch_up"):
        urls = list(await seeds() if callable(seeds) else seeds)
        # A Scrapy job may have no seeds at all (its spider's start requests are its seeds).
        new = await frontier.seed(urls) if urls or action == "seed" else 0
        event: FleetEvent | None = None
        if action == "seed":
            seeded = new
            event = FleetEvent("Seeded", f"{new} seed URL(s) queued", fields={"seeds": new})
        elif new or action == "reseed":
            # the whole list through the filter: what was seeded before is seen, not queued
            event = seeds_added = FleetEvent(
                "SeedsAdded",
                f"the seed list changed: {new} of {len(urls)} seeds new, queued ahead of"
                " discovered links",
                fields={"new": new, "seeds": len(urls)},
            )
        if event is not None:
            await backend.record(event)
        stats = await frontier.stats()
    if action != "none":
        memory = replace(memory, seeds_hash=seeds_hash)
    pause = rate_limit_pause(
        policy,
        memory,
        pushed_back_since=stats.pushed_back_since,
        pending=stats.pending,
        suspended=suspended,
        resumed=resumed,
        now=now,
    )
    memory = pause.memory
    if pause.newly_paused or pause.newly_resumed:
        said = _rate_limit_event(policy, pause, stats)
        await backend.record(said)
        applied.append(said)
    suspended = suspended or pause.paused
    # Claims promote due revisits too, but a fleet scaled to zero claims nothing: here they
    # become queued, and the backlog asks for workers as any other would.
    revisits_due = policy.revisits and not suspended and _revisit_due(stats)
    if revisits_due and await frontier.promote_due():
        stats = await frontier.stats()
    beats = heard_while_reachable(
        await frontier.workers(), now=now, reachable_since=reachable_since
    )
    workers, vanished = join(view, beats)
    output_blocked = tuple(
        sorted(
            beat.worker
            for beat in beats
            if beat.number("output_blocked") and beat.age_seconds <= policy.dead_after_seconds
        )
    )
    redis_memory = await frontier.memory()
    files = await frontier.file_stats() if policy.files else None
    observation = Observation.of(
        stats,
        now=now,
        suspended=suspended,
        workers=workers,
        vanished=vanished,
        memory_used_bytes=redis_memory.used_bytes,
        memory_max_bytes=redis_memory.max_bytes,
        pages_per_second=pages_per_second,
    )
    before = memory
    decision, memory = decide(policy, observation, memory)
    if held.expired == "Fail" and decision.phase != "Failed":
        why = f"suspended longer than spec.suspendExpiry.after ({_after(policy)})"
        decision = replace(
            decision, phase="Failed", desired_replicas=0, reasons=(*decision.reasons, why)
        )
    await _frontier_health(frontier, backend, policy, before, decision, stats, redis_memory)
    await _workers_health(backend, before, decision)

    for unit in decision.replace:
        await backend.replace(unit)
        await backend.record(
            FleetEvent(
                "WorkerReplaced",
                f"worker {unit} is running but dead (no heartbeat for "
                f"{policy.dead_after_seconds:g} s, or past its drain deadline): "
                "killed, its leases requeued",
                warning=True,
                fields={"worker": unit},
            )
        )
    for requeue in decision.requeues:
        await _requeue(frontier, backend, requeue.worker_id, requeue.reason)
    for unit in decision.forget:
        await backend.forget(unit)
    expired = await frontier.requeue_expired()
    if decision.requeues or expired.requeued or expired.dead:
        # What the requeues moved: the Events below count the frontier as it is now.
        stats = await frontier.stats()
    if expired.requeued or expired.dead:
        await backend.record(
            FleetEvent(
                "LeasesExpired",
                f"{expired.requeued} expired lease(s) requeued, {expired.dead} dead-lettered",
                fields={"requeued": expired.requeued, "dead": expired.dead},
            )
        )

    desired = decision.desired_replicas
    scaled = desired != view.replicas
    if scaled:
        await backend.scale(desired)
        await backend.record(
            FleetEvent(
                "Scaled",
                f"workers {view.replicas} -> {desired}: "
                + (decision.reason or "back to the count the brain wants"),
                fields={
                    "from": view.replicas,
                    "to": desired,
                    "queued": stats.queued,
                    "delayed": stats.delayed,
                    "in_flight": stats.leased,
                },
            )
        )
    waiting = assess(
        stats,
        now=now,
        suspended=suspended,
        workers=workers,
        beats=beats,
        policy=policy,
        wanted=decision.desired_replicas,
    )
    stall = stalled(
        beats,
        stall_after_seconds=policy.stall_after_seconds,
        fresh_seconds=policy.dead_after_seconds,
    )
    if decision.complete:
        # Nothing is left to wait for: a wait announced ends with the job, unsaid; a stall
        # announced (a warning) is said to be over.
        waiting = stall = None
        memory = replace(memory, waiting=None, moving_since=None)
    memory, news = _waits_news(memory, waiting, stall, now=now)
    for event in news:
        await backend.record(event)
    if decision.complete:
        await backend.record(
            FleetEvent(
                "Completed",
                f"{stats.crawled} pages crawled, {stats.dead} dead-lettered",
                fields={"crawled": stats.crawled, "dead": stats.dead},
            )
        )
    return Tick(
        stats,
        view,
        decision,
        memory,
        seeded,
        scaled,
        output_blocked,
        redis_memory,
        seeds_added,
        waiting,
        stall,
        (*applied, *news),
        files,
        link_checks=live_link_checks(beats, fresh_seconds=policy.dead_after_seconds),
        beats=tuple(beats),
    )


async def _retune(frontier: Frontier, limits: FrontierLimits) -> list[FleetEvent]:
    """The spec's limits into the frontier when a running job changed them (one HMGET a
    tick; a write and an Event only on a change)."""
    changes = await frontier.retune(limits)
    if not changes:
        return []
    said = ", ".join(str(change) for change in changes)
    return [
        FleetEvent(
            "LimitsChanged",
            f"{said}: in force from the next claim and the next batch of links",
            fields={change.field: change.after for change in changes},
        )
    ]


def _after(policy: FleetPolicy) -> str:
    assert policy.suspend_expiry is not None
    return format_duration(policy.suspend_expiry[0])


def _rate_limit_event(
    policy: FleetPolicy, pause: RateLimitPause, stats: FrontierStats
) -> FleetEvent:
    """``RateLimited`` when the job pauses itself, ``RateLimitPauseEnded`` when it tries again."""
    assert policy.auto_pause is not None
    limited_for, resume_after = policy.auto_pause
    if pause.newly_resumed:
        return FleetEvent(
            "RateLimitPauseEnded",
            f"paused for spec.autoPause.resumeAfter ({format_duration(resume_after or 0)}):"
            " the job tries again",
        )
    since = stats.pushed_back_since
    then = (
        f"it tries again in {format_duration(resume_after)} (spec.autoPause.resumeAfter)"
        if resume_after is not None
        else "resume it by setting spec.suspend to true, then false"
    )
    return FleetEvent(
        "RateLimited",
        f"every fetch since {_utc(since)} was pushed back by its site (429, 403 or an"
        f" empty page), longer than spec.autoPause.rateLimitedFor"
        f" ({format_duration(limited_for)}): the job pauses itself (workers at 0, frontier"
        f" kept); {then}",
        warning=True,
        fields={"pending": stats.pending},
    )


def _utc(seconds: float | None) -> str:
    if seconds is None:
        return "(unknown)"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _suspend_expired(policy: FleetPolicy, held: Suspension) -> FleetEvent:
    since = held.memory.suspended_since
    what = (
        "the job resumes (spec.suspend still says true)"
        if held.expired == "Resume"
        else ("the job fails")
    )
    return FleetEvent(
        "SuspendExpired",
        f"suspended longer than spec.suspendExpiry.after ({_after(policy)}): {what}",
        warning=held.expired == "Fail",
        fields={"then": str(held.expired), "since": since or 0.0},
    )


async def _rescope(frontier: Frontier, rules: ScopeRules) -> list[FleetEvent]:
    """The spec's include/exclude into the frontier for the workers (one HGET a tick); an
    Event when a running job changed them (not when a new frontier gets its first)."""
    changed, before = await frontier.set_scope_rules(rules)
    if not changed or before is None:
        return []
    said = "; ".join(
        f"scope.{name}: {_pattern_diff(old, new)}"
        for name, old, new in (("include", before[0], rules[0]), ("exclude", before[1], rules[1]))
        if old != new
    )
    return [
        FleetEvent(
            "ScopeChanged",
            f"{said}: the workers follow within a heartbeat, and queued URLs out of scope now"
            " are dropped when claimed (excluded_live)",
            fields={"include": len(rules[0]), "exclude": len(rules[1])},
        )
    ]


def _pattern_diff(before: Sequence[str], after: Sequence[str]) -> str:
    added = [p for p in after if p not in before]
    removed = [p for p in before if p not in after]
    words = [f"+{p!r}" for p in added] + [f"-{p!r}" for p in removed]
    return " ".join(words) or "reordered"


def _revisit_due(stats: FrontierStats) -> bool:
    due_in = stats.next_revisit_in_seconds
    return due_in is not None and due_in <= 0


def _waits_news(
    memory: FleetMemory, waiting: Waiting | None, stall: Stall | None, *, now: float
) -> tuple[FleetMemory, tuple[FleetEvent, ...]]:
    """The Events of what the crawl waits for and of stalled leases, on change only; the
    memory that says what was announced."""
    news: list[FleetEvent] = []
    wait_news, announced, moving_since = track(
        waiting, announced=memory.waiting, moving_since=memory.moving_since, now=now
    )
    if wait_news.began is not None:
        began = wait_news.began
        news.append(
            FleetEvent(
                "Waiting",
                f"waiting: {began.sentence()}",
                warning=began.reason in ("NoLiveWorker", "OutputBlocked"),
                fields={
                    "why": began.reason,
                    "count": began.main.count,
                    "causes": ",".join(cause.reason for cause in began.causes),
                },
            )
        )
    elif wait_news.ended is not None:
        news.append(
            FleetEvent(
                "WaitEnded",
                f"moving again: no longer waiting ({wait_news.ended})",
                fields={"why": wait_news.ended},
            )
        )
    reason = stall.reason if stall is not None else None
    if stall is not None and reason != memory.stalled:
        main = stall.main
        news.append(
            FleetEvent(
                "Stalled",
                stall.sentence(),
                warning=True,
                fields={
                    "why": stall.reason,
                    "stage": main.stage,
                    "leases": stall.leases,
                    "workers": ",".join(main.workers),
                    "oldest_seconds": round(main.oldest_seconds, 1),
                },
            )
        )
    elif stall is None and memory.stalled is not None:
        news.append(
            FleetEvent(
                "StallEnded",
                f"the stalled leases move again ({memory.stalled} is over)",
                fields={"why": memory.stalled},
            )
        )
    memory = replace(memory, waiting=announced, moving_since=moving_since, stalled=reason)
    return memory, tuple(news)


async def _frontier_health(
    frontier: Frontier,
    backend: FleetBackend,
    policy: FleetPolicy,
    before: FleetMemory,
    decision: Decision,
    stats: FrontierStats,
    redis_memory: MemoryState,
) -> None:
    """Memory pressure set on the frontier when its level changes; the Bloom filter's warning.

    Each transition is an Event; the level is the frontier's to enforce (fewer claims, a
    link budget per page), so a crawl slows down instead of running Redis out of memory.
    """
    pressure = decision.set_pressure
    if pressure is not None:
        await frontier.set_pressure(pressure)
        was, now = stats.pressure.level, pressure.level
        what = {
            PressureLevel.NONE: "released: the crawl is complete"
            if decision.complete
            else "released: claims and new links at full speed again",
            PressureLevel.HIGH: f"claims slowed ({_rate(pressure)}), at most"
            f" {pressure.links_per_page} new links per page",
            PressureLevel.CRITICAL: f"claims slowed ({_rate(pressure)}), no new links"
            " admitted; acks, fails and requeues pass",
        }[now]
        await backend.record(
            FleetEvent(
                "FrontierMemoryPressure",
                f"frontier memory pressure {was.name} -> {now.name}: Redis uses"
                f" {redis_memory.used_bytes} of {redis_memory.max_bytes} bytes of maxmemory"
                f" ({redis_memory.ratio:.0%}); {what}",
                warning=now > was,
                fields={
                    "from": was.name,
                    "to": now.name,
                    "used_bytes": redis_memory.used_bytes,
                    "max_bytes": redis_memory.max_bytes,
                },
            )
        )
    if decision.bloom_nearly_full and not before.bloom_nearly_full:
        await backend.record(
            FleetEvent(
                "BloomNearlyFull",
                f"{stats.seen} distinct URLs seen, {stats.seen / policy.bloom_capacity:.0%} of"
                f" dedup.capacity {policy.bloom_capacity}: past it the Bloom filter grows a"
                " layer (each at a tighter error rate, more memory); size dedup.capacity for"
                " such a crawl next time",
                warning=True,
                fields={"seen": stats.seen, "capacity": policy.bloom_capacity},
            )
        )


async def _workers_health(backend: FleetBackend, before: FleetMemory, decision: Decision) -> None:
    """An Event when workers start failing at start (once per error), and when that ends.

    The reason is ``OutputUnavailable`` when that is what the workers said (the destination
    refused their test write), else ``WorkersFailing``; the message is their own sentence.
    """
    failing = decision.workers_failing
    if failing is not None and failing.key != before.workers_failing:
        then = (
            "the job stops (crawlfleet run); fix it and resume"
            if decision.phase == "Failed"
            else "they are restarted with back-off until it is fixed"
        )
        await backend.record(
            FleetEvent(
                "OutputUnavailable" if failing.reason == "OutputUnavailable" else "WorkersFailing",
                f"{failing.summary}; {then}",
                warning=True,
                fields={
                    "worker": failing.unit,
                    "deaths": failing.deaths,
                    "why": failing.reason,
                    "code": failing.code,
                },
            )
        )
    elif failing is None and before.workers_failing is not None:
        await backend.record(FleetEvent("WorkersRecovered", "no worker dies at start any more"))


def _rate(pressure: Backpressure) -> str:
    rate = pressure.claims_per_second
    return "unlimited" if rate is None else f"at most {rate:g} a second"


def output_event(blocked: Sequence[str], was_blocked: bool) -> FleetEvent | None:
    """The Event for a change in the workers blocked by their output, or None if none."""
    if bool(blocked) == was_blocked:
        return None
    if blocked:
        return FleetEvent(
            "OutputBlocked",
            f"{len(blocked)} worker(s) stopped claiming: their output destination is failing"
            " (uploads are retried; nothing is acked or dropped meanwhile)",
            warning=True,
            fields={"workers": ",".join(blocked)},
        )
    return FleetEvent("OutputResumed", "the output destination is writable again")


async def requeue_unit(
    frontier: Frontier, backend: FleetBackend, unit: str, reason: RequeueReason
) -> None:
    """The fast path of a watch: a unit is gone or failed, so its workers' leases go back now.

    Every incarnation that heartbeated from the unit, and the unit's own name (a worker that
    died before its first heartbeat may still own leases under it), without waiting a tick.
    """
    owners = {unit, *(b.worker for b in await frontier.workers() if unit_of(b.worker) == unit)}
    for worker in sorted(owners):
        await _requeue(frontier, backend, worker, reason)


async def _requeue(
    frontier: Frontier, backend: FleetBackend, worker: str, reason: RequeueReason
) -> None:
    moved = await frontier.requeue_owner(worker, ended=reason in _ENDED)
    await frontier.forget_worker(worker)
    if moved.requeued or moved.dead:
        await backend.record(
            FleetEvent(
                "LeasesRequeued",
                f"worker {worker} {_WHY[reason]}: "
                f"{moved.requeued} lease(s) requeued, {moved.dead} dead-lettered",
                fields={
                    "worker": worker,
                    "why": reason,
                    "requeued": moved.requeued,
                    "dead": moved.dead,
                },
            )
        )


#: Reasons that mean the worker's process has ended (its connections closed with it): its
#: unfinished fetches give their host slots back at once. The others (it stopped
#: heartbeating, it overran its drain) may be a hung process still talking to the site.
_ENDED: frozenset[RequeueReason] = frozenset({"exited", "drained", "gone"})

_WHY: dict[RequeueReason, str] = {
    "exited": "exited",
    "no_heartbeat": "never sent a heartbeat",
    "stale_heartbeat": "stopped heartbeating",
    "drained": "drained and exited",
    "drain_overrun": "overran its drain deadline",
    "gone": "is gone (no pod or process runs it)",
}
