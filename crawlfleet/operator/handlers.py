"""kopf handlers: a CrawlJob's children, its fleet, its status.

Three paths, each idempotent:

- ``ensure`` (create, update, resume): the children exist and match the spec. Fixed names,
  ownerReferences through ``kopf.adopt``, server-side apply (:meth:`Kube.ensure`). A managed
  Redis's password Secret is made once and never rewritten.
- ``tick`` (a timer per job): the one steering tick (:func:`crawlfleet.fleet.steer.tick`, the
  same code ``crawlfleet run`` uses) over the Kubernetes backend
  (:class:`~crawlfleet.operator.backend.KubeBackend`), then status. Between full ticks a
  one-read check of the counters (:func:`crawlfleet.fleet.steer.check`).
- a scheduled job (``spec.schedule``) is looked at by the same tick (crawlfleet.fleet.recurring):
  between runs it is ``Scheduled`` with no workers and nothing steered; at a due time a run
  begins (``Frontier.begin_run``, the seeds queued again) and is steered as any job; on
  completion it commits (``Frontier.commit_run``) and goes back to ``Scheduled``. The book of
  runs (``status.nextRunAt``, ``currentRun``, ``runs``, ``runsSkipped``) lives in the status.
  Due times are read against :attr:`CrawlJobOperator.clock` (a test moves a file clock).
- ``worker_pod_event`` (a watch on worker pods): the fast path. A worker pod that is gone or
  failed has its leases requeued at once (:func:`crawlfleet.fleet.steer.requeue_unit`)
  instead of at the next tick or at lease expiry.

What the tick observes of pods and Deployments comes from kopf indices (``worker_pods``,
``worker_deployments``): kopf fills them from its watches and lists every indexed kind in
full before it runs any resource handler, so even the first tick after a restart sees every
pod. The fleet brain's memory lives in ``status.fleet``; this process only caches it.

Errors are decisions: a Kubernetes 429 or 5xx becomes ``kopf.TemporaryError(delay=...)``; a
frontier that cannot be reached is reported in the status and retried at the next tick. A
spec that slipped past admission is marked ``InvalidSpec`` with the exact reason and left
alone: the handlers return normally, so kopf neither retries nor backs off in a loop; an edit
of the spec runs ``ensure`` again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import random
import secrets
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, NoReturn

import kopf

from crawlfleet.config import Config
from crawlfleet.crawljob import CrawlJobSpec, Phase, parse_seed_list
from crawlfleet.errors import (
    ConfigError,
    FrontierError,
    FrontierLost,
    FrontierUnavailable,
    KubeError,
    UnsafeRedis,
)
from crawlfleet.fleet import FleetMemory, FleetPolicy, Freshness, seed_list_hash, steer
from crawlfleet.fleet.clock import schedule_clock
from crawlfleet.fleet.recurring import fresh_memory, run_ended
from crawlfleet.fleet.recurring import step as schedule_step
from crawlfleet.fleet.runs import RunBook
from crawlfleet.frontier import Frontier, FrontierSettings, FrontierStats
from crawlfleet.operator import children
from crawlfleet.operator.backend import DeploymentInfo, KubeBackend, PodInfo
from crawlfleet.operator.children import JobRef
from crawlfleet.operator.kube import Child, Kube
from crawlfleet.operator.metrics import OperatorMetrics
from crawlfleet.operator.output import DefaultOutput, output_plan
from crawlfleet.operator.ownership import RECHECK_SECONDS, ChildConflict, conflict_message
from crawlfleet.operator.status import (
    Observed,
    child_conflict_resolved,
    child_conflict_status,
    invalid_spec_status,
    job_status,
    output_not_durable_status,
    partition_condition,
    rfc3339,
    shards_change_problem,
)
from crawlfleet.proxies import InvalidProxy, parse_proxy_list
from crawlfleet.tenancy import (
    PROXY_SECRET_FIELD,
    REDIS_SECRET_FIELD,
    REDIS_URL_FIELD,
    SecretUse,
    TenancyPolicy,
)

__all__ = [
    "GROUP",
    "PLURAL",
    "VERSION",
    "CrawlJobOperator",
    "index_worker_deployment",
    "index_worker_pod",
]

log = logging.getLogger(__name__)

GROUP: Final = "crawlfleet.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "crawljobs"


#: The labels every worker pod and worker Deployment the operator made carries.
WORKER_LABELS: Final[Mapping[str, Any]] = {  # str, or kopf.PRESENT (its type is private)
    children.LABEL_COMPONENT: "worker",
    children.LABEL_JOB: kopf.PRESENT,
    "app.kubernetes.io/managed-by": "crawlfleet-operator",
}

#: ensure() calls at once (each a dozen API calls); the rest wait their turn.
_CONCURRENT_ENSURES: Final = 8

PodIndex = kopf.Index[tuple[str, str], PodInfo]
DeploymentIndex = kopf.Index[tuple[str, str], DeploymentInfo]


def index_worker_pod(
    name: str,
    namespace: str | None,
    labels: kopf.Labels,
    meta: kopf.Meta,
    status: kopf.Status,
    **_: Any,
) -> dict[tuple[str, str], PodInfo]:
    """The ``worker_pods`` index: (namespace, job label) -> the job's pods."""
    return {(namespace or "", labels[children.LABEL_JOB]): PodInfo.of(name, status, meta)}


def index_worker_deployment(
    name: str, namespace: str | None, spec: kopf.Spec, status: kopf.Status, **_: Any
) -> dict[tuple[str, str], DeploymentInfo]:
    """The ``worker_deployments`` index: (namespace, name) -> replicas wanted and ready."""
    return {(namespace or "", name): DeploymentInfo.of(spec, status)}


def _first(store: Collection[DeploymentInfo] | None) -> DeploymentInfo | None:
    return next(iter(store), None) if store else None


