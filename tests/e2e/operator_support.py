"""What the operator's e2e tests share: the CRD applied, the operator as a subprocess, jobs.

The operator runs as a user runs it (``crawlfleet operator`` in its own process, talking to
the real API server with a kubeconfig), against the real control plane and the process
kubelet; the crawl goes to the loopback test site.
"""

from __future__ import annotations

import base64
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import redis
import yaml
from kubernetes import client

from crawlfleet.testsite import TestSite
from tests.e2e.cluster.client import Cluster, wait_established, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.support.runs import crawlfleet_done

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = Path(os.environ.get("CRAWLFLEET_E2E_CRD") or REPO / "crds" / "crawljob.yaml")
GROUP, VERSION, PLURAL = "crawlfleet.io", "v1alpha1", "crawljobs"


def apply(cluster: Cluster, *documents: dict[str, Any], namespace: str | None = None) -> str:
    """``kubectl apply`` of documents, as a user would; returns kubectl's output."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump_all(documents, f)
    try:
        args = ["apply", "-f", f.name]
        if namespace:
            args += ["-n", namespace]
        return cluster.kubectl(*args).stdout
    finally:
        os.unlink(f.name)


def install_crd(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(CRD_FILE))
    wait_established(cluster, "crawljobs.crawlfleet.io")


#: A fetch budget for tests that hang a worker (SIGSTOP) on the loopback site, whose pages take
#: at most a second: the frontier keeps a hung worker's host slots until its fetches' deadline
#: (claim + totalTimeoutSeconds), so with the default minute the crawl stands still for a
#: minute after the hang; with this, a few seconds. The behaviour is the same.
HUNG_WORKER_FETCH: Final = {
    "connectTimeoutSeconds": 2,
    "readTimeoutSeconds": 5,
    "totalTimeoutSeconds": 5,
}


def crawljob(name: str, site: TestSite, **spec: Any) -> dict[str, Any]:
    """A CrawlJob for the test site: private addresses allowed, quick leases, fast scale-down,
    output files sealed each second."""
    base: dict[str, Any] = {
        "seeds": site.seeds,
        "scope": {"allowedDomains": site.hosts, "allowPrivateNetworks": True, "maxDepth": 10},
        "dedup": {"capacity": 100_000},
        "concurrency": {"perWorker": 8, "perHost": 4, "hostDelaySeconds": 0},
        "workers": {
            "minReplicas": 1,
            "maxReplicas": 2,
            "targetBacklogPerReplica": 50,
            "scaleDownDelaySeconds": 2,
            "image": "crawlfleet/worker:dev",
        },
        "lease": {"ttlSeconds": 60, "heartbeatSeconds": 0.5, "deadAfterSeconds": 4},
        "retry": {"backoffBaseSeconds": 0.05, "backoffMaxSeconds": 0.2},
        # Files sealed every second, so pages are acked (and counted crawled) as the crawl
        # goes; ephemeral: the pods' own folders will do, unless a test gives a destination.
        "output": {"maxFileAgeSeconds": 1, "ephemeral": True},
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CrawlJob",
        "metadata": {"name": name},
        "spec": base,
    }


def get_job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(cluster.api)
    job: dict[str, Any] = custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return job


def event_messages(core: client.CoreV1Api, namespace: str, reason: str) -> list[str] | None:
    """The messages of the namespace's Events of ``reason``; None while there is none."""
    found = core.list_namespaced_event(namespace).items
    return [e.message for e in found if e.reason == reason] or None


def pod_argv(core: client.CoreV1Api, namespace: str) -> dict[str, str]:
    """``{pod: its process's command line}`` of the running containers, read from /proc as
    anyone on a node could (a pod gone since the listing is left out)."""
    argv = {}
    for pod in core.list_namespaced_pod(namespace).items:
        for status in pod.status.container_statuses or ():
            if status.container_id and status.state.running:
                pid = status.container_id.removeprefix("process://")
                try:
                    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                argv[pod.metadata.name] = raw.replace(b"\0", b" ").decode(errors="replace")
    return argv


def posted_events(
    core: client.CoreV1Api, namespace: str, reason: str, at_least: int = 1, timeout: float = 30
) -> list[Any]:
    """The namespace's Events of ``reason``, once at least ``at_least`` are posted.

    kopf posts an Event from a background queue after the handler that raised it has patched
    the status, so a test that has just seen the status must wait for the Event, not race it.
    A test asserting "exactly once" waits for one and then counts.
    """
    found: list[Any] = []

    def posted() -> bool:
        selector = f"reason={reason}"
        found[:] = core.list_namespaced_event(namespace, field_selector=selector).items
        return len(found) >= at_least

    wait_until(posted, timeout=timeout, what=f"{at_least} {reason} Event(s) posted")
    return found


def condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for entry in job.get("status", {}).get("conditions") or ():
        if entry.get("type") == kind:
            return dict(entry)
    return None


def wait_for_phase(
    cluster: Cluster,
    namespace: str,
    name: str,
    phase: str,
    timeout: float = 120,
    operator: OperatorProcess | None = None,
) -> dict[str, Any]:
    """Poll the job until its phase is ``phase``; a timeout shows ``operator``'s log."""

    def probe() -> dict[str, Any] | None:
        job = get_job(cluster, namespace, name)
        return job if job.get("status", {}).get("phase") == phase else None

    try:
        return wait_until(probe, timeout=timeout, interval=0.5, what=f"{name} to reach {phase}")
    except AssertionError as error:
        if operator is None:
            raise
        raise AssertionError(f"{error}\n{operator.log()}") from None


