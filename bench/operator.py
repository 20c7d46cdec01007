"""Operator benchmark on the e2e test bed: how fast the operator reacts, and what it costs.

    python -m bench.operator [--quick] [--json]

Real kube-apiserver, etcd and kube-controller-manager (built by tests/e2e/cluster/build.sh),
the process kubelet, ``crawlfleet operator`` in its own process with its default 5 s tick:

- ``scale_reaction``: a job runs one idle worker; a backlog of URLs appears in its frontier
  (enqueued straight into Redis, as a burst of discovered links would); time until the
  worker Deployment's replicas are patched up. KEDA's Redis scaler polls every 30 s by
  default and an HPA syncs every 15 s, so the same event takes them 15-45 s.
- ``requeue_after_pod_delete``: ``kubectl delete pod --force`` of a worker holding leases;
  time until none of that worker's leases is left in the frontier (the pod-watch path; the
  leases themselves would live 300 s); ``moves_again_after_pod_delete``: time until the first
  of them is fetched again by another worker (the crawl moving on: leases and host slots back).
- ``operator_rss_mb_100_jobs`` and ``reconcile_p99_ms``: the operator's resident memory and
  the 99th percentile of its per-job reconcile time while it steers 100 running CrawlJobs
  (external Redis, no workers: every tick reads stats, heartbeats and pods, and patches
  status), read from /proc and from its own /metrics histogram.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from crawlfleet.frontier import Frontier, Link, canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.controlplane import ControlPlane, binary_dir
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    OperatorProcess,
    apply,
    crawljob,
    install_crd,
    job_redis,
    leases_held,
    wait_crawled,
)
from tests.support.specs import frontier_settings


@dataclass
class _Seeds:
    """Seeds of jobs that never fetch (no workers): only their reconcile cost is measured."""

    seeds: list[str]
    hosts: list[str]


def _namespace(core: client.CoreV1Api, name: str) -> str:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def _replicas(apps: client.AppsV1Api, namespace: str, name: str) -> int | None:
    found = apps.list_namespaced_deployment(namespace, field_selector=f"metadata.name={name}").items
    return found[0].spec.replicas if found else None


@dataclass(frozen=True)
class Reaction:
    """One job's reactions, in seconds: a backlog to a scale-up; a pod deletion to its leases
    leaving the frontier, and to the first of them fetched again by another worker."""

    scaled: float
    requeued: float
    moved: float


def reaction_samples(
    cluster: Cluster, kubelet: KubeletDouble, log_dir: Path, samples: int
) -> list[Reaction]:
    core = client.CoreV1Api(cluster.api)
    namespace = _namespace(core, "bench-reaction")
    reactions: list[Reaction] = []
    site_config = SiteConfig(hosts=2, pages_per_host=50, hostile=False, latency_seconds=1.0)
    with TestSite(site_config) as site:
        operator = OperatorProcess(cluster, namespace, log_dir, "--tick-seconds", "5").start()
        try:
            for i in range(samples):
                reactions.append(_one_sample(cluster, kubelet, site, namespace, f"react-{i}"))
        finally:
            operator.stop()
    return reactions


def _one_sample(
    cluster: Cluster, kubelet: KubeletDouble, site: TestSite, namespace: str, name: str
) -> Reaction:
    """One job's reactions (see :class:`Reaction`)."""
    core, apps = client.CoreV1Api(cluster.api), client.AppsV1Api(cluster.api)
    job = crawljob(
        name,
        site,
        seeds=site.seeds[:1],
        scope={"maxDepth": 0},
        lease={"ttlSeconds": 300},
        workers={"minReplicas": 1, "maxReplicas": 3, "targetBacklogPerReplica": 100},
    )
    apply(cluster, job, namespace=namespace)
    wait_crawled(cluster, namespace, name, 1, timeout=120)  # one worker crawling
    r = job_redis(kubelet, core, namespace, name)
    kwargs = r.connection_pool.connection_kwargs
    url = f"redis://:{kwargs['password']}@{kwargs['host']}:{kwargs['port']}/0"
    # A backlog appears: 300 URLs of the slow site, queued the way a worker's flush does.
    urls = [canonicalize(site.url(k % 2, f"/backlog/{name}/{k}")) for k in range(300)]
    started = time.monotonic()
    asyncio.run(_enqueue(url, f"{namespace}.{name}", urls))
    wait_until(
        lambda: (_replicas(apps, namespace, f"{name}-workers") or 0) > 1,
        timeout=60,
        interval=0.05,
        what="scale-up",
    )
    scaled = time.monotonic() - started

    # Delete a worker that holds leases; time until its leases are back in the queue.
    selector = f"crawlfleet.io/job={name},app.kubernetes.io/component=worker"

    def holding() -> str | None:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        names = (p.metadata.name for p in pods)
        return next((n for n in names if leases_held(r, namespace, name, n)), None)

    holder = wait_until(holding, timeout=30, what="a worker holding leases")
    started = time.monotonic()
    cluster.kubectl("delete", "pod", holder, "-n", namespace, "--grace-period=0", "--force")
    wait_until(
        lambda: leases_held(r, namespace, name, holder) == 0,
        timeout=60,
        interval=0.02,
        what="requeue",
    )
    requeued = time.monotonic() - started
    # The crawl moves on: a URL requested before the deletion (one the dead worker held: the
    # backlog's pages answer 404, never retried) requested again by another worker.
    moved_at = wait_until(
        lambda: _refetched_since(site, started), timeout=120, interval=0.02, what="a refetch"
    )
    r.close()
    cluster.kubectl("delete", "crawljob", name, "-n", namespace, "--wait=false")
    return Reaction(scaled, requeued, moved_at - started)