@dataclass
class JobState:
    """What the operator keeps in memory per job; all of it can be rebuilt after a restart."""

    owner: dict[str, Any]
    frontier: Frontier | None = None
    #: A cache of ``status.fleet`` (read from there after a restart): the brain's memory.
    memory: FleetMemory | None = None
    last_crawled: int | None = None
    last_time: float = 0.0
    pages_per_second: float = 0.0
    last_full: float = 0.0
    #: Set by the watches when a worker pod or the Deployment changed: reconcile now.
    dirty: bool = True
    #: The worker Deployment as its last event showed it (a change makes the job dirty).
    deployment: DeploymentInfo | None = None
    #: The spec validated once per generation, not at every one-second check (None: invalid).
    spec: CrawlJobSpec | None = None
    spec_generation: int | None = None
    #: Where the output goes, in words, as ensure() decided it (operator/output.py).
    output: str = ""
    #: Why the job must not start (OutputNotDurable), as ensure() found it; None: it may.
    output_problem: str | None = None
    #: Whether the last tick saw workers blocked by their output (an Event on each change).
    output_blocked: bool = False
    #: Why the spec cannot be used (the seedsFrom list, or a change its frontier cannot
    #: take), as ensure() found it (InvalidSpec); None: it can.
    seeds_problem: str | None = None
    #: The seedsFrom list ensure() read and checked, for the tick that seeds (which takes it:
    #: a hundred thousand URLs are not kept in memory once the frontier holds them).
    listed_seeds: tuple[str, ...] | None = None
    #: Why the tenancy policy refuses the spec (InvalidSpec), as ensure() found it; None: it
    #: does not.
    policy_problem: str | None = None
    #: Which of the job's child names other objects hold (ChildConflict), as ensure() found
    #: it; None: none.
    child_conflict: str | None = None
    #: The digest of the seed list of ``spec`` (a change queues the seeds again, once).
    seeds_hash: str | None = None
    _seeds_hash_key: tuple[int | None, str | None] | None = None
    #: The seedsFrom ConfigMap's resourceVersion, and when it was last looked at.
    seeds_from_version: str | None = None
    seeds_from_checked: float = 0.0
    #: The digest of a seed list a finished job was warned about (SeedsIgnored, once).
    seeds_ignored: str | None = None
    #: Redis did not answer the last reconcile; when it last answered again after that
    #: (the tick's ``reachable_since``: the workers could not heartbeat meanwhile).
    redis_away: bool = False
    redis_back_at: float | None = None
    #: Why the job's Redis was last refused (RedisRefused, announced once: the status this
    #: tick reads may not show the previous tick's patch yet); None: it was not.
    redis_refused: str | None = None
    #: The last tick failed for some frontier partitions only: which, and whether a worker's
    #: link spool was full (PartitionUnavailable, announced again when either changes).
    partition_outage: tuple[tuple[int, ...], bool] | None = None

    def reachable_since(self, now: float) -> float | None:
        return now if self.redis_away else self.redis_back_at

    def spec_for(self, generation: int | None, raw: Mapping[str, Any]) -> CrawlJobSpec | None:
        if generation is None or generation != self.spec_generation:
            try:
                self.spec = CrawlJobSpec.from_mapping(dict(raw))
            except ConfigError:
                self.spec = None
            self.spec_generation = generation
        return self.spec

    def seeds_hash_of(self, spec: CrawlJobSpec) -> str:
        """The digest of the seed list: the spec's and, with seedsFrom, the ConfigMap's
        version last looked at (computed once per spec generation and version)."""
        key = (self.spec_generation, self.seeds_from_version)
        if self.seeds_hash is None or self._seeds_hash_key != key:
            self.seeds_hash, self._seeds_hash_key = _seeds_hash(spec, self.seeds_from_version), key
        return self.seeds_hash

    async def disconnect(self) -> None:
        if self.frontier is not None:
            await self.frontier.aclose()
        self.frontier = None


