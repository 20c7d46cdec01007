"""The operator rides out an API server that throttles and fails for ten seconds.

The operator talks to the real kube-apiserver through :class:`OverloadedApiServer`, a test
double of an overloaded API server (tests/e2e/overload.py); the test itself talks to the real
one directly, as the rest of the cluster would. During the outage a backlog appears in a job's
frontier, so the operator decides to scale up while every call it makes is refused: the
decision must land once the API server answers again, with no failed reconcile (the calls
rode it out instead of failing the handler) and no restart of the operator.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from crawlfleet.frontier import Frontier, Link, canonicalize
from crawlfleet.local.redis_server import RedisServer
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.operator_support import (
    OperatorProcess,
    apply,
    crawljob,
    get_job,
    install_crd,
    wait_for_phase,
)
from tests.e2e.overload import OverloadedApiServer
from tests.support.specs import frontier_settings

OUTAGE_SECONDS = 10


@dataclass(frozen=True)
class _Nowhere:
    """Seeds of a job whose workers never run (no kubelet here): only its steering counts."""

    seeds: list[str] = field(default_factory=lambda: ["http://127.0.0.9/"])
    hosts: list[str] = field(default_factory=lambda: ["127.0.0.9"])


async def _enqueue(url: str, job_id: str, count: int) -> None:
    frontier = await Frontier.connect(
        url, frontier_settings(job_id, {"dedup": {"capacity": 100_000}})
    )
    try:
        urls = [canonicalize(f"http://127.0.0.9/backlog/{k}") for k in range(count)]
        await frontier.enqueue([Link(u, 1, u) for u in urls])
    finally:
        await frontier.aclose()


def _metric(operator: OperatorProcess, name: str) -> float:
    _, text = operator.get("/metrics")
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return 0.0


def test_a_scale_decided_while_the_api_server_refuses_lands_afterwards(
    cluster: Cluster,
    apps: client.AppsV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    install_crd(cluster)
    proxy = OverloadedApiServer(cluster.kubeconfig, tmp_path).start()
    with RedisServer(tmp_path / "redis") as redis_server:
        operator = OperatorProcess(
            cluster, namespace, tmp_path, kubeconfig=proxy.kubeconfig
        ).start()
        try:
            name = "busy"
            job = crawljob(
                name,
                _Nowhere(),  # type: ignore[arg-type]  # crawljob() reads seeds and hosts
                redis={"url": redis_server.url},
                workers={"minReplicas": 1, "maxReplicas": 4, "targetBacklogPerReplica": 50},
            )
            apply(cluster, job, namespace=namespace)
            wait_for_phase(cluster, namespace, name, "Running", timeout=60, operator=operator)
            workers = f"{name}-workers"
            wait_until(
                lambda: apps.read_namespaced_deployment(workers, namespace).spec.replicas == 1,
                timeout=30,
                what="one worker wanted",
            )
            errors_before = _metric(operator, "crawlfleet_reconcile_errors_total")

            proxy.overloaded = True
            outage_started = time.monotonic()
            asyncio.run(_enqueue(redis_server.url, f"{namespace}.{name}", 300))
            time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - outage_started)))
            proxy.overloaded = False

            scale_path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{workers}/scale"
            refused_scales = [r for r in proxy.refused if r.path == scale_path]
            assert refused_scales, f"no scale met the outage; refused: {proxy.refused[:20]}"
            assert {r.status for r in proxy.refused} == {429, 503}

            wait_until(
                lambda: apps.read_namespaced_deployment(workers, namespace).spec.replicas == 4,
                timeout=60,
                what="the scale decided during the outage",
            )
            wait_until(
                lambda: (
                    get_job(cluster, namespace, name)["status"].get("desiredReplicas") == 4
                    and get_job(cluster, namespace, name)["status"].get("queued", 0) >= 300
                ),
                timeout=60,
                what="the status written during the outage",
            )
            assert operator.process is not None
            assert operator.process.poll() is None
            # Ridden out inside the calls: no tick failed and had to be retried by kopf.
            assert _metric(operator, "crawlfleet_reconcile_errors_total") == errors_before
        except AssertionError as error:
            raise AssertionError(f"{error}\n{operator.log()}") from None
        finally:
            operator.stop()
            proxy.stop()
