"""The worker image on a real node: kubelet, containerd and runc run what the operator deploys.

Everything the other e2e tests prove about pods, they prove on the kubelet double, which runs a
container as a local process of the test's own user. Here the operator (in its own process on
the machine, as in the other e2e tests) deploys its worker Deployment into a namespace whose
pods the real kube-scheduler binds to the real node (cluster/node.py), where containerd runs
``crawlfleet/worker:dev`` as built from crawler_image/Dockerfile. A pod has its own network
namespace and loopback, so what it must reach listens on the node's bridge addresses: the test
site, the job's Redis (an external ``redis.url``: a managed Redis would need a redis image and
a Service address, and there is neither a registry nor kube-proxy here) and the S3 store.

What can only be seen here: the image's user, read-only root and dropped capabilities as the
kernel applies them; the probes as the kubelet runs them; SIGTERM from an API delete reaching
the worker inside its grace; a liveness failure killing a hung container.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.node import NODE_NAME, SERVICE_ADDRESSES, RealNode
from tests.e2e.operator_support import (
    OperatorProcess,
    apply,
    crawljob,
    install_crd,
    leases_held,
    wait_crawled,
    wait_for_phase,
)
from tests.support.images import built_images
from tests.support.s3 import REGION, S3Server

S3_ADDRESS, REDIS_ADDRESS, SITE_ADDRESS = SERVICE_ADDRESSES[:3]
NONROOT_UID = 65532


@pytest.fixture(scope="module")
def worker_on_node(real_node: RealNode) -> str:
    """The worker image, copied into the node's containerd: the name pods give it."""
    image = built_images().worker.removeprefix("localhost/")
    started = time.monotonic()
    real_node.import_image(f"localhost/{image}")
    real_node.timings["worker image import"] = time.monotonic() - started
    return image


@pytest.fixture(scope="module")
def node(real_node: RealNode, cluster: Cluster) -> RealNode:
    """The real node, with the CRD applied."""
    install_crd(cluster)
    return real_node


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("node-s3"), host=S3_ADDRESS) as server:
        yield server


@dataclass
class NodeCrawl:
    """One test's crawl on the real node: its namespace, operator, Redis and bucket."""

    node: RealNode
    cluster: Cluster
    core: client.CoreV1Api
    namespace: str
    operator: OperatorProcess
    redis_server: RedisServer
    store: S3Server
    bucket: str
    image: str

    def start(self, name: str, site: TestSite, **spec: Any) -> None:
        """A CrawlJob whose workers reach the site, Redis and the store at node addresses."""
        output = {
            "maxFileAgeSeconds": 1,
            "destination": f"s3://{self.bucket}/crawl/",
            "s3": {
                "endpoint": self.store.endpoint_url,
                "region": REGION,
                "secretRef": {"name": "store"},
            },
        }
        redis_spec = {"url": self.redis_server.url}
        workers = {"image": self.image, **spec.pop("workers", {})}
        job = crawljob(name, site, redis=redis_spec, output=output, workers=workers, **spec)
        apply(self.cluster, job, namespace=self.namespace)

    def wait_phase(self, name: str, phase: str, timeout: float = 120) -> None:
        wait_for_phase(
            self.cluster, self.namespace, name, phase, timeout=timeout, operator=self.operator
        )

    def frontier(self) -> Any:
        return redis.Redis.from_url(self.redis_server.url, decode_responses=True)

    def worker_pods(self) -> list[Any]:
        selector = "app.kubernetes.io/component=worker"
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def running_workers(self) -> list[Any]:
        return [
            pod
            for pod in self.worker_pods()
            if not pod.metadata.deletion_timestamp
            and pod.status.container_statuses
            and pod.status.container_statuses[0].state.running
        ]

    def busy_worker(self, job: str) -> Any:
        """A running worker pod of ``job`` that holds leases, once pages were crawled (so the
        site's robots.txt was read: a worker stopped while it holds the robots.txt lock would
        hold every worker off the host until the lock's ttl, a minute)."""
        wait_crawled(self.cluster, self.namespace, job, 5, timeout=90)
        r = self.frontier()

        def busy() -> Any:
            return next(
                (
                    pod
                    for pod in self.running_workers()
                    if leases_held(r, self.namespace, job, pod.metadata.name)
                ),
                None,
            )

        return wait_until(busy, timeout=60, what="a worker holding leases")

    def events(self, reason: str) -> list[Any]:
        found = self.core.list_namespaced_event(self.namespace).items
        return [e for e in found if e.reason == reason]

    def stored_pages(self) -> set[str]:
        """The URLs of the pages in the bucket, read from the store's own disk."""
        pages: set[str] = set()
        for key, path in self.store.stored_objects(self.bucket).items():
            if key.startswith("crawl/pages/"):
                for line in path.read_text().splitlines():
                    record = json.loads(line)
                    if record["status"] == 200:
                        pages.add(str(canonicalize(record["url"])))
        return pages