def _seeds_hash(spec: CrawlJobSpec, seeds_from_version: str | None) -> str:
    """The digest of a job's seed list: ``spec.seeds``, where seedsFrom points, and the
    version of the ConfigMap there (looked at every ``seeds_from_check_seconds``)."""
    source = spec.seeds_from
    where = "" if source is None else source.model_dump_json(by_alias=True, exclude_none=True)
    return seed_list_hash(spec.seeds, f"{where}@{seeds_from_version or ''}")


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

    def __init__(self, kube: Kube, config: Config, metrics: OperatorMetrics) -> None:
        self.kube = kube
        self.config = config
        self.knobs = config.operator
        self.metrics = metrics
        #: By (namespace, job label): the label is what a worker pod carries.
        self.jobs: dict[tuple[str, str], JobState] = {}
        self.default_output = (
            DefaultOutput.parse(self.knobs.default_output) if self.knobs.default_output else None
        )
        self._ensuring = asyncio.Semaphore(_CONCURRENT_ENSURES)
        self.policy = TenancyPolicy.from_config(self.knobs)
        self.seed_list = config.seed_list.bounds()
        self.cluster_cidrs = _networks(self.knobs.cluster_cidrs, "CRAWLFLEET_CLUSTER_CIDRS")
        #: What scheduled jobs' due times are read against (the wall clock, or a test's).
        self.clock = schedule_clock(config.steering.schedule_clock_file)

    def register(self, registry: kopf.OperatorRegistry) -> None:
        resource = (GROUP, VERSION, PLURAL)
        for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
            decorator(*resource, registry=registry, id="ensure")(self.ensure)
        kopf.timer(
            *resource,
            registry=registry,
            id="tick",
            interval=min(self.knobs.check_seconds, self.knobs.tick_seconds),
            initial_delay=0.5,
            sharp=False,
        )(self.tick)
        kopf.on.delete(*resource, registry=registry, id="cleanup")(self.cleanup)
        # The index ids are the names handlers receive them by (worker_pods=...).
        kopf.index("", "v1", "pods", registry=registry, id="worker_pods", labels=WORKER_LABELS)(
            index_worker_pod
        )
        kopf.index(
            "apps",
            "v1",
            "deployments",
            registry=registry,
            id="worker_deployments",
            labels=WORKER_LABELS,
        )(index_worker_deployment)
        kopf.on.event("", "v1", "pods", registry=registry, id="worker-pods", labels=WORKER_LABELS)(
            self.worker_pod_event
        )
        kopf.on.event(
            "apps",
            "v1",
            "deployments",
            registry=registry,
            id="worker-deployments",
            labels=WORKER_LABELS,
        )(self.worker_deployment_event)

    def _state(self, body: Mapping[str, Any]) -> JobState:
        ref = _ref(body)
        key = (ref.namespace, ref.label)
        state = self.jobs.get(key)
        if state is None:
            state = self.jobs[key] = JobState(owner=_owner(body))
        return state

    # -- children ----------------------------------------------------------------------

    async def ensure(self, **kwargs: Any) -> None:
        """kopf's create/update/resume handler: :meth:`_ensure`, a few jobs at a time.

        A hundred jobs applied at once (or an operator restart with a thousand) would otherwise
        hold a hundred sets of manifests and API answers in memory together, and the heap
        keeps the high-water mark of such a burst long after it.
        """
        async with self._ensuring:
            await self._ensure(**kwargs)

    async def _ensure(
        self,
        body: kopf.Body,
        spec: kopf.Spec,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
        reason: str = "",
        **_: Any,
    ) -> None:
        ref = _ref(body)
        state = self._state(body)
        try:
            parsed = CrawlJobSpec.from_mapping(dict(spec))
            changed = shards_change_problem(status, parsed)
            if changed is not None:  # the frontier exists: its partitions stay as made
                raise ConfigError(changed)
            # The workers' scope needs the list's hosts: it is read (and checked) before
            # anything is made, and again only when the tick seeds.
            listed = await self._listed_seeds(ref, parsed)
            parsed = parsed.with_listed_seeds(listed)
        except ConfigError as error:
            state.seeds_problem = str(error)
            if status.get("selector"):  # it ran: its workers (on the old spec) stop
                await self._scale_workers_to_zero(ref)
            self._mark_invalid(body, status, meta, patch, str(error))
            return
        state.seeds_problem, state.listed_seeds = None, listed or None
        problems, missing = await self._policy_problems(ref, parsed)
        state.policy_problem = "; ".join(problems) or None
        if problems:
            if status.get("selector"):  # it ran: its workers stop; the refused spec is not
                await self._scale_workers_to_zero(ref)  # applied, its Redis stays
            self._mark_invalid(body, status, meta, patch, state.policy_problem or "")
            if missing:  # it may yet be created: look again, without a retry storm
                raise kopf.TemporaryError(state.policy_problem, delay=30)
            return
        plan = output_plan(ref, parsed, self.default_output, output_secret=ref.names.output_secret)
        credentials: dict[str, str] | None = None
        if plan.problem is None and plan.copy_secret is not None:
            credentials = await self._default_credentials(*plan.copy_secret)
            if credentials is None:
                namespace, name = plan.copy_secret
                plan = dataclasses.replace(
                    plan,
                    problem=f"the operator's default output Secret {namespace}/{name} has no"
                    " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: create it (the chart's"
                    " defaultOutput), or give the job its own output.destination",
                )
        was_writing_to = state.output
        state.output, state.output_problem = plan.description, plan.problem
        if plan.problem is not None:
            problem = plan.problem
            if status.get("selector"):  # it ran: an edit took its durable destination away
                problem += await self._stop_workers(ref, was_writing_to)
            self._mark_not_durable(body, status, meta, patch, problem)
            return
        # (manifest, made once and never rewritten, fields handed over after creation)
        manifests: list[tuple[dict[str, Any], bool, tuple[str, ...]]] = []
        if credentials is not None:
            manifests.append((children.output_secret(ref, credentials), False, ()))
        if parsed.redis.managed is not None:
            manifests.append(await self._redis_secret(ref, meta["uid"]))
            pvc = children.redis_pvc(ref, parsed)
            if pvc is not None:
                manifests.append((pvc, True, ()))  # a claim's spec is immutable
            manifests.append((children.redis_deployment(ref, parsed), False, ()))
            manifests.append((children.redis_service(ref), False, ()))
            network_policy = children.network_policy(
                ref, dict(self.knobs.operator_labels), self.knobs.pod_namespace
            )
            manifests.append((network_policy, False, ()))
        elif parsed.redis.url is not None:
            manifests.append((children.external_redis_secret(ref, parsed.redis.url), False, ()))
        if self.knobs.worker_egress:
            egress = children.worker_egress_policy(
                ref, plan.spec, self.cluster_cidrs, await self._proxy_ports(ref, plan.spec)
            )
            manifests.append((egress, False, ()))
        manifests.append((children.config_map(ref, plan.spec), False, ()))
        workers = children.worker_deployment(
            ref,
            plan.spec,
            replicas=0,  # the tick scales up once Redis answers and the seeds are in
            image=parsed.workers.image or self.knobs.worker_image,
            drain=self.config.worker.drain,
            output_dir=plan.folder,
        )
        # Replicas belong to the tick (or to kubectl scale / an HPA): set only at creation.
        manifests.append((workers, False, ("spec.replicas",)))
        manifests.append((children.metrics_service(ref), False, ()))
        owned = [Child(*entry) for entry in manifests]
        for child in owned:
            kopf.adopt(child.manifest, owner=body)
        try:  # only what is this job's: a name taken by another object holds the job
            conflicts = await self.kube.ensure_children(owned, meta["uid"])
        except KubeError as error:
            raise _retry_later(error) from error
        state.child_conflict = conflict_message(conflicts) if conflicts else None
        if conflicts:
            await self._hold_for_conflicts(body, ref, status, meta, patch, conflicts)
        patch.status.update(child_conflict_resolved(status, meta.get("generation"), _now()))
        selector = children.selector_string(children.worker_selector(ref))
        # A failed job starts again when its spec changes (an edit may be the fix: a valid
        # spec, redis.onLoss: Reseed), not when the operator merely restarts.
        again = status.get("phase") is None or (
            status.get("phase") == "Failed" and reason != kopf.Reason.RESUME.value
        )
        if again or status.get("selector") != selector:
            patch.status["selector"] = selector
            if again:
                patch.status["phase"] = "Pending"
                patch.status["message"] = "children created; waiting for Redis"
                patch.status["completionTime"] = None
        self._state(body)

    async def _stop_workers(self, ref: JobRef, was_writing_to: str) -> str:
        """A running job edited to a destination that is not durable: the same rule as at
        creation (no worker writes where nothing lasts), so its workers are scaled to 0 --
        they drain, making what they hold durable where it went until now -- and the
        Deployment keeps its old destination until the spec is fixed."""
        await self._scale_workers_to_zero(ref)
        where = f" ({was_writing_to})" if was_writing_to else ""
        return (
            f". The job's workers are stopped until then; what they wrote is in the"
            f" destination it had before the edit{where}"
        )

    async def _listed_seeds(self, ref: JobRef, spec: CrawlJobSpec) -> tuple[str, ...]:
        """The seeds of the job's seedsFrom list, read and checked; () without one.

        A ConfigError is the user's to fix (InvalidSpec); a ConfigMap not there yet is waited
        for (kopf retries ensure), as a pod waits for a ConfigMap it mounts.
        """
        source = spec.seeds_from
        if source is None:
            return ()
        if source.config_map_key_ref is None:
            raise ConfigError(
                "spec.seedsFrom.file: a file is read by crawlfleet run and crawlfleet validate;"
                " in a cluster give the list as seedsFrom.configMapKeyRef"
            )
        found = source.config_map_key_ref
        where = f"spec.seedsFrom.configMapKeyRef (ConfigMap {found.name}, key {found.key})"
        try:
            # Its labels first: a ConfigMap the policy does not let the job read is not read.
            meta = await self.kube.config_map_metadata(ref.namespace, found.name)
            refused = self.policy.seed_list_problem(
                where, found.name, None if meta is None else dict(meta.get("labels") or {})
            )
            if refused is not None:
                raise ConfigError(refused)
            data = await self.kube.config_map_value(ref.namespace, found.name, found.key)
        except KubeError as error:
            raise _retry_later(error) from error
        if data is None:
            raise kopf.TemporaryError(f"{where}: not there yet; waiting for it", delay=10)
        # Thread: a million URLs are seconds of checking, which the loop must not wait out.
        return await asyncio.to_thread(parse_seed_list, data, where, self.seed_list)

    async def _seeds_hash(self, ref: JobRef, spec: CrawlJobSpec, state: JobState) -> str:
        """The seed list's digest, its seedsFrom ConfigMap's version looked at when due.

        A ConfigMap is not watched (that would cache every ConfigMap of the namespace, seed
        lists of megabytes among them): its metadata is read every
        ``seeds_from_check_seconds``, so a list edited in place is queued again, once.
        """
        source = spec.seeds_from
        found = source.config_map_key_ref if source is not None else None
        due = time.monotonic() - state.seeds_from_checked >= self.knobs.seeds_from_check_seconds
        if found is not None and due:
            try:
                version = await self.kube.config_map_version(ref.namespace, found.name)
            except KubeError as error:  # looked at again next time; the list stays as it was
                log.info(
                    "job %s/%s: seedsFrom ConfigMap not read: %s", ref.namespace, ref.name, error
                )
            else:
                state.seeds_from_version, state.seeds_from_checked = version, time.monotonic()
        return state.seeds_hash_of(spec)

    def _seeds_of(self, ref: JobRef, spec: CrawlJobSpec, state: JobState) -> steer.Seeds:
        """What the tick seeds with: a seedsFrom list is read only if it does seed (and taken
        from ensure() when it just read it)."""
        if spec.seeds_from is None:
            return spec.seeds

        async def read() -> tuple[str, ...]:
            listed, state.listed_seeds = state.listed_seeds, None
            try:
                return (*spec.seeds, *(listed or await self._listed_seeds(ref, spec)))
            except ConfigError as error:  # changed since ensure() read it
                raise kopf.TemporaryError(f"cannot seed: {error}", delay=30) from error

        return read

    async def _scale_workers_to_zero(self, ref: JobRef) -> None:
        try:
            await self.kube.scale_deployment(ref.namespace, ref.names.workers, 0)
        except KubeError as error:
            raise _retry_later(error) from error

    async def _policy_problems(self, ref: JobRef, spec: CrawlJobSpec) -> tuple[list[str], bool]:
        """What the tenancy policy refuses in the spec, and whether a Secret may yet fix it.

        Checked before any child exists: a refused job gets no pod, no claim, no copy.
        """
        problems = self.policy.spec_problems(spec)
        missing = False
        for use in self.policy.secret_uses(spec):
            labels = await self._secret_labels(ref, use)
            problem = self.policy.secret_problem(use, labels)
            fixed_in_secret = problem is None and use.field in (
                REDIS_SECRET_FIELD,
                PROXY_SECRET_FIELD,
            )
            if fixed_in_secret and use.field == REDIS_SECRET_FIELD:
                problem = await self._secret_redis_problem(ref, spec)
            elif fixed_in_secret:
                problem = await self._secret_proxy_problem(ref, spec)
            if problem is not None:
                problems.append(problem)
                # Fixed outside the spec (a Secret created, or its URL changed): look again.
                missing = missing or labels is None or fixed_in_secret
        return problems, missing

    async def _proxy_ports(self, ref: JobRef, spec: CrawlJobSpec) -> tuple[int, ...]:
        """The ports of the proxies in ``spec.proxy.secretRef``'s Secret, for the workers'
        egress when ``proxy.allowPrivate`` lets them be in the cluster (none otherwise, or
        while the list cannot be read: its problem is the job's InvalidSpec)."""
        proxy = spec.proxy
        if proxy is None or proxy.secret_ref is None or not proxy.allow_private:
            return ()
        try:
            listed = await self.kube.secret_value(
                ref.namespace, proxy.secret_ref.name, proxy.secret_ref.key
            )
        except KubeError as error:
            raise _retry_later(error) from error
        try:
            return tuple(sorted({p.port for p in parse_proxy_list(listed or "")}))
        except InvalidProxy:
            return ()

    async def _secret_proxy_problem(self, ref: JobRef, spec: CrawlJobSpec) -> str | None:
        """Why the proxy list in ``spec.proxy.secretRef``'s Secret cannot be used, in the words
        the workers and ``crawlfleet run`` would use (None: it can). Never its credentials."""
        assert spec.proxy is not None
        secret_ref = spec.proxy.secret_ref
        assert secret_ref is not None
        try:
            listed = await self.kube.secret_value(ref.namespace, secret_ref.name, secret_ref.key)
        except KubeError as error:
            raise _retry_later(error) from error
        where = f"spec.proxy.secretRef: Secret {secret_ref.name}, key {secret_ref.key}"
        if listed is None:
            return f"{where}: no such key (it holds the proxy URLs, one per line)"
        try:
            parse_proxy_list(listed)
        except InvalidProxy as error:
            return f"{where}: {error}"
        return None

    async def _secret_redis_problem(self, ref: JobRef, spec: CrawlJobSpec) -> str | None:
        """Why the Redis URL in the job's Secret is outside the policy (None: it is inside, or
        the key is not there yet: the frontier then waits for it)."""
        secret_ref = spec.redis.secret_ref
        assert secret_ref is not None
        try:
            url = await self.kube.secret_value(ref.namespace, secret_ref.name, secret_ref.key)
        except KubeError as error:
            raise _retry_later(error) from error
        return None if url is None else self.policy.redis_url_problem(REDIS_SECRET_FIELD, url)

    async def _secret_labels(self, ref: JobRef, use: SecretUse) -> dict[str, str] | None:
        try:
            return await self.kube.secret_labels(ref.namespace, use.name)
        except KubeError as error:
            raise _retry_later(error) from error

    async def _default_credentials(self, namespace: str, name: str) -> dict[str, str] | None:
        """The default output's keys, to copy into the job's namespace; None if incomplete."""
        found: dict[str, str] = {}
        for key in children.OUTPUT_SECRET_KEYS:
            try:
                value = await self.kube.secret_value(namespace, name, key)
            except KubeError as error:
                raise _retry_later(error) from error
            if value is not None:
                found[key] = value
        if "AWS_ACCESS_KEY_ID" not in found or "AWS_SECRET_ACCESS_KEY" not in found:
            return None
        return found

    def _mark_not_durable(
        self,
        body: kopf.Body,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
        message: str,
    ) -> None:
        """No durable place for the output: the job waits (Pending), nothing is created."""
        self._mark(body, status, meta, patch, message, "OutputNotDurable")

    async def _redis_secret(
        self, ref: JobRef, owner_uid: str
    ) -> tuple[dict[str, Any], bool, tuple[str, ...]]:
        """The managed Redis's Secret: a new password (created once: should the read have
        missed a Secret, the create leaves it alone), or the one it has, never rotated. Only
        the job's own Secret's password is kept: one that is not the job's is a conflict.

        A Secret made by an earlier version may hold only the password: the keys derived from
        it (the config line Redis includes, the workers' URL) are applied beside it.
        """
        try:
            kept = await self.kube.secret_value(
                ref.namespace,
                ref.names.redis_secret,
                children.SECRET_PASSWORD,
                owner_uid=owner_uid,
            )
        except KubeError as error:
            raise _retry_later(error) from error
        manifest = children.redis_secret(ref, kept or secrets.token_hex(24))
        return manifest, kept is None, ()

    def _mark_invalid(
        self,
        body: kopf.Body,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
        message: str,
    ) -> None:
        self._mark(body, status, meta, patch, message, "InvalidSpec")

    async def _hold_for_conflicts(
        self,
        body: kopf.Body,
        ref: JobRef,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
        conflicts: list[ChildConflict],
    ) -> NoReturn:
        """Child names taken by objects that are not the job's: they are left alone, nothing of
        the job is made or changed, and kopf runs ensure() again in ``RECHECK_SECONDS`` (the
        job starts once they are gone). A job that ran stops its workers: nothing steers them
        while it is held."""
        taken = {(conflict.kind, conflict.name) for conflict in conflicts}
        ran = status.get("selector") and status.get("phase") not in ("Succeeded", "Failed")
        if ran and ("Deployment", ref.names.workers) not in taken:
            await self._scale_workers_to_zero(ref)
        self._mark(body, status, meta, patch, conflict_message(conflicts), "ChildConflict")
        raise kopf.TemporaryError(
            f"{len(conflicts)} of the job's child names held by other objects; looking again",
            delay=RECHECK_SECONDS,
        )

    def _mark(
        self,
        body: kopf.Body,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
        message: str,
        reason: Literal["InvalidSpec", "OutputNotDurable", "ChildConflict"],
    ) -> None:
        """A job that must not run: its condition and status, and a warning Event once."""
        already = any(
            c.get("type") == reason and c.get("status") == "True" and c.get("message") == message
            for c in status.get("conditions") or ()
        )
        make = _MARKS[reason]
        made = make(status, message, generation=meta.get("generation"), now=_now())
        patch.status.update(made)
        if not already:
            kopf.warn(body, reason=reason, message=message)
        self.metrics.set_phase(_ref(body).namespace, _ref(body).name, made["phase"])

    # -- the tick ----------------------------------------------------------------------

    async def tick(
        self,
        body: kopf.Body,
        spec: kopf.Spec,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
        **indices: Any,
    ) -> None:
        worker_pods: PodIndex = indices["worker_pods"]
        worker_deployments: DeploymentIndex = indices["worker_deployments"]
        if self.knobs.tick_jitter_seconds > 0:
            await asyncio.sleep(random.uniform(0, self.knobs.tick_jitter_seconds))
        if meta.get("deletionTimestamp"):
            return  # being deleted: cleanup() owns it, and a tick would recreate its keys
        ref = _ref(body)
        state = self._state(body)
        parsed = state.spec_for(meta.get("generation"), spec)
        if (
            parsed is None
            or state.output_problem is not None
            or state.seeds_problem is not None
            or state.policy_problem is not None
            or state.child_conflict is not None
        ):
            return  # ensure() marked it InvalidSpec, OutputNotDurable or ChildConflict
        policy = FleetPolicy.from_spec(
            parsed,
            self.config.steering,
            completion_grace_seconds=self.knobs.completion_grace_seconds,
        )
        try:
            if not await self._due(state, policy, parsed, status):
                return
        except (FrontierError, OSError):
            pass  # the full reconcile below reconnects and reports it
        started = time.perf_counter()
        state.last_full, state.dirty = time.monotonic(), False
        backend = KubeBackend(
            self.kube,
            ref,
            state.owner,
            pods=tuple(worker_pods.get((ref.namespace, ref.label), ())),
            deployment=_first(worker_deployments.get((ref.namespace, ref.names.workers))),
            metrics=self.metrics,
            quick_death_seconds=self.config.steering.startup_grace_seconds,
        )
        try:
            await self._reconcile(body, ref, parsed, policy, backend, state, status, meta, patch)
        except (FrontierError, OSError) as error:
            # Redis restarting or moving: reconnect next tick; leases stay valid meanwhile.
            self.metrics.reconcile_errors.inc()
            state.redis_away = True
            outage = (
                await steer.partition_outage(state.frontier, error)
                if isinstance(error, FrontierUnavailable) and state.frontier is not None
                else None
            )
            if outage is None:
                log.warning("tick of %s/%s: %s", ref.namespace, ref.name, error)
                await state.disconnect()
                patch.status["message"] = f"Redis unavailable: {error}"
            else:  # the other partitions' connections are fine: only the tick waits
                said = (outage.partitions, outage.spool_full > 0)
                if state.partition_outage != said:
                    log.warning("%s/%s: %s", ref.namespace, ref.name, outage.message)
                    kopf.warn(body, reason="PartitionUnavailable", message=outage.message)
                state.partition_outage = said
                patch.status["message"] = outage.message
                patch.status["conditions"] = partition_condition(
                    status.get("conditions") or (),
                    outage.message,
                    meta.get("generation"),
                    now=_now(),
                )
        except KubeError as error:
            self.metrics.reconcile_errors.inc()
            raise _retry_later(error) from error
        except Exception:
            self.metrics.reconcile_errors.inc()
            raise
        else:
            state.partition_outage = None
        finally:
            self.metrics.reconcile_duration.observe(time.perf_counter() - started)

    async def _due(
        self, state: JobState, policy: FleetPolicy, spec: CrawlJobSpec, status: kopf.Status
    ) -> bool:
        """Whether this check must be a full tick; at most one Redis read to find out.

        A scheduled job between runs has nothing to steer: its tick is due at its next due
        time (or every ``tick_seconds``, as any job's)."""
        if state.frontier is None or state.memory is None or state.dirty:
            return True
        if time.monotonic() - state.last_full >= self.knobs.tick_seconds:
            return True
        if spec.schedule is not None and not spec.suspend and not status.get("currentRun"):
            book = RunBook.from_status(status)
            return book.next_run_at is None or self.clock.now() >= book.next_run_at
        return await steer.check(state.frontier, policy, state.memory, suspended=spec.suspend)

    async def _reconcile(
        self,
        body: kopf.Body,
        ref: JobRef,
        spec: CrawlJobSpec,
        policy: FleetPolicy,
        backend: KubeBackend,
        state: JobState,
        status: kopf.Status,
        meta: kopf.Meta,
        patch: kopf.Patch,
    ) -> None:
        now = _now()
        generation = meta.get("generation")
        selector = children.selector_string(children.worker_selector(ref))
        deployment = backend.deployment
        if deployment is None:
            return  # not made yet by ensure(), or not seen by the watch yet
        current, ready = deployment.replicas, deployment.ready
        if status.get("phase") in ("Succeeded", "Failed"):
            await self._finished(body, ref, spec, state, status, current)
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
        memory = state.memory or dataclasses.replace(
            FleetMemory.from_mapping(status.get("fleet")) or FleetMemory(replicas=current),
            frontier_epoch=status.get("frontierEpoch"),
        )
        unsafe: str | None = None
        try:
            opened = await self._frontier(ref, spec, state, policy, memory)
        except UnsafeRedis as error:  # it could evict the frontier's keys: never run on it
            opened, unsafe = None, str(error)
        if unsafe != state.redis_refused:
            if unsafe is not None and status.get("message") != unsafe:
                kopf.warn(body, reason="RedisRefused", message=unsafe)
            state.redis_refused = unsafe
        if opened is None:
            seen = Observed(
                phase="Pending",
                redis_ready=False,
                desired_replicas=0,
                replicas=current,
                ready_replicas=ready,
                stats=None,
                selector=selector,
                pages_per_second=0.0,
                message=unsafe or "waiting for Redis",
            )
            _patch_changed(patch, status, job_status(status, seen, generation=generation, now=now))
            return
        book: RunBook | None = None
        if isinstance(opened, Frontier) and spec.schedule is not None:
            book, memory = await self._look_at_schedule(
                ref, spec, state, opened, backend, status, memory
            )
            _patch_changed(patch, status, book.to_status())
            if book.current is None and not spec.suspend:
                await self._between_runs(
                    ref, spec, state, opened, backend, book, status, patch, memory, generation
                )
                return
        if isinstance(opened, str):  # lost, and the job fails: the tick's decision to make
            done = await steer.frontier_lost(backend, policy, memory, opened, now=time.time())
        else:
            ticked_at = time.time()
            done = await steer.tick(
                opened,
                backend,
                policy,
                memory,
                now=ticked_at,
                suspended=spec.suspend,
                seeds=self._seeds_of(ref, spec, state),
                seeds_hash=await self._seeds_hash(ref, spec, state),
                pages_per_second=state.pages_per_second or None,
                reachable_since=state.reachable_since(ticked_at),
            )
            if state.redis_away:
                state.redis_away, state.redis_back_at = False, ticked_at
        if done is None:
            return
        state.memory = done.memory
        # Explicit nulls: a merge patch keeps whatever it is not told to drop. bloomNearlyFull
        # has a schema default (false), which the API server fills in: compared and written
        # as false, or every tick would patch a status that did not change.
        remembered = {
            "lowDemandSince": None,
            "idleSince": None,
            "bloomNearlyFull": False,
            "pressureBaseRate": None,
            "workersFailing": None,
            "waiting": None,
            "movingSince": None,
            "stalled": None,
            "suspendedSince": None,
            "suspendExpired": False,
            **done.memory.to_mapping(),
        }
        stored = {
            "bloomNearlyFull": False,
            "suspendExpired": False,
            **dict(status.get("fleet") or {}),
        }
        if {k: v for k, v in remembered.items() if v is not None} != stored:  # strings exactly
            patch.status["fleet"] = remembered
        stats, decision = done.stats, done.decision
        desired = decision.desired_replicas
        phase: Phase = decision.phase
        if spec.schedule is not None and book is not None and book.current is not None:
            ended: Literal["Succeeded", "Failed"] | None = (
                "Succeeded"
                if decision.complete
                else "Failed"
                if decision.phase == "Failed"
                else None
            )
            if ended is not None and isinstance(opened, Frontier):
                book = await run_ended(
                    opened, backend, spec.schedule, book, stats, outcome=ended, now=self.clock.now()
                )
                _patch_changed(patch, status, book.to_status())
                phase = "Scheduled" if ended == "Succeeded" else phase
        if stats is None:  # the frontier is lost: nothing of it to report but that
            await self._lost(ref, spec, state, done, status, patch, current, ready, generation)
            return
        event = steer.output_event(done.output_blocked, state.output_blocked)
        if event is not None:
            state.output_blocked = bool(done.output_blocked)
            await backend.record(event)
        self._rate(state, stats.crawled)
        freshness = Freshness.of(stats, now=time.time()) if spec.recrawl else None
        seen = Observed(
            phase=phase,
            redis_ready=True,
            desired_replicas=desired,
            replicas=desired if done.scaled else current,
            ready_replicas=ready,
            stats=stats,
            selector=selector,
            pages_per_second=state.pages_per_second,
            message=_message(phase, stats, desired, book)
            if decision.workers_failing is None
            else f"workers failing: {decision.workers_failing.summary}",
            scaled=done.scaled,
            output=state.output,
            output_blocked=done.output_blocked,
            frontier_epoch=done.memory.frontier_epoch,
            frontier_shards=opened.settings.shards if isinstance(opened, Frontier) else None,
            frontier_memory=done.frontier_memory,
            pressure=decision.pressure,
            bloom_capacity=spec.dedup.capacity,
            bloom_nearly_full=decision.bloom_nearly_full,
            workers_failing=decision.workers_failing,
            waiting=done.waiting,
            stall=done.stall,
            freshness=freshness,
            files=done.files,
            local_dedup_hit_rate=done.link_checks.hit_rate,
            rate_limited=done.memory.rate_limited_pause_since is not None,
        )
        _patch_changed(patch, status, job_status(status, seen, generation=generation, now=now))
        self._observe(ref, phase, stats, desired, ready)
        if freshness is not None:
            self.metrics.freshness(ref.namespace, ref.name, freshness)
        if done.files is not None:
            self.metrics.files(ref.namespace, ref.name, done.files)
        self.metrics.motion(ref.namespace, ref.name, done.waiting, done.stall)
        self.metrics.link_checks(ref.namespace, ref.name, done.link_checks)
        self.metrics.frontier(
            ref.namespace,
            ref.name,
            stats,
            done.frontier_memory,
            decision.pressure,
            spec.dedup.capacity,
        )

    async def _look_at_schedule(
        self,
        ref: JobRef,
        spec: CrawlJobSpec,
        state: JobState,
        frontier: Frontier,
        backend: KubeBackend,
        status: kopf.Status,
        memory: FleetMemory,
    ) -> tuple[RunBook, FleetMemory]:
        """One look at a scheduled job's schedule (crawlfleet.fleet.recurring): a run begun,
        skipped or cancelled, each with its Event. A run begun starts the fleet's memory afresh
        (its idle clock would complete it at once)."""
        schedule = spec.schedule
        assert schedule is not None
        view = await backend.observe()
        took = await schedule_step(
            frontier,
            backend,
            schedule,
            RunBook.from_status(status),
            now=self.clock.now(),
            suspended=spec.suspend,
            workers_gone=view is not None and not view.units,
            seeds=self._seeds_of(ref, spec, state),
        )
        if took.started is not None:
            memory = state.memory = fresh_memory(memory, await self._seeds_hash(ref, spec, state))
        return took.book, memory

    async def _between_runs(
        self,
        ref: JobRef,
        spec: CrawlJobSpec,
        state: JobState,
        frontier: Frontier,
        backend: KubeBackend,
        book: RunBook,
        status: kopf.Status,
        patch: kopf.Patch,
        memory: FleetMemory,
        generation: int | None,
    ) -> None:
        """A scheduled job between runs: no workers (scaled to 0, the last run's drain), the
        last run's counters, and when the next run is."""
        deployment = backend.deployment
        assert deployment is not None
        scaled = deployment.replicas != 0
        if scaled:
            await backend.scale(0)
        state.memory = dataclasses.replace(memory, replicas=0)
        stats = await frontier.stats()
        seen = Observed(
            phase="Scheduled",
            redis_ready=True,
            desired_replicas=0,
            replicas=0 if scaled else deployment.replicas,
            ready_replicas=deployment.ready,
            stats=stats,
            selector=children.selector_string(children.worker_selector(ref)),
            pages_per_second=0.0,
            message=_between_runs_message(book),
            scaled=scaled,
            output=state.output,
            frontier_epoch=state.memory.frontier_epoch,
            frontier_shards=frontier.settings.shards,
            bloom_capacity=spec.dedup.capacity,
        )
        now = _now()
        _patch_changed(patch, status, job_status(status, seen, generation=generation, now=now))
        self._observe(ref, "Scheduled", stats, 0, deployment.ready)

    async def _lost(
        self,
        ref: JobRef,
        spec: CrawlJobSpec,
        state: JobState,
        done: steer.Tick,
        status: kopf.Status,
        patch: kopf.Patch,
        current: int,
        ready: int,
        generation: int | None,
    ) -> None:
        """The tick found the frontier lost: Failed, or (Reseed) opened anew next tick."""
        decision = done.decision
        self.metrics.frontier_lost.inc()
        if decision.reopen:
            await state.disconnect()  # the next tick opens a new frontier, and seeds it
            message = f"frontier lost: {decision.lost}; re-seeding (redis.onLoss: Reseed)"
        else:
            message = (
                f"frontier lost: {decision.lost}; the job fails (redis.onLoss: Fail): set"
                " redis.onLoss: Reseed to crawl it again from the seeds"
            )
        seen = Observed(
            phase=decision.phase,
            redis_ready=True,
            desired_replicas=decision.desired_replicas,
            replicas=decision.desired_replicas if done.scaled else current,
            ready_replicas=ready,
            stats=None,
            selector=children.selector_string(children.worker_selector(ref)),
            pages_per_second=0.0,
            message=message,
            scaled=done.scaled,
            output=state.output,
            frontier_lost=message,
            frontier_epoch=done.memory.frontier_epoch,
            bloom_capacity=spec.dedup.capacity,
        )
        _patch_changed(patch, status, job_status(status, seen, generation=generation, now=_now()))
        self.metrics.set_phase(ref.namespace, ref.name, decision.phase)

    async def _finished(
        self,
        body: kopf.Body,
        ref: JobRef,
        spec: CrawlJobSpec,
        state: JobState,
        status: kopf.Status,
        current: int,
    ) -> None:
        """A finished job keeps its Redis (the results' index) and no workers.

        Its phase is terminal, as a Kubernetes Job's is: seeds added to it are not crawled,
        and a SeedsIgnored warning says so, once per change of the list (per operator
        process: a restart may say it once more).
        """
        if current:
            await self.kube.scale_deployment(ref.namespace, ref.names.workers, 0)
        seeded = (status.get("fleet") or {}).get("seedsHash")
        seeds_now = await self._seeds_hash(ref, spec, state)
        if seeded and seeds_now not in (seeded, state.seeds_ignored):
            state.seeds_ignored = seeds_now
            kopf.warn(
                body,
                reason="SeedsIgnored",
                message=f"the seed list changed after the job {status.get('phase')}: a"
                " finished job is not started again; create a new CrawlJob with the new seeds",
            )
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
            weight = 0.25 if state.pages_per_second else 1.0  # the first reading alone
            state.pages_per_second = (1 - weight) * state.pages_per_second + weight * instant
        state.last_crawled, state.last_time = crawled, now

    def _observe(
        self, ref: JobRef, phase: str, stats: FrontierStats, desired: int, ready: int
    ) -> None:
        labels = (ref.namespace, ref.name)
        self.metrics.set_phase(ref.namespace, ref.name, phase)
        self.metrics.queued.labels(*labels).set(stats.queued + stats.delayed)
        self.metrics.in_flight.labels(*labels).set(stats.leased)
        self.metrics.crawled.labels(*labels).set(stats.crawled)
        self.metrics.desired.labels(*labels).set(desired)
        self.metrics.ready.labels(*labels).set(ready)

    async def _frontier(
        self,
        ref: JobRef,
        spec: CrawlJobSpec,
        state: JobState,
        policy: FleetPolicy | None = None,
        memory: FleetMemory | None = None,
    ) -> Frontier | str | None:
        """The job's frontier (None: Redis not reachable yet), or what was found instead.

        A string is a lost frontier's story (``redis.onLoss: Fail``), for the tick to judge;
        :class:`UnsafeRedis` (a Redis that may evict keys) is raised for the caller to show.
        """
        if state.frontier is not None:
            return state.frontier
        url = await self._redis_url(ref, spec, state.owner["metadata"]["uid"])
        if url is None:
            return None
        settings = FrontierSettings.from_spec(f"{ref.namespace}.{ref.name}", spec)
        try:
            if policy is None or memory is None:  # not steering: cleanup
                state.frontier = await Frontier.connect(url, settings)
            else:
                state.frontier = await steer.open_frontier(
                    url, settings, policy=policy, memory=memory
                )
        except FrontierLost as error:
            return str(error)
        except UnsafeRedis:
            raise
        except (FrontierError, ValueError) as error:  # ValueError: a URL redis cannot parse
            log.info("Redis of %s/%s not reachable yet: %s", ref.namespace, ref.name, error)
            state.redis_away = True
            return None
        return state.frontier

    async def _redis_url(self, ref: JobRef, spec: CrawlJobSpec, owner_uid: str) -> str | None:
        """Where the operator reaches the job's Redis.

        A managed Redis by its Service's cluster IP: no dependence on cluster DNS, and the
        address is stable for the Service's life. Workers use the Service's DNS name. Both
        from the job's own Secret and Service only (not an object put under their names).
        """
        redis = spec.redis
        if redis.url is not None:
            # Never a host outside the policy, here too: cleanup connects whatever ensure() said.
            allowed = self.policy.redis_url_problem(REDIS_URL_FIELD, redis.url) is None
            return redis.url if allowed else None
        if redis.secret_ref is not None:
            # Only a Secret the policy lets the job use, here too: cleanup reads it to remove
            # the job's keys, whatever ensure() decided.
            use = SecretUse(REDIS_SECRET_FIELD, redis.secret_ref.name)
            if self.policy.secret_problem(use, await self._secret_labels(ref, use)) is not None:
                return None
            url = await self.kube.secret_value(
                ref.namespace, redis.secret_ref.name, redis.secret_ref.key
            )
            if url is None or self.policy.redis_url_problem(REDIS_SECRET_FIELD, url) is not None:
                return None
            return url
        names = ref.names
        password = await self.kube.secret_value(
            ref.namespace, names.redis_secret, "password", owner_uid=owner_uid
        )
        address = await self.kube.service_cluster_ip(
            ref.namespace, names.redis, owner_uid=owner_uid
        )
        if password is None or address is None:
            return None
        return f"redis://:{password}@{address}:{children.REDIS_PORT}/0"

    # -- the fast path -----------------------------------------------------------------

    async def worker_deployment_event(
        self,
        body: kopf.Body,
        namespace: str | None,
        labels: kopf.Labels,
        **_: Any,
    ) -> None:
        """A worker Deployment changed its replicas or readiness: reconcile its job now."""
        state = self.jobs.get((namespace or "", labels[children.LABEL_JOB]))
        if state is None:
            return
        info = DeploymentInfo.of(body.spec, body.status)
        if state.deployment != info:
            state.deployment, state.dirty = info, True

    async def worker_pod_event(
        self,
        event: Mapping[str, Any],
        body: kopf.Body,
        name: str,
        namespace: str | None,
        labels: kopf.Labels,
        **_: Any,
    ) -> None:
        """A worker pod gone or failed: its leases go back now, not at the next tick."""
        gone = event.get("type") == "DELETED"
        if not (gone or body.status.get("phase") in ("Failed", "Succeeded")):
            return
        state = self.jobs.get((namespace or "", labels[children.LABEL_JOB]))
        if state is None:
            return
        state.dirty = True
        if state.frontier is None:
            return  # the next tick sees its heartbeat without a pod and requeues then
        backend = KubeBackend(
            self.kube, _ref(state.owner), state.owner, (), None, metrics=self.metrics
        )
        try:
            await steer.requeue_unit(state.frontier, backend, name, "gone" if gone else "exited")
        except (FrontierError, OSError) as error:
            log.warning("requeue for pod %s/%s failed: %s", namespace, name, error)

    # -- deletion ----------------------------------------------------------------------

    async def cleanup(self, body: kopf.Body, spec: kopf.Spec, **indices: Any) -> None:
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
        worker_pods: PodIndex = indices["worker_pods"]
        if external and worker_pods.get((ref.namespace, ref.label)):
            try:
                await self.kube.scale_deployment(ref.namespace, ref.names.workers, 0)
            except KubeError as error:
                raise _retry_later(error) from error
            raise kopf.TemporaryError(
                "waiting for the workers to stop before removing the job's keys", delay=2
            )
        state = self.jobs.pop((ref.namespace, ref.label), None)
        self.metrics.set_phase(ref.namespace, ref.name, None)
        try:
            if external and parsed is not None:
                await self._remove_keys(ref, parsed, state, body)
        except KubeError as error:  # reading the Redis URL's Secret
            raise _retry_later(error) from error
        except FrontierError as error:
            raise kopf.TemporaryError(f"removing the job's keys: {error}", delay=5) from error
        finally:
            if state is not None:
                await state.disconnect()

    async def _remove_keys(
        self, ref: JobRef, spec: CrawlJobSpec, state: JobState | None, body: kopf.Body
    ) -> None:
        frontier = state.frontier if state else None
        if frontier is None:
            try:
                opened = await self._frontier(ref, spec, JobState(owner=_owner(body)))
            except UnsafeRedis as error:  # the job never ran there: nothing of it to remove
                log.warning("Redis of %s/%s refused: %s", ref.namespace, ref.name, error)
                return
            frontier = opened if isinstance(opened, Frontier) else None
        if frontier is None:
            log.warning("Redis of %s/%s unreachable: its keys stay there", ref.namespace, ref.name)
            return
        removed = await frontier.delete()
        log.info("removed %d keys of %s/%s", removed, ref.namespace, ref.name)
        await frontier.aclose()
        if state is not None:
            state.frontier = None


