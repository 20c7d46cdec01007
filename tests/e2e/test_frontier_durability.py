"""The managed Redis in a cluster: it keeps its data, and its secrets stay secret.

Real control plane; the kubelet double runs the pods, provisions the job's claim as a
directory that outlives the Redis pod, and the real PV binder binds it. The crawl goes to the
loopback test site, whose request log is the judge of what was fetched.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    apply,
    crawljob,
    get_job,
    install_crd,
    pod_argv,
    posted_events,
    running_operator,
    wait_crawled,
    wait_for_phase,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> None:
    install_crd(cluster)


@pytest.fixture
def slow_site() -> Iterator[TestSite]:
    """Slow enough that the crawl is still under way when the test acts on it."""
    config = SiteConfig(hosts=2, pages_per_host=100, hostile=False, latency_seconds=0.3)
    with TestSite(config) as site:
        yield site


def served(site: TestSite) -> dict[str, int]:
    """How often the site served each page with a 200, robots.txt aside (server-side)."""
    counts: dict[str, int] = {}
    for request in site.log.all_requests():
        if request.status == 200 and request.path != "/robots.txt":
            url = canonicalize(request.url)
            counts[url] = counts.get(url, 0) + 1
    return counts


def redis_pod(core: client.CoreV1Api, namespace: str, job: str) -> Any | None:
    """The job's Redis pod that runs and is ready, not terminating."""
    selector = f"crawlfleet.io/job={job},app.kubernetes.io/component=redis"
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or ())
        if ready and not pod.metadata.deletion_timestamp:
            return pod
    return None


def test_a_deleted_redis_pod_comes_back_on_its_volume_and_nothing_is_lost(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    slow_site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
) -> None:
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, crawljob("durable", slow_site), namespace=namespace)
        wait_crawled(cluster, namespace, "durable", 30, timeout=90)

        claim = core.read_namespaced_persistent_volume_claim("durable-redis-data", namespace)
        assert claim.status.phase == "Bound"
        first = redis_pod(core, namespace, "durable")
        assert first is not None
        cluster.kubectl("delete", "pod", first.metadata.name, "-n", namespace, "--wait=false")

        def replacement() -> Any | None:
            pod = redis_pod(core, namespace, "durable")
            return pod if pod is not None and pod.metadata.uid != first.metadata.uid else None

        wait_until(replacement, timeout=60, what="a new Redis pod, ready on its data")
        job = wait_for_phase(
            cluster, namespace, "durable", "Succeeded", timeout=180, operator=operator
        )

    # Every page was crawled: none was forgotten with the pod.
    expected = {canonicalize(url) for url in slow_site.expected_pages()}
    assert set(served(slow_site)) == expected
    status = job["status"]
    assert status["crawled"] == len(expected)
    assert status["queued"] == 0
    assert status["inFlight"] == 0
    # Seeded once: the frontier came back whole, nobody started the crawl again.
    events = client.CoreV1Api(cluster.api).list_namespaced_event(namespace).items
    assert [e.reason for e in events].count("Seeded") == 1


def _secret_values(core: client.CoreV1Api, namespace: str) -> set[str]:
    """Every password the namespace's Secrets hold (and the URLs built around them)."""
    found = set()
    for secret in core.list_namespaced_secret(namespace).items:
        for key, value in (secret.data or {}).items():
            text = base64.b64decode(value).decode()
            if key == "password":
                found.add(text)
    return found


