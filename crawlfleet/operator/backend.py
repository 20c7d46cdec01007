"""The Kubernetes backend of the steering tick: a job's workers are the pods of a Deployment.

What the tick observes comes from kopf's in-memory indices (``@kopf.index`` on worker pods and
worker Deployments, see :mod:`crawlfleet.operator.handlers`), never from a listing per tick;
what it applies goes through :class:`~crawlfleet.operator.kube.Kube` (scale, delete a pod) and
kopf's Events. The Deployment replaces an exited pod itself, so ``forget`` has nothing to do.

A pod with a ``deletionTimestamp`` is draining: Kubernetes sets that field to the moment the
kubelet will kill it (deletion time plus the termination grace), which is the drain deadline
the tick needs.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from crawlfleet.fleet import FleetEvent, FleetView, Unit
from crawlfleet.operator.children import JobRef
from crawlfleet.operator.kube import Kube
from crawlfleet.operator.metrics import OperatorMetrics

__all__ = ["DeploymentInfo", "KubeBackend", "PodInfo"]


def _timestamp(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A worker pod as the pod index holds it: what the tick needs, not the whole body."""

    name: str
    phase: str | None
    started_at: float
    #: metadata.deletionTimestamp: the pod drains, and is killed at this moment.
    drain_deadline: float | None = None

    @classmethod
    def of(cls, name: str, phase: str | None, meta: Mapping[str, Any]) -> PodInfo:
        created = _timestamp(meta.get("creationTimestamp"))
        return cls(
            name,
            phase,
            created if created is not None else time.time(),
            _timestamp(meta.get("deletionTimestamp")),
        )

    @property
    def running(self) -> bool:
        """Not exited: a pod still being scheduled or started counts as running."""
        return self.phase in (None, "Pending", "Running")


@dataclass(frozen=True, slots=True)
class DeploymentInfo:
    """A worker Deployment as its index holds it."""

    replicas: int
    ready: int

    @classmethod
    def of(cls, spec: Mapping[str, Any], status: Mapping[str, Any]) -> DeploymentInfo:
        return cls(spec.get("replicas") or 0, status.get("readyReplicas") or 0)


@dataclass
class KubeBackend:
    """One job's fleet in a cluster, for one tick (the indices are read when it is built)."""

    kube: Kube
    ref: JobRef
    #: The CrawlJob (or the least of it with metadata) that Events are posted about.
    owner: Mapping[str, Any]
    pods: Collection[PodInfo]
    deployment: DeploymentInfo | None
    metrics: OperatorMetrics

    async def observe(self) -> FleetView | None:
        """None until the job's Deployment is in the index (just created by ``ensure``).

        kopf fills every index before it runs a resource handler, so on an operator restart
        the pod index is whole by the first tick: a heartbeating worker is never taken for
        gone because its pod had not been listed yet.
        """
        if self.deployment is None:
            return None
        units = tuple(
            Unit(pod.name, pod.running, pod.started_at, pod.drain_deadline) for pod in self.pods
        )
        return FleetView(
            units,
            replicas=self.deployment.replicas,
            ready=self.deployment.ready,
            owns=f"{self.ref.names.workers}-",  # a Deployment's pods are <deployment>-<hashes>
        )

    async def scale(self, replicas: int) -> None:
        await self.kube.scale_deployment(self.ref.namespace, self.ref.names.workers, replicas)

    async def replace(self, unit: str) -> None:
        """Delete the pod; its Deployment starts a new one."""
        await self.kube.delete_pod(self.ref.namespace, unit)

    async def forget(self, unit: str) -> None:
        """Nothing to do: the pod index drops a pod when the API server does."""

    async def record(self, event: FleetEvent) -> None:
        """A Kubernetes Event on the CrawlJob, and the metric that goes with it."""
        fields = event.fields
        if event.reason == "Scaled":
            up = int(fields["to"]) > int(fields["from"])
            self.metrics.scale_decisions.labels("up" if up else "down").inc()
        elif event.reason == "LeasesRequeued":
            self.metrics.requeued.labels(str(fields["why"])).inc(int(fields["requeued"]))
        elif event.reason == "LeasesExpired":
            self.metrics.requeued.labels("expired").inc(int(fields["requeued"]))
        post = kopf.warn if event.warning else kopf.info
        # kopf posts Events about any mapping with metadata (apiVersion, kind, name, uid).
        post(cast(Any, self.owner), reason=event.reason, message=event.message)
