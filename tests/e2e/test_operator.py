"""The operator end to end: `kubectl apply` a CrawlJob, watch it crawl the test site, as a user.

Real kube-apiserver, etcd and kube-controller-manager; pods run as processes by the kubelet
double; the operator is ``crawlfleet operator`` in its own process; the workers crawl the
loopback test site and the assertions read the site's own request log. The steering rules
(scaling, draining, replacement, pins, suspend, restarts) are the contract suite's, run on
both backends: tests/e2e/test_steering.py. What is here is the operator's own.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_established, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    REPO,
    OperatorProcess,
    apply,
    condition,
    crawljob,
    install_crd,
    job_redis,
    leases_held,
    posted_events,
    running_operator,
    wait_crawled,
    wait_for_phase,
)


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> None:
    install_crd(cluster)


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite(SiteConfig(hosts=2, pages_per_host=40, hostile=False)) as running:
        yield running


def served_pages(site: TestSite) -> set[str]:
    return {
        canonicalize(r.url)
        for r in site.log.all_requests()
        if r.status == 200 and r.path != "/robots.txt"
    }


def worker_pods(core: client.CoreV1Api, namespace: str) -> list[Any]:
    selector = "app.kubernetes.io/component=worker"
    return list(core.list_namespaced_pod(namespace, label_selector=selector).items)


def events(core: client.CoreV1Api, namespace: str, reason: str) -> list[Any]:
    return [e for e in core.list_namespaced_event(namespace).items if e.reason == reason]


def test_a_crawljob_crawls_the_site_to_completion(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
    apps: client.AppsV1Api,
) -> None:
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, crawljob("books", site), namespace=namespace)
        job = wait_for_phase(
            cluster, namespace, "books", "Succeeded", timeout=150, operator=operator
        )

        # Children exist, owned by the job.
        uid = job["metadata"]["uid"]
        for deployment in ("books-redis", "books-workers"):
            owners = apps.read_namespaced_deployment(deployment, namespace).metadata
            assert [o.uid for o in owners.owner_references] == [uid]
        assert core.read_namespaced_service("books-redis", namespace).metadata.owner_references
        assert core.read_namespaced_secret("books-redis-auth", namespace).metadata.owner_references
        networking = client.NetworkingV1Api(cluster.api)
        assert networking.read_namespaced_network_policy("books-redis-access", namespace)

        # Every reachable page was crawled; the status says so in its own numbers.
        expected = set(site.expected_pages())
        assert served_pages(site) == expected
        status = job["status"]
        assert status["crawled"] == len(expected)
        assert status["queued"] == 0
        assert status["inFlight"] == 0
        complete = condition(job, "Complete")
        assert complete is not None
        assert complete["status"] == "True"
        assert status["completionTime"]

        # The workers go to zero and stay there.
        wait_until(
            lambda: apps.read_namespaced_deployment("books-workers", namespace).spec.replicas == 0,
            what="workers scaled to 0",
        )
        wait_until(lambda: not worker_pods(core, namespace), timeout=60, what="worker pods gone")

        final_row = ["books", "Succeeded", "0/0", "0", str(len(expected)), "0"]

        def table() -> list[list[str]] | None:
            lines = cluster.kubectl("get", "crawljobs", "-n", namespace).stdout.splitlines()
            rows = [line.split()[:6] for line in lines]
            return rows if rows[1:] == [final_row] else None

        header = wait_until(table, timeout=20, what="kubectl get crawljobs to settle")[0]
        assert header == ["NAME", "PHASE", "WORKERS", "QUEUED", "CRAWLED", "FAILED"]
        assert posted_events(core, namespace, "Scaled")
        assert posted_events(core, namespace, "Completed")

        # Its own endpoints: liveness, and metrics that agree with the status.
        assert operator.get("/healthz", operator.health_port)[0] == 200
        _, metrics = operator.get("/metrics")
        assert 'crawlfleet_jobs{phase="Succeeded"} 1.0' in metrics
        crawled = f'crawlfleet_job_crawled{{crawljob="books",namespace="{namespace}"}}'
        assert f"{crawled} {float(len(expected))}" in metrics
        assert operator.reconciles() > 0


def slow_site(pages_per_host: int = 100, latency: float = 0.3) -> TestSite:
    """A site slow enough that a crawl is still running when the test acts on it."""
    return TestSite(
        SiteConfig(hosts=2, pages_per_host=pages_per_host, hostile=False, latency_seconds=latency)
    )


def worker_pid(pod: Any) -> int:
    (status,) = pod.status.container_statuses
    return int(status.container_id.removeprefix("process://"))


def test_a_deleted_worker_pods_leases_are_requeued_at_once(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    tmp_path: Path,
    core: client.CoreV1Api,
) -> None:
    with slow_site() as site, running_operator(cluster, namespace, tmp_path) as operator:
        # Leases live 5 minutes: only the pod watch can explain a requeue within seconds.
        job = crawljob("deleted", site, lease={"ttlSeconds": 300}, workers={"minReplicas": 2})
        apply(cluster, job, namespace=namespace)

        wait_crawled(cluster, namespace, "deleted", 10)

        def busy_worker() -> Any:
            pods = [p for p in worker_pods(core, namespace) if p.status.phase == "Running"]
            if len(pods) < 2:
                return None
            r = job_redis(kubelet, core, namespace, "deleted")
            return next(
                (p for p in pods if leases_held(r, namespace, "deleted", p.metadata.name)), None
            )

        victim_pod = wait_until(busy_worker, timeout=60, what="two workers crawling")
        victim = victim_pod.metadata.name
        # Frozen first, so it cannot drain and release its leases itself on SIGTERM: what
        # comes back quickly can only have come back through the operator's pod watch.
        os.kill(worker_pid(victim_pod), signal.SIGSTOP)
        cluster.kubectl("delete", "pod", victim, "-n", namespace, "--grace-period=0", "--force")

        def requeued() -> Any:
            return [e for e in events(core, namespace, "LeasesRequeued") if victim in e.message]

        (event,) = wait_until(requeued, timeout=10, interval=0.1, what="the victim's requeue")
        # Requeued through the pod watch ("is gone"), not by the leases' expiry.
        assert "is gone" in event.message
        wait_for_phase(cluster, namespace, "deleted", "Succeeded", timeout=150, operator=operator)
        assert served_pages(site) == set(site.expected_pages())


def test_an_operator_restart_makes_no_second_set_of_children(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    tmp_path: Path,
    core: client.CoreV1Api,
    apps: client.AppsV1Api,
) -> None:
    with slow_site() as site:
        with running_operator(cluster, namespace, tmp_path):
            apply(cluster, crawljob("restart", site), namespace=namespace)

            wait_crawled(cluster, namespace, "restart", 20)
        with running_operator(cluster, namespace, tmp_path) as operator:
            wait_for_phase(
                cluster, namespace, "restart", "Succeeded", timeout=150, operator=operator
            )
        assert len(posted_events(core, namespace, "Seeded")) == 1
        deployments = apps.list_namespaced_deployment(namespace).items
        assert sorted(d.metadata.name for d in deployments) == ["restart-redis", "restart-workers"]
        secrets = [s.metadata.name for s in core.list_namespaced_secret(namespace).items]
        assert secrets.count("restart-redis-auth") == 1
        assert served_pages(site) == set(site.expected_pages())


def test_deleting_a_job_with_external_redis_removes_its_keys(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    site: TestSite,
    tmp_path: Path,
    apps: client.AppsV1Api,
) -> None:
    with RedisServer(tmp_path / "redis") as server, running_operator(cluster, namespace, tmp_path):
        job = crawljob("ext", site, redis={"url": server.url})
        apply(cluster, job, namespace=namespace)
        wait_for_phase(cluster, namespace, "ext", "Succeeded", timeout=150)
        keys = redis.Redis.from_url(server.url)
        assert keys.keys(f"cf:{{{namespace}.ext}}:*")
        cluster.kubectl("delete", "crawljob/ext", "-n", namespace, "--timeout=60s")
        assert keys.keys(f"cf:{{{namespace}.ext}}:*") == []
        wait_until(
            lambda: not apps.list_namespaced_deployment(namespace).items,
            timeout=60,
            what="children garbage-collected",
        )


def test_a_spec_that_passed_admission_but_is_invalid_is_marked_not_retried(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
) -> None:
    # URL patterns valid one by one (CEL checks each) but too large to compile together: Python
    # refuses the list, the API server cannot. (A pattern invalid alone is refused at admission.)
    too_large = [f"[a-z]{{1,1000}}x{index}" for index in range(100)]
    job = crawljob("badregex", site, scope={"exclude": too_large})
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, job, namespace=namespace)
        found = wait_for_phase(cluster, namespace, "badregex", "Failed", timeout=30)
        invalid = condition(found, "InvalidSpec")
        assert invalid is not None
        assert invalid["status"] == "True"
        assert "spec.scope.exclude: are too large to match together" in invalid["message"]
        time.sleep(3)  # ticks keep coming: nothing may be retried or crash
        assert len(posted_events(core, namespace, "InvalidSpec")) == 1
        assert operator.process is not None
        assert operator.process.poll() is None
        assert "Traceback" not in operator.log()


def _peers(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The operators a KopfPeering lists as alive (its status: one entry per peer)."""
    found = cluster.kubectl("get", "kopfpeering", name, "-n", namespace, "-o", "json")
    status: dict[str, Any] = json.loads(found.stdout).get("status") or {}
    return status


