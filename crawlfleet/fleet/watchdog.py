"""The watchdog: leases that stop moving while their workers live become ``Stalled`` (DESIGN §4).

A lease held by a live worker is extended at each of its heartbeats, so no lease TTL will ever
requeue it: a request that never ends, a page whose processing never returns, a record whose
output never becomes durable would hold it -- and its URL -- for ever, with every heartbeat
fresh. So every worker says in its heartbeat how many of its leases are in each stage and how
long the oldest has been there (``leases_<stage>``, ``oldest_<stage>_seconds``:
:meth:`crawlfleet.crawler.worker.leases.LeaseBook.account`), and :func:`stalled` reads them: a lease
in one stage for longer than the policy's ``stall_after_seconds``
(:func:`~crawlfleet.fleet.policy.stall_after_seconds`: several lease TTLs past the longest
legitimate wait) is stalled. The answer is the workers' own account: which workers, which
stage, how many leases, how long, and for the output stage why the output is blocked
(``output_blocked_reason``).

Pure, like the rest of the brain: the steering tick applies it (a condition, an Event when it
begins or ends, a line on the local run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from crawlfleet.fleet.policy import STALL_LEASE_TTLS
from crawlfleet.fleet.waiting import duration
from crawlfleet.frontier.models import WorkerHeartbeat

__all__ = ["STAGES", "STALL_REASONS", "Stall", "StallReason", "StalledStage", "stalled"]

#: A worker's lease stages, in the order a lease goes through them (crawler/worker/leases.py).
STAGES: Final = ("fetching", "processing", "output")
StallReason = Literal["StuckFetching", "StuckProcessing", "StuckOutput"]
STALL_REASONS: Final[tuple[StallReason, ...]] = get_args(StallReason)
_REASONS: Final[dict[str, StallReason]] = {
    "fetching": "StuckFetching",
    "processing": "StuckProcessing",
    "output": "StuckOutput",
}
#: What a lease in each stage is waiting on, in words.
_WAITS_ON: Final = {
    "fetching": "their requests have not ended",
    "processing": "their pages are still being processed",
    "output": "their records wait for the output to become durable",
}


@dataclass(frozen=True, slots=True)
class StalledStage:
    """Leases of live workers stuck in one stage: how many (every lease of those workers in
    that stage), on which workers, how long the oldest has been there, and for ``output``
    the workers' own word on why their output is blocked."""

    stage: str
    leases: int
    workers: tuple[str, ...]
    oldest_seconds: float
    output_blocked_reason: str = ""

    def text(self) -> str:
        on = ", ".join(self.workers)
        said = f"{self.leases} in {self.stage} on {on}, the oldest for"
        said += f" {duration(self.oldest_seconds)}: {_WAITS_ON[self.stage]}"
        if self.output_blocked_reason:
            said += f" ({self.output_blocked_reason})"
        return said


@dataclass(frozen=True, slots=True)
class Stall:
    """What the watchdog found: the stuck stages, the longest-stuck first."""

    stages: tuple[StalledStage, ...]
    stall_after_seconds: float

    @property
    def main(self) -> StalledStage:
        return self.stages[0]

    @property
    def reason(self) -> StallReason:
        return _REASONS[self.main.stage]

    @property
    def leases(self) -> int:
        return sum(stage.leases for stage in self.stages)

    def sentence(self) -> str:
        stuck = "; ".join(stage.text() for stage in self.stages)
        return (
            f"leases stopped moving while their workers heartbeat: {stuck} (stalled past"
            f" {duration(self.stall_after_seconds)}: {STALL_LEASE_TTLS} × lease.ttlSeconds"
            " + fetch.totalTimeoutSeconds + output.maxFileAgeSeconds)"
        )


def stalled(
    beats: Sequence[WorkerHeartbeat], *, stall_after_seconds: float, fresh_seconds: float
) -> Stall | None:
    """The leases stuck past ``stall_after_seconds`` in a stage of a live worker (a heartbeat
    at most ``fresh_seconds`` old), or None. A dead worker's leases are the requeue's."""
    found: dict[str, list[tuple[str, int, float, str]]] = {}
    for beat in sorted(beats, key=lambda b: b.worker):
        if beat.age_seconds > fresh_seconds:
            continue
        for stage in STAGES:
            leases = int(beat.number(f"leases_{stage}"))
            oldest = beat.number(f"oldest_{stage}_seconds")
            if leases > 0 and oldest > stall_after_seconds:
                why = beat.text("output_blocked_reason") if stage == "output" else ""
                found.setdefault(stage, []).append((beat.worker, leases, oldest, why))
    if not found:
        return None
    stages = [
        StalledStage(
            stage,
            sum(leases for _, leases, _, _ in stuck),
            tuple(worker for worker, _, _, _ in stuck),
            max(oldest for _, _, oldest, _ in stuck),
            next((why for _, _, _, why in stuck if why), ""),
        )
        for stage, stuck in found.items()
    ]
    stages.sort(key=lambda stage: -stage.oldest_seconds)
    return Stall(tuple(stages), stall_after_seconds)
