"""Fleet policy shared by the operator and the local runner (DESIGN §5)."""

from crawlfleet.fleet.policy import (
    Decision,
    FleetMemory,
    FleetPolicy,
    Observation,
    Phase,
    WorkerView,
    decide,
    demand,
)

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
