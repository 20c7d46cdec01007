"""The one brain of the fleet (DESIGN §5): pure policy, the steering tick, the backend Protocol.

``policy`` decides from observations (no I/O); ``steer`` observes, decides and applies, once
per tick, over a ``backend.FleetBackend`` that the local runner and the operator implement
(import it as ``from crawlfleet.fleet import steer``).
"""

from crawlfleet.fleet.backend import EventReason, FleetBackend, FleetEvent, FleetView, Unit, unit_of
from crawlfleet.fleet.freshness import Freshness
from crawlfleet.fleet.policy import (
    Decision,
    FleetMemory,
    FleetPolicy,
    Observation,
    Phase,
    Requeue,
    RequeueReason,
    WorkersFailing,
    WorkerView,
    decide,
    demand,
    seed_list_hash,
    wants_tick,
)

__all__ = [
    "Decision",
    "EventReason",
    "FleetBackend",
    "FleetEvent",
    "FleetMemory",
    "FleetPolicy",
    "FleetView",
    "Freshness",
    "Observation",
    "Phase",
    "Requeue",
    "RequeueReason",
    "Unit",
    "WorkerView",
    "WorkersFailing",
    "decide",
    "demand",
    "seed_list_hash",
    "unit_of",
    "wants_tick",
]
