"""The tenancy policy on the real API server: a CrawlJob gets no more than the policy gives.

A user who may create CrawlJobs but not Pods must not get, through the operator, a pod with a
hostPath of the node, an image of their choosing, or a Secret of the namespace that nobody
meant for crawlfleet. Each such job is marked ``InvalidSpec`` at the exact field, and the
operator creates none of its children; a job inside the policy gets them all, the workers'
egress NetworkPolicy included (the API server validates every manifest).
"""

from __future__ import annotations

import json
import socket
import threading
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
    running_operator,
    wait_crawled,
)

LABEL = {"crawlfleet.io/crawljob-secret": "true"}


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> None:
    install_crd(cluster)


def secret(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    labels: dict[str, str],
    url: str = "redis://:hunter2@redis.elsewhere.svc:6379/0",
) -> None:
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, labels=labels), string_data={"url": url}
        ),
    )


class WatchedPort:
    """A TCP port on a loopback address that counts who connects (and hangs up on them): where
    a Redis URL points when the test must know whether the operator knocked."""

    def __init__(self, host: str) -> None:
        self.socket = socket.create_server((host, 0))
        self.host, self.port = self.socket.getsockname()[:2]
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> WatchedPort:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.socket.close()  # accept() then fails, and the thread ends
        self._thread.join(5)

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections += 1
            connection.close()


