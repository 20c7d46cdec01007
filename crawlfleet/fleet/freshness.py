"""How fresh a job that revisits its pages keeps them: what it shows instead of a progress.

A job with revisit rules (``spec.recrawl``, DESIGN §10) has no end to progress towards, so
status, the local run's line and summary, and the metrics say what matters to whoever relies
on it: how many URLs are tracked, how many are due and not fetched yet (growing: the workers
do not keep up with the rules' intervals), when the next one is due, how late revisits are
(p50/p95 of due -> fetched) and what they found (changed, unchanged, not modified, gone).

Pure: read from :class:`~crawlfleet.frontier.FrontierStats`, which the frontier's scripts keep
as counters (its revisit lag in fixed buckets), so no tick reads anything more for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from crawlfleet.fleet.waiting import duration
from crawlfleet.frontier.models import FrontierStats

__all__ = ["Freshness"]


@dataclass(frozen=True, slots=True)
class Freshness:
    """A job's freshness at one moment; times in wall-clock seconds, lags in seconds."""

    tracked: int
    due: int
    next_revisit_at: float | None
    lag_p50_seconds: float | None
    lag_p95_seconds: float | None
    changed: int
    unchanged: int
    not_modified: int
    gone: int

    @classmethod
    def of(cls, stats: FrontierStats, *, now: float) -> Freshness:
        """From the frontier's counters read at ``now`` (wall clock)."""
        next_in = stats.next_revisit_in_seconds
        lag = stats.revisit_lag
        return cls(
            tracked=stats.tracked,
            due=stats.revisits_due,
            next_revisit_at=None if next_in is None else now + next_in,
            lag_p50_seconds=lag.quantile(0.5),
            lag_p95_seconds=lag.quantile(0.95),
            changed=stats.changed,
            unchanged=stats.unchanged,
            not_modified=stats.not_modified,
            gone=stats.gone,
        )

    def to_mapping(self) -> dict[str, int | float | str]:
        """``status.freshness``: camelCase; the next revisit to the second (RFC 3339), so a
        status is not patched at every tick; lags rounded to 0.1 s; unknowns left out."""
        out: dict[str, int | float | str] = {
            "tracked": self.tracked,
            "due": self.due,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "notModified": self.not_modified,
            "gone": self.gone,
        }
        if self.next_revisit_at is not None:
            moment = datetime.fromtimestamp(round(self.next_revisit_at), UTC)
            out["nextRevisitAt"] = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.lag_p50_seconds is not None:
            out["lagP50Seconds"] = round(self.lag_p50_seconds, 1)
        if self.lag_p95_seconds is not None:
            out["lagP95Seconds"] = round(self.lag_p95_seconds, 1)
        return out

    def line(self, now: float) -> str:
        """The local run's progress line for a job that keeps going."""
        if self.next_revisit_at is None:
            upcoming = "next revisit: none scheduled"
        else:
            left = self.next_revisit_at - now
            upcoming = f"next revisit in {duration(left)}" if left > 0 else "next revisit due now"
        text = f"tracked {self.tracked}  due {self.due}  {upcoming}"
        if self.lag_p95_seconds is not None:
            text += f"  lag p50 {duration(self.lag_p50_seconds or 0.0)}"
            text += f" p95 {duration(self.lag_p95_seconds)}"
        return (
            f"{text}  changed {self.changed}  unchanged {self.unchanged}"
            f"  not-modified {self.not_modified}  gone {self.gone}"
        )
