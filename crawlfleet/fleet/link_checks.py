"""How much of its dedup a fleet answers in its workers: ``local_dedup_hit_rate`` (DESIGN §7).

Each worker keeps an exact, bounded cache of the links it settled with the job's filter
(``crawler/links/admission.py``) and heartbeats two counters: ``links_local_hits``, the links it
answered itself, and ``links_remote_checks``, those it sent to the frontier's ``enqueue``. The
fleet's hit rate is ``hits / (hits + remote checks)`` summed over the live workers' heartbeats:
what share of the link checks never left the processes. On a site whose pages share their
navigation it is high (most links are met again); on a site whose links are all different it is
low, and that is no fault: the filter is the dedup of record either way.

The counters are a worker process's since it started, so the status figure covers the fleet
that runs now (a worker that was scaled down took its counts with it); ``crawlfleet run``
remembers every worker's last counters for its summary (:func:`by_worker`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from crawlfleet.frontier.models import WorkerHeartbeat

__all__ = ["LinkChecks", "by_worker", "live_link_checks"]


@dataclass(frozen=True, slots=True)
class LinkChecks:
    """Links answered in the workers and links checked by the frontier's filter."""

    local_hits: int = 0
    remote_checks: int = 0

    @classmethod
    def of(cls, beat: WorkerHeartbeat) -> LinkChecks:
        """One worker's counters (zero from a worker too old to send them)."""
        return cls(int(beat.number("links_local_hits")), int(beat.number("links_remote_checks")))

    @classmethod
    def total(cls, checks: Iterable[LinkChecks]) -> LinkChecks:
        hits = remote = 0
        for each in checks:
            hits += each.local_hits
            remote += each.remote_checks
        return cls(hits, remote)

    @property
    def hit_rate(self) -> float | None:
        """The share answered locally; None before any link was checked."""
        checked = self.local_hits + self.remote_checks
        return self.local_hits / checked if checked else None


def live_link_checks(beats: Iterable[WorkerHeartbeat], *, fresh_seconds: float) -> LinkChecks:
    """The counters of the workers whose heartbeat is fresh (a dead worker's is on its way out)."""
    return LinkChecks.total(
        LinkChecks.of(beat) for beat in beats if beat.age_seconds <= fresh_seconds
    )


def by_worker(
    remembered: Mapping[str, LinkChecks], beats: Iterable[WorkerHeartbeat]
) -> dict[str, LinkChecks]:
    """``remembered`` updated with the heartbeats read now: a worker gone keeps its last counts."""
    return {**remembered, **{beat.worker: LinkChecks.of(beat) for beat in beats}}
