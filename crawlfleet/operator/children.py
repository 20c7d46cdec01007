"""The objects a CrawlJob owns, as plain manifests: pure functions of the job, unit-tested.

Names are fixed per job (``<job>-redis``, ``<job>-workers``, …) so every reconcile finds what
an earlier one made, across operator restarts, without a lookup table. A CrawlJob's name may
be a 253-character DNS subdomain while Service names and label values stop at 63, so long
names are shortened with a hash of the full name (``child_name``), the way StatefulSet and
Job controllers shorten theirs.

The operator adopts each object (ownerReference to the CrawlJob) before it creates it, so
deleting the job deletes its children through the garbage collector. A fixed name is where a
child is looked for, not proof that it is the job's: an object found there is changed only if
its controller reference is the job (operator/ownership.py).
"""

from __future__ import annotations

import hashlib
import ipaddress
import urllib.parse
from dataclasses import dataclass
from typing import Any, Final

import yaml

from crawlfleet.config import DrainConfig
from crawlfleet.crawljob import API_VERSION, KIND, CrawlJobSpec, ManagedRedis
from crawlfleet.networks import METADATA_ADDRESSES, PRIVATE_NETWORKS
from crawlfleet.proxies import PROXY_ENV, parse_proxy

__all__ = [
    "METRICS_PORT",
    "REDIS_PORT",
    "TERMINATION_LOG",
    "ChildNames",
    "JobRef",
    "config_map",
    "external_redis_secret",
    "metrics_service",
    "network_policy",
    "output_secret",
    "redis_deployment",
    "redis_pvc",
    "redis_secret",
    "redis_service",
    "selector_string",
    "worker_deployment",
    "worker_egress_policy",
    "worker_selector",
]

Manifest = dict[str, Any]

REDIS_PORT: Final = 6379
METRICS_PORT: Final = 9100
JOB_FILE: Final = "/etc/crawlfleet/job.yaml"
OUTPUT_DIR: Final = "/data/out"
#: The container's terminationMessagePath (Kubernetes' default): why a worker stopped.
TERMINATION_LOG: Final = "/dev/termination-log"
NONROOT_UID: Final = 65532

LABEL_JOB: Final = "crawlfleet.io/job"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
ANNOTATION_SPEC_HASH: Final = "crawlfleet.io/spec-hash"


@dataclass(frozen=True, slots=True)
class JobRef:
    """The CrawlJob a child belongs to: enough to name, label and select its objects."""

    namespace: str
    name: str

    @property
    def label(self) -> str:
        """The job's name as a label value (at most 63 characters)."""
        return child_name(self.name, "")

    @property
    def names(self) -> ChildNames:
        return ChildNames.of(self.name)


def child_name(job: str, suffix: str, limit: int = 63) -> str:
    """``<job>-<suffix>`` within ``limit`` characters, a valid DNS-1035 label.

    Too long: the job part is cut and a hash of the whole name keeps it unique. A name that
    starts with a digit (allowed for CrawlJobs, not for Services) gets a ``cj-`` prefix.
    """
    tail = f"-{suffix}" if suffix else ""
    name = f"{job}{tail}"
    if not name[0].isalpha():
        name = f"cj-{name}"
    if len(name) <= limit and "." not in name:
        return name
    digest = hashlib.sha256(job.encode()).hexdigest()[:8]
    keep = limit - len(tail) - len(digest) - 1
    head = name[: len(name) - len(tail)][:keep].replace(".", "-").rstrip("-")
    return f"{head}-{digest}{tail}"


@dataclass(frozen=True, slots=True)
class ChildNames:
    redis: str
    redis_secret: str
    workers: str
    config: str
    network_policy: str
    metrics: str
    redis_data: str
    output_secret: str
    worker_egress: str

    @classmethod
    def of(cls, job: str) -> ChildNames:
        return cls(
            redis=child_name(job, "redis"),
            redis_secret=child_name(job, "redis-auth"),
            workers=child_name(job, "workers"),
            config=child_name(job, "config"),
            network_policy=child_name(job, "redis-access"),
            metrics=child_name(job, "metrics"),
            redis_data=child_name(job, "redis-data"),
            output_secret=child_name(job, "output"),
            worker_egress=child_name(job, "worker-egress"),
        )


