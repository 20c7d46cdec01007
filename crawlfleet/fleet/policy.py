"""The fleet brain: how many workers a job wants, which are dead, and when it is done.

Pure functions of what was observed, shared by the operator and ``crawlfleet run`` (DESIGN
§5): no I/O here, so every rule is a table test. The caller observes (frontier counters,
heartbeats, its workers), calls :func:`decide`, and applies the decision with its backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.frontier.models import FrontierStats

__all__ = [
    "Decision",
    "FleetMemory",
    "FleetPolicy",
    "Observation",
    "Phase",
    "WorkerView",
    "decide",
    "demand",
]

Phase = Literal["Pending", "Running", "Suspended", "Succeeded", "Failed"]


@dataclass(frozen=True, slots=True)
class FleetPolicy:
    """The spec's knobs that steer the fleet, in plain values."""

    min_replicas: int = 1
    max_replicas: int = 10
    target_backlog_per_replica: int = 500
    scale_down_delay_seconds: float = 60.0
    dead_after_seconds: float = 20.0
    #: How long a started worker may take to send its first heartbeat (imports, a pulled
    #: image, a loaded node) before it counts as dead: a startup probe's budget. It claims
    #: nothing before that heartbeat, so waiting costs no leases.
    startup_grace_seconds: float = 60.0
    completion_grace_seconds: float = 5.0

    @classmethod
    def from_spec(cls, spec: CrawlJobSpec, completion_grace_seconds: float = 5.0) -> FleetPolicy:
        return cls(
            min_replicas=spec.workers.min_replicas,
            max_replicas=spec.workers.max_replicas,
            target_backlog_per_replica=spec.workers.target_backlog_per_replica,
            scale_down_delay_seconds=spec.workers.scale_down_delay_seconds,
            dead_after_seconds=spec.lease.dead_after_seconds,
            completion_grace_seconds=completion_grace_seconds,
        )


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One worker as the backend and the heartbeats see it.

    ``running``: the process or pod exists and has not exited. ``heartbeat_age_seconds``:
    None when it never heartbeated. ``started_at``: when the backend started it.
    """

    worker_id: str
    running: bool
    started_at: float
    heartbeat_age_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    now: float
    queued: int
    delayed: int
    in_flight: int
    seeded: bool
    suspended: bool = False
    workers: tuple[WorkerView, ...] = ()
    #: Workers the frontier knows (heartbeat table) that the backend does not run any more.
    vanished: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        stats: FrontierStats,
        *,
        now: float,
        suspended: bool,
        workers: tuple[WorkerView, ...],
        vanished: tuple[str, ...],
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
        )


@dataclass(frozen=True, slots=True)
class FleetMemory:
    """What the brain remembers between ticks (kept on the CrawlJob status in a cluster)."""

    replicas: int = 0
    low_demand_since: float | None = None
    idle_since: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    desired_replicas: int
    phase: Phase
    complete: bool = False
    #: Workers whose leases go back to the queue now (gone, or stopped heartbeating).
    requeue_owners: tuple[str, ...] = ()
    #: Workers still running but not heartbeating: stop and replace them.
    replace: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def _is_dead(worker: WorkerView, now: float, policy: FleetPolicy) -> bool:
    if not worker.running:
        return True
    if worker.heartbeat_age_seconds is None:
        startup = max(policy.dead_after_seconds, policy.startup_grace_seconds)
        return now - worker.started_at > startup
    return worker.heartbeat_age_seconds > policy.dead_after_seconds


def demand(policy: FleetPolicy, queued: int, in_flight: int) -> int:
    """Replicas the backlog asks for, before stabilisation: DESIGN §5's formula."""
    wanted = math.ceil((queued + in_flight) / max(1, policy.target_backlog_per_replica))
    return max(policy.min_replicas, min(policy.max_replicas, wanted))


def decide(
    policy: FleetPolicy, seen: Observation, memory: FleetMemory
) -> tuple[Decision, FleetMemory]:
    """One tick of the brain."""
    dead = [w for w in seen.workers if _is_dead(w, seen.now, policy)]
    stale_running = tuple(w.worker_id for w in dead if w.running)
    requeue = tuple(sorted({w.worker_id for w in dead} | set(seen.vanished)))
    reasons: list[str] = []
    if requeue:
        reasons.append(f"requeue leases of {', '.join(requeue)}")

    if seen.suspended:
        reasons.append("suspended")
        decision = Decision(0, "Suspended", requeue_owners=requeue, reasons=tuple(reasons))
        return decision, replace(memory, replicas=0, low_demand_since=None, idle_since=None)

    pending = seen.queued + seen.delayed + seen.in_flight
    if seen.seeded and pending == 0:
        idle_since = memory.idle_since if memory.idle_since is not None else seen.now
        if seen.now - idle_since >= policy.completion_grace_seconds:
            reasons.append("nothing queued, delayed or in flight: complete")
            decision = Decision(
                0, "Succeeded", complete=True, requeue_owners=requeue, reasons=tuple(reasons)
            )
            return decision, replace(memory, replicas=0, idle_since=idle_since)
    else:
        idle_since = None

    wanted = demand(policy, seen.queued, seen.in_flight)
    current = memory.replicas
    low_since = memory.low_demand_since
    if wanted >= current:
        desired, low_since = wanted, None
        if wanted > current:
            reasons.append(
                f"scale up {current} -> {wanted}: backlog {seen.queued + seen.in_flight}"
            )
    else:  # HPA-style stabilisation: shrink only after the delay of lower demand
        low_since = low_since if low_since is not None else seen.now
        if seen.now - low_since >= policy.scale_down_delay_seconds:
            desired, low_since = wanted, None
            reasons.append(f"scale down {current} -> {wanted} after the stabilisation delay")
        else:
            desired = current
    phase: Phase = "Running" if seen.seeded else "Pending"
    decision = Decision(
        desired,
        phase,
        requeue_owners=requeue,
        replace=stale_running,
        reasons=tuple(reasons),
    )
    return decision, FleetMemory(
        replicas=desired, low_demand_since=low_since, idle_since=idle_since
    )
