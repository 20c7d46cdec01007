"""A process kubelet: a test double for the node agent, running containers as local processes.

This machine has no container runtime, so nothing can run a real kubelet. Everything above the
node is real (kube-apiserver, the Deployment, ReplicaSet and garbage-collector controllers);
this double plays the node's part closely enough that those controllers -- and later the
crawlfleet operator -- see what they would see in a cluster, and never a container that did
not run:

- **scheduling**: it binds every unscheduled pod to its Node through the ``pods/binding``
  subresource (the scheduler is not running), unless the pod's containers request more CPU or
  memory than the Node can allocate (``NODE_CPU``, ``NODE_MEMORY``; requests, else limits): such
  a pod stays Pending with ``PodScheduled`` False, reason ``Unschedulable`` and the scheduler's
  message (``0/1 nodes are available: 1 Insufficient cpu. ...``). Only that one filter of the
  scheduler's: no other pod's requests are counted, and affinity and taints are not read. A pod
  whose ``nodeSelector`` does not match the double's Node is left alone: it is for the real
  node (node.py) and its kube-scheduler.
- **containers**: each container becomes a local process, chosen by image from a small table
  (``ImageRule``): ``crawlfleet`` images run ``python -m crawlfleet worker`` (or the container's
  ``crawlfleet``/``python`` command), ``redis`` images run ``redis-server``. An image the table
  does not know leaves the container Waiting with reason ``ErrImagePull`` and a message saying
  so: the pod stays Pending, as with an image that cannot be pulled.
- **network**: each pod gets its own loopback address ``127.P.x.y`` as its pod IP; the process
  is made to listen there (``redis-server --bind``), so container ports stay as declared and two
  pods never fight over a port (P is a ``LoopbackBlock`` this session holds, so no other
  session on the machine uses it). Service cluster IPs are loopback addresses too (the control
  plane's service range is ``127.S.0.0/16``), and the double listens on each ``clusterIP:port``
  and forwards connections to a Ready pod, as kube-proxy's old userspace mode did. So a Service
  address is a real, reachable address. There is no DNS: ``service_address()`` resolves a name
  for tests, and for processes the double rewrites ``<svc>.<ns>.svc[.cluster.local]`` in args
  and env values to the cluster IP at container start, and sets the ``<SVC>_SERVICE_HOST`` /
  ``_PORT`` variables a kubelet sets. EndpointSlices are not written: the API rejects loopback
  endpoint addresses.
- **env**: literal values with ``$(VAR)`` expansion, ``envFrom`` and ``valueFrom`` with
  ``secretKeyRef``, ``configMapKeyRef`` (read through the API; a missing one is a
  ``CreateContainerConfigError``) and the downward API ``fieldRef`` (metadata.name, namespace,
  uid, labels/annotations, spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP).
- **volumes**: ``configMap``, ``secret`` and ``emptyDir`` volumes are written to a directory in
  the pod's sandbox. Nothing can be mounted, so the double substitutes the mount path: every
  arg or env value that starts with a container's ``mountPath`` is rewritten to the local
  directory. Processes run with the sandbox as their cwd and HOME.
- **claims**: a ``persistentVolumeClaim`` volume is the directory of the PersistentVolume its
  claim is bound to, under the double's own directory, so it outlives every pod that mounts
  it: a Redis pod deleted and started again finds its append-only file. The double also plays
  the cluster's dynamic provisioner: for each pending claim it creates a ``hostPath``
  PersistentVolume of the requested size, pre-bound to the claim (``claimRef``), and the real
  PV binder controller binds the two; a volume whose claim is gone (Released) is deleted
  with its directory, as a provisioner's ``Delete`` reclaim policy would. A pod whose claim
  is missing or not Bound yet waits (``CreateContainerConfigError``, retried).
- **status**: phase, pod IP, host IP, conditions (PodScheduled, Initialized, ContainersReady,
  Ready), and per container its state (Running, Terminated with the real exit code, Waiting
  with CrashLoopBackOff), ``restartCount`` and ``containerID: process://<pid>`` (the real PID).
  Readiness honours ``tcpSocket``, ``httpGet`` and ``exec`` readiness probes with their
  delays, periods and failure thresholds; without a probe a running container is ready. An
  ``exec`` probe runs as if inside the container: with its environment, its mount paths
  rewritten, and ``127.0.0.1``/``localhost`` rewritten to the pod IP (the pods share the
  machine's loopback, so a pod's own loopback is its pod IP here).
- **termination messages**: each start of a container gets a fresh, empty file for its
  ``terminationMessagePath`` (default ``/dev/termination-log``; the path in args and env is
  rewritten to it, as a mount path is). When the container exits, what the process wrote
  there (at most 4096 bytes, a kubelet's limit) becomes ``state.terminated.message`` (then
  ``lastState.terminated.message`` once it restarts); with ``terminationMessagePolicy:
  FallbackToLogsOnError`` an empty file and a non-zero exit code give the last 2048 bytes
  (at most 80 lines) of what that run wrote to its log instead, as a kubelet does.
- **restarts**: per ``restartPolicy`` (Always, OnFailure, Never), with back-off doubling from
  ``backoff_base_seconds`` up to ``backoff_max_seconds`` (1 s and 10 s here; a kubelet uses
  10 s and 5 min, too slow for tests).
- **deletion**: on a deletionTimestamp it sends SIGTERM, waits the pod's grace period, sends
  SIGKILL to the process group, and then deletes the pod with grace 0, as a kubelet does.

Not done: init and ephemeral containers (the pod fails to start, with a message), liveness and
startup probes, resource limits, ``kubectl logs``/``exec``/``port-forward`` (there is no kubelet
API; ``logs()`` reads a container's output file), DNS, NetworkPolicy, and isolation of any kind:
the processes are the test's own user on the test's own machine. A process that binds 0.0.0.0
instead of its pod IP shares the machine's ports with every other pod.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from crawlfleet.crawljob.fields import parse_quantity
from tests.e2e.cluster.controlplane import LoopbackBlock
from tests.e2e.cluster.processes import kill_group, spawn, terminate

log = logging.getLogger(__name__)

Json = dict[str, Any]

NODE_IP = "127.0.0.1"
#: What the Node says it can allocate (and the scheduling filter holds pods' requests to).
NODE_CPU = str(os.cpu_count() or 1)
NODE_MEMORY = "8Gi"
SYNC_INTERVAL_SECONDS = 0.2
#: Between syncs that found no pod and no claim at all: most of a suite run (the other test
#: modules, teardown), where four LISTs five times a second kept each API server busy for
#: nothing. The first pod of a test waits at most this long to be bound.
IDLE_SYNC_INTERVAL_SECONDS = 1.0
KILL_GRACE_AT_STOP_SECONDS = 3.0
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
#: A kubelet's limits: a termination file is read up to 4096 bytes; FallbackToLogsOnError
#: takes the last 2048 bytes or 80 lines of the log, whichever is less.
TERMINATION_MESSAGE_MAX_BYTES = 4096
TERMINATION_LOG_TAIL_BYTES = 2048
TERMINATION_LOG_TAIL_LINES = 80


class ContainerStartError(Exception):
    """A container cannot be started; ``reason`` is the kubelet's Waiting reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ImageRule:
    """How the double runs the containers of images whose name contains ``marker``.

    ``entrypoint`` is the local argv used when the container sets no ``command`` (the image's
    ENTRYPOINT); ``programs`` maps a container ``command[0]`` to its local argv prefix;
    ``pod_ip_args`` are appended when the program is ``entrypoint[0]``'s, so the process
    listens on its pod IP (``{pod_ip}`` is substituted).
    """

    marker: str
    entrypoint: tuple[str, ...]
    programs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    pod_ip_args: tuple[str, ...] = ()

    def argv(self, container: Json, pod_ip: str) -> list[str]:
        command = list(container.get("command") or [])
        args = list(container.get("args") or [])
        if not command:
            prefix = list(self.entrypoint)
        elif command[0] in self.programs:
            prefix = [*self.programs[command[0]], *command[1:]]
        else:
            raise ContainerStartError(
                "RunContainerError",
                f"kubelet double: image {container['image']!r} runs no {command[0]!r} here "
                f"(known: {', '.join(sorted(self.programs)) or 'its entrypoint only'})",
            )
        extra = []
        if prefix[:1] == list(self.entrypoint[:1]):
            extra = [arg.format(pod_ip=pod_ip) for arg in self.pod_ip_args]
        return [*prefix, *args, *extra]


