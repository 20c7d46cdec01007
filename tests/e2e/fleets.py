"""One job, two backends, one test interface: the harness of the steering contract suite.

``LocalFleet`` runs a job as a user runs ``crawlfleet run``; ``ClusterFleet`` applies it to the
real control plane, with ``crawlfleet operator`` in its own process and the pods run by the
kubelet double. Both use a Redis the test owns (``redis.url`` in the cluster, ``--redis-url``
locally), so the frontier is read the same way in both, and both crawl the loopback test site,
whose request log counts every fetch server-side.

What differs is only how a user acts on each: a job file edited in place, or ``kubectl``
(``suspend``, ``set_replicas``); a runner interrupted and resumed, or an operator restarted
(``restart_controller``); a process signalled, or a pod deleted (``stop_worker``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import redis
import yaml
from kubernetes import client

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    OperatorProcess,
    apply,
    crawljob,
    get_job,
)
from tests.support.processes import worker_processes


@dataclass(frozen=True)
class Event:
    reason: str
    message: str


class Fleet(Protocol):
    """What a contract test does to a job and reads back, whichever backend runs it."""

    name: str
    site: TestSite

    @property
    def job_id(self) -> str: ...
    def start(self, **spec: Any) -> None: ...
    def phase(self) -> str | None: ...
    def events(self, reason: str) -> list[Event]: ...
    def workers(self) -> dict[str, int]: ...
    def suspend(self, value: bool) -> None: ...
    def set_replicas(self, replicas: int) -> None: ...
    def restart_controller(self) -> None: ...
    def stop_worker(self, unit: str) -> None: ...
    def worker_gone(self, unit: str) -> bool: ...
    def log(self) -> str: ...
    def worker_logs(self) -> str: ...


def job_spec(site: TestSite, **spec: Any) -> dict[str, Any]:
    """The CrawlJob spec both backends run: operator_support's, without the image."""
    document = crawljob("unused", site, **spec)["spec"]
    return dict(document)


class Frontier:
    """The job's frontier read directly, the same for both backends (a test-owned Redis)."""

    def __init__(self, url: str, job_id: str) -> None:
        self.redis = redis.Redis.from_url(url, decode_responses=True)
        self.prefix = f"cf:{{{job_id}}}:"

    def stats(self) -> dict[str, int]:
        return {k: int(float(v)) for k, v in self.redis.hgetall(self.prefix + "stats").items()}

    def lease_owners(self) -> list[str]:
        """The worker id of every lease held now."""
        return [m.split("\t")[1] for m in self.redis.zrange(self.prefix + "leases", 0, -1)]

    def heartbeats(self) -> list[str]:
        return list(self.redis.zrange(self.prefix + "heartbeats", 0, -1))


def fetches(site: TestSite) -> Counter[str]:
    """How often the site served each page (robots.txt aside), counted server-side."""
    return Counter(canonicalize(r.url) for r in site.log.all_requests() if r.path != "/robots.txt")


def wait_for(probe: Callable[[], Any], fleet: Fleet, what: str, timeout: float = 120) -> Any:
    try:
        return wait_until(probe, timeout=timeout, interval=0.2, what=what)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{fleet.log()}") from None


def wait_phase(fleet: Fleet, phase: str, timeout: float = 150) -> None:
    wait_for(lambda: fleet.phase() == phase, fleet, f"{fleet.name} to reach {phase}", timeout)


# -- crawlfleet run -------------------------------------------------------------------------


class LocalFleet:
    """``crawlfleet run`` of the job, against the test's Redis; the job file is the spec."""

    def __init__(self, name: str, site: TestSite, redis_url: str, tmp_path: Path) -> None:
        self.name = name
        self.site = site
        self.redis_url = redis_url
        self.job_file = tmp_path / f"{name}.yaml"
        self.out = tmp_path / f"{name}-out"
        self.run: subprocess.Popen[str] | None = None
        self.runs: list[subprocess.Popen[str]] = []
        self.document: dict[str, Any] = {}

    @property
    def job_id(self) -> str:
        return f"default.{self.name}"

    def _write(self) -> None:
        partial = self.job_file.with_suffix(".partial")
        partial.write_text(yaml.safe_dump(self.document))
        os.replace(partial, self.job_file)  # the runner never reads half a file

    def _launch(self, *extra: str) -> None:
        self.run = subprocess.Popen(
            [
                sys.executable, "-m", "crawlfleet", "run", str(self.job_file),
                "--out", str(self.out), "--redis-url", self.redis_url, "--json", *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self.runs.append(self.run)

    def start(self, **spec: Any) -> None:
        self.document = {
            "apiVersion": "crawlfleet.io/v1alpha1",
            "kind": "CrawlJob",
            "metadata": {"name": self.name},
            "spec": job_spec(self.site, **spec),
        }
        self._write()
        self._launch()

    def _state(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.out / "state.json").read_text()))
        except (OSError, ValueError):
            return {}

    def phase(self) -> str | None:
        if self.run is not None and self.run.poll() == 0:
            return "Succeeded"  # the summary is written: the run is over
        phase = self._state().get("phase")
        return phase if phase != "Succeeded" else None  # Succeeded once the run has ended

    def events(self, reason: str) -> list[Event]:
        try:
            lines = (self.out / "events.jsonl").read_text().splitlines()
        except OSError:
            return []
        entries = [json.loads(line) for line in lines]
        return [Event(e["kind"], e["message"]) for e in entries if e["kind"] == reason]

    def workers(self) -> dict[str, int]:
        return worker_processes(self.job_file)

    def suspend(self, value: bool) -> None:
        self.document["spec"]["suspend"] = value
        self._write()

    def set_replicas(self, replicas: int) -> None:
        self.document["spec"]["workers"]["replicas"] = replicas
        self._write()

    def restart_controller(self) -> None:
        """Ctrl-C (the workers drain), then ``--resume``: a restart of the one who steers."""
        assert self.run is not None
        self.run.send_signal(signal.SIGINT)
        assert self.run.wait(60) == 130, self.log()
        self._launch("--resume")

    def stop_worker(self, unit: str) -> None:
        """SIGTERM, what a kubelet sends a pod's container."""
        os.kill(self.workers()[unit], signal.SIGTERM)

    def worker_gone(self, unit: str) -> bool:
        return unit not in self.workers()

    def worker_logs(self) -> str:
        """Every worker's log lines, of every run into this folder."""
        return "".join(path.read_text(errors="replace") for path in self.out.glob("logs/*.log"))

    def log(self) -> str:
        text = ""
        for name in ("crawlfleet.log", "events.jsonl"):
            path = self.out / name
            if path.exists():
                text += f"--- {name}\n{path.read_text()[-4000:]}"
        return text

    def close(self) -> None:
        for run in self.runs:
            if run.poll() is None:
                run.terminate()
                try:
                    run.wait(60)
                except subprocess.TimeoutExpired:
                    run.kill()
                    run.wait()
            run.communicate()


