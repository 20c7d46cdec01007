"""The one steering tick: observe -> decide -> apply, for ``crawlfleet run`` and the operator.

::

    observe   backend.observe()           units (pods / processes), replicas, ready
              frontier.stats()            counters, earliest retry: one pipeline
              frontier.workers()          heartbeats: one pipeline
              (frontier.seed() once, if the job is not seeded yet)
    decide    policy.decide()             pure: desired replicas, requeues, replacements
    apply     backend.replace(unit)       dead but running: kill it
              frontier.requeue_owner()    leases of dead, gone and drained workers
              backend.forget(unit)        exited units
              frontier.requeue_expired()  leases whose ttl ran out
              backend.scale(n)            when the desired count differs
              backend.record(event)       one per decision applied

A tick is O(1) Redis round trips per job (three, plus two per worker found dead), however big
the crawl. Between ticks the callers make one cheap :func:`check` (one read of the counters)
that brings the next tick forward when the crawl ends or the backlog outgrows the fleet.

The memory (:class:`~crawlfleet.fleet.policy.FleetMemory`) goes in and comes out: the caller
keeps it durable (status in a cluster, state.json locally).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crawlfleet.fleet.backend import FleetBackend, FleetEvent, FleetView, unit_of
from crawlfleet.fleet.policy import (
    Decision,
    FleetMemory,
    FleetPolicy,
    Observation,
    RequeueReason,
    WorkerView,
    decide,
    wants_tick,
)
from crawlfleet.frontier import Frontier, FrontierStats, WorkerHeartbeat

__all__ = ["Tick", "check", "join", "output_event", "requeue_unit", "tick"]


@dataclass(frozen=True, slots=True)
class Tick:
    """What one tick saw and did."""

    stats: FrontierStats
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
            )
        )
    for name, incarnations in by_unit.items():
        if name.startswith(view.owns):
            gone += [worker for _, worker in incarnations]
    return tuple(views), tuple(sorted(gone))


async def check(
    frontier: Frontier, policy: FleetPolicy, memory: FleetMemory, *, suspended: bool
) -> bool:
    """One read of the counters: is a full tick due before its time?"""
    return wants_tick(policy, await frontier.stats(), memory, suspended=suspended)


async def tick(
    frontier: Frontier,
    backend: FleetBackend,
    policy: FleetPolicy,
    memory: FleetMemory,
    *,
    now: float,
    suspended: bool,
    seeds: Sequence[str],
) -> Tick | None:
    """Observe, decide, apply, once; None when the backend cannot see its fleet yet."""
    view = await backend.observe()
    if view is None:
        return None
    stats = await frontier.stats()
    seeded: int | None = None
    if not stats.seeded and not suspended:
        seeded = await frontier.seed(list(seeds))
        await backend.record(
            FleetEvent("Seeded", f"{seeded} seed URL(s) queued", fields={"seeds": seeded})
        )
        stats = await frontier.stats()
    beats = await frontier.workers()
    workers, vanished = join(view, beats)
    output_blocked = tuple(
        sorted(
            beat.worker
            for beat in beats
            if beat.counters.get("output_blocked") and beat.age_seconds <= policy.dead_after_seconds
        )
    )
    observation = Observation.of(
        stats, now=now, suspended=suspended, workers=workers, vanished=vanished
    )
    decision, memory = decide(policy, observation, memory)

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
    if decision.complete:
        await backend.record(
            FleetEvent(
                "Completed",
                f"{stats.crawled} pages crawled, {stats.dead} dead-lettered",
                fields={"crawled": stats.crawled, "dead": stats.dead},
            )
        )
    return Tick(stats, view, decision, memory, seeded, scaled, output_blocked)


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
    moved = await frontier.requeue_owner(worker)
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


_WHY: dict[RequeueReason, str] = {
    "exited": "exited",
    "no_heartbeat": "never sent a heartbeat",
    "stale_heartbeat": "stopped heartbeating",
    "drained": "drained and exited",
    "drain_overrun": "overran its drain deadline",
    "gone": "is gone (no pod or process runs it)",
}