def test_two_peered_operators_never_both_act_and_one_takes_over(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    tmp_path: Path,
) -> None:
    cluster.kubectl(
        "apply", "-f", str(REPO / "charts" / "crawlfleet" / "crds" / "kopf-peering.yaml")
    )
    wait_established(cluster, "kopfpeerings.kopf.dev")
    peering = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "ha"}}
    apply(cluster, peering, namespace=namespace)
    first = OperatorProcess(cluster, namespace, tmp_path, peering="ha").start()
    time.sleep(3)  # a peer that starts at the very same moment can leave both paused (seen 2/14)
    second = OperatorProcess(cluster, namespace, tmp_path, peering="ha").start()
    try:
        with slow_site() as site:
            # both have written their keep-alive, so each has read the other's, before there
            # is work (a fixed 3 s was too short under CI load: both reconciled)
            wait_until(
                lambda: len(_peers(cluster, namespace, "ha")) == 2 or None,
                timeout=60,
                what="both operators in the KopfPeering's status",
            )
            time.sleep(1)
            apply(cluster, crawljob("ha", site), namespace=namespace)
            wait_crawled(cluster, namespace, "ha", 20, timeout=90)
            counts = [first.reconciles(), second.reconciles()]
            assert sorted(count > 0 for count in counts) == [False, True], counts
            active, standby = (first, second) if counts[0] else (second, first)
            assert active.stop() == 0  # a clean exit withdraws from the peering at once
            wait_for_phase(cluster, namespace, "ha", "Succeeded", timeout=150, operator=standby)
            assert standby.reconciles() > 0
            assert served_pages(site) == set(site.expected_pages())
    finally:
        first.stop()
        second.stop()
