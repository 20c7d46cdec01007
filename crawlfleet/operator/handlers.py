"""kopf handlers: a CrawlJob's children, its fleet, its status.

Three paths, each idempotent:

- ``ensure`` (create, update, resume): the children exist and match the spec. Fixed names,
  ownerReferences through ``kopf.adopt``, create then patch on 409. A managed Redis's
  password Secret is made once and never rewritten.
- ``tick`` (a timer per job): read the frontier's O(1) counters and the heartbeats, list the
  worker pods, run the fleet brain (``crawlfleet.fleet.policy.decide``, the same code
  ``crawlfleet run`` uses) and apply its decision: Deployment replicas, requeues, stale pods
  replaced, completion, status and Events.
- ``worker_pod_event`` (a watch on worker pods): the fast path. A worker pod that is gone or
  failed has its leases requeued at once instead of at the next tick or at lease expiry.

A spec that slipped past admission is marked ``InvalidSpec`` with the exact reason and left
alone: the handlers return normally, so kopf neither retries nor backs off in a loop; an edit
of the spec runs ``ensure`` again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, cast

import kopf
from redis.exceptions import RedisError

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.errors import ConfigError, FrontierError
from crawlfleet.fleet import (
    FleetMemory,
    FleetPolicy,
    Observation,
    WorkerView,
    decide,
    demand,
)
from crawlfleet.frontier import Frontier, FrontierSettings, connect
from crawlfleet.operator import children
from crawlfleet.operator.children import JobRef
from crawlfleet.operator.kube import Kube
from crawlfleet.operator.metrics import OperatorMetrics
from crawlfleet.operator.status import Observed, invalid_spec_status, job_status

__all__ = ["GROUP", "PLURAL", "VERSION", "CrawlJobOperator", "OperatorConfig"]

log = logging.getLogger(__name__)

GROUP: Final = "crawlfleet.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "crawljobs"


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    worker_image: str = children.DEFAULT_WORKER_IMAGE
    #: A full reconcile of each job at least this often (status, heartbeats, requeues).
    tick_seconds: float = 5.0
    #: In between, a one-read check of the frontier's counters (one HGETALL): a backlog
    #: that needs more workers, or a queue that ran dry, is acted on within this time.
    check_seconds: float = 1.0
    #: How much a check may be late, at random, so a thousand jobs created at once do not
    #: all hit their Redis and the API server in the same instant.
    tick_jitter_seconds: float = 0.2
    completion_grace_seconds: float = 5.0
    #: Labels of the operator's own pods, admitted to each managed Redis by NetworkPolicy.
    operator_labels: Mapping[str, str] = field(
        default_factory=lambda: {"app.kubernetes.io/name": "crawlfleet-operator"}
    )


@dataclass
class JobState:
    """What the operator keeps in memory per job; all of it can be rebuilt after a restart."""

    owner: dict[str, Any]
    frontier: Frontier | None = None
    memory: FleetMemory | None = None
    last_crawled: int | None = None
    last_time: float = 0.0
    pages_per_second: float = 0.0
    last_full: float = 0.0
    #: Set by the watches when a worker pod or the Deployment changed: reconcile now.
    dirty: bool = True
    #: The spec validated once per generation, not at every one-second check (None: invalid).
    spec: CrawlJobSpec | None = None
    spec_generation: int | None = None

    def spec_for(self, generation: int | None, raw: Mapping[str, Any]) -> CrawlJobSpec | None:
        if generation is None or generation != self.spec_generation:
            try:
                self.spec = CrawlJobSpec.from_mapping(dict(raw))
            except ConfigError:
                self.spec = None
            self.spec_generation = generation
        return self.spec

    async def disconnect(self) -> None:
        if self.frontier is not None:
            with contextlib.suppress(Exception):
                await self.frontier.client.aclose()
        self.frontier = None


def _now() -> datetime:
    return datetime.now(UTC)


def _ref(body: Mapping[str, Any]) -> JobRef:
    meta = body["metadata"]
    return JobRef(namespace=meta["namespace"], name=meta["name"])


def _owner(body: Mapping[str, Any]) -> dict[str, Any]:
    """The least of a CrawlJob that kopf needs to post Events about it later."""
    meta = body["metadata"]
    return {
        "apiVersion": body.get("apiVersion", f"{GROUP}/{VERSION}"),
        "kind": body.get("kind", "CrawlJob"),
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
    }


class CrawlJobOperator:
    """The handlers, bound to one API client, one configuration and one metrics registry."""

    def __init__(self, kube: Kube, config: OperatorConfig, metrics: OperatorMetrics) -> None:
        self.kube = kube
        self.config = config
        self.metrics = metrics
        #: By (namespace, job label): the label is what a worker pod carries.
        self.jobs: dict[tuple[str, str], JobState] = {}
        # What the watches saw, so a reconcile reads memory instead of listing: the worker
        # pods by job, and each worker Deployment's (replicas, ready replicas).
        self.pods: dict[tuple[str, str], dict[str, PodInfo]] = {}
        self.deployments: dict[tuple[str, str], tuple[int, int]] = {}

    def register(self, registry: kopf.OperatorRegistry) -> None:
        resource = (GROUP, VERSION, PLURAL)
        for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
            decorator(*resource, registry=registry, id="ensure")(self.ensure)
        kopf.timer(
            *resource,
            registry=registry,
            id="tick",
            interval=min(self.config.check_seconds, self.config.tick_seconds),
            initial_delay=0.5,
            sharp=False,
        )(self.tick)
        kopf.on.delete(*resource, registry=registry, id="cleanup")(self.cleanup)
        kopf.on.event(
            "",
            "v1",
            "pods",
            registry=registry,
            id="worker-pods",
            labels={
                children.LABEL_COMPONENT: "worker",
                children.LABEL_JOB: kopf.PRESENT,
                "app.kubernetes.io/managed-by": "crawlfleet-operator",
            },
        )(self.worker_pod_event)
        kopf.on.event(
            "apps",
            "v1",
            "deployments",
            registry=registry,
            id="worker-deployments",
            labels={
                children.LABEL_COMPONENT: "worker",
                children.LABEL_JOB: kopf.PRESENT,
                "app.kubernetes.io/managed-by": "crawlfleet-operator",
            },
        )(self.worker_deployment_event)

    def _state(self, body: Mapping[str, Any]) -> JobState:
        ref = _ref(body)
        key = (ref.namespace, ref.label)
        state = self.jobs.get(key)
        if state is None:
            state = self.jobs[key] = JobState(owner=_owner(body))
        return state

    # -- children ----------------------------------------------------------------------

    async def ensure(
        self,
        body: kopf.Body,
        spec: kopf.Spec,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
        **_: Any,
    ) -> None:
        ref = _ref(body)
        try:
            parsed = CrawlJobSpec.from_mapping(dict(spec))
        except ConfigError as error:
            self._mark_invalid(body, status, meta, patch, str(error))
            return
        manifests: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        if parsed.redis.managed is not None:
            password = secrets.token_hex(24)
            manifests.append((children.redis_secret(ref, password), {}))  # never rotated here
            pvc = children.redis_pvc(ref, parsed)
            if pvc is not None:
                manifests.append((pvc, {}))  # a claim's spec is immutable
            manifests.append((children.redis_deployment(ref, parsed), None))
            manifests.append((children.redis_service(ref), None))
            manifests.append(
                (children.network_policy(ref, dict(self.config.operator_labels)), None)
            )
        elif parsed.redis.url is not None:
            manifests.append((children.external_redis_secret(ref, parsed.redis.url), None))
        manifests.append((children.config_map(ref, parsed), None))
        workers = children.worker_deployment(
            ref,
            parsed,
            replicas=0,  # the tick scales up once Redis answers and the seeds are in
            image=parsed.workers.image or self.config.worker_image,
        )
        # Replicas belong to the tick (or to kubectl scale / an HPA): never reset them here.
        workers_patch = {key: value for key, value in workers.items() if key != "spec"}
        workers_patch["spec"] = {k: v for k, v in workers["spec"].items() if k != "replicas"}
        manifests.append((workers, workers_patch))
        manifests.append((children.metrics_service(ref), None))
        for manifest, patch_body in manifests:
            kopf.adopt(manifest, owner=body)
            if patch_body:
                kopf.adopt(patch_body, owner=body)
            created = await self.kube.ensure(manifest, patch=patch_body)
            if created:
                log.info(
                    "created %s %s/%s",
                    manifest["kind"],
                    ref.namespace,
                    manifest["metadata"]["name"],
                )
        selector = children.selector_string(children.worker_selector(ref))
        if status.get("phase") in (None, "Failed") or status.get("selector") != selector:
            patch.status["selector"] = selector
            if status.get("phase") in (None, "Failed"):
                patch.status["phase"] = "Pending"
                patch.status["message"] = "children created; waiting for Redis"
        self._state(body)

    def _mark_invalid(
        self,
        body: kopf.Body,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
        message: str,
    ) -> None:
        already = any(
            c.get("type") == "InvalidSpec"
            and c.get("status") == "True"
            and c.get("message") == message
            for c in status.get("conditions") or ()
        )
        patch.status.update(
            invalid_spec_status(status, message, generation=meta.get("generation"), now=_now())
        )
        if not already:
            kopf.warn(body, reason="InvalidSpec", message=message)
        self.metrics.set_phase(_ref(body).namespace, _ref(body).name, "Failed")

    # -- the tick ----------------------------------------------------------------------

    async def tick(
        self,
        body: kopf.Body,
        spec: kopf.Spec,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
        **_: Any,
    ) -> None:
        if self.config.tick_jitter_seconds > 0:
            await asyncio.sleep(random.uniform(0, self.config.tick_jitter_seconds))
        if meta.get("deletionTimestamp"):
            return  # being deleted: cleanup() owns it, and a tick would recreate its keys
        ref = _ref(body)
        state = self._state(body)
        parsed = state.spec_for(meta.get("generation"), spec)
        if parsed is None:
            return  # ensure() marked it InvalidSpec; nothing to steer
        try:
            if not await self._due(state, parsed):
                return
        except (RedisError, FrontierError, OSError):
            pass  # the full reconcile below reconnects and reports it
        started = time.perf_counter()
        state.last_full, state.dirty = time.monotonic(), False
        try:
            await self._reconcile(body, ref, parsed, state, status, meta, patch)
        except (RedisError, FrontierError, OSError) as error:
            # Redis restarting or moving: reconnect next tick; leases stay valid meanwhile.
            self.metrics.reconcile_errors.inc()
            await state.disconnect()
            log.warning("tick of %s/%s: %s", ref.namespace, ref.name, error)
            patch.status["message"] = f"Redis unavailable: {error}"
        except Exception:
            self.metrics.reconcile_errors.inc()
            raise
        finally:
            self.metrics.reconcile_duration.observe(time.perf_counter() - started)

    async def _due(self, state: JobState, spec: CrawlJobSpec) -> bool:
        """Whether this check must be a full reconcile; at most one Redis read to find out."""
        if state.frontier is None or state.memory is None or state.dirty:
            return True
        if time.monotonic() - state.last_full >= self.config.tick_seconds:
            return True
        stats = await state.frontier.stats()
        if stats.pending == 0:
            return True  # done, or a moment from it: completion should not wait a tick
        if spec.workers.autoscale == "internal":
            policy = FleetPolicy.from_spec(spec, self.config.completion_grace_seconds)
            return demand(policy, stats.queued, stats.leased) > state.memory.replicas
        if spec.suspend:
            return False
        wanted = spec.workers.replicas
        wanted = spec.workers.min_replicas if wanted is None else wanted
        return wanted != state.memory.replicas  # kubectl scale or an HPA changed it

    async def _reconcile(
        self,
        body: kopf.Body,
        ref: JobRef,
        spec: CrawlJobSpec,
        state: JobState,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
    ) -> None:
        names = ref.names
        now = _now()
        generation = meta.get("generation")
        selector = children.selector_string(children.worker_selector(ref))
        deployment = self.deployments.get((ref.namespace, names.workers))
        if deployment is None:
            return  # not made yet by ensure(), or not seen by the watch yet
        current, ready = deployment
        if status.get("phase") == "Succeeded":
            await self._finished(body, ref, spec, status, current)
            _patch_changed(
                patch,
                status,
                {
                    "replicas": current,
                    "readyReplicas": ready,
                    "desiredReplicas": 0,
                    "workers": f"{ready}/0",
                },
            )
            return
        frontier = await self._frontier(ref, spec, state)
        if frontier is None:
            seen = Observed(
                phase="Pending",
                redis_ready=False,
                desired_replicas=0,
                replicas=current,
                ready_replicas=ready,
                stats=None,
                selector=selector,
                pages_per_second=0.0,
                message="waiting for Redis",
            )
            _patch_changed(patch, status, job_status(status, seen, generation=generation, now=now))
            return
        stats = await frontier.stats()
        if not stats.seeded and not spec.suspend:
            added = await frontier.seed(list(spec.seeds))
            kopf.info(body, reason="Seeded", message=f"{added} seed URL(s) queued")
            stats = await frontier.stats()

        beats = {beat.worker: beat.age_seconds for beat in await frontier.workers()}
        pods = list(self.pods.get((ref.namespace, ref.label), {}).values())
        views, superseded = _worker_views(pods, beats)
        pod_names = {pod.name for pod in pods}
        gone = [w for w in beats if pod_of(w) not in pod_names]
        observation = Observation.of(
            stats,
            now=time.time(),
            suspended=spec.suspend,
            workers=views,
            vanished=tuple(sorted({*gone, *superseded})),
        )
        policy = FleetPolicy.from_spec(spec, self.config.completion_grace_seconds)
        memory = state.memory or FleetMemory(replicas=current)
        decision, state.memory = decide(policy, observation, memory)

        for worker_id in decision.replace:
            pod_name = pod_of(worker_id)
            await self.kube.delete_pod(ref.namespace, pod_name)
            kopf.warn(
                body,
                reason="WorkerReplaced",
                message=f"pod {pod_name} is running but sent no heartbeat for "
                f"{spec.lease.dead_after_seconds:g} s: deleted, its leases requeued",
            )
        for worker in decision.requeue_owners:
            await self._requeue_owner(body, frontier, worker, "stale_heartbeat")
        expired = await frontier.requeue_expired()
        if expired.requeued or expired.dead:
            self.metrics.requeued.labels("expired").inc(expired.requeued)
            kopf.info(
                body,
                reason="LeasesExpired",
                message=f"{expired.requeued} expired lease(s) requeued, {expired.dead} dead",
            )

        desired = decision.desired_replicas
        if spec.workers.autoscale == "external" and decision.phase in ("Running", "Pending"):
            wanted = spec.workers.replicas
            desired = wanted if wanted is not None else spec.workers.min_replicas
            state.memory = FleetMemory(replicas=desired)
        scaled = desired != current
        if scaled:
            await self.kube.scale_deployment(ref.namespace, names.workers, desired)
            self.metrics.scale_decisions.labels("up" if desired > current else "down").inc()
            reason = decision.reason or (
                "scaled by spec.workers.replicas (autoscale: external)"
                if spec.workers.autoscale == "external"
                else "fleet brain"
            )
            kopf.info(body, reason="Scaled", message=f"workers {current} -> {desired}: {reason}")

        if decision.complete:
            stats = await frontier.stats()
            kopf.info(
                body,
                reason="Completed",
                message=f"{stats.crawled} pages crawled, {stats.dead} dead-lettered",
            )
        self._rate(state, stats.crawled)
        message = _message(decision.phase, stats, desired)
        seen = Observed(
            phase=decision.phase,
            redis_ready=True,
            desired_replicas=desired,
            replicas=current if not scaled else desired,
            ready_replicas=ready,
            stats=stats,
            selector=selector,
            pages_per_second=state.pages_per_second,
            message=message,
            scaled=scaled,
        )
        _patch_changed(patch, status, job_status(status, seen, generation=generation, now=now))
        self._observe(ref, decision.phase, stats.queued + stats.delayed, stats, desired, ready)

    async def _finished(
        self,
        body: kopf.Body,
        ref: JobRef,
        spec: CrawlJobSpec,
        status: kopf.Status,
        current: int,
    ) -> None:
        """A finished job keeps its Redis (the results' index) and no workers."""
        if current:
            await self.kube.scale_deployment(ref.namespace, ref.names.workers, 0)
        ttl = spec.ttl_seconds_after_finished
        completed = status.get("completionTime")
        if ttl is None or not completed:
            return
        done_at = datetime.strptime(completed, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        if (_now() - done_at).total_seconds() >= ttl:
            kopf.info(body, reason="Expired", message=f"ttlSecondsAfterFinished={ttl}: deleting")
            await self.kube.delete_crawljob(ref.namespace, ref.name)

    def _rate(self, state: JobState, crawled: int) -> None:
        """Pages per second over the last tick, smoothed (an EWMA over about four ticks)."""
        now = time.monotonic()
        if state.last_crawled is not None and now > state.last_time:
            instant = max(0, crawled - state.last_crawled) / (now - state.last_time)
            state.pages_per_second = 0.75 * state.pages_per_second + 0.25 * instant
        state.last_crawled, state.last_time = crawled, now

    def _observe(
        self, ref: JobRef, phase: str, queued: int, stats: Any, desired: int, ready: int
    ) -> None:
        labels = (ref.namespace, ref.name)
        self.metrics.set_phase(ref.namespace, ref.name, phase)
        self.metrics.queued.labels(*labels).set(queued)
        self.metrics.in_flight.labels(*labels).set(stats.leased)
        self.metrics.crawled.labels(*labels).set(stats.crawled)
        self.metrics.desired.labels(*labels).set(desired)
        self.metrics.ready.labels(*labels).set(ready)

    async def _requeue_owner(
        self, body: Mapping[str, Any], frontier: Frontier, worker: str, reason: str
    ) -> None:
        moved = await frontier.requeue_owner(worker)
        await frontier.forget_worker(worker)
        if moved.requeued or moved.dead:
            self.metrics.requeued.labels(reason).inc(moved.requeued)
            kopf.info(
                cast(Any, body),  # kopf posts Events for any mapping with metadata
                reason="LeasesRequeued",
                message=f"worker {worker} is gone ({reason.replace('_', ' ')}): "
                f"{moved.requeued} lease(s) requeued, {moved.dead} dead-lettered",
            )

    async def _frontier(self, ref: JobRef, spec: CrawlJobSpec, state: JobState) -> Frontier | None:
        if state.frontier is not None:
            return state.frontier
        url = await self._redis_url(ref, spec)
        if url is None:
            return None
        client = connect(url)
        try:
            await client.ping()
            state.frontier = await Frontier.open(
                client, FrontierSettings.from_spec(f"{ref.namespace}.{ref.name}", spec)
            )
        except (RedisError, FrontierError, OSError) as error:
            log.info("Redis of %s/%s not reachable yet: %s", ref.namespace, ref.name, error)
            with contextlib.suppress(Exception):
                await client.aclose()
            return None
        return state.frontier

    async def _redis_url(self, ref: JobRef, spec: CrawlJobSpec) -> str | None:
        """Where the operator reaches the job's Redis.

        A managed Redis by its Service's cluster IP: no dependence on cluster DNS, and the
        address is stable for the Service's life. Workers use the Service's DNS name.
        """
        redis = spec.redis
        if redis.url is not None:
            return redis.url
        if redis.secret_ref is not None:
            return await self.kube.secret_value(
                ref.namespace, redis.secret_ref.name, redis.secret_ref.key
            )
        names = ref.names
        password = await self.kube.secret_value(ref.namespace, names.redis_secret, "password")
        address = await self.kube.service_cluster_ip(ref.namespace, names.redis)
        if password is None or address is None:
            return None
        return f"redis://:{password}@{address}:{children.REDIS_PORT}/0"

    # -- the fast path -----------------------------------------------------------------

    async def worker_deployment_event(
        self,
        event: Mapping[str, Any],
        body: kopf.Body,
        name: str,
        namespace: str | None,
        labels: kopf.Labels,
        **_: Any,
    ) -> None:
        if namespace is None:
            return
        key = (namespace, name)
        if event.get("type") == "DELETED":
            self.deployments.pop(key, None)
        else:
            replicas = body.get("spec", {}).get("replicas") or 0
            ready = body.get("status", {}).get("readyReplicas") or 0
            if self.deployments.get(key) != (replicas, ready):
                self.deployments[key] = (replicas, ready)
                self._touch(namespace, labels[children.LABEL_JOB])

    def _touch(self, namespace: str, job_label: str) -> None:
        state = self.jobs.get((namespace, job_label))
        if state is not None:
            state.dirty = True

    async def worker_pod_event(
        self,
        event: Mapping[str, Any],
        body: kopf.Body,
        name: str,
        namespace: str | None,
        labels: kopf.Labels,
        **_: Any,
    ) -> None:
        if namespace is None:
            return
        job_label = labels[children.LABEL_JOB]
        pods = self.pods.setdefault((namespace, job_label), {})
        gone = event.get("type") == "DELETED"
        phase = body.get("status", {}).get("phase")
        if gone:
            pods.pop(name, None)
        else:
            pods[name] = PodInfo.of(name, phase, body["metadata"].get("creationTimestamp"))
        failed = phase in ("Failed", "Succeeded")
        if not (gone or failed):
            return
        self._touch(namespace, job_label)
        state = self.jobs.get((namespace, job_label))
        if state is None or state.frontier is None:
            return  # the next tick sees its heartbeat without a pod and requeues then
        try:
            beats = await state.frontier.workers()
            for worker in {name, *(b.worker for b in beats if pod_of(b.worker) == name)}:
                await self._requeue_owner(
                    state.owner, state.frontier, worker, "pod_gone" if gone else "pod_failed"
                )
        except (RedisError, FrontierError, OSError) as error:
            log.warning("requeue for pod %s/%s failed: %s", namespace, name, error)

    # -- deletion ----------------------------------------------------------------------

    async def cleanup(self, body: kopf.Body, spec: kopf.Spec, **_: Any) -> None:
        """Forget the job; with an external Redis, remove its keys (a managed one is GC'd).

        The keys go only after the job's workers have stopped: a worker still draining
        would write its heartbeat (and claims) into them again.
        """
        ref = _ref(body)
        try:
            parsed: CrawlJobSpec | None = CrawlJobSpec.from_mapping(dict(spec))
        except ConfigError:
            parsed = None
        external = parsed is not None and parsed.redis.managed is None
        if external and self.pods.get((ref.namespace, ref.label)):
            await self.kube.scale_deployment(ref.namespace, ref.names.workers, 0)
            raise kopf.TemporaryError(
                "waiting for the workers to stop before removing the job's keys", delay=2
            )
        state = self.jobs.pop((ref.namespace, ref.label), None)
        self.metrics.set_phase(ref.namespace, ref.name, None)
        if external and parsed is not None:
            frontier = state.frontier if state else None
            if frontier is None:
                frontier = await self._frontier(ref, parsed, JobState(owner=_owner(body)))
            if frontier is not None:
                removed = await frontier.delete()
                log.info("removed %d keys of %s/%s", removed, ref.namespace, ref.name)
                await frontier.client.aclose()
                if state is not None:
                    state.frontier = None
        if state is not None:
            await state.disconnect()


def pod_of(worker_id: str) -> str:
    """The pod a worker id belongs to: workers in pods are ``<pod name>#<incarnation>``."""
    return worker_id.split("#", 1)[0]


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A worker pod as the watch last saw it."""

    name: str
    phase: str | None
    started_at: float

    @classmethod
    def of(cls, name: str, phase: str | None, created: str | None) -> PodInfo:
        started = (
            datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
            if created
            else time.time()
        )
        return cls(name, phase, started)


def _patch_changed(patch: kopf.Patch, status: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Put into the status patch only what differs: an unchanged status costs no API call."""
    for key, value in new.items():
        if status.get(key) != value:
            patch.status[key] = value


def _worker_views(
    pods: Sequence[PodInfo], beats: Mapping[str, float]
) -> tuple[tuple[WorkerView, ...], list[str]]:
    """One view per pod, and the worker ids of earlier incarnations of live pods.

    A container that crashed and restarted keeps its pod's name but is a new worker: the
    pod's freshest heartbeat stands for the pod, and older incarnations are gone (their
    leases are requeued at once). A terminating pod still counts as running while it drains.
    """
    by_pod: dict[str, list[tuple[float, str]]] = {}
    for beating, beat_age in beats.items():
        by_pod.setdefault(pod_of(beating), []).append((beat_age, beating))
    views: list[WorkerView] = []
    superseded: list[str] = []
    for pod in pods:
        name = pod.name
        incarnations = sorted(by_pod.get(name, ()))
        age: float | None = incarnations[0][0] if incarnations else None
        worker = incarnations[0][1] if incarnations else name
        superseded += [w for _, w in incarnations[1:]]
        views.append(
            WorkerView(
                worker_id=worker,
                running=pod.phase in (None, "Pending", "Running"),
                started_at=pod.started_at,
                heartbeat_age_seconds=age,
            )
        )
    return tuple(views), superseded


def _message(phase: str, stats: Any, desired: int) -> str:
    if phase == "Succeeded":
        return f"complete: {stats.crawled} pages crawled, {stats.dead} dead-lettered"
    if phase == "Suspended":
        return f"suspended with {stats.queued + stats.delayed} URLs queued"
    return (
        f"{stats.crawled} crawled, {stats.queued + stats.delayed} queued, "
        f"{stats.leased} in flight, {desired} workers wanted"
    )
