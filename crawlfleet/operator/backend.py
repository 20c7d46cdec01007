"""The Kubernetes backend of the steering tick: a job's workers are the pods of a Deployment.

What the tick observes comes from kopf's in-memory indices (``@kopf.index`` on worker pods and
worker Deployments, see :mod:`crawlfleet.operator.handlers`), never from a listing per tick;
what it applies goes through :class:`~crawlfleet.operator.kube.Kube` (scale, delete a pod) and
kopf's Events. The Deployment replaces an exited pod itself, so ``forget`` has nothing to do.

A pod with a ``deletionTimestamp`` is draining: Kubernetes sets that field to the moment the
kubelet will kill it (deletion time plus the termination grace), which is the drain deadline
the tick needs.

A worker container that exits is restarted in place by the kubelet (the pod keeps its name,
``restartCount`` goes up, and after a few quick deaths it backs off: CrashLoopBackOff). Its
last termination -- exit code, times, and the termination message the worker wrote
(crawlfleet.fleet.exits) -- is in the container's status, which the pod index keeps, so the
tick sees a worker that dies at start as what it is.

A pod whose worker is not running says why in its status, in the platform's own words, and
the unit carries them (:class:`~crawlfleet.fleet.backend.UnitWaiting`): ``PodScheduled``
False (``Unschedulable``, with the scheduler's message: no node has the CPU or memory it
requests, or matches its selector), or the worker container's waiting reason
(``ErrImagePull``, ``ImagePullBackOff``, ``CreateContainerConfigError``,
``CrashLoopBackOff``, ``ContainerCreating``). A pod that never started is not dead and is not
replaced; it is what the crawl waits for (crawlfleet.fleet.waiting).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from crawlfleet.config import SteeringConfig
from crawlfleet.fleet import FleetEvent, FleetView, Unit
from crawlfleet.fleet.backend import UnitWaiting
from crawlfleet.fleet.exits import parse_exit
from crawlfleet.operator.children import JobRef
from crawlfleet.operator.kube import Kube
from crawlfleet.operator.metrics import OperatorMetrics

__all__ = ["DeploymentInfo", "KubeBackend", "PodInfo"]


#: The container of a worker pod that runs the worker (operator/children.py).
WORKER_CONTAINER = "worker"


def _timestamp(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


@dataclass(frozen=True, slots=True)
class ContainerExit:
    """A container's last termination, as its status shows it."""

    code: int
    message: str
    started_at: float | None
    finished_at: float | None

    @classmethod
    def of(cls, terminated: Mapping[str, Any]) -> ContainerExit:
        return cls(
            int(terminated.get("exitCode") or 0),
            str(terminated.get("message") or ""),
            _timestamp(terminated.get("startedAt")),
            _timestamp(terminated.get("finishedAt")),
        )

    @property
    def lived_seconds(self) -> float:
        if self.started_at is None or self.finished_at is None:
            return 0.0
        return max(0.0, self.finished_at - self.started_at)


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A worker pod as the pod index holds it: what the tick needs, not the whole body."""

    name: str
    phase: str | None
    started_at: float
    #: metadata.deletionTimestamp: the pod drains, and is killed at this moment.
    drain_deadline: float | None = None
    #: The worker container's restarts, its last termination, and since when its current
    #: run has been running (None: it is not running now).
    restarts: int = 0
    last_exit: ContainerExit | None = None
    running_since: float | None = None
    #: Why its worker is not running, in the pod's own status (None: it runs, or nothing says).
    waiting: UnitWaiting | None = None

    @classmethod
    def of(cls, name: str, status: Mapping[str, Any], meta: Mapping[str, Any]) -> PodInfo:
        created = _timestamp(meta.get("creationTimestamp"))
        restarts, last_exit, running_since = 0, None, None
        waiting = _unscheduled(status)
        for container in status.get("containerStatuses") or ():
            if container.get("name") != WORKER_CONTAINER:
                continue
            restarts = int(container.get("restartCount") or 0)
            state = container.get("state") or {}
            terminated = state.get("terminated") or (container.get("lastState") or {}).get(
                "terminated"
            )
            if terminated:
                last_exit = ContainerExit.of(terminated)
            if state.get("running"):
                running_since = _timestamp(state["running"].get("startedAt"))
            held = state.get("waiting") or {}
            if waiting is None and held.get("reason"):
                waiting = UnitWaiting(str(held["reason"]), str(held.get("message") or ""))
        return cls(
            name,
            status.get("phase"),
            created if created is not None else time.time(),
            _timestamp(meta.get("deletionTimestamp")),
            restarts,
            last_exit,
            running_since,
            waiting,
        )

    @property
    def running(self) -> bool:
        """Not exited: a pod still being scheduled or started counts as running."""
        return self.phase in (None, "Pending", "Running")

    def unit(self, *, quick_seconds: float, now: float) -> Unit:
        """The tick's view of this pod: a worker that keeps dying at start shows as one.

        Its deaths in a row are its restarts (plus the death it is backing off from, when it
        is not running), as long as the last run was quick and the current one, if any, has
        not outlived ``quick_seconds`` yet.
        """
        last = self.last_exit
        exit_ = None
        deaths = 0
        if last is not None:
            exit_ = parse_exit(last.code, last.message, lived_seconds=last.lived_seconds)
            quick = exit_.failed and last.lived_seconds < quick_seconds
            settled = self.running_since is not None and now - self.running_since >= quick_seconds
            if quick and not settled:
                deaths = self.restarts + (0 if self.running_since is not None else 1)
        return Unit(
            self.name,
            self.running,
            self.started_at,
            self.drain_deadline,
            last_exit=exit_,
            quick_deaths=deaths,
            waiting=self.waiting,
        )


def _unscheduled(status: Mapping[str, Any]) -> UnitWaiting | None:
    """The scheduler's refusal of a pod (PodScheduled False: reason and message), if any."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            reason = str(condition.get("reason") or "Unschedulable")
            return UnitWaiting(reason, str(condition.get("message") or ""))
    return None


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
    #: A worker container that exits within this long of its start died while starting.
    quick_death_seconds: float = SteeringConfig().startup_grace_seconds

    async def observe(self) -> FleetView | None:
        """None until the job's Deployment is in the index (just created by ``ensure``).

        kopf fills every index before it runs a resource handler, so on an operator restart
        the pod index is whole by the first tick: a heartbeating worker is never taken for
        gone because its pod had not been listed yet.
        """
        if self.deployment is None:
            return None
        now = time.time()
        units = tuple(
            pod.unit(quick_seconds=self.quick_death_seconds, now=now) for pod in self.pods
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
