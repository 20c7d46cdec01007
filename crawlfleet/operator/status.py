"""A CrawlJob's status from what one reconcile saw: pure, so every phase is a table test.

Conditions follow ``metav1.Condition``: one entry per type, ``lastTransitionTime`` moves only
when the status of that type flips (so ``kubectl wait --for=condition=Complete`` and alerts on
"Ready false for 10 minutes" both work), and each carries the generation it was computed for.
All fifteen types are present from the first reconcile on, so a client never has to tell
"not yet reported" from "false". ``OutputNotDurable`` and ``OutputBlocked`` are about the output
(DESIGN §8): the job's files would go nowhere durable (no worker is created), or the workers
claim nothing because their destination is failing. ``FrontierLost``,
``FrontierMemoryPressure`` and ``BloomNearlyFull`` are about the frontier (DESIGN §3): it is
gone from Redis (the job fails, or is re-seeded on purpose), Redis's memory is filling (the
crawl is slowed), the Bloom filter is past 80 % of the capacity it was sized for.
``WorkersFailing`` is about the workers: they die at start again and again with the same error
(its reason is theirs -- ``OutputUnavailable`` when the destination refused their test write,
``RedisUnavailable``, ``InvalidConfig``, ``WorkerCrashed`` -- and its message their sentence,
read from the pods' termination messages); the kubelet keeps restarting them meanwhile.
``Waiting`` says what the crawl waits for while URLs are queued and none is fetched (its reason
the main cause -- ``RobotsTxt``, ``NoLiveWorker``, ``OutputBlocked``... -- its message every
cause with its count and next change, crawlfleet.fleet.waiting), or, for a job that keeps
going (revisit rules, no schedule), ``NextRevisit`` while it waits for its next due revisit
("next revisit due at <time> (N tracked)"), and ``status.waiting`` says
the reason in one word for ``kubectl get``. ``Stalled`` says which leases stopped moving in a
live worker, in which stage, for how long (crawlfleet.fleet.watchdog). ``ChildConflict`` says
which of the job's child names are held by objects that are not the job's (operator/ownership.py):
the job is held (Pending; a finished job keeps its phase) with nothing made or changed, and
starts once they are gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from crawlfleet.crawljob import CrawlJobSpec, Phase
from crawlfleet.crawljob.frontier import SHARDS_CANNOT_CHANGE
from crawlfleet.fleet import Freshness, WorkersFailing
from crawlfleet.fleet.waiting import Waiting
from crawlfleet.fleet.watchdog import Stall
from crawlfleet.frontier import FileStats, FrontierStats, MemoryState, PressureLevel

__all__ = [
    "CONDITION_TYPES",
    "Observed",
    "child_conflict_resolved",
    "child_conflict_status",
    "conditions_for",
    "invalid_spec_status",
    "job_status",
    "merge_conditions",
    "output_not_durable_status",
    "partition_condition",
    "rfc3339",
    "shards_change_problem",
]

ConditionStatus = Literal["True", "False", "Unknown"]
CONDITION_TYPES: Final = (
    "Ready",
    "Progressing",
    "Complete",
    "Failed",
    "Suspended",
    "InvalidSpec",
    "OutputNotDurable",
    "OutputBlocked",
    "FrontierLost",
    "FrontierMemoryPressure",
    "BloomNearlyFull",
    "WorkersFailing",
    "Waiting",
    "Stalled",
    "ChildConflict",
)
#: The status of the three frontier conditions when nothing is wrong with it.
_FRONTIER_FINE: Final = (
    ("FrontierLost", "Intact"),
    ("FrontierMemoryPressure", "Normal"),
    ("BloomNearlyFull", "Room"),
)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Wanted:
    """One condition as this reconcile sees it, before transition times are merged in."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""


