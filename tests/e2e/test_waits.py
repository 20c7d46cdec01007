"""A CrawlJob that does not move says why, on the real control plane (DESIGN §4).

Real kube-apiserver and controllers, the process kubelet (whose scheduling filter leaves a pod
that requests more CPU than the node has Pending and Unschedulable, as the scheduler does), the
real operator and workers, the loopback test site and a real S3 server (versitygw) stopped
mid-crawl. What the job waits for is its ``Waiting`` condition, its WAITING column, an Event and
a metric; leases that stop moving are its ``Stalled`` condition and an Event.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    apply,
    condition,
    crawljob,
    get_job,
    install_crd,
    posted_events,
    running_operator,
    wait_condition,
    wait_crawled,
    wait_for_phase,
)
from tests.e2e.test_output import credentials_secret, own_bucket
from tests.support.frontier_actor import fetch_budget
from tests.support.s3 import S3Server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> None:
    install_crd(cluster)


@pytest.fixture
def site() -> Iterator[TestSite]:
    config = SiteConfig(hosts=2, pages_per_host=60, hostile=False, latency_seconds=0.05)
    with TestSite(config) as running:
        yield running


@pytest.fixture
def slow_site() -> Iterator[TestSite]:
    """A site still being crawled when the test stops the store: 2 requests at a time, 0.1 s
    each, 200 pages."""
    config = SiteConfig(hosts=1, pages_per_host=200, hostile=False, latency_seconds=0.1)
    with TestSite(config) as running:
        yield running


def warnings(core: client.CoreV1Api, namespace: str, reason: str) -> list[Any]:
    found = core.list_namespaced_event(namespace, field_selector=f"reason={reason}").items
    return list(found)


def test_an_unschedulable_worker_is_what_the_job_waits_for_and_is_not_replaced(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker pod no node can hold (it requests 1000 CPUs) stays Pending: the job says it
    waits for a live worker, in the scheduler's words, and the pod is left alone -- it never
    ran, so it is not "running but dead", and a new pod would not fit either."""
    # A worker silent past max(startup grace, deadAfterSeconds) = 2 s would be dead by now.
    monkeypatch.setenv("CRAWLFLEET_STARTUP_GRACE_SECONDS", "1")
    document = crawljob(
        "too-big",
        site,
        workers={"resources": {"requests": {"cpu": "1000", "memory": "256Mi"}}},
        lease={"deadAfterSeconds": 2},
    )
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, document, namespace=namespace)
        found = wait_condition(cluster, namespace, "too-big", "Waiting", timeout=90)
        assert found["reason"] == "NoLiveWorker", operator.log()
        assert found["message"].startswith(
            "no live worker: 1 not started: Unschedulable (0/1 nodes are available: 1"
            " Insufficient cpu."
        )
        selector = "app.kubernetes.io/component=worker,crawlfleet.io/job=too-big"
        (pod,) = core.list_namespaced_pod(namespace, label_selector=selector).items
        assert pod.status.phase == "Pending"
        # Full ticks well past the time a silent worker is dead: the pod is still the one.
        seen = operator.reconciles()
        wait_until(lambda: operator.reconciles() >= seen + 4, timeout=30, what="four ticks")
        (still,) = core.list_namespaced_pod(namespace, label_selector=selector).items
        assert still.metadata.uid == pod.metadata.uid
        assert not warnings(core, namespace, "WorkerReplaced")
        (event,) = posted_events(core, namespace, "Waiting")
        assert event.type == "Warning"
        assert "Insufficient cpu" in event.message

        # Where people look: kubectl get, and the metric an alert reads.
        lines = cluster.kubectl("get", "crawljobs", "-n", namespace).stdout.splitlines()
        header, row = lines[0].split(), lines[1].split()
        assert row[header.index("WAITING")] == "NoLiveWorker"
        _, metrics = operator.get("/metrics")
        series = f'crawljob="too-big",namespace="{namespace}",reason="NoLiveWorker"'
        assert f"crawlfleet_job_waiting{{{series}}} 1.0" in metrics
        assert get_job(cluster, namespace, "too-big")["status"]["crawled"] == 0


def test_leases_stuck_behind_a_store_that_is_down_are_stalled_until_it_is_back(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    slow_site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
    private_s3_server: S3Server,
) -> None:
    """The job's bucket stops answering mid-crawl: the worker's pages wait in the output stage
    while it heartbeats. Past the stall threshold (3 × 2 + 2 + 1 = 9 s) the job is Stalled,
    reason StuckOutput, with the workers' account; once the store is back it moves, the
    condition clears with an Event, and the job succeeds."""
    server = private_s3_server
    bucket = server.create_bucket(f"stall-{namespace}")
    credentials_secret(core, namespace, server, "store-keys")
    document = crawljob(
        "stuck",
        slow_site,
        concurrency={"perWorker": 2, "perHost": 2},
        lease={"ttlSeconds": 2, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
        fetch=fetch_budget(2.0),
        workers={"minReplicas": 1, "maxReplicas": 1},
    )
    document["spec"]["output"] = own_bucket(server, bucket)
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, document, namespace=namespace)
        wait_crawled(cluster, namespace, "stuck", 10, timeout=120)
        server.stop()
        found = wait_condition(cluster, namespace, "stuck", "Stalled", timeout=90)
        assert found["reason"] == "StuckOutput", operator.log()
        assert " in output on stuck-workers-" in found["message"]
        assert "their records wait for the output to become durable" in found["message"]
        (stalled,) = posted_events(core, namespace, "Stalled")
        assert stalled.type == "Warning"

        server.start()
        job = wait_for_phase(cluster, namespace, "stuck", "Succeeded", timeout=180)
        cleared = condition(job, "Stalled")
        assert cleared is not None
        assert (cleared["status"], cleared["reason"]) == ("False", "Moving")
        assert posted_events(core, namespace, "StallEnded")
        assert job["status"]["crawled"] == len(slow_site.expected_pages())