def invalid(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        entry = condition(get_job(cluster, namespace, name), "InvalidSpec")
        return entry if entry and entry["status"] == "True" else None

    entry: dict[str, Any] = wait_until(found, timeout=60, interval=0.5, what=f"{name} InvalidSpec")
    return entry


def children_of(core: client.CoreV1Api, namespace: str, job: str) -> list[str]:
    """Every object of the namespace that the operator made for ``job`` (by its label)."""
    selector = f"crawlfleet.io/job={job}"
    apps = client.AppsV1Api(core.api_client)
    networking = client.NetworkingV1Api(core.api_client)
    listed = [
        *apps.list_namespaced_deployment(namespace, label_selector=selector).items,
        *core.list_namespaced_service(namespace, label_selector=selector).items,
        *core.list_namespaced_config_map(namespace, label_selector=selector).items,
        *core.list_namespaced_secret(namespace, label_selector=selector).items,
        *core.list_namespaced_persistent_volume_claim(namespace, label_selector=selector).items,
        *networking.list_namespaced_network_policy(namespace, label_selector=selector).items,
    ]
    return sorted(item.metadata.name for item in listed)


def test_jobs_that_ask_for_more_than_the_policy_gives_are_refused_and_get_no_children(
    cluster: Cluster,
    crd: None,
    namespace: str,
    tmp_path: Path,
    core: client.CoreV1Api,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRAWLFLEET_ALLOWED_REDIS_HOSTS", "redis.elsewhere.svc")
    secret(core, namespace, "someone-elses", {})
    secret(core, namespace, "meant-for-crawls", LABEL)
    with TestSite(SiteConfig(hosts=1, pages_per_host=5, hostile=False)) as site:
        host_path = crawljob("host-path", site, output={"volume": {"hostPath": {"path": "/"}}})
        foreign = crawljob("foreign-image", site, workers={"image": "evil.example/miner:1"})
        unlabelled = crawljob("unlabelled", site, redis={"secretRef": {"name": "someone-elses"}})
        missing = crawljob("missing", site, redis={"secretRef": {"name": "not-there"}})
        allowed = crawljob("allowed", site, redis={"secretRef": {"name": "meant-for-crawls"}})
        with running_operator(cluster, namespace, tmp_path) as operator:
            apply(cluster, host_path, foreign, unlabelled, missing, allowed, namespace=namespace)
            refusals = {
                name: invalid(cluster, namespace, name)["message"]
                for name in ("host-path", "foreign-image", "unlabelled", "missing")
            }
            # The job inside the policy gets its children, which the API server accepted.
            wait_until(
                lambda: "allowed-workers" in children_of(core, namespace, "allowed"),
                timeout=60,
                what="the allowed job's children",
            )
            log = operator.log()

    assert refusals["host-path"] == (
        "spec.output.volume.hostPath: is not a volume type this operator allows (allowed:"
        " emptyDir, ephemeral, persistentVolumeClaim); its administrator chooses them (chart"
        " value policy.volumeTypes)"
    ), log
    assert refusals["foreign-image"].startswith(
        "spec.workers.image: is not an image this operator allows (allowed: crawlfleet/worker)"
    )
    assert refusals["unlabelled"] == (
        "spec.redis.secretRef.name: Secret someone-elses is not labelled"
        " crawlfleet.io/crawljob-secret=true, the label that lets CrawlJobs use a Secret (add it"
        " if this Secret is meant for crawlfleet)"
    )
    assert refusals["missing"] == (
        "spec.redis.secretRef.name: Secret not-there does not exist in the job's namespace"
    )
    for name in refusals:
        assert get_job(cluster, namespace, name)["status"]["phase"] == "Failed"
        assert children_of(core, namespace, name) == [], name
    warned = core.list_namespaced_event(namespace, field_selector="reason=InvalidSpec").items
    assert sorted({event.involved_object.name for event in warned}) == sorted(refusals)
    assert children_of(core, namespace, "allowed") == [
        "allowed-config",
        "allowed-metrics",
        "allowed-worker-egress",
        "allowed-workers",
    ]
    # The workers read the Redis URL from the labelled Secret, by reference only.
    workers = client.AppsV1Api(cluster.api).read_namespaced_deployment("allowed-workers", namespace)
    (container,) = workers.spec.template.spec.containers
    (redis_url,) = [env for env in container.env if env.name == "CRAWLFLEET_REDIS_URL"]
    assert redis_url.value_from.secret_key_ref.name == "meant-for-crawls"
    assert "Traceback" not in log


def test_a_running_job_edited_past_the_policy_is_refused_and_its_workers_stop(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    tmp_path: Path,
    apps: client.AppsV1Api,
) -> None:
    config = SiteConfig(hosts=1, pages_per_host=200, hostile=False, latency_seconds=0.5)
    with TestSite(config) as site, running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, crawljob("edited", site), namespace=namespace)
        wait_crawled(cluster, namespace, "edited", 2, timeout=90)
        before = apps.read_namespaced_deployment("edited-workers", namespace)
        cluster.kubectl(
            "patch", "crawljob/edited", "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"workers": {"image": "evil.example/miner:1"}}}),
        )  # fmt: skip
        message = invalid(cluster, namespace, "edited")["message"]
        assert message.startswith("spec.workers.image: is not an image"), operator.log()
        wait_until(
            lambda: apps.read_namespaced_deployment("edited-workers", namespace).spec.replicas == 0,
            timeout=30,
            what="the refused job's workers scaled to 0",
        )
        after = apps.read_namespaced_deployment("edited-workers", namespace)
        # The refused spec never reached the children: the workers' image is the old one.
        (container,) = after.spec.template.spec.containers
        assert container.image == before.spec.template.spec.containers[0].image
        assert get_job(cluster, namespace, "edited")["status"]["phase"] == "Failed"


def test_a_redis_outside_the_policy_is_refused_without_a_connection(
    cluster: Cluster,
    crd: None,
    namespace: str,
    tmp_path: Path,
    core: client.CoreV1Api,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator connects to a job's Redis from its own network position: a URL outside the
    administrator's hosts is refused at the field, and the port it names never sees the
    operator; the same operator does connect where the policy allows (the control)."""
    monkeypatch.setenv("CRAWLFLEET_ALLOWED_REDIS_HOSTS", "127.0.0.1")
    with (
        WatchedPort("127.0.0.2") as outside,
        WatchedPort("127.0.0.1") as inside,
        TestSite(SiteConfig(hosts=1, pages_per_host=5, hostile=False)) as site,
    ):
        hidden = f"redis://:hunter2@{outside.host}:{outside.port}/0"
        secret(core, namespace, "outside-url", LABEL, url=hidden)
        direct = crawljob("direct", site, redis={"url": hidden})
        in_secret = crawljob("in-secret", site, redis={"secretRef": {"name": "outside-url"}})
        allowed = crawljob(
            "inside",
            site,
            redis={"url": f"redis://{inside.host}:{inside.port}/0"},
            output={"ephemeral": True},
        )
        with running_operator(cluster, namespace, tmp_path) as operator:
            apply(cluster, direct, in_secret, allowed, namespace=namespace)
            refusals = {name: invalid(cluster, namespace, name) for name in ("direct", "in-secret")}
            wait_until(lambda: inside.connections > 0, timeout=60, what="the allowed Redis dialled")
            log = operator.log()
        knocked = outside.connections

    assert knocked == 0, log
    allowed_hosts = "(allowed: 127.0.0.1); leave redis unset for a managed one, or ask its"
    assert refusals["direct"]["message"] == (
        "spec.redis.url: names a Redis on 127.0.0.2, which this operator does not connect to"
        f" {allowed_hosts} administrator (chart value policy.redisUrls)"
    )
    assert refusals["in-secret"]["message"] == (
        "spec.redis.secretRef.name: names a Redis on 127.0.0.2, which this operator does not"
        f" connect to {allowed_hosts} administrator (chart value policy.redisUrls)"
    )
    for name in refusals:
        assert children_of(core, namespace, name) == [], name
    events = core.list_namespaced_event(namespace).items
    assert not any("hunter2" in (event.message or "") for event in events)
    assert "hunter2" not in log
