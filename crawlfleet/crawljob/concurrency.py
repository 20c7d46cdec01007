"""``spec.concurrency`` and ``spec.workers``: how much runs at once, and on how many workers.

Politeness is per host across the whole fleet, parallelism per worker; the number of workers is
the autoscaler's (within the replica bounds) or, with ``autoscale: external``, an HPA's or KEDA's.
A worker's ``resources`` are checked as the API server checks them when they reach a Pod.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, ClassVar, Final, Literal

from pydantic import AfterValidator, JsonValue

from crawlfleet.crawljob.base import Range, Rule, Section
from crawlfleet.crawljob.fields import DelaySeconds, Image, parse_quantity
from crawlfleet.crawljob.validation import Where, problems

__all__ = ["ConcurrencySpec", "WorkersSpec"]

_MAX_REPLICAS: Final = 1000


class ConcurrencySpec(Section):
    """Politeness and parallelism: per worker, and per host across the whole fleet."""

    per_worker: Annotated[int, Range(ge=1, le=1024)] = 16
    """Most pages one worker fetches at once. A worker halves its own limit after failures in
    a row and grows it back one by one on success, never above this."""
    per_host: Annotated[int, Range(ge=1, le=256)] = 2
    """Most requests in flight to one host at once, counted over all workers together: the
    politeness limit a site sees, however large the fleet."""
    host_delay_seconds: Annotated[float, Range(ge=0, le=3600)] = 1.0
    """Least time, in seconds, between two requests to the same host, fleet-wide. A longer
    robots.txt Crawl-delay wins (when robots.obey is on)."""


_RESOURCE_KEYS: Final = frozenset({"limits", "requests"})


def _resources(resources: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """The checks the API server makes when the operator puts these into a Pod."""
    found: list[tuple[Where, str]] = []
    amounts: dict[str, dict[str, Decimal]] = {}
    for key, section in resources.items():
        if key not in _RESOURCE_KEYS:
            found.append(((key,), "unknown field; a worker's resources take limits and requests"))
            continue
        if not isinstance(section, dict):
            found.append(((key,), "must be a mapping of resource names to quantities"))
            continue
        amounts[key] = {}
        for name, value in section.items():
            amount = parse_quantity(value)
            if amount is None:
                found.append(((key, name), "must be a Kubernetes quantity such as 500m or 1Gi"))
            else:
                amounts[key][name] = amount
    limits = amounts.get("limits", {})
    for name, amount in amounts.get("requests", {}).items():
        if name in limits and amount > limits[name]:
            found.append((("requests", name), f"must not be greater than limits.{name}"))
    if found:
        raise problems(found)
    return resources


class WorkersSpec(Section):
    """Replica bounds for the autoscaler; ``autoscale: external`` hands scaling to HPA/KEDA."""

    min_replicas: Annotated[int, Range(ge=0, le=_MAX_REPLICAS)] = 1
    """Fewest worker pods while the job runs: the autoscaler's floor."""
    max_replicas: Annotated[int, Range(ge=1, le=_MAX_REPLICAS)] = 10
    """Most worker pods the autoscaler starts: the ceiling on cost and on load."""
    target_backlog_per_replica: Annotated[int, Range(ge=1, le=10_000_000)] = 500
    """URLs of backlog (queued plus in flight) per worker the autoscaler aims for: it runs
    ceil(backlog / targetBacklogPerReplica) workers, kept between minReplicas and
    maxReplicas."""
    scale_down_delay_seconds: DelaySeconds = 60.0
    """Seconds demand must stay lower before workers are removed; scaling up is immediate.
    Keeps the fleet from shrinking and growing again while a queue drains and refills."""
    image: Image | None = None
    """Worker container image. Unset: the worker image the operator was installed with. The
    operator runs only images its administrator allows (docs/security.md)."""
    resources: Annotated[dict[str, JsonValue], AfterValidator(_resources)] | None = None
    """Compute resources of each worker container, as in a Pod (requests, limits). Unset: the
    operator's modest defaults."""
    autoscale: Literal["internal", "external"] = "internal"
    """Who sizes the worker fleet. internal: the operator, from the backlog (see
    targetBacklogPerReplica). external: whatever sets replicas through the scale subresource,
    such as kubectl scale, a HorizontalPodAutoscaler or KEDA."""
    replicas: Annotated[int, Range(ge=0, le=_MAX_REPLICAS)] | None = None
    """Worker pods to run when autoscale is external; kubectl scale, an HPA or KEDA set it
    through the scale subresource. Ignored when autoscale is internal. Unset: minReplicas."""

    cross_field_rules: ClassVar[tuple[Rule[WorkersSpec], ...]] = (
        Rule(
            field="minReplicas",
            message="must not be greater than maxReplicas",
            cel="self.minReplicas <= self.maxReplicas",
            holds=lambda workers: workers.min_replicas <= workers.max_replicas,
            shows=("minReplicas", "maxReplicas"),
        ),
    )