_PYTHON = (sys.executable,)
DEFAULT_IMAGES: tuple[ImageRule, ...] = (
    ImageRule(
        marker="crawlfleet",
        entrypoint=(*_PYTHON, "-m", "crawlfleet", "worker"),
        programs={
            "crawlfleet": (*_PYTHON, "-m", "crawlfleet"),
            "python": _PYTHON,
            "python3": _PYTHON,
        },
    ),
    ImageRule(
        marker="redis",
        entrypoint=("redis-server",),
        programs={"redis-server": ("redis-server",)},
        # last, so it wins over a --bind in the pod's args: the pod IP is all this pod owns
        pod_ip_args=("--bind", "{pod_ip}"),
    ),
)


def unschedulable(raw: Json) -> str | None:
    """The scheduler's message for a pod whose containers request more than the Node can
    allocate (a request unset is its limit's, as the API server defaults it), or None."""
    short = []
    for resource, allocatable in (("cpu", NODE_CPU), ("memory", NODE_MEMORY)):
        wanted = Decimal(0)
        for container in raw["spec"]["containers"]:
            resources = container.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            wanted += parse_quantity(requests.get(resource, limits.get(resource, 0))) or 0
        if wanted > (parse_quantity(allocatable) or 0):
            short.append(f"1 Insufficient {resource}")
    if not short:
        return None
    return (
        f"0/1 nodes are available: {', '.join(short)}. preemption: 0/1 nodes are available:"
        " 1 No preemption victims found for incoming pod."
    )


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: A pod's own loopback, in an exec probe's command: the pod IP here (module docstring).
_LOOPBACK = re.compile(r"\b(127\.0\.0\.1|localhost)\b")
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: unknown references stay as written, ``$$`` escapes."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR_REF.sub(replace, value)


