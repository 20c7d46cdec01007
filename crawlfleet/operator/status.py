"""A CrawlJob's status from what one reconcile saw: pure, so every phase is a table test.

Conditions follow ``metav1.Condition``: one entry per type, ``lastTransitionTime`` moves only
when the status of that type flips (so ``kubectl wait --for=condition=Complete`` and alerts on
"Ready false for 10 minutes" both work), and each carries the generation it was computed for.
All eight types are present from the first reconcile on, so a client never has to tell "not
yet reported" from "false". ``OutputNotDurable`` and ``OutputBlocked`` are about the output
(DESIGN §8): the job's files would go nowhere durable (no worker is created), or the workers
claim nothing because their destination is failing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from crawlfleet.crawljob import Phase
from crawlfleet.frontier import FrontierStats

__all__ = [
    "CONDITION_TYPES",
    "Observed",
    "conditions_for",
    "invalid_spec_status",
    "job_status",
    "merge_conditions",
    "output_not_durable_status",
    "rfc3339",
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


def conditions_for(seen: Observed) -> list[Wanted]:
    phase = seen.phase
    workers_ready = seen.ready_replicas >= seen.desired_replicas
    if not seen.redis_ready:
        ready = Wanted("Ready", "False", "RedisUnavailable", seen.message)
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
    suspended = (
        Wanted("Suspended", "True", "Suspended", "spec.suspend is true: workers scaled to 0")
        if phase == "Suspended"
        else Wanted("Suspended", "False", "NotSuspended", "")
    )
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
    return [ready, progressing, complete, failed, suspended, valid, durable, blocked]


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
        )
    if not previous.get("startTime"):
        status["startTime"] = rfc3339(now)
    if seen.phase == "Succeeded" and not previous.get("completionTime"):
        status["completionTime"] = rfc3339(now)
    if seen.scaled:
        status["lastScaleTime"] = rfc3339(now)
    return status


def invalid_spec_status(
    previous: Mapping[str, Any], message: str, *, generation: int | None, now: datetime
) -> dict[str, Any]:
    """A spec that slipped past admission: say exactly why, once; nothing is retried."""
    wanted = [
        Wanted("Ready", "False", "InvalidSpec", message),
        Wanted("Progressing", "False", "InvalidSpec", ""),
        Wanted("Complete", "False", "NotDone", ""),
        Wanted("Failed", "True", "InvalidSpec", message),
        Wanted("Suspended", "False", "NotSuspended", ""),
        Wanted("InvalidSpec", "True", "InvalidSpec", message),
        Wanted("OutputNotDurable", "Unknown", "InvalidSpec", ""),
        Wanted("OutputBlocked", "False", "Writing", ""),
    ]
    return {
        "phase": "Failed",
        "observedGeneration": generation,
        "message": message,
        "conditions": merge_conditions(
            previous.get("conditions") or (), wanted, generation=generation, now=now
        ),
    }


def output_not_durable_status(
    previous: Mapping[str, Any], message: str, *, generation: int | None, now: datetime
) -> dict[str, Any]:
    """A job whose files would go nowhere durable: it waits, with the fix in its message, and
    no worker is created until the spec (or the operator's default) gives it a destination."""
    wanted = [
        Wanted("Ready", "False", "OutputNotDurable", message),
        Wanted("Progressing", "False", "OutputNotDurable", ""),
        Wanted("Complete", "False", "NotDone", ""),
        Wanted("Failed", "False", "NoFailure", ""),
        Wanted("Suspended", "False", "NotSuspended", ""),
        Wanted("InvalidSpec", "False", "Valid", ""),
        Wanted("OutputNotDurable", "True", "OutputNotDurable", message),
        Wanted("OutputBlocked", "False", "Writing", ""),
    ]
    return {
        "phase": "Pending",
        "observedGeneration": generation,
        "message": message,
        "conditions": merge_conditions(
            previous.get("conditions") or (), wanted, generation=generation, now=now
        ),
    }
