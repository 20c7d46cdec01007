"""The operator end to end: `kubectl apply` a CrawlJob, watch it crawl the test site, as a user.

Real kube-apiserver, etcd and kube-controller-manager; pods run as processes by the kubelet
double; the operator is ``crawlfleet operator`` in its own process; the workers crawl the
loopback test site and the assertions read the site's own request log.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    apply,
    condition,
    crawljob,
    get_job,
    install_crd,
    running_operator,
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
        try:
            job = wait_for_phase(cluster, namespace, "books", "Succeeded", timeout=150)
        except AssertionError:
            raise AssertionError(operator.log()) from None

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
        assert events(core, namespace, "Scaled")
        assert events(core, namespace, "Completed")