#: The status of a job that must not run, by the condition that says why.
_MARKS: Final = {
    "InvalidSpec": invalid_spec_status,
    "OutputNotDurable": output_not_durable_status,
    "ChildConflict": child_conflict_status,
}


def _networks(texts: tuple[str, ...], source: str) -> tuple[str, ...]:
    """CIDRs in their canonical spelling; one that does not parse is a ConfigError."""
    try:
        return tuple(str(ipaddress.ip_network(text, strict=False)) for text in texts)
    except ValueError as error:
        raise ConfigError(f"{source}: {error}") from None


def _patch_changed(patch: kopf.Patch, status: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Put into the status patch only what differs: an unchanged status costs no API call."""
    for key, value in new.items():
        if status.get(key) != value:
            patch.status[key] = value


def _retry_later(error: KubeError) -> kopf.TemporaryError:
    """The decision for an API error: retry soon when waiting helps, else in a minute.

    Throttling (429, with the server's Retry-After), a server error or no answer: seconds.
    Anything else (a 403 from RBAC, say) needs a person, so kopf retries it slowly and logs
    the one line, not a traceback.
    """
    delay = error.retry_after_seconds or (5.0 if error.transient else 60.0)
    return kopf.TemporaryError(f"Kubernetes API: {error}", delay=delay)


def _message(phase: str, stats: FrontierStats, desired: int, book: RunBook | None = None) -> str:
    if phase == "Scheduled" and book is not None:
        return _between_runs_message(book)
    if phase == "Succeeded":
        return f"complete: {stats.crawled} pages crawled, {stats.dead} dead-lettered"
    if phase == "Suspended":
        return f"suspended with {stats.queued + stats.delayed} URLs queued"
    return (
        f"{stats.crawled} crawled, {stats.queued + stats.delayed} queued, "
        f"{stats.leased} in flight, {desired} workers wanted"
    )


def _between_runs_message(book: RunBook) -> str:
    """A scheduled job between runs, in words: when the next run is, how the last one went."""
    when = "" if book.next_run_at is None else rfc3339(book.next_run_at)
    text = f"next run at {when}" if when else "waiting for the schedule"
    last = book.history[0] if book.history else None
    if last is not None:
        text += (
            f"; run {last.id} {last.outcome.lower()}: {last.pages} pages, {last.changed}"
            f" changed, {last.unchanged} unchanged"
        )
    return text
