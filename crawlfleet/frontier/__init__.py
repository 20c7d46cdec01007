"""The frontier: dedup, per-host queues, leases and counters in Redis (DESIGN §3).

The one speaker of Redis: open a job's frontier with :meth:`Frontier.connect` (it owns its
client; :meth:`Frontier.aclose` closes it) and every call's errors come back as
:class:`~crawlfleet.errors.FrontierUnavailable`. A raw redis-py client is not part of this
face (``crawlfleet.frontier.connection.connect`` makes one, for tests and benchmarks).
"""

from crawlfleet.frontier.bloom import BloomBackend, BloomParams
from crawlfleet.frontier.frontier import Frontier
from crawlfleet.frontier.keys import JobKeys
from crawlfleet.frontier.models import (
    HIGH_PRESSURE_LINKS_PER_PAGE,
    Admission,
    Backpressure,
    DeadLetter,
    FailOutcome,
    Failure,
    FileStats,
    FrontierLimits,
    FrontierSettings,
    FrontierStats,
    FrontierWaits,
    HeartbeatValue,
    LagHistogram,
    Lease,
    LimitChange,
    Link,
    MemoryState,
    Outcomes,
    PressureLevel,
    Requeued,
    Revisit,
    RevisitState,
    RunStart,
    ScopeRules,
    Validators,
    WorkerHeartbeat,
)
from crawlfleet.frontier.partitions import PartitionedFrontier
from crawlfleet.frontier.robots_cache import RobotsCache, RobotsEntry
from crawlfleet.urls import CanonicalURL, canonicalize, host_of, try_canonicalize

__all__ = [
    "HIGH_PRESSURE_LINKS_PER_PAGE",
    "Admission",
    "Backpressure",
    "BloomBackend",
    "BloomParams",
    "CanonicalURL",
    "DeadLetter",
    "FailOutcome",
    "Failure",
    "FileStats",
    "Frontier",
    "FrontierLimits",
    "FrontierSettings",
    "FrontierStats",
    "FrontierWaits",
    "HeartbeatValue",
    "JobKeys",
    "LagHistogram",
    "Lease",
    "LimitChange",
    "Link",
    "MemoryState",
    "Outcomes",
    "PartitionedFrontier",
    "PressureLevel",
    "Requeued",
    "Revisit",
    "RevisitState",
    "RobotsCache",
    "RobotsEntry",
    "RunStart",
    "ScopeRules",
    "Validators",
    "WorkerHeartbeat",
    "canonicalize",
    "host_of",
    "try_canonicalize",
]