def wait_condition(
    cluster: Cluster, namespace: str, name: str, kind: str, timeout: float = 120
) -> dict[str, Any]:
    """Poll the job until its condition ``kind`` is True; that condition."""

    def probe() -> dict[str, Any] | None:
        found = condition(get_job(cluster, namespace, name), kind)
        return found if found and found["status"] == "True" else None

    found: dict[str, Any] = wait_until(probe, timeout=timeout, interval=0.5, what=f"{name} {kind}")
    return found


def wait_crawled(
    cluster: Cluster, namespace: str, name: str, pages: int, timeout: float = 60
) -> None:
    """Poll the job's status until it reports at least ``pages`` crawled: a crawl under way."""
    wait_until(
        lambda: get_job(cluster, namespace, name).get("status", {}).get("crawled", 0) >= pages,
        timeout=timeout,
        what=f"{name} to crawl {pages} pages",
    )


def job_redis(kubelet: KubeletDouble, core: client.CoreV1Api, namespace: str, job: str) -> Any:
    """A client of a job's managed Redis, through its Service, with the generated password."""
    host, port = kubelet.service_address(f"{job}-redis.{namespace}.svc", 6379)
    secret = core.read_namespaced_secret(f"{job}-redis-auth", namespace).data
    password = base64.b64decode(secret["password"]).decode()
    return redis.Redis(host=host, port=port, password=password, decode_responses=True)


def leases_held(r: Any, namespace: str, job: str, pod: str) -> int:
    """Leases in the frontier whose owner is a worker of ``pod`` (any incarnation)."""
    members = r.zrange(f"cf:{{{namespace}.{job}}}:leases", 0, -1)
    return sum(1 for member in members if member.split("\t")[1].split("#")[0] == pod)


def listen_port() -> int:
    """A free port below the kernel's ephemeral range (32768+ here).

    A port picked by binding port 0 comes from that range, and until the operator binds it,
    any outgoing connection of the busy e2e session (watches, kubectl) may take it as its
    local port: the operator then fails to start its /metrics or /healthz server.
    """
    rng = random.Random()
    for _ in range(100):
        port = rng.randrange(20000, 32000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")


class OperatorProcess:
    """``crawlfleet operator`` in a subprocess; its stderr goes to a file for failures."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        log_dir: Path,
        *extra: str,
        peering: str | None = None,
        kubeconfig: Path | None = None,
    ) -> None:
        self.cluster = cluster
        #: Where the operator finds the API server (default: the cluster's own kubeconfig).
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        self.namespace = namespace
        self.peering = peering
        self.log_file = log_dir / f"operator-{namespace}-{os.getpid()}-{id(self)}.log"
        self.extra = extra
        self.metrics_port = listen_port()
        self.health_port = listen_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        env = {
            # The suite's own Redis servers listen on loopback; a test may narrow this.
            "CRAWLFLEET_ALLOWED_REDIS_HOSTS": "127.0.0.1,::1",
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PYTHONPATH": str(REPO),
        }
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "crawlfleet", "operator",
                    "--namespace", self.namespace,
                    *(["--peering", self.peering] if self.peering else ["--standalone"]),
                    "--bind-host", "127.0.0.1",
                    "--metrics-port", str(self.metrics_port),
                    "--health-port", str(self.health_port),
                    "--tick-seconds", "1",
                    *self.extra,
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        return self

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        code = self.process.returncode
        self.process = None
        return code

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-6000:]

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        """GET one of the operator's own endpoints (/metrics, /healthz)."""
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"the operator exited ({self.process.returncode}):\n{self.log()}")
        url = f"http://127.0.0.1:{port or self.metrics_port}{path}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()

    def reconciles(self) -> float:
        """How many full reconciles this operator ran (its own histogram's count)."""
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith("crawlfleet_reconcile_duration_seconds_count"):
                return float(line.split()[-1])
        return 0.0


@contextmanager
def running_operator(
    cluster: Cluster, namespace: str, log_dir: Path, *extra: str
) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(cluster, namespace, log_dir, *extra).start()
    try:
        yield operator
    finally:
        operator.stop()


def frontier_command(
    cluster: Cluster, *args: str, redis_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``crawlfleet frontier`` as a user runs it: the cluster's kubeconfig, and the job's Redis
    (a port-forward's address here: the Service's) in ``CRAWLFLEET_REDIS_URL``."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    env.pop("CRAWLFLEET_REDIS_URL", None)
    if redis_url is not None:
        env["CRAWLFLEET_REDIS_URL"] = redis_url
    return crawlfleet_done("frontier", *args, cwd=REPO, env=env)


def job_redis_url(kubelet: KubeletDouble, core: client.CoreV1Api, namespace: str, job: str) -> str:
    """The URL of a job's managed Redis, through its Service, with the generated password."""
    host, port = kubelet.service_address(f"{job}-redis.{namespace}.svc", 6379)
    secret = core.read_namespaced_secret(f"{job}-redis-auth", namespace).data
    password = base64.b64decode(secret["password"]).decode()
    return f"redis://:{urllib.parse.quote(password, safe='')}@{host}:{port}/0"


def enqueue(cluster: Cluster, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``crawlfleet enqueue`` as a user runs it, with the cluster's kubeconfig."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return crawlfleet_done("enqueue", *args, cwd=REPO, stdin=stdin, env=env)