@pytest.fixture
def crawl(
    node: RealNode,
    worker_on_node: str,
    cluster: Cluster,
    core: client.CoreV1Api,
    store: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[NodeCrawl]:
    """A namespace whose pods go to the real node, the operator watching it, a Redis on the
    node's bridge (with a password: any pod could reach it), and a bucket with its keys."""
    # The administrator's word that jobs may use that Redis (tenancy policy).
    monkeypatch.setenv("CRAWLFLEET_ALLOWED_REDIS_HOSTS", REDIS_ADDRESS)
    namespace = node.create_namespace(f"real-node-{secrets.token_hex(3)}")
    keys = store.root_credentials
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name="store", labels={"crawlfleet.io/crawljob-secret": "true"}
            ),
            string_data={
                "AWS_ACCESS_KEY_ID": keys.access_key_id,
                "AWS_SECRET_ACCESS_KEY": keys.secret_access_key,
            },
        ),
    )
    redis_server = RedisServer(
        tmp_path / "redis", host=REDIS_ADDRESS, password=secrets.token_hex(16)
    )
    operator = OperatorProcess(cluster, namespace, tmp_path)
    try:
        with redis_server:
            operator.start()
            yield NodeCrawl(
                node, cluster, core, namespace, operator, redis_server, store,
                store.create_bucket(namespace), worker_on_node,
            )  # fmt: skip
    finally:
        operator.stop()
        core.delete_namespace(namespace)


def site_on_node(pages_per_host: int, latency_seconds: float) -> TestSite:
    config = SiteConfig(
        hosts=1, pages_per_host=pages_per_host, hostile=False, latency_seconds=latency_seconds
    )
    return TestSite(config, base_address=SITE_ADDRESS)


def expected_pages(site: TestSite) -> set[str]:
    return {str(canonicalize(url)) for url in site.expected_pages()}


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def root_mount_options(pid: int) -> list[str]:
    """The mount options of the process's ``/`` as the kernel has it (its mount namespace)."""
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError(f"no / in /proc/{pid}/mountinfo")


def is_ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or ())


def test_the_operators_workers_crawl_the_site_to_succeeded_into_the_store(
    crawl: NodeCrawl,
) -> None:
    """The worker Deployment's pods run in containerd on the real node, fetch the test site
    over the pod network and write every page to the S3 store."""
    with site_on_node(pages_per_host=60, latency_seconds=0.05) as site:
        crawl.start("crawl", site)
        pod = wait_until(
            lambda: next(iter(crawl.running_workers()), None),
            timeout=60,
            what="a running worker pod",
        )
        crawl.wait_phase("crawl", "Succeeded")
        served = {
            str(canonicalize(r.url)) for r in site.log.all_requests() if r.path != "/robots.txt"
        }
        expected = expected_pages(site)
    assert pod.spec.node_name == NODE_NAME
    assert pod.status.container_statuses[0].container_id.startswith("containerd://")
    assert pod.status.pod_ip != pod.status.host_ip  # its own network namespace
    assert served == expected
    assert crawl.stored_pages() == expected