def merge_conditions(
    previous: Sequence[Mapping[str, Any]],
    wanted: Sequence[Wanted],
    *,
    generation: int | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """The new conditions list: ``lastTransitionTime`` kept unless the status flipped."""
    before = {c.get("type"): c for c in previous}
    merged: list[dict[str, Any]] = []
    for want in wanted:
        old = before.get(want.type)
        changed = old is None or old.get("status") != want.status
        condition: dict[str, Any] = {
            "type": want.type,
            "status": want.status,
            "reason": want.reason,
            "message": want.message,
            "lastTransitionTime": rfc3339(now)
            if changed or old is None or not old.get("lastTransitionTime")
            else old["lastTransitionTime"],
        }
        if generation is not None:
            condition["observedGeneration"] = generation
        merged.append(condition)
    return merged


def partition_condition(
    previous: Sequence[Mapping[str, Any]],
    message: str,
    generation: int | None,
    *,
    now: datetime,
) -> list[dict[str, Any]]:
    """The conditions with ``PartitionUnavailable`` true (``message`` says which partition
    and what waits for it), the others as they were. A tick that gets through again writes
    the conditions anew, without it."""
    kept = [
        Wanted(c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
        for c in previous
        if c.get("type") != "PartitionUnavailable"
    ]
    wanted = [*kept, Wanted("PartitionUnavailable", "True", "PartitionUnavailable", message)]
    return merge_conditions(previous, wanted, generation=generation, now=now)


@dataclass(frozen=True, slots=True)
class Observed:
    """What a reconcile of a valid spec saw and decided."""

    phase: Phase
    redis_ready: bool
    desired_replicas: int
    replicas: int
    ready_replicas: int
    stats: FrontierStats | None
    selector: str
    pages_per_second: float
    message: str = ""
    scaled: bool = False
    #: Where the output goes, in words (operator/output.py).
    output: str = ""
    #: Workers that claim nothing because their destination is failing.
    output_blocked: tuple[str, ...] = ()
    #: The frontier is gone from Redis: what was found instead, and what follows.
    frontier_lost: str | None = None
    #: The frontier's epoch (the job's identity in Redis), for status.frontierEpoch.
    frontier_epoch: str | None = None
    #: The partitions of the frontier the tick opened, for status.frontierShards (kept as
    #: first written: see shards_change_problem).
    frontier_shards: int | None = None
    #: Redis's memory, and the backpressure level the frontier holds.
    frontier_memory: MemoryState | None = None
    pressure: PressureLevel = PressureLevel.NONE
    #: ``dedup.capacity``: what the Bloom filter was sized for.
    bloom_capacity: int = 0
    bloom_nearly_full: bool = False
    #: Workers that keep dying at start, and what they said.
    workers_failing: WorkersFailing | None = None
    #: What the crawl waits for (URLs queued, none fetched); leases that stopped moving.
    waiting: Waiting | None = None
    stall: Stall | None = None
    #: How fresh a job with revisit rules keeps its pages (None: it has none).
    freshness: Freshness | None = None
    #: What a job with file rules stored (None: it has none).
    files: FileStats | None = None
    #: The live workers' share of link checks answered locally (None: none checked yet).
    local_dedup_hit_rate: float | None = None
    #: The job paused itself: every fetch pushed back for spec.autoPause.rateLimitedFor.
    rate_limited: bool = False


def _frontier_conditions(seen: Observed) -> list[Wanted]:
    lost = (
        Wanted("FrontierLost", "True", "FrontierLost", seen.frontier_lost)
        if seen.frontier_lost is not None
        else Wanted("FrontierLost", "False", "Intact", "")
    )
    memory = seen.frontier_memory
    if seen.pressure != PressureLevel.NONE and memory is not None:
        pressure = Wanted(
            "FrontierMemoryPressure",
            "True",
            seen.pressure.name.title(),
            f"Redis uses {memory.used_bytes} of {memory.max_bytes} bytes of maxmemory"
            f" ({memory.ratio:.0%}): claims are slowed and new links held back until it is"
            " below 70 %",
        )
    else:
        pressure = Wanted("FrontierMemoryPressure", "False", "Normal", "")
    stats = seen.stats
    if seen.bloom_nearly_full and stats is not None and seen.bloom_capacity:
        bloom = Wanted(
            "BloomNearlyFull",
            "True",
            "NearlyFull",
            f"{stats.seen} distinct URLs seen, {stats.seen / seen.bloom_capacity:.0%} of"
            f" dedup.capacity {seen.bloom_capacity}; {stats.bloom_layers} layer(s), estimated"
            f" false-positive rate {stats.bloom_false_positive_rate:.2g}",
        )
    else:
        bloom = Wanted("BloomNearlyFull", "False", "Room", "")
    return [lost, pressure, bloom]


#: ChildConflict when every child name is the job's (or free).
_NO_CONFLICT: Final = Wanted("ChildConflict", "False", "NoConflict", "")


#: The Waiting and Stalled conditions while the crawl moves (or before it could be judged).
_MOVING: Final = (
    Wanted("Waiting", "False", "Moving", ""),
    Wanted("Stalled", "False", "Moving", ""),
)


def _motion_conditions(seen: Observed) -> list[Wanted]:
    """What the crawl waits for, and leases that stopped moving: each a condition, its
    message with times (not "in 9m12s"), so it changes only when the wait does."""
    waiting, stall = seen.waiting, seen.stall
    return [
        Wanted("Waiting", "True", waiting.reason, waiting.sentence())
        if waiting is not None
        else _MOVING[0],
        Wanted("Stalled", "True", stall.reason, stall.sentence())
        if stall is not None
        else _MOVING[1],
    ]


def _frontier_unknown() -> list[Wanted]:
    """The frontier conditions of a job whose frontier nobody has looked at."""
    return [Wanted(kind, "False", reason, "") for kind, reason in _FRONTIER_FINE]


def conditions_for(seen: Observed) -> list[Wanted]:
    phase = seen.phase
    workers_ready = seen.ready_replicas >= seen.desired_replicas
    failing = seen.workers_failing
    if not seen.redis_ready:
        ready = Wanted("Ready", "False", "RedisUnavailable", seen.message)
    elif failing is not None and not workers_ready:
        ready = Wanted("Ready", "False", "WorkersFailing", failing.summary)
    elif not workers_ready:
        ready = Wanted(
            "Ready",
            "False",
            "WorkersStarting",
            f"{seen.ready_replicas} of {seen.desired_replicas} workers ready",
        )
    else:
        ready = Wanted("Ready", "True", "Ready", f"{seen.ready_replicas} workers ready")
    running = phase in ("Pending", "Running")
    progressing = (
        Wanted("Progressing", "True", "Crawling", seen.message)
        if running
        else Wanted("Progressing", "False", phase, "")
    )
    complete = (
        Wanted("Complete", "True", "Crawled", seen.message)
        if phase == "Succeeded"
        else Wanted("Complete", "False", "NotDone", "")
    )
    failed = (
        Wanted("Failed", "True", "Failed", seen.message)
        if phase == "Failed"
        else Wanted("Failed", "False", "NoFailure", "")
    )
    if phase == "Suspended" and seen.rate_limited:
        suspended = Wanted(
            "Suspended",
            "True",
            "RateLimited",
            "every fetch was pushed back by its site (429, 403 or an empty page) for"
            " spec.autoPause.rateLimitedFor: the job paused itself, workers scaled to 0 (see the"
            " RateLimited Event)",
        )
    elif phase == "Suspended":
        suspended = Wanted(
            "Suspended", "True", "Suspended", "spec.suspend is true: workers scaled to 0"
        )
    else:
        suspended = Wanted("Suspended", "False", "NotSuspended", "")
    valid = Wanted("InvalidSpec", "False", "Valid", "")
    durable = Wanted("OutputNotDurable", "False", "Durable", seen.output)
    blocked = (
        Wanted(
            "OutputBlocked",
            "True",
            "DestinationFailing",
            f"{len(seen.output_blocked)} worker(s) claim nothing: their output destination is"
            " failing (uploads are retried; nothing is acked or dropped meanwhile; see the"
            " workers' logs)",
        )
        if seen.output_blocked
        else Wanted("OutputBlocked", "False", "Writing", "")
    )
    workers = (
        Wanted("WorkersFailing", "True", failing.reason, failing.summary)
        if failing is not None
        else Wanted("WorkersFailing", "False", "NotFailing", "")
    )
    return [
        ready,
        progressing,
        complete,
        failed,
        suspended,
        valid,
        durable,
        blocked,
        *_frontier_conditions(seen),
        workers,
        *_motion_conditions(seen),
        _NO_CONFLICT,
    ]


def job_status(
    previous: Mapping[str, Any],
    seen: Observed,
    *,
    generation: int | None,
    now: datetime,
) -> dict[str, Any]:
    """The status patch for a valid job (merged into the stored status by the API server)."""
    stats = seen.stats
    status: dict[str, Any] = {
        "phase": seen.phase,
        "observedGeneration": generation,
        "replicas": seen.replicas,
        "readyReplicas": seen.ready_replicas,
        "desiredReplicas": seen.desired_replicas,
        "workers": f"{seen.ready_replicas}/{seen.desired_replicas}",
        "selector": seen.selector,
        "pagesPerSecond": round(seen.pages_per_second, 2),
        "message": seen.message,
        "waiting": _waiting_word(seen),
        "conditions": merge_conditions(
            previous.get("conditions") or (),
            conditions_for(seen),
            generation=generation,
            now=now,
        ),
    }
    if stats is not None:
        status.update(
            queued=stats.queued + stats.delayed,
            inFlight=stats.leased,
            seen=stats.seen,
            crawled=stats.crawled,
            failed=stats.dead,
            bloomFillRatio=round(stats.seen / seen.bloom_capacity, 4)
            if seen.bloom_capacity
            else 0.0,
            bloomFalsePositiveRate=float(f"{stats.bloom_false_positive_rate:.3g}"),
            bloomLayers=stats.bloom_layers,
            frontierPressure=seen.pressure.name.title(),
        )
    if seen.freshness is not None:
        status["freshness"] = seen.freshness.to_mapping()
    if seen.files is not None:
        status["files"] = {
            "stored": seen.files.stored,
            "bytes": seen.files.bytes,
            "duplicates": seen.files.duplicates,
        }
    if seen.frontier_memory is not None:
        status.update(
            frontierMemoryUsedBytes=seen.frontier_memory.used_bytes,
            frontierMemoryMaxBytes=seen.frontier_memory.max_bytes,
        )
    if seen.local_dedup_hit_rate is not None:
        status["localDedupHitRate"] = round(seen.local_dedup_hit_rate, 4)
    if seen.frontier_epoch is not None:
        status["frontierEpoch"] = seen.frontier_epoch
    if seen.frontier_shards is not None and previous.get("frontierShards") is None:
        status["frontierShards"] = seen.frontier_shards
    if not previous.get("startTime"):
        status["startTime"] = rfc3339(now)
    if seen.phase in ("Succeeded", "Failed") and not previous.get("completionTime"):
        status["completionTime"] = rfc3339(now)
    if seen.scaled:
        status["lastScaleTime"] = rfc3339(now)
    return status


def _waiting_word(seen: Observed) -> str:
    """``status.waiting``, for ``kubectl get``: the Waiting condition's reason, else the
    Stalled one's, else empty (the crawl moves)."""
    if seen.waiting is not None:
        return seen.waiting.reason
    return seen.stall.reason if seen.stall is not None else ""


def _held(
    previous: Mapping[str, Any],
    message: str,
    phase: Phase,
    held_by: Sequence[Wanted],
    *,
    generation: int | None,
    now: datetime,
) -> dict[str, Any]:
    """The status of a job that must not run: ``phase``, the message, and every condition
    (nothing runs; ``held_by`` says what holds it, by type, the first one's type the reason
    that Ready and Progressing give)."""
    reason = held_by[0].type
    given = {want.type: want for want in held_by}
    wanted = [
        Wanted("Ready", "False", reason, message),
        Wanted("Progressing", "False", reason, ""),
        Wanted("Complete", "False", "NotDone", ""),
        Wanted("Failed", "False", "NoFailure", ""),
        Wanted("Suspended", "False", "NotSuspended", ""),
        Wanted("InvalidSpec", "False", "Valid", ""),
        Wanted("OutputNotDurable", "False", "Durable", ""),
        Wanted("OutputBlocked", "False", "Writing", ""),
        *_frontier_unknown(),
        Wanted("WorkersFailing", "False", "NotFailing", ""),
        *_MOVING,
        Wanted("ChildConflict", "Unknown", reason, ""),  # the children were not looked at
    ]
    return {
        "phase": phase,
        "observedGeneration": generation,
        "message": message,
        "conditions": merge_conditions(
            previous.get("conditions") or (),
            [given.get(want.type, want) for want in wanted],
            generation=generation,
            now=now,
        ),
    }


def shards_change_problem(previous: Mapping[str, Any], spec: CrawlJobSpec) -> str | None:
    """Why ``spec`` cannot run on the job's frontier as it exists (None: it can): it asks for
    another count of partitions than the frontier was created with.

    The API server refuses that change (a transition rule); this is the door for a client that
    got past it (an update of the whole object that dropped the rule's oldSelf, a CRD installed
    without it). The count is the status's ``frontierShards``, written once when the frontier
    is first seen; a frontier made before partitions existed (an epoch and no count) has 1.
    """
    created = previous.get("frontierShards")
    if created is None and previous.get("frontierEpoch"):
        created = 1
    asked = spec.frontier.shards
    if created is None or created == asked:
        return None
    return (
        f"spec.frontier.shards: {SHARDS_CANNOT_CHANGE}; its frontier was created with"
        f" {created} and the spec asks for {asked}: set it back to {created}"
    )


def invalid_spec_status(
    previous: Mapping[str, Any], message: str, *, generation: int | None, now: datetime
) -> dict[str, Any]:
    """A spec that slipped past admission: say exactly why, once; nothing is retried."""
    held_by = (
        Wanted("InvalidSpec", "True", "InvalidSpec", message),
        Wanted("Failed", "True", "InvalidSpec", message),
        Wanted("OutputNotDurable", "Unknown", "InvalidSpec", ""),
    )
    return _held(previous, message, "Failed", held_by, generation=generation, now=now)


def output_not_durable_status(
    previous: Mapping[str, Any], message: str, *, generation: int | None, now: datetime
) -> dict[str, Any]:
    """A job whose files would go nowhere durable: it waits, with the fix in its message, and
    no worker is created until the spec (or the operator's default) gives it a destination."""
    held_by = (Wanted("OutputNotDurable", "True", "OutputNotDurable", message),)
    return _held(previous, message, "Pending", held_by, generation=generation, now=now)


def child_conflict_status(
    previous: Mapping[str, Any], message: str, *, generation: int | None, now: datetime
) -> dict[str, Any]:
    """A job held because objects that are not its own have its children's names: it waits
    (Pending) with the objects in its message until they are gone. A finished job keeps its
    phase and conditions; only ChildConflict is set."""
    conflict = Wanted("ChildConflict", "True", "NotOwned", message)
    phase = previous.get("phase")
    if phase in ("Succeeded", "Failed"):
        return {
            "phase": phase,
            "conditions": _with_condition(previous, conflict, generation=generation, now=now),
        }
    return _held(previous, message, "Pending", (conflict,), generation=generation, now=now)


def child_conflict_resolved(
    previous: Mapping[str, Any], generation: int | None, now: datetime
) -> dict[str, Any]:
    """The status patch once every child is the job's: ChildConflict False if it was True
    (the tick writes the rest; a finished job has no tick to do it), else nothing."""
    held = any(
        c.get("type") == "ChildConflict" and c.get("status") == "True"
        for c in previous.get("conditions") or ()
    )
    if not held:
        return {}
    return {"conditions": _with_condition(previous, _NO_CONFLICT, generation=generation, now=now)}


def _with_condition(
    previous: Mapping[str, Any], want: Wanted, *, generation: int | None, now: datetime
) -> list[dict[str, Any]]:
    """The stored conditions with ``want`` merged in, the others as they are."""
    conditions = [dict(c) for c in previous.get("conditions") or ()]
    old = [c for c in conditions if c.get("type") == want.type]
    (merged,) = merge_conditions(old, [want], generation=generation, now=now)
    if not old:
        return [*conditions, merged]
    return [merged if c.get("type") == want.type else c for c in conditions]