def _refetched_since(site: TestSite, moment: float) -> float | None:
    """When (monotonic) a URL first requested before ``moment`` was first requested again
    after it; None while none was."""
    before = {r.path for r in site.all_requests() if r.start < moment}
    again = [r.start for r in site.all_requests() if r.start >= moment and r.path in before]
    return min(again, default=None)


async def _enqueue(url: str, job_id: str, urls: list[str]) -> None:
    """Enqueue through the frontier's own script, as a worker's flush would."""
    settings = frontier_settings(job_id, {"dedup": {"capacity": 100_000}})
    frontier = await Frontier.connect(url, settings)
    await frontier.enqueue([Link(u, 1, u) for u in urls])
    await frontier.aclose()


def hundred_jobs(cluster: Cluster, log_dir: Path, jobs: int) -> tuple[float, float]:
    core = client.CoreV1Api(cluster.api)
    namespace = _namespace(core, "bench-many")
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        operator = OperatorProcess(cluster, namespace, log_dir, "--tick-seconds", "5").start()
        try:
            nowhere = _Seeds(seeds=["http://127.0.0.9/"], hosts=["127.0.0.9"])
            documents = [
                crawljob(
                    f"many-{i}",
                    nowhere,  # type: ignore[arg-type]  # crawljob() reads seeds and hosts
                    redis={"url": server.url},
                    workers={"autoscale": "external", "replicas": 0, "minReplicas": 0},
                )
                for i in range(jobs)
            ]
            if documents:
                apply(cluster, *documents, namespace=namespace)
            custom = client.CustomObjectsApi(cluster.api)

            def all_running() -> bool:
                items = custom.list_namespaced_custom_object(
                    "crawlfleet.io", "v1alpha1", namespace, "crawljobs"
                )["items"]
                return (
                    sum(1 for j in items if j.get("status", {}).get("phase") == "Running") == jobs
                )

            wait_until(all_running, timeout=300, interval=1, what=f"{jobs} jobs Running")
            time.sleep(30)  # six ticks of every job
            assert operator.process is not None
            rss_kb = _rss_kb(operator.process.pid)
            _, metrics = operator.get("/metrics")
            p99 = _histogram_quantile(metrics, "crawlfleet_reconcile_duration_seconds", 0.99)
        finally:
            operator.stop()
    return rss_kb / 1024, p99 * 1000


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _histogram_quantile(text: str, name: str, q: float) -> float:
    """The bucket upper bound where quantile ``q`` falls (Prometheus' method, no interpolation)."""
    buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            upper = float("inf") if bound == "+Inf" else float(bound)
            buckets.append((upper, float(line.split()[-1])))
    total = buckets[-1][1]
    for bound, count in buckets:
        if count >= q * total:
            return bound
    return float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples; under 5 minutes")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    samples = 4 if args.quick else 10
    jobs = 100
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        plane = ControlPlane(binary_dir(), tmp / "control-plane")
        plane.start()
        try:
            api = config.new_client_from_config(config_file=str(plane.kubeconfig))
            cluster = Cluster(plane.kubeconfig, str(plane.bin_dir / "kubectl"), api, built=True)
            kubelet = KubeletDouble(
                config.new_client_from_config(config_file=str(plane.kubeconfig)), tmp / "kubelet"
            )
            kubelet.start()
            try:
                install_crd(cluster)
                reactions = reaction_samples(cluster, kubelet, tmp, samples)
                rss_mb, p99_ms = hundred_jobs(cluster, tmp, jobs)
            finally:
                kubelet.stop()
        finally:
            plane.stop()
    scale = [r.scaled for r in reactions]
    requeue = [r.requeued for r in reactions]
    moved = [r.moved for r in reactions]
    results: dict[str, Any] = {
        "samples": samples,
        "scale_reaction_p50_s": statistics.median(scale),
        "scale_reaction_max_s": max(scale),
        "requeue_after_pod_delete_p50_s": statistics.median(requeue),
        "requeue_after_pod_delete_max_s": max(requeue),
        "moves_again_after_pod_delete_p50_s": statistics.median(moved),
        "moves_again_after_pod_delete_max_s": max(moved),
        "operator_rss_mb_100_jobs": rss_mb,
        "reconcile_p99_ms": p99_ms,
        "tick_seconds": 5,
    }
    print(f"scale reaction p50:            {results['scale_reaction_p50_s']:.2f} s (target ≤ 5)")
    print(f"requeue after pod delete p50:  {results['requeue_after_pod_delete_p50_s']:.2f} s")
    print(f"crawl moves again, p50:        {statistics.median(moved):.2f} s (target ≤ 2)")
    print(f"operator RSS, {jobs} jobs:        {rss_mb:.0f} MB (target ≤ 100)")
    print(f"reconcile p99:                 {p99_ms:.0f} ms")
    if args.json:
        print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