def test_the_worker_container_runs_restricted_and_its_probes_pass(crawl: NodeCrawl) -> None:
    """Read from the kernel, not the pod spec: the worker's process runs as 65532 with no
    capability and no way to gain one, under seccomp, on a read-only root; the kubelet's own
    readiness and liveness probes pass."""
    with site_on_node(pages_per_host=200, latency_seconds=0.2) as site:
        crawl.start("restricted", site)
        pod = wait_until(
            lambda: next((p for p in crawl.running_workers() if is_ready(p)), None),
            timeout=60,
            what="a Ready worker pod",
        )
        assert pod.spec.node_name == NODE_NAME
        status = pod.status.container_statuses[0]
        pid = crawl.node.container_pid(status.container_id)
        proc = proc_status(pid)
        assert proc["Uid"].split() == [str(NONROOT_UID)] * 4
        assert proc["Gid"].split() == [str(NONROOT_UID)] * 4
        for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(proc[capabilities], 16) == 0, (capabilities, proc[capabilities])
        assert proc["NoNewPrivs"] == "1"
        assert proc["Seccomp"] == "2"  # a filter: RuntimeDefault
        assert "ro" in root_mount_options(pid)
        assert "crawlfleet" in Path(f"/proc/{pid}/cmdline").read_text()
        # The kubelet's probes, run against the pod's address: Ready once /metrics answered
        # (a readiness failure before the worker listened is expected), never a liveness
        # failure.
        assert status.ready
        assert status.restart_count == 0
        failed = [e.message for e in crawl.events("Unhealthy")]
        assert not [m for m in failed if "Liveness" in m], failed


def test_an_api_delete_reaches_the_worker_as_sigterm_and_it_drains_in_its_grace(
    crawl: NodeCrawl,
) -> None:
    """``kubectl delete pod``: the kubelet sends SIGTERM, the worker finishes what it holds and
    exits within the pod's grace. Leases last 5 minutes and a silent worker is dead only after
    2: nothing but the worker itself can have released its leases, and no page is lost."""
    with site_on_node(pages_per_host=80, latency_seconds=0.3) as site:
        crawl.start("delete", site, lease={"ttlSeconds": 300, "deadAfterSeconds": 120})
        victim = crawl.busy_worker("delete").metadata.name
        crawl.cluster.kubectl("delete", "pod", victim, "-n", crawl.namespace, "--wait=false")
        wait_until(
            lambda: victim not in {p.metadata.name for p in crawl.worker_pods()},
            timeout=90,
            what=f"{victim} gone",
        )
        assert leases_held(crawl.frontier(), crawl.namespace, "delete", victim) == 0
        crawl.wait_phase("delete", "Succeeded")
        assert not [e for e in crawl.events("LeasesRequeued") if victim in e.message]
        expected = expected_pages(site)
    assert crawl.stored_pages() == expected


def test_a_hung_worker_fails_liveness_is_restarted_by_the_kubelet_and_its_leases_requeued(
    crawl: NodeCrawl,
) -> None:
    """SIGSTOP the worker's process: its /metrics stops answering, the kubelet's liveness probe
    fails and the kubelet kills and restarts the container; the new incarnation's heartbeat
    tells the operator the old one is gone, and its leases go back to the queue. The operator
    would call a worker dead only after 2 minutes: the kubelet acted, not the operator."""
    with site_on_node(pages_per_host=80, latency_seconds=0.3) as site:
        crawl.start("hung", site, lease={"ttlSeconds": 300, "deadAfterSeconds": 120})
        victim = crawl.busy_worker("hung")
        name = victim.metadata.name
        os.kill(
            crawl.node.container_pid(victim.status.container_statuses[0].container_id),
            signal.SIGSTOP,
        )

        def restarted() -> Any:
            pod = crawl.core.read_namespaced_pod(name, crawl.namespace)
            status = pod.status.container_statuses[0]
            return status if status.restart_count >= 1 else None

        status = wait_until(restarted, timeout=90, what=f"{name} restarted by the kubelet")
        assert status.last_state.terminated.exit_code == 128 + signal.SIGKILL
        unhealthy = [e.message for e in crawl.events("Unhealthy")]
        assert any("Liveness probe failed" in m for m in unhealthy), unhealthy
        wait_until(
            lambda: [e for e in crawl.events("LeasesRequeued") if name in e.message],
            timeout=60,
            what=f"the leases of {name}'s first incarnation requeued",
        )
        crawl.wait_phase("hung", "Succeeded", timeout=150)
        expected = expected_pages(site)
    assert crawl.stored_pages() == expected