def labels_match(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@dataclass
class Probe:
    """Readiness-probe bookkeeping for one container."""

    spec: Json
    next_at: float
    failures: int = 0


@dataclass
class Container:
    """One container of a pod as the double runs it."""

    spec: Json
    process: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    restart_count: int = 0
    ready: bool = False
    probe: Probe | None = None
    waiting: tuple[str, str] | None = ("ContainerCreating", "")
    terminated: Json | None = None
    last_terminated: Json | None = None
    next_start: float = 0.0
    done: bool = False  # exited and will not be restarted
    #: The environment and mounts it was started with: an exec probe runs inside them.
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[tuple[str, str]] = field(default_factory=list)
    #: This run's termination message file, and where its output began in the log.
    termination_file: Path | None = None
    log_offset: int = 0

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class Pod:
    """A pod bound to the double's node, with its sandbox directory and pod IP."""

    uid: str
    namespace: str
    name: str
    ip: str
    sandbox: Path
    containers: list[Container]
    start_time: str = field(default_factory=now_rfc3339)
    transitions: dict[str, tuple[str, str]] = field(default_factory=dict)
    kill_deadline: float | None = None
    deleted: bool = False
    last_status: Json | None = None

    def processes(self) -> Iterator[subprocess.Popen[bytes]]:
        for container in self.containers:
            if container.running and container.process is not None:
                yield container.process


class ServiceProxy:
    """Listens on a Service's ``clusterIP:port`` and forwards each connection to a Ready pod."""

    def __init__(self, address: tuple[str, int], pick: Callable[[], tuple[str, int] | None]):
        self.address = address
        self._pick = pick
        self._listener = socket.create_server(address, reuse_port=False)
        self._listener.settimeout(0.5)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name=f"proxy {address}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self._thread.join(2)

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            target = self._pick()
            if target is None:  # no Ready endpoint: refuse, as a Service without endpoints does
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(target, timeout=2)
            except OSError:
                downstream.close()
                continue
            upstream.settimeout(None)
            downstream.settimeout(None)
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
            with contextlib.suppress(OSError):
                source.shutdown(socket.SHUT_RD)


class KubeletDouble:
    """Runs the pods bound to one Node as local processes; see the module docstring.

    ``start()`` registers the Node and starts the sync loop in a thread; ``stop()`` kills every
    process it started (SIGTERM, then SIGKILL) and closes the Service proxies.
    """

    def __init__(
        self,
        api: client.ApiClient,
        directory: Path,
        *,
        node_name: str = "crawlfleet-e2e-node",
        images: tuple[ImageRule, ...] = DEFAULT_IMAGES,
        backoff_base_seconds: float = 1.0,
        backoff_max_seconds: float = 10.0,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.directory = directory
        self.node_name = node_name
        self.images = images
        self.backoff_base_seconds = backoff_base_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self._pod_ip_block = LoopbackBlock.claim()  # released by stop()
        self._next_ip = 0
        self._free_ips: list[str] = []
        self.pods: dict[str, Pod] = {}
        self._services: dict[tuple[str, str], Json] = {}
        self._endpoints: dict[tuple[str, str, int], list[tuple[str, int]]] = {}
        self._proxies: dict[tuple[str, int], ServiceProxy] = {}
        self._pod_labels: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        #: The last sync found nothing to run or provision (see IDLE_SYNC_INTERVAL_SECONDS).
        self._idle = False
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._register_node()
        self._thread = threading.Thread(target=self._run, name="kubelet-double", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(10)
        # the sync thread is gone: nothing else touches pods and proxies from here on
        terminate(
            *(p for pod in self.pods.values() for p in pod.processes()),
            grace_seconds=KILL_GRACE_AT_STOP_SECONDS,
        )
        for proxy in self._proxies.values():
            proxy.close()
        self._proxies.clear()
        self._pod_ip_block.release()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.sync()
            except Exception as error:  # the loop must survive an API hiccup; keep the error
                log.exception("kubelet double: sync failed")
                detail = getattr(error, "body", None) or ""
                self.errors.append(f"{error!r} {str(detail)[:300]}".strip())
                self._idle = False
            self._stopping.wait(IDLE_SYNC_INTERVAL_SECONDS if self._idle else SYNC_INTERVAL_SECONDS)

    def _selects_me(self, spec: Json) -> bool:
        """Whether the pod's ``nodeSelector`` (if any) matches this Node's labels."""
        labels = self._node_labels()
        return all(
            labels.get(key) == value for key, value in (spec.get("nodeSelector") or {}).items()
        )

    def _node_labels(self) -> dict[str, str]:
        return {
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "crawlfleet.io/kubelet-double": "true",
        }

    def _register_node(self) -> None:
        """Create the Node and mark it Ready, as a kubelet's first status update would."""
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "labels": self._node_labels(),
            },
        }
        try:
            self.core.create_node(body, _preload_content=False)
        except ApiException as error:
            if error.status != 409:
                raise
        now = now_rfc3339()
        capacity = {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": "110"}
        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [
                {"type": "InternalIP", "address": NODE_IP},
                {"type": "Hostname", "address": self.node_name},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet double (local processes) is ready",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "nodeInfo": {
                "kubeletVersion": "crawlfleet-kubelet-double",
                "containerRuntimeVersion": "process://local",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "local processes",
                "kernelVersion": os.uname().release,
                "kubeProxyVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }
        self.core.patch_node_status(self.node_name, {"status": status}, _preload_content=False)
        # the TaintNodesByCondition admission plugin taints a new node not-ready; the
        # node-lifecycle controller (not running) would lift it once the node reports Ready
        self.core.patch_node(self.node_name, {"spec": {"taints": None}}, _preload_content=False)

    # -- what tests use ------------------------------------------------------------------------

    def service_address(self, host: str, port: int | str | None = None) -> tuple[str, int]:
        """``(clusterIP, port)`` of a Service named ``<svc>.<ns>[.svc[.cluster.local]]``.

        The address is live: the double forwards it to a Ready pod of the Service.
        """
        name, _, rest = host.partition(".")
        namespace = rest.split(".")[0] if rest else "default"
        with self._lock:
            service = self._services.get((namespace, name))
        if service is None:
            raise LookupError(f"no Service {namespace}/{name} (yet)")
        cluster_ip = service["spec"].get("clusterIP")
        if not cluster_ip or cluster_ip == "None":
            raise LookupError(f"Service {namespace}/{name} has no cluster IP")
        ports = service["spec"].get("ports") or []
        for service_port in ports:
            if port is None or port in (service_port.get("port"), service_port.get("name")):
                return cluster_ip, int(service_port["port"])
        raise LookupError(f"Service {namespace}/{name} has no port {port}")

    def endpoints(self, namespace: str, name: str) -> list[tuple[str, int]]:
        """The Ready ``(podIP, targetPort)`` pairs behind every port of a Service."""
        with self._lock:
            return sorted(
                {
                    endpoint
                    for (ns, svc, _), ready in self._endpoints.items()
                    if (ns, svc) == (namespace, name)
                    for endpoint in ready
                }
            )

    def logs(self, namespace: str, name: str, container: str | None = None) -> str:
        """A container's stdout and stderr (``kubectl logs`` has no kubelet API to call here)."""
        with self._lock:
            pod = next(
                (p for p in self.pods.values() if (p.namespace, p.name) == (namespace, name)),
                None,
            )
        if pod is None:
            raise LookupError(f"pod {namespace}/{name} is not on {self.node_name}")
        container = container or pod.containers[0].name
        return (pod.sandbox / f"{container}.log").read_text(errors="replace")

    # -- the sync loop ---------------------------------------------------------------------------

    def sync(self) -> None:
        """One level-triggered pass: bind, start, probe, restart, kill, report."""
        pods = self._items(
            self.core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=10)
        )
        services = self._items(
            self.core.list_service_for_all_namespaces(_preload_content=False, _request_timeout=10)
        )
        claims = self._provision()
        self._idle = not pods and not claims and not self.pods
        with self._lock:
            self._services = {
                (s["metadata"]["namespace"], s["metadata"]["name"]): s for s in services
            }
            seen: set[str] = set()
            self._pod_labels = {
                p["metadata"]["uid"]: p["metadata"].get("labels") or {} for p in pods
            }
            for raw in pods:
                spec = raw["spec"]
                uid = raw["metadata"]["uid"]
                if not spec.get("nodeName"):
                    if raw["metadata"].get("deletionTimestamp") or not self._selects_me(spec):
                        continue  # a nodeSelector for another node: the scheduler's pod
                    refused = unschedulable(raw)
                    if refused is None:
                        self._bind(raw)
                    else:
                        self._refuse(raw, refused)
                    continue
                if spec["nodeName"] != self.node_name:
                    continue
                seen.add(uid)
                pod = self.pods.get(uid) or self._admit(raw)
                self._sync_pod(pod, raw)
            for uid in list(self.pods):
                if uid not in seen:  # gone from the API (force-deleted): kill what is left
                    pod = self.pods[uid]
                    if self._kill(pod, grace_seconds=2):
                        self._forget(pod)
            self._sync_services()

    # -- claims ------------------------------------------------------------------------------

    def _provision(self) -> int:
        """A hostPath volume for each pending claim; a released volume deleted with its data;
        returns how many claims there are.

        The double's stand-in for a dynamic provisioner. Binding is the real PV controller's.
        """
        claims = self._items(
            self.core.list_persistent_volume_claim_for_all_namespaces(
                _preload_content=False, _request_timeout=10
            )
        )
        volumes = {
            v["metadata"]["name"]: v
            for v in self._items(
                self.core.list_persistent_volume(_preload_content=False, _request_timeout=10)
            )
        }
        for claim in claims:
            meta, spec = claim["metadata"], claim["spec"]
            name = f"pv-{meta['uid']}"
            if spec.get("volumeName") or name in volumes or meta.get("deletionTimestamp"):
                continue
            path = self.directory / "persistent-volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            body = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {"crawlfleet.io/kubelet-double": "true"}},
                "spec": {
                    "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                    "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                    "storageClassName": spec.get("storageClassName") or "",
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
                    "claimRef": {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "namespace": meta["namespace"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                    },
                },
            }
            try:
                self.core.create_persistent_volume(body, _preload_content=False)
            except ApiException as error:
                if error.status != 409:
                    raise
        for name, volume in volumes.items():
            labels = volume["metadata"].get("labels") or {}
            released = (volume.get("status") or {}).get("phase") == "Released"
            if released and labels.get("crawlfleet.io/kubelet-double") == "true":
                try:
                    self.core.delete_persistent_volume(name, _preload_content=False)
                except ApiException as error:
                    if error.status != 404:
                        raise
                shutil.rmtree(volume["spec"]["hostPath"]["path"], ignore_errors=True)
        return len(claims)

    def _claim_directory(self, namespace: str, claim_name: str) -> Path:
        """The directory of the volume a Bound claim holds; waits (an error) until it is."""
        try:
            claim = self.core.read_namespaced_persistent_volume_claim(claim_name, namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            raise ContainerStartError(
                "CreateContainerConfigError",
                f'persistentvolumeclaim "{claim_name}" not found',
            ) from error
        phase = claim.status.phase if claim.status else None
        if phase != "Bound" or not claim.spec.volume_name:
            raise ContainerStartError(
                "CreateContainerConfigError",
                f'persistentvolumeclaim "{claim_name}" is not bound (phase {phase})',
            )
        volume = self.core.read_persistent_volume(claim.spec.volume_name)
        if volume.spec.host_path is None:
            raise ContainerStartError(
                "CreateContainerConfigError",
                f"kubelet double: volume {volume.metadata.name} is not a hostPath volume",
            )
        return Path(volume.spec.host_path.path)

    @staticmethod
    def _items(response: Any) -> list[Json]:
        """Items of a raw list response: plain camelCase dicts, as the API and YAML spell them."""
        return list(json.loads(response.data)["items"])

    def _bind(self, raw: Json) -> None:
        meta = raw["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        try:
            self.core.create_namespaced_pod_binding(
                meta["name"], meta["namespace"], body, _preload_content=False
            )
        except ApiException as error:
            # 404/409: gone or bound already. 403: its namespace is being terminated, and
            # the API refuses new content there; the namespace controller removes the pod.
            if error.status not in (403, 404, 409):
                raise

    def _refuse(self, raw: Json, message: str) -> None:
        """Leave the pod Pending with the scheduler's PodScheduled condition (once)."""
        for condition in raw["status"].get("conditions") or ():
            if condition.get("type") == "PodScheduled" and condition.get("message") == message:
                return
        meta = raw["metadata"]
        status = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": now_rfc3339(),
                }
            ],
        }
        try:
            self.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": status}, _preload_content=False
            )
        except ApiException as error:
            if error.status not in (403, 404):  # gone, or its namespace is terminating
                raise

    def _admit(self, raw: Json) -> Pod:
        meta = raw["metadata"]
        pod = Pod(
            uid=meta["uid"],
            namespace=meta["namespace"],
            name=meta["name"],
            ip=self._allocate_ip(),
            sandbox=self.directory / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}",
            containers=[Container(spec=c) for c in raw["spec"]["containers"]],
        )
        pod.sandbox.mkdir(parents=True, exist_ok=True)
        self.pods[pod.uid] = pod
        return pod

    def _allocate_ip(self) -> str:
        if self._free_ips:
            return self._free_ips.pop(0)
        self._next_ip += 1
        high, low = divmod(self._next_ip, 250)
        return f"127.{self._pod_ip_block.number}.{high}.{low + 2}"

    def _forget(self, pod: Pod) -> None:
        del self.pods[pod.uid]
        self._free_ips.append(pod.ip)

    def _sync_pod(self, pod: Pod, raw: Json) -> None:
        if raw["metadata"].get("deletionTimestamp"):
            grace = raw["metadata"].get("deletionGracePeriodSeconds")
            if grace is None:
                grace = raw["spec"].get("terminationGracePeriodSeconds", 30)
            if self._kill(pod, grace_seconds=float(grace)) and not pod.deleted:
                self._delete(pod)
            return
        if raw["status"].get("phase") in ("Succeeded", "Failed") and not any(pod.processes()):
            return
        now = time.monotonic()
        for container in pod.containers:
            self._sync_container(pod, raw, container, now)
        self._report(pod, raw)

    def _sync_container(self, pod: Pod, raw: Json, container: Container, now: float) -> None:
        process = container.process
        if process is not None and process.poll() is not None:
            self._exited(pod, raw, container, process.returncode)
        if container.running:
            self._probe(pod, container, now)
            return
        if container.done or now < container.next_start:
            return
        try:
            self._start(pod, raw, container)
        except ContainerStartError as error:
            container.waiting = (error.reason, error.message)
            container.next_start = now + self.backoff_base_seconds

    def _exited(self, pod: Pod, raw: Json, container: Container, code: int) -> None:
        terminated = {
            "exitCode": code if code >= 0 else 128 - code,  # killed by signal N: 128+N
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": container.started_at,
            "finishedAt": now_rfc3339(),
            "containerID": f"process://{container.process.pid if container.process else 0}",
        }
        if code < 0:
            terminated["signal"] = -code
        message = self._termination_message(pod, container, code)
        if message:
            terminated["message"] = message
        container.process = None
        container.ready = False
        policy = raw["spec"].get("restartPolicy", "Always")
        restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        if restart:
            delay = min(
                self.backoff_max_seconds,
                self.backoff_base_seconds * 2 ** min(container.restart_count, 30),
            )
            container.next_start = time.monotonic() + delay
            container.last_terminated = terminated
            container.terminated = None
            container.waiting = (
                "CrashLoopBackOff",
                f"back-off {delay:g}s restarting failed container={container.name} pod={pod.name}",
            )
        else:
            container.terminated = terminated
            container.waiting = None
            container.done = True

    def _start(self, pod: Pod, raw: Json, container: Container) -> None:
        spec = container.spec
        if raw["spec"].get("initContainers") or raw["spec"].get("ephemeralContainers"):
            raise ContainerStartError(
                "CreateContainerConfigError",
                "kubelet double: init and ephemeral containers are not supported",
            )
        rule = next((r for r in self.images if r.marker in spec["image"]), None)
        if rule is None:
            raise ContainerStartError(
                "ErrImagePull",
                f"kubelet double: no local command for image {spec['image']!r} "
                f"(it runs images containing: {', '.join(r.marker for r in self.images)})",
            )
        mounts = self._volumes(pod, raw, container)
        container.termination_file = pod.sandbox / f"{container.name}.termination-log"
        container.termination_file.write_bytes(b"")  # each run starts with an empty one
        message_path = spec.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
        mounts = sorted(
            [*mounts, (message_path, str(container.termination_file))],
            key=lambda m: len(m[0]),
            reverse=True,
        )
        env = self._env(pod, raw, container)
        argv = [expand(arg, env) for arg in rule.argv(spec, pod.ip)]
        argv = [self._rewrite(arg, mounts) for arg in argv]
        host = self._host_env(pod)
        env = {
            key: value if host.get(key) == value else self._rewrite(value, mounts)
            for key, value in env.items()
        }
        log_path = pod.sandbox / f"{container.name}.log"
        with log_path.open("ab") as out:
            out.write(f"--- {now_rfc3339()} kubelet double: {argv}\n".encode())
            container.log_offset = out.tell()
        try:
            container.process = spawn(argv, log=log_path, env=env, cwd=pod.sandbox)
        except OSError as error:
            raise ContainerStartError("RunContainerError", f"kubelet double: {error}") from error
        if container.started_at:  # a restart
            container.restart_count += 1
        container.started_at = now_rfc3339()
        container.env, container.mounts = env, mounts
        container.waiting = None
        container.terminated = None
        container.ready = False
        probe = spec.get("readinessProbe")
        container.probe = (
            Probe(probe, time.monotonic() + float(probe.get("initialDelaySeconds", 0)))
            if probe
            else None
        )

    def _termination_message(self, pod: Pod, container: Container, code: int) -> str:
        """The message of a run that ended: its termination file, else (FallbackToLogsOnError,
        a failure) the tail of what it logged."""
        if container.termination_file is not None and container.termination_file.exists():
            with container.termination_file.open("rb") as source:
                written = source.read(TERMINATION_MESSAGE_MAX_BYTES)
            if written:
                return written.decode("utf-8", errors="replace")
        policy = container.spec.get("terminationMessagePolicy", "File")
        if policy != "FallbackToLogsOnError" or code == 0:
            return ""
        log_path = pod.sandbox / f"{container.name}.log"
        with contextlib.suppress(OSError), log_path.open("rb") as source:
            size = source.seek(0, os.SEEK_END)
            source.seek(max(container.log_offset, size - TERMINATION_LOG_TAIL_BYTES))
            lines = source.read().decode("utf-8", errors="replace").splitlines()
            return "\n".join(lines[-TERMINATION_LOG_TAIL_LINES:])
        return ""

    # -- env, volumes, names -----------------------------------------------------------------

    def _host_env(self, pod: Pod) -> dict[str, str]:
        """What the double itself gives every container: this machine's paths, which are no
        container paths to rewrite (a checkout under /tmp is not the pod's /tmp mount)."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(pod.sandbox),
            "HOSTNAME": pod.name,
        }
        if "PYTHONPATH" in os.environ:  # so crawlfleet images run this checkout's code
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        return env

    def _env(self, pod: Pod, raw: Json, container: Container) -> dict[str, str]:
        env = self._host_env(pod)
        if raw["spec"].get("enableServiceLinks", True):
            env.update(self._service_env(pod.namespace))
        namespace = pod.namespace
        for source in container.spec.get("envFrom") or []:
            prefix = source.get("prefix", "")
            for kind in ("configMapRef", "secretRef"):
                if kind in source:
                    ref = source[kind]
                    data = self._read_data(namespace, kind, ref["name"], ref.get("optional"))
                    env.update({prefix + k: v for k, v in (data or {}).items()})
        for var in container.spec.get("env") or []:
            if "valueFrom" not in var:
                env[var["name"]] = expand(var.get("value", ""), env)
                continue
            value = self._value_from(pod, raw, var["valueFrom"])
            if value is not None:
                env[var["name"]] = value
        return env

    def _value_from(self, pod: Pod, raw: Json, source: Json) -> str | None:
        if "fieldRef" in source:
            return self._field(pod, raw, source["fieldRef"]["fieldPath"])
        for kind, ref_key in (("secretKeyRef", "secretRef"), ("configMapKeyRef", "configMapRef")):
            if kind in source:
                ref = source[kind]
                data = self._read_data(pod.namespace, ref_key, ref["name"], ref.get("optional"))
                if data is None:
                    return None
                if ref["key"] not in data:
                    if ref.get("optional"):
                        return None
                    raise ContainerStartError(
                        "CreateContainerConfigError",
                        f"couldn't find key {ref['key']} in {kind[:-6]} "
                        f"{pod.namespace}/{ref['name']}",
                    )
                return data[ref["key"]]
        raise ContainerStartError(
            "CreateContainerConfigError",
            f"kubelet double: unsupported env source {sorted(source)}",
        )

    def _field(self, pod: Pod, raw: Json, path: str) -> str:
        meta = raw["metadata"]
        simple = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "spec.nodeName": self.node_name,
            "spec.serviceAccountName": raw["spec"].get("serviceAccountName", "default"),
            "status.podIP": pod.ip,
            "status.podIPs": pod.ip,
            "status.hostIP": NODE_IP,
            "status.hostIPs": NODE_IP,
        }
        if path in simple:
            return simple[path]
        match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if match:
            return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
        raise ContainerStartError(
            "CreateContainerConfigError", f"kubelet double: unsupported fieldRef {path}"
        )

    def _read_data(
        self, namespace: str, kind: str, name: str, optional: bool | None
    ) -> dict[str, str] | None:
        """A ConfigMap's or Secret's data, decoded; None when optional and missing."""
        try:
            if kind == "secretRef":
                secret = self.core.read_namespaced_secret(name, namespace)
                return {
                    k: base64.b64decode(v).decode(errors="replace")
                    for k, v in (secret.data or {}).items()
                }
            config_map = self.core.read_namespaced_config_map(name, namespace)
            return dict(config_map.data or {})
        except ApiException as error:
            if error.status != 404:
                raise
            if optional:
                return None
            what = "secret" if kind == "secretRef" else "configmap"
            raise ContainerStartError(
                "CreateContainerConfigError", f'{what} "{name}" not found'
            ) from error

    def _volumes(self, pod: Pod, raw: Json, container: Container) -> list[tuple[str, str]]:
        """Write the pod's volumes into its sandbox; ``[(mountPath, local dir)]``, longest first."""
        volumes = {v["name"]: v for v in raw["spec"].get("volumes") or []}
        mounts = []
        for mount in container.spec.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None:
                raise ContainerStartError(
                    "CreateContainerConfigError", f"volume {mount['name']} is not in the pod"
                )
            if "persistentVolumeClaim" in volume:
                local = self._claim_directory(
                    pod.namespace, volume["persistentVolumeClaim"]["claimName"]
                )
            else:
                local = pod.sandbox / "volumes" / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            for kind, ref_key, name_key in (
                ("configMap", "configMapRef", "name"),
                ("secret", "secretRef", "secretName"),
            ):
                if kind in volume:
                    source = volume[kind]
                    data = self._read_data(
                        pod.namespace, ref_key, source[name_key], source.get("optional")
                    )
                    items = source.get("items") or [{"key": k, "path": k} for k in data or {}]
                    for item in items:
                        if data is not None and item["key"] in data:
                            target = local / item["path"]
                            target.parent.mkdir(parents=True, exist_ok=True)
                            target.write_text(data[item["key"]])
                    break
            else:
                if "emptyDir" not in volume and "persistentVolumeClaim" not in volume:
                    raise ContainerStartError(
                        "CreateContainerConfigError",
                        f"kubelet double: volume {mount['name']}: only configMap, secret, "
                        "emptyDir and persistentVolumeClaim volumes are supported",
                    )
            if mount.get("subPath"):
                local = local / mount["subPath"]
            mounts.append((mount["mountPath"].rstrip("/"), str(local)))
        return sorted(mounts, key=lambda m: len(m[0]), reverse=True)

    def _rewrite(self, value: str, mounts: list[tuple[str, str]]) -> str:
        """Local paths for mount paths, cluster IPs for ``<svc>.<ns>.svc`` names."""
        for mount_path, local in mounts:
            if value == mount_path or value.startswith(mount_path + "/"):
                value = local + value[len(mount_path) :]
                break
        for (namespace, name), service in self._services.items():
            cluster_ip = service["spec"].get("clusterIP")
            if cluster_ip and cluster_ip != "None":
                value = re.sub(
                    rf"\b{re.escape(name)}\.{re.escape(namespace)}\.svc(\.cluster\.local)?\b",
                    cluster_ip,
                    value,
                )
        return value

    def _service_env(self, namespace: str) -> dict[str, str]:
        """The ``<SVC>_SERVICE_HOST``/``_PORT`` variables a kubelet sets for each Service."""
        env = {}
        for (ns, name), service in self._services.items():
            cluster_ip = service["spec"].get("clusterIP")
            ports = service["spec"].get("ports") or []
            if ns != namespace or not cluster_ip or cluster_ip == "None" or not ports:
                continue
            prefix = name.upper().replace("-", "_")
            env[f"{prefix}_SERVICE_HOST"] = cluster_ip
            env[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
            for port in ports:
                if port.get("name"):
                    key = f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"
                    env[key] = str(port["port"])
        return env

    # -- probes ----------------------------------------------------------------------------------

    def _probe(self, pod: Pod, container: Container, now: float) -> None:
        probe = container.probe
        if probe is None:
            container.ready = True
            return
        if now < probe.next_at:
            return
        spec = probe.spec
        probe.next_at = now + float(spec.get("periodSeconds", 10))
        if self._probe_once(pod, container, spec):
            probe.failures = 0
            container.ready = True
        else:
            probe.failures += 1
            if probe.failures >= int(spec.get("failureThreshold", 3)) or not container.ready:
                container.ready = False

    def _probe_once(self, pod: Pod, container: Container, spec: Json) -> bool:
        timeout = float(spec.get("timeoutSeconds", 1))
        if "tcpSocket" in spec:
            port = self._port(container, spec["tcpSocket"]["port"])
            try:
                with socket.create_connection((pod.ip, port), timeout=timeout):
                    return True
            except OSError:
                return False
        if "httpGet" in spec:
            get = spec["httpGet"]
            url = f"http://{pod.ip}:{self._port(container, get['port'])}{get.get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    return 200 <= int(response.status) < 400
            except OSError:
                return False
        if "exec" in spec:
            command = [
                _LOOPBACK.sub(pod.ip, self._rewrite(arg, container.mounts))
                for arg in spec["exec"]["command"]
            ]
            try:
                done = subprocess.run(
                    command,
                    capture_output=True,
                    timeout=timeout,
                    env=container.env,
                    cwd=pod.sandbox,
                )
            except (OSError, subprocess.TimeoutExpired):
                return False
            return done.returncode == 0
        return False  # grpc probes: unsupported, so never ready rather than falsely ready

    @staticmethod
    def _port(container: Container, port: int | str) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for declared in container.spec.get("ports") or []:
            if declared.get("name") == port:
                return int(declared["containerPort"])
        raise LookupError(f"container {container.name} has no port named {port}")

    # -- termination -----------------------------------------------------------------------------

    def _kill(self, pod: Pod, grace_seconds: float) -> bool:
        """Advance a pod's termination; True once no process of it is left."""
        now = time.monotonic()
        if pod.kill_deadline is None:
            pod.kill_deadline = now + grace_seconds
            for container in pod.containers:
                container.done = True
            for process in pod.processes():
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        alive = list(pod.processes())
        if alive and now >= pod.kill_deadline:
            for process in alive:
                kill_group(process)
                process.wait()
            alive = []
        return not alive

    def _delete(self, pod: Pod) -> None:
        """The kubelet's last word: remove the pod object now that its processes are gone."""
        body = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=pod.uid)
        )
        try:
            self.core.delete_namespaced_pod(pod.name, pod.namespace, body=body)
        except ApiException as error:
            if error.status not in (404, 409):
                raise
        pod.deleted = True
        self._forget(pod)

    # -- status ------------------------------------------------------------------------------------

    def _report(self, pod: Pod, raw: Json) -> None:
        """Write the pod's status when it differs from what the double last wrote."""
        statuses = [self._container_status(c) for c in pod.containers]
        phase = self._phase(pod)
        all_ready = all(c.ready for c in pod.containers)
        conditions = [
            self._condition(pod, "PodReadyToStartContainers", True),
            self._condition(pod, "Initialized", True),
            self._condition(pod, "ContainersReady", all_ready),
            self._condition(pod, "Ready", all_ready),
            self._condition(pod, "PodScheduled", True),
        ]
        ours = {c["type"] for c in conditions}
        status = dict(raw.get("status") or {})
        status.update(
            {
                "phase": phase,
                "hostIP": NODE_IP,
                "hostIPs": [{"ip": NODE_IP}],
                "podIP": pod.ip,
                "podIPs": [{"ip": pod.ip}],
                "startTime": pod.start_time,
                "containerStatuses": statuses,
                "conditions": [
                    *[c for c in status.get("conditions") or [] if c["type"] not in ours],
                    *conditions,
                ],
            }
        )
        if status == pod.last_status and raw["status"].get("phase") == phase:
            return
        body = dict(raw)
        body["status"] = status
        try:
            self.core.replace_namespaced_pod_status(
                pod.name, pod.namespace, body, _preload_content=False
            )
        except ApiException as error:
            if error.status in (404, 409):  # changed or gone meanwhile: next pass retries
                return
            raise
        pod.last_status = status

    def _phase(self, pod: Pod) -> str:
        containers = pod.containers
        if all(c.done for c in containers):
            codes = [(c.terminated or {}).get("exitCode", 1) for c in containers]
            return "Succeeded" if all(code == 0 for code in codes) else "Failed"
        if any(c.started_at for c in containers):
            return "Running"
        return "Pending"

    def _condition(self, pod: Pod, kind: str, value: bool) -> Json:
        status = "True" if value else "False"
        previous = pod.transitions.get(kind)
        if previous is None or previous[0] != status:
            pod.transitions[kind] = (status, now_rfc3339())
        condition = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": pod.transitions[kind][1],
        }
        if not value and kind in ("Ready", "ContainersReady"):
            unready = [c.name for c in pod.containers if not c.ready]
            condition["reason"] = "ContainersNotReady"
            condition["message"] = f"containers with unready status: [{' '.join(unready)}]"
        return condition

    @staticmethod
    def _container_status(container: Container) -> Json:
        state: Json
        if container.running and container.process is not None:
            state = {"running": {"startedAt": container.started_at}}
        elif container.terminated is not None:
            state = {"terminated": container.terminated}
        else:
            reason, message = container.waiting or ("ContainerCreating", "")
            state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        status: Json = {
            "name": container.name,
            "image": container.spec["image"],
            "imageID": "",
            "ready": container.ready,
            "restartCount": container.restart_count,
            "started": container.running,
            "state": state,
            "lastState": {"terminated": container.last_terminated}
            if container.last_terminated
            else {},
        }
        if container.running and container.process is not None:
            status["containerID"] = f"process://{container.process.pid}"
        return status

    # -- services --------------------------------------------------------------------------

    def _sync_services(self) -> None:
        """Recompute Ready endpoints per Service port; open and close cluster-IP listeners."""
        endpoints: dict[tuple[str, str, int], list[tuple[str, int]]] = {}
        wanted: dict[tuple[str, int], tuple[str, str, int]] = {}
        for (namespace, name), service in self._services.items():
            spec = service["spec"]
            selector = spec.get("selector") or {}
            cluster_ip = spec.get("clusterIP")
            for service_port in spec.get("ports") or []:
                port = int(service_port["port"])
                target = service_port.get("targetPort", port)
                ready = []
                for pod in self.pods.values():
                    if pod.namespace != namespace or pod.kill_deadline is not None:
                        continue
                    if not labels_match(selector, self._pod_labels.get(pod.uid, {})):
                        continue
                    if not all(c.ready for c in pod.containers):
                        continue
                    with contextlib.suppress(LookupError):
                        named = next(
                            (c for c in pod.containers if self._has_port(c, target)),
                            pod.containers[0],
                        )
                        ready.append((pod.ip, self._port(named, target)))
                endpoints[(namespace, name, port)] = ready
                if cluster_ip and cluster_ip != "None" and selector:
                    wanted[(cluster_ip, port)] = (namespace, name, port)
        self._endpoints = endpoints
        for address in list(self._proxies):
            if address not in wanted:
                self._proxies.pop(address).close()
        for address, key in wanted.items():
            if address not in self._proxies:
                try:
                    self._proxies[address] = ServiceProxy(address, self._picker(key))
                except OSError as error:
                    self.errors.append(f"cannot listen on Service address {address}: {error}")

    @staticmethod
    def _has_port(container: Container, target: int | str) -> bool:
        return any(
            target in (p.get("name"), p.get("containerPort"))
            for p in container.spec.get("ports") or []
        )

    def _picker(self, key: tuple[str, str, int]) -> Callable[[], tuple[str, int] | None]:
        counter = iter(range(1 << 62))

        def pick() -> tuple[str, int] | None:
            with self._lock:
                ready = self._endpoints.get(key) or []
            return ready[next(counter) % len(ready)] if ready else None

        return pick