def _labels(job: JobRef, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "crawlfleet",
        "app.kubernetes.io/instance": job.label,
        LABEL_COMPONENT: component,
        "app.kubernetes.io/managed-by": "crawlfleet-operator",
        LABEL_JOB: job.label,
    }


def _selector(job: JobRef, component: str) -> dict[str, str]:
    return {LABEL_JOB: job.label, LABEL_COMPONENT: component}


def worker_selector(job: JobRef) -> dict[str, str]:
    """The worker pods' selector (also the scale subresource's, as a string)."""
    return _selector(job, "worker")


def selector_string(labels: dict[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _meta(job: JobRef, name: str, component: str) -> Manifest:
    return {"name": name, "namespace": job.namespace, "labels": _labels(job, component)}


_RESTRICTED_CONTAINER: Final[Manifest] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}


def _restricted_pod(uid: int) -> Manifest:
    """The Pod Security Standards' "restricted" profile, which both our pods meet."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


# -- Redis ---------------------------------------------------------------------------------


#: Where the managed Redis finds its password: a Secret mounted as a file it ``include``s.
REDIS_AUTH_DIR: Final = "/etc/redis-auth"
REDIS_AUTH_FILE: Final = "auth.conf"
#: The Secret's keys: the password (for clients) and the config line Redis includes.
SECRET_PASSWORD: Final = "password"
SECRET_URL: Final = "url"


def _redis_secret(job: JobRef, data: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(job, job.names.redis_secret, "redis"),
        "type": "Opaque",
        "stringData": data,
    }


def redis_secret(job: JobRef, password: str) -> Manifest:
    """The managed Redis's password, and everything derived from it.

    Generated once and never rotated by a reconcile. Redis reads ``requirepass`` from the
    mounted ``auth.conf`` (an ``include``), so the password is in no argv and no ConfigMap;
    the workers read ``url`` through a secretKeyRef, the readiness probe ``password``.
    """
    host = f"{job.names.redis}.{job.namespace}.svc"
    return _redis_secret(
        job,
        {
            SECRET_PASSWORD: password,
            REDIS_AUTH_FILE: f"requirepass {password}\n",
            SECRET_URL: f"redis://:{password}@{host}:{REDIS_PORT}/0",
        },
    )


def external_redis_secret(job: JobRef, url: str) -> Manifest:
    """``redis.url`` copied into a Secret: a URL may hold a password, a pod spec must not."""
    return _redis_secret(job, {SECRET_URL: url})


def _redis_args(managed: ManagedRedis) -> list[str]:
    """redis-server's command line: no secret in it (the password comes from the include).

    The append-only file is fsynced every second and is the only persistence (no RDB
    snapshots); ``maxmemory`` is a share of the container's limit with ``noeviction``, so a
    full Redis refuses writes instead of dropping queued URLs, and the fleet's backpressure
    keeps it from getting there.
    """
    return [
        "--include", f"{REDIS_AUTH_DIR}/{REDIS_AUTH_FILE}",
        "--port", str(REDIS_PORT),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--dir", "/data",
        "--save", "",
        "--maxmemory", str(managed.max_memory_bytes),
        "--maxmemory-policy", "noeviction",
    ]  # fmt: skip


#: Ready once Redis answers an authenticated PING: not while it loads its append-only file
#: (it answers LOADING), not with a wrong password (NOAUTH). redis-cli reads the password from
#: REDISCLI_AUTH, so it is not on the probe's command line either.
#: A worker whose /metrics (served by a thread of its own) does not answer at all is hung:
#: stopped, or wedged with the interpreter's lock held. The kubelet restarts its container
#: without a drain (a hung process cannot drain; 2 s, not the pod's whole drain budget), and
#: the new incarnation's heartbeat tells the operator to requeue the old one's leases. A loop
#: that hangs while the thread still answers is the operator's to find: its heartbeat stops.
_WORKER_LIVENESS: Final[Manifest] = {
    "httpGet": {"path": "/metrics", "port": "metrics"},
    "periodSeconds": 5,
    "timeoutSeconds": 3,
    "failureThreshold": 3,
    "terminationGracePeriodSeconds": 2,
}

_REDIS_READINESS: Final[Manifest] = {
    "exec": {
        "command": [
            "sh",
            "-c",
            f"redis-cli -h 127.0.0.1 -p {REDIS_PORT} ping | grep -q PONG",
        ]
    },
    "periodSeconds": 2,
    "timeoutSeconds": 2,
}


def redis_deployment(job: JobRef, spec: CrawlJobSpec) -> Manifest:
    """One Redis, its data on the job's claim (or an emptyDir when persistence is off).

    A Deployment of one replica with the Recreate strategy, not a StatefulSet: the old pod is
    gone before the new one starts, so a ReadWriteOnce claim is never wanted by two pods at
    once (a rolling update would wait forever for the new pod to mount it), and the claim is
    an object of the CrawlJob's own, deleted with the job and kept across every Redis pod.
    docs/operations.md says more.
    """
    managed = spec.redis.managed
    assert managed is not None, "only managed Redis gets a Deployment"
    names = job.names
    labels = _labels(job, "redis")
    volume: Manifest = (
        {"name": "data", "persistentVolumeClaim": {"claimName": names.redis_data}}
        if managed.persistence.enabled
        else {"name": "data", "emptyDir": {}}
    )
    auth_volume: Manifest = {
        "name": "auth",
        "secret": {
            "secretName": names.redis_secret,
            "items": [{"key": REDIS_AUTH_FILE, "path": REDIS_AUTH_FILE}],
            "defaultMode": 0o440,
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(job, names.redis, "redis"),
        "spec": {
            "replicas": 1,
            # One writer to the AOF: never two pods on one volume during a rollout.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": _selector(job, "redis")},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": _restricted_pod(999),
                    "containers": [
                        {
                            "name": "redis",
                            "image": managed.image,
                            "command": ["redis-server"],
                            "args": _redis_args(managed),
                            "env": [
                                _secret_env("REDISCLI_AUTH", names.redis_secret, SECRET_PASSWORD)
                            ],
                            "ports": [{"name": "redis", "containerPort": REDIS_PORT}],
                            "readinessProbe": _REDIS_READINESS,
                            "securityContext": _RESTRICTED_CONTAINER,
                            "resources": {
                                "requests": {"cpu": "100m", "memory": managed.memory_request},
                                "limits": {"memory": managed.memory_limit},
                            },
                            "volumeMounts": [
                                {"name": "data", "mountPath": "/data"},
                                {"name": "auth", "mountPath": REDIS_AUTH_DIR, "readOnly": True},
                            ],
                        }
                    ],
                    "volumes": [volume, auth_volume],
                },
            },
        },
    }


def redis_pvc(job: JobRef, spec: CrawlJobSpec) -> Manifest | None:
    managed = spec.redis.managed
    if managed is None or not managed.persistence.enabled:
        return None
    pvc_spec: Manifest = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": managed.persistence.size}},
    }
    if managed.persistence.storage_class_name:
        pvc_spec["storageClassName"] = managed.persistence.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(job, job.names.redis_data, "redis"),
        "spec": pvc_spec,
    }


def redis_service(job: JobRef) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(job, job.names.redis, "redis"),
        "spec": {
            "selector": _selector(job, "redis"),
            "ports": [{"name": "redis", "port": REDIS_PORT, "targetPort": "redis"}],
        },
    }


def network_policy(
    job: JobRef, operator_labels: dict[str, str], operator_namespace: str | None
) -> Manifest:
    """Only the job's own workers and the operator may open the managed Redis.

    The operator is matched by its namespace's name (``kubernetes.io/metadata.name``, a label
    only the API server sets) and its labels: labels alone admit any pod that copies them, in
    any namespace. An operator that does not know its namespace (run outside the cluster) is
    no pod to admit.
    """
    sources: list[Manifest] = [{"podSelector": {"matchLabels": worker_selector(job)}}]
    if operator_namespace:
        sources.append(
            {
                "podSelector": {"matchLabels": operator_labels},
                "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator_namespace}},
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(job, job.names.network_policy, "redis"),
        "spec": {
            "podSelector": {"matchLabels": _selector(job, "redis")},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": sources, "ports": [{"protocol": "TCP", "port": REDIS_PORT}]}],
        },
    }


#: The label the API server gives every namespace: its name, which no tenant can choose.
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
_EVERYWHERE: Final = ("0.0.0.0/0", "::/0")


def _anywhere(*ports: tuple[str, int]) -> Manifest:
    """``ports`` at any address, a pod of the cluster included (an ipBlock may not match pods)."""
    return {
        "to": [{"namespaceSelector": {}}, *({"ipBlock": {"cidr": c}} for c in _EVERYWHERE)],
        "ports": [{"protocol": protocol, "port": port} for protocol, port in ports],
    }


def _port_of(url: str, default: int) -> int:
    try:
        return urllib.parse.urlsplit(url).port or default
    except ValueError:
        return default


def worker_egress_policy(
    job: JobRef,
    spec: CrawlJobSpec,
    cluster_cidrs: tuple[str, ...],
    proxy_ports: tuple[int, ...] = (),
) -> Manifest:
    """Where the job's workers may connect: the web, DNS, their Redis and their output store.

    Without ``scope.allowPrivateNetworks`` the cluster's own ranges (``cluster_cidrs``: pods,
    Services, nodes) and the private ones are out of reach: the crawler's address guard
    refuses them too, this is the network's second net for the day the process is wrong.
    With it, only the metadata addresses stay out (as in the guard). DNS (port 53) is open
    everywhere, the managed Redis by its pods, an external Redis and an s3 endpoint by their
    port at any address (their names resolve only in the pod; a Redis URL in a Secret is
    taken to be on 6379). Proxies that ``proxy.allowPrivate`` lets be private (a proxy in the
    cluster) are admitted the same way, by their ports: those of ``proxy.urls`` and
    ``proxy_ports``, the ones the operator read in the proxy Secret.
    """
    metadata = [f"{ip}/{ip.max_prefixlen}" for ip in sorted(METADATA_ADDRESSES, key=str)]
    denied = metadata
    if not spec.scope.allow_private_networks:
        denied = [*PRIVATE_NETWORKS, *cluster_cidrs, *metadata]
    web: list[Manifest] = []
    for everywhere in _EVERYWHERE:
        version = ipaddress.ip_network(everywhere).version
        excepted = [c for c in denied if ipaddress.ip_network(c, strict=False).version == version]
        web.append({"ipBlock": {"cidr": everywhere, "except": excepted}})
    rules: list[Manifest] = [
        {"to": web},
        _anywhere(("UDP", 53), ("TCP", 53)),
    ]
    if spec.redis.managed is not None:
        rules.append(
            {
                "to": [{"podSelector": {"matchLabels": _selector(job, "redis")}}],
                "ports": [{"protocol": "TCP", "port": REDIS_PORT}],
            }
        )
    else:
        rules.append(_anywhere(("TCP", _port_of(spec.redis.url or "", REDIS_PORT))))
    s3 = spec.output.s3
    if s3 is not None and s3.endpoint is not None:
        secure = s3.endpoint.startswith("https:")
        rules.append(_anywhere(("TCP", _port_of(s3.endpoint, 443 if secure else 80))))
    if spec.proxy is not None and spec.proxy.allow_private:
        ports = {*proxy_ports, *(parse_proxy(url).port for url in spec.proxy.urls)}
        if ports:
            rules.append(_anywhere(*(("TCP", port) for port in sorted(ports))))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(job, job.names.worker_egress, "worker"),
        "spec": {
            "podSelector": {"matchLabels": worker_selector(job)},
            "policyTypes": ["Egress"],
            "egress": rules,
        },
    }


# -- workers -------------------------------------------------------------------------------


def job_document(job: JobRef, spec: CrawlJobSpec) -> str:
    """The CrawlJob as a worker reads it: every default filled, so all workers agree.

    A ConfigMap is no place for a secret: ``redis.url`` (which may hold a password) becomes a
    reference to the Secret the operator copied it into. Workers take their Redis from
    ``CRAWLFLEET_REDIS_URL`` anyway; the job file only says where it comes from.
    """
    mapping = spec.to_mapping()
    if spec.redis.url is not None:
        redis = dict(mapping["redis"])  # type: ignore[arg-type]
        del redis["url"]
        redis["secretRef"] = {"name": job.names.redis_secret, "key": SECRET_URL}
        mapping["redis"] = redis
    document = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job.name, "namespace": job.namespace},
        "spec": mapping,
    }
    return yaml.safe_dump(document, sort_keys=True)


def config_map(job: JobRef, spec: CrawlJobSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(job, job.names.config, "worker"),
        "data": {"job.yaml": job_document(job, spec)},
    }


def spec_hash(job: JobRef, spec: CrawlJobSpec) -> str:
    """Changes when the workers' job file does, so a spec edit rolls the worker pods.

    The seeds alone do not count: a fleet's workers never seed (the tick does), so seeds added
    to a running job (``crawlfleet enqueue``) do not restart its fleet. The scope they imply
    (``allowedDomains``, the seed hosts by default) is filled in the document and does count.
    """
    unseeded = spec.model_copy(update={"seeds": ()})
    return hashlib.sha256(job_document(job, unseeded).encode()).hexdigest()[:16]


def _secret_env(name: str, secret: str, key: str) -> Manifest:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _redis_env(job: JobRef, spec: CrawlJobSpec) -> list[Manifest]:
    """``CRAWLFLEET_REDIS_URL`` for the worker, built without a secret in the pod spec."""
    names = job.names
    if spec.redis.secret_ref is not None:
        ref = spec.redis.secret_ref
        return [_secret_env("CRAWLFLEET_REDIS_URL", ref.name, ref.key)]
    return [_secret_env("CRAWLFLEET_REDIS_URL", names.redis_secret, SECRET_URL)]


def output_secret(job: JobRef, credentials: dict[str, str]) -> Manifest:
    """The operator's default output credentials, copied for one job: a pod can only take
    env from a Secret in its own namespace. Owned by the job, so deleted with it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(job, job.names.output_secret, "worker"),
        "type": "Opaque",
        "stringData": credentials,
    }


