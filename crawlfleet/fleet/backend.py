"""What the steering tick needs from whatever runs the workers: five verbs.

:mod:`crawlfleet.fleet.steer` observes, decides and applies; a backend only runs workers. The
local backend (:class:`crawlfleet.local.processes.LocalProcessBackend`) runs them as child
processes of ``crawlfleet run``; the Kubernetes backend (:mod:`crawlfleet.operator.backend`)
as the pods of a Deployment. Neither knows the fleet's rules: when to scale, who is dead,
whose leases go back -- that is the tick's, the same in both places (DESIGN §5).

Worker ids: a backend's unit (a pod, a local process) is a name; the worker in it heartbeats
as ``<name>`` or ``<name>#<incarnation>`` (a restarted container is a new worker in the same
pod). :func:`unit_of` maps one to the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from crawlfleet.fleet.exits import UnitExit

__all__ = [
    "EventReason",
    "FleetBackend",
    "FleetEvent",
    "FleetView",
    "Unit",
    "UnitWaiting",
    "unit_of",
]

#: The Kubernetes Event reasons of the tick's decisions (locally, the ``kind`` of a line of
#: events.jsonl).
EventReason = Literal[
    "Seeded",
    "SeedsAdded",
    "Scaled",
    "WorkerReplaced",
    "LeasesRequeued",
    "LeasesExpired",
    "Completed",
    "OutputBlocked",
    "OutputResumed",
    "FrontierLost",
    "FrontierReseeded",
    "FrontierMemoryPressure",
    "BloomNearlyFull",
    "WorkersFailing",
    "OutputUnavailable",
    "WorkersRecovered",
    "Waiting",
    "WaitEnded",
    "Stalled",
    "StallEnded",
    # The frontier's Redis not answering the run, and answering again (a local run's).
    "RedisUnavailable",
    "RedisAvailable",
    # Some partitions of a partitioned frontier not answering (the others do).
    "PartitionUnavailable",
    # Limits of a running job changed (perHost, hostDelaySeconds, per-host budgets), in force
    # from the next claim or batch of links.
    "LimitsChanged",
    # The scope's include/exclude of a running job changed: the workers follow at their next
    # heartbeat, and drop queued URLs out of it when they claim them (excluded_live).
    "ScopeChanged",
    # A suspended job outlasted spec.suspendExpiry: it resumes, or fails.
    "SuspendExpired",
    # Every fetch pushed back for spec.autoPause.rateLimitedFor: the job paused itself; and
    # it tries again after resumeAfter.
    "RateLimited",
    "RateLimitPauseEnded",
    # A scheduled job's runs (crawlfleet.fleet.recurring).
    "RunStarted",
    "RunSkipped",
    "RunCancelled",
    "RunSucceeded",
    "RunFailed",
]


def unit_of(worker_id: str) -> str:
    """The unit a worker id belongs to: ``<unit>#<incarnation>`` -> ``<unit>``."""
    return worker_id.split("#", 1)[0]


@dataclass(frozen=True, slots=True)
class UnitWaiting:
    """Why a unit's worker is not running, in the platform's own words: a pod Pending and
    unschedulable (``Unschedulable``, the scheduler's message), its image not there
    (``ErrImagePull``, ``ImagePullBackOff``), its container not created
    (``CreateContainerConfigError``, ``ContainerCreating``), or restarted with back-off after
    it died (``CrashLoopBackOff``). One waiting so that never heartbeated is not dead -- it
    never ran -- and a new one would wait alike, so the tick does not replace it: the fleet
    reports it as what the crawl waits for."""

    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class Unit:
    """One worker as its backend runs it, before heartbeats are joined.

    ``drain_deadline`` (wall-clock seconds): set once the unit was told to stop -- a pod's
    deletionTimestamp, a local process sent SIGTERM -- and the moment it must be gone by.

    ``last_exit``: how the unit's worker last ended (its termination message, see
    :mod:`crawlfleet.fleet.exits`); None while it never did. ``quick_deaths``: how many times
    in a row a worker died within ``startup_grace_seconds`` of its start, this unit's last
    exit included (0: the last exit was not one, or there was none). A pod counts its own
    container restarts (the kubelet restarts it in place, backing off: CrashLoopBackOff);
    locally each worker is a new unit, so the backend counts the workers it started one after
    another that each died so, with the same error.

    ``waiting``: why its worker is not running (:class:`UnitWaiting`); None while it runs (and
    when the backend cannot tell: a local process runs as soon as it is started).
    """

    name: str
    running: bool
    started_at: float
    drain_deadline: float | None = None
    last_exit: UnitExit | None = None
    quick_deaths: int = 0
    waiting: UnitWaiting | None = None


@dataclass(frozen=True, slots=True)
class FleetView:
    """What a backend sees of its fleet, at one moment.

    ``replicas``: how many workers it is set to run (the Deployment's spec.replicas; locally
    the running units not draining). ``ready``: how many of them are ready. ``owns``: the
    prefix of the worker ids it starts; a heartbeat with that prefix and no unit is a worker
    gone. Heartbeats of other workers (one started by hand against the same Redis) are not
    this backend's to requeue.
    """

    units: tuple[Unit, ...]
    replicas: int
    ready: int
    owns: str


@dataclass(frozen=True, slots=True)
class FleetEvent:
    """One decision the tick applied, for people (an Event, a line of events.jsonl).

    ``fields`` carries the numbers behind the message (from, to, requeued, dead...) for the
    local log and the metrics; never a secret.
    """

    reason: EventReason
    message: str
    warning: bool = False
    fields: Mapping[str, str | int | float] = field(default_factory=dict)


class FleetBackend(Protocol):
    """Runs one job's workers; the steering tick decides, the backend does."""

    async def observe(self) -> FleetView | None:
        """The fleet now; None while the backend cannot see it whole yet (no tick then)."""
        ...

    async def scale(self, replicas: int) -> None:
        """Run ``replicas`` workers; surplus ones are told to stop and drain."""
        ...

    async def replace(self, unit: str) -> None:
        """Kill a unit that is dead but still running; the fleet's count stays the same."""
        ...

    async def forget(self, unit: str) -> None:
        """Drop a unit that has exited, and whose leftovers the tick has requeued."""
        ...

    async def record(self, event: FleetEvent) -> None:
        """Tell people about a decision."""
        ...