# -- the operator ---------------------------------------------------------------------------


class ClusterFleet:
    """The job as a CrawlJob in its own namespace, steered by ``crawlfleet operator``."""

    def __init__(
        self,
        name: str,
        site: TestSite,
        redis_url: str,
        tmp_path: Path,
        cluster: Cluster,
        namespace: str,
        kubelet: KubeletDouble,
    ) -> None:
        self.name = name
        self.site = site
        self.redis_url = redis_url
        self.tmp_path = tmp_path
        self.cluster = cluster
        self.namespace = namespace
        self.kubelet = kubelet
        self.core = client.CoreV1Api(cluster.api)
        self.operator: OperatorProcess | None = None

    @property
    def job_id(self) -> str:
        return f"{self.namespace}.{self.name}"

    def _start_operator(self) -> None:
        self.operator = OperatorProcess(self.cluster, self.namespace, self.tmp_path).start()

    def start(self, **spec: Any) -> None:
        self._start_operator()
        redis = {**spec.pop("redis", {}), "url": self.redis_url}
        document = crawljob(self.name, self.site, redis=redis, **spec)
        apply(self.cluster, document, namespace=self.namespace)

    def phase(self) -> str | None:
        phase = get_job(self.cluster, self.namespace, self.name).get("status", {}).get("phase")
        return str(phase) if phase else None

    def events(self, reason: str) -> list[Event]:
        found = self.core.list_namespaced_event(self.namespace).items
        ordered = sorted(found, key=lambda e: e.metadata.creation_timestamp)
        return [Event(e.reason, e.message) for e in ordered if e.reason == reason]

    def _pods(self) -> Iterator[Any]:
        selector = f"crawlfleet.io/job={self.name},app.kubernetes.io/component=worker"
        yield from self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def workers(self) -> dict[str, int]:
        """Running worker pods that are not terminating, and their container's PID."""
        found = {}
        for pod in self._pods():
            statuses = pod.status.container_statuses or ()
            if pod.metadata.deletion_timestamp or pod.status.phase != "Running" or not statuses:
                continue
            (status,) = statuses
            if status.container_id and status.state.running:
                found[pod.metadata.name] = int(status.container_id.removeprefix("process://"))
        return found

    def _patch(self, spec: dict[str, Any]) -> None:
        self.cluster.kubectl(
            "patch", f"crawljob/{self.name}", "-n", self.namespace, "--type=merge",
            "-p", json.dumps({"spec": spec}),
        )  # fmt: skip

    def suspend(self, value: bool) -> None:
        self._patch({"suspend": value})

    def set_replicas(self, replicas: int) -> None:
        self.cluster.kubectl(
            "scale", f"crawljob/{self.name}", "--replicas", str(replicas), "-n", self.namespace
        )

    def restart_controller(self) -> None:
        assert self.operator is not None
        assert self.operator.stop() == 0
        self._start_operator()

    def stop_worker(self, unit: str) -> None:
        """Delete the pod, gracefully: the kubelet sends SIGTERM and waits out its grace."""
        self.cluster.kubectl("delete", "pod", unit, "-n", self.namespace, "--wait=false")

    def worker_gone(self, unit: str) -> bool:
        return unit not in {pod.metadata.name for pod in self._pods()}

    def worker_logs(self) -> str:
        """Every worker container's output, of pods gone too (the double keeps sandboxes)."""
        sandboxes = self.kubelet.directory.glob(f"{self.namespace}_{self.name}-workers-*")
        return "".join(
            (sandbox / "worker.log").read_text(errors="replace")
            for sandbox in sandboxes
            if (sandbox / "worker.log").exists()
        )

    def log(self) -> str:
        return self.operator.log() if self.operator is not None else ""

    def close(self) -> None:
        if self.operator is not None:
            self.operator.stop()
        # The namespace fixture deletes the job; its workers stop with it.
        self.cluster.kubectl("delete", "crawljob", "--all", "-n", self.namespace, "--wait=false")


def wait_workers(fleet: Fleet, count: int, timeout: float = 90) -> dict[str, int]:
    """Wait until exactly ``count`` workers run; ``{unit: pid}`` of them."""

    def probe() -> dict[str, int] | None:
        workers = fleet.workers()
        return workers if len(workers) == count else None

    found: dict[str, int] = wait_for(probe, fleet, f"{count} running workers", timeout)
    return found