#: The keys of an output credentials Secret, by the AWS variable names the workers read.
OUTPUT_SECRET_KEYS: Final = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def _output_env(spec: CrawlJobSpec) -> list[Manifest]:
    """The output's credentials as env from its Secret (never in the ConfigMap or argv), and
    where files bound for a bucket are spooled (the pod's /tmp emptyDir)."""
    env: list[Manifest] = [{"name": "CRAWLFLEET_SPOOL_DIR", "value": "/tmp/crawlfleet-spool"}]
    s3 = spec.output.s3
    if s3 is not None and s3.secret_ref is not None:
        for key in OUTPUT_SECRET_KEYS:
            ref: Manifest = {"name": s3.secret_ref.name, "key": key}
            if key == "AWS_SESSION_TOKEN":
                ref["optional"] = True
            env.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
    return env


def _proxy_env(spec: CrawlJobSpec) -> list[Manifest]:
    """``spec.proxy.secretRef``'s proxy list (credentials and all) as the variable the workers
    read, from the Secret: never in the ConfigMap, the argv or the pod spec's values."""
    if spec.proxy is None or spec.proxy.secret_ref is None:
        return []
    ref = spec.proxy.secret_ref
    return [_secret_env(PROXY_ENV, ref.name, ref.key)]


def worker_deployment(
    job: JobRef,
    spec: CrawlJobSpec,
    *,
    replicas: int,
    image: str,
    drain: DrainConfig,
    output_dir: str = OUTPUT_DIR,
) -> Manifest:
    """The worker fleet. ``replicas`` is only the initial count: the operator's timer owns it.

    The pod's termination grace is the worker's whole drain budget (fetches, its last output
    files, loops, the last flush), so a worker told to stop is never killed while it drains as
    designed. ``spec`` is the one the workers read (``operator/output.py`` decides its output);
    ``output_dir`` is their folder when that names no destination.
    """
    names = job.names
    labels = _labels(job, "worker")
    resources = spec.workers.resources or {
        "requests": {"cpu": "250m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }
    output_volume: Manifest = {"name": "output", **(spec.output.volume or {"emptyDir": {}})}
    env: list[Manifest] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "CRAWLFLEET_WORKER_ID", "value": "$(POD_NAME)"},
        {"name": "CRAWLFLEET_METRICS_HOST", "value": "$(POD_IP)"},
        *_redis_env(job, spec),
        *_output_env(spec),
        *_proxy_env(spec),
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(job, names.workers, "worker"),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": worker_selector(job)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        ANNOTATION_SPEC_HASH: spec_hash(job, spec),
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(METRICS_PORT),
                    },
                },
                "spec": {
                    # Workers talk to Redis and the web, never to the Kubernetes API.
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": drain.budget_seconds,
                    "securityContext": _restricted_pod(NONROOT_UID),
                    "containers": [
                        {
                            "name": "worker",
                            "image": image,
                            "command": ["crawlfleet"],
                            "args": [
                                "worker",
                                JOB_FILE,
                                "--out",
                                output_dir,
                                "--metrics-port",
                                str(METRICS_PORT),
                                "--grace-seconds",
                                f"{drain.grace_seconds:g}",
                                # The operator decides when the job is done and scales to 0;
                                # a worker exiting on its own would only be restarted.
                                "--keep-running",
                                # A restarted container is a new worker (POD_NAME#random).
                                "--incarnation",
                                "--termination-log",
                                TERMINATION_LOG,
                            ],
                            # A worker that must stop writes "<Reason>: <sentence>" there;
                            # one that dies without writing it (a traceback) leaves its log's
                            # tail instead: the pod's status says why either way, and the
                            # operator's WorkersFailing condition quotes it.
                            "terminationMessagePath": TERMINATION_LOG,
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "env": env,
                            "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
                            "readinessProbe": {
                                "httpGet": {"path": "/metrics", "port": "metrics"},
                                "periodSeconds": 5,
                            },
                            "livenessProbe": _WORKER_LIVENESS,
                            "securityContext": _RESTRICTED_CONTAINER,
                            "resources": resources,
                            "volumeMounts": [
                                {
                                    "name": "job",
                                    "mountPath": "/etc/crawlfleet",
                                    "readOnly": True,
                                },
                                {"name": "output", "mountPath": "/data"},
                                {"name": "tmp", "mountPath": "/tmp"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "job", "configMap": {"name": names.config}},
                        output_volume,
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }


def metrics_service(job: JobRef) -> Manifest:
    """A headless Service over the workers' /metrics, for a ServiceMonitor or a scrape config."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(job, job.names.metrics, "worker"),
        "spec": {
            "clusterIP": "None",
            "selector": worker_selector(job),
            "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}],
        },
    }