def test_no_secret_value_in_a_config_map_an_argv_an_event_or_a_log_line(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    slow_site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
) -> None:
    external_password = "ext-hunter2-" + namespace
    with (
        RedisServer(tmp_path / "redis", password=external_password) as server,
        running_operator(cluster, namespace, tmp_path) as operator,
    ):
        apply(
            cluster,
            crawljob("managed", slow_site),
            crawljob("external", slow_site, redis={"url": server.url}),
            namespace=namespace,
        )
        wait_crawled(cluster, namespace, "managed", 5, timeout=90)
        wait_crawled(cluster, namespace, "external", 5, timeout=90)
        secrets = _secret_values(core, namespace) | {external_password}
        assert len(secrets) == 2  # the managed Redis's generated one, and the external one
        argv = wait_until(
            lambda: (found := pod_argv(core, namespace)) and len(found) >= 3 and found,
            timeout=30,
            what="the Redis pod and workers of both jobs running",
        )
        assert any("redis-server" in line for line in argv.values())
        places: dict[str, str] = {f"argv of {pod}": line for pod, line in argv.items()}
        for config_map in core.list_namespaced_config_map(namespace).items:
            for key, value in (config_map.data or {}).items():
                places[f"ConfigMap {config_map.metadata.name}/{key}"] = value
        for event in core.list_namespaced_event(namespace).items:
            places[f"Event {event.reason}"] = event.message or ""
        for pod in core.list_namespaced_pod(namespace).items:
            for container in pod.spec.containers:
                try:
                    log = kubelet.logs(namespace, pod.metadata.name, container.name)
                except LookupError:
                    continue  # created since (a rollout), not started yet: it wrote nothing
                places[f"log of {pod.metadata.name}"] = log
        for name in ("managed", "external"):
            places[f"status of {name}"] = str(get_job(cluster, namespace, name).get("status"))
        places["operator log"] = operator.log_file.read_text(errors="replace")

    assert any(name.startswith("ConfigMap") for name in places)
    leaks = [(where, s) for where, text in places.items() for s in secrets if s in text]
    assert not leaks, leaks


def test_without_persistence_a_deleted_redis_pod_is_a_lost_frontier_not_a_silent_reseed(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    slow_site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
) -> None:
    job = crawljob("forgetful", slow_site, redis={"managed": {"persistence": {"enabled": False}}})
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, job, namespace=namespace)
        wait_crawled(cluster, namespace, "forgetful", 10, timeout=90)
        with pytest.raises(client.ApiException):  # no claim without persistence
            core.read_namespaced_persistent_volume_claim("forgetful-redis-data", namespace)
        first = redis_pod(core, namespace, "forgetful")
        assert first is not None
        seen = get_job(cluster, namespace, "forgetful")["status"]
        epoch = seen["frontierEpoch"]
        assert seen["frontierShards"] == 1  # what the frontier was created with, kept
        cluster.kubectl("delete", "pod", first.metadata.name, "-n", namespace, "--wait=false")
        failed = wait_for_phase(
            cluster, namespace, "forgetful", "Failed", timeout=120, operator=operator
        )

    lost = next(c for c in failed["status"]["conditions"] if c["type"] == "FrontierLost")
    assert lost["status"] == "True"
    assert "redis.onLoss: Fail" in lost["message"]
    assert failed["status"]["frontierEpoch"] == epoch  # what the job was, for people
    assert len(posted_events(core, namespace, "FrontierLost")) == 1
    reasons = [e.reason for e in core.list_namespaced_event(namespace).items]
    assert reasons.count("Seeded") == 1  # never queued again behind anyone's back


def test_an_evicting_redis_is_refused_and_the_job_says_why(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    slow_site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
) -> None:
    with (
        RedisServer(tmp_path / "redis") as server,
        running_operator(cluster, namespace, tmp_path),
    ):
        redis_client = redis.Redis.from_url(server.url)
        redis_client.config_set("maxmemory", 64 * 1024 * 1024)
        redis_client.config_set("maxmemory-policy", "allkeys-lru")
        apply(
            cluster, crawljob("evicting", slow_site, redis={"url": server.url}), namespace=namespace
        )

        def refused() -> dict[str, Any] | None:
            job = get_job(cluster, namespace, "evicting")
            return job if "maxmemory-policy" in job.get("status", {}).get("message", "") else None

        job = wait_until(refused, timeout=60, what="the job to say why its Redis is refused")
        assert job["status"]["phase"] == "Pending"
        ready = next(c for c in job["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False"
        assert "allkeys-lru" in ready["message"]
        assert len(posted_events(core, namespace, "RedisRefused")) == 1
        assert not served(slow_site)  # nothing was crawled on it
        assert redis_client.keys("cf:*") == []  # and nothing written
