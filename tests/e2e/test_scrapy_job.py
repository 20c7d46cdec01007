"""A Scrapy project's spider as a CrawlJob on the real control plane (issue #16, deliverable 2).

The operator runs a job with ``spec.crawler.scrapy`` as it runs any job: the same worker
Deployment and the same steering tick, whose pods (run by the kubelet double) start Scrapy
because their job says so. The project is tests/scrapy_project (its ``graph`` CrawlSpider);
the site counts every fetch server-side and the workers' own output folders hold the items.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.fleets import ClusterFleet, fetches, wait_phase, wait_workers
from tests.e2e.operator_support import (
    GROUP,
    PLURAL,
    VERSION,
    apply,
    crawljob,
    enqueue,
    install_crd,
    running_operator,
    wait_condition,
)

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[1] / "scrapy_project"
#: A Scrapy project image built FROM the worker image (docs/scrapy.md): the double runs an
#: image whose name holds "crawlfleet" as ``crawlfleet``, with this process's PYTHONPATH.
IMAGE_REPOSITORY = "crawlfleet/siteshop"
IMAGE = f"{IMAGE_REPOSITORY}:dev"
SCRAPY = {"spider": "graph", "settingsModule": "siteshop.settings"}


@pytest.fixture
def project_in_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's image: its package on the pods' path (a real image pip-installs it, or
    has it in its WORKDIR with scrapy.cfg), and allowed by the operator's tenancy policy."""
    paths = [str(PROJECT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    # The administrator lets jobs name it (chart value policy.workerImages).
    monkeypatch.setenv("CRAWLFLEET_ALLOWED_WORKER_IMAGES", f"crawlfleet/worker,{IMAGE_REPOSITORY}")


@pytest.fixture
def site() -> Iterator[TestSite]:
    """Slow enough (0.2 s a page, 8 at a time) that the backlog outlasts the pods' start."""
    config = SiteConfig(hosts=2, pages_per_host=60, hostile=False, latency_seconds=0.2)
    with TestSite(config) as running:
        yield running


def items_written(kubelet: KubeletDouble, namespace: str, job: str) -> list[dict[str, Any]]:
    """Every item line the job's workers wrote in their output folders (the double keeps a
    pod's sandbox, and its emptyDir in it, after the pod is gone)."""
    found = []
    for sandbox in kubelet.directory.glob(f"{namespace}_{job}-workers-*"):
        for path in sandbox.glob("volumes/**/items/*.jsonl"):
            found += [json.loads(line) for line in path.read_text().splitlines() if line]
    return found


def scale_step(message: str) -> tuple[int, int]:
    """(from, to) of a Scaled event ("workers 1 -> 3: ...")."""
    numbers = message.split(":", 1)[0].split()
    return int(numbers[1]), int(numbers[3])


def test_a_scrapy_job_is_admitted_and_reads_back_as_the_model_has_it(
    cluster: Cluster, namespace: str
) -> None:
    install_crd(cluster)
    document = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CrawlJob",
        "metadata": {"name": "books"},
        "spec": {
            "crawler": {
                "scrapy": {
                    **SCRAPY,
                    "settings": {"DOWNLOAD_TIMEOUT": 20, "ITEM_PIPELINES": {"shop.P": 300}},
                    "args": {"category": "fiction"},
                }
            },
            "workers": {"image": IMAGE},
        },
    }
    api = client.CustomObjectsApi(cluster.api)

    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, document)

    stored = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "books")
    assert (
        stored["spec"]["crawler"]
        == CrawlJobSpec.from_mapping(document["spec"]).to_mapping()["crawler"]
    )
    assert CrawlJobSpec.from_mapping(stored["spec"]) == CrawlJobSpec.from_mapping(document["spec"])


def test_a_scrapy_job_crawls_to_completion_and_scales_from_its_backlog(
    cluster: Cluster,
    kubelet: KubeletDouble,
    namespace: str,
    tmp_path: Path,
    site: TestSite,
    project_in_the_image: None,
) -> None:
    install_crd(cluster)
    unlinked = site.url(0, "/unlinked/3")  # no page links it
    expected = {canonicalize(url) for url in [*site.expected_pages(), unlinked]}
    with RedisServer(tmp_path / "redis") as server:
        fleet = ClusterFleet("shop", site, server.url, tmp_path, cluster, namespace, kubelet)
        try:
            fleet.start(
                seeds=sorted(site.expected_pages()),  # 120 queued at once: a backlog
                crawler={"scrapy": {**SCRAPY, "args": {"start": ",".join(site.seeds)}}},
                workers={
                    "image": IMAGE,
                    "minReplicas": 1,
                    "maxReplicas": 3,
                    "targetBacklogPerReplica": 20,
                    "scaleDownDelaySeconds": 60,
                },
            )
            wait_workers(fleet, 3, timeout=45)
            # A URL added once its processes have seeded the job is the tick's to queue.
            added = enqueue(cluster, f"{namespace}/shop", unlinked)
            assert added.returncode == 0, added.stderr
            wait_phase(fleet, "Succeeded", timeout=45)
            scaled = [event.message for event in fleet.events("Scaled")]
        finally:
            fleet.close()

    steps = [scale_step(message) for message in scaled]
    # A Scrapy job's processes seed it (its start requests), not the tick: one worker first,
    # then 120 queued / 20 per worker, capped at 3; and to zero when done.
    assert steps[0] == (0, 1), scaled
    assert (1, 3) in steps, scaled
    assert steps[-1] == (3, 0), scaled
    served = fetches(site)
    assert set(served) == expected
    assert max(served.values()) == 1, served  # no kill: each page fetched once
    items = items_written(kubelet, namespace, "shop")
    assert {canonicalize(item["url"]) for item in items} == expected
    assert {item["source"] for item in items} == {"graph"}
    assert all(item["fields"]["title"] for item in items), items[:3]


def test_a_spider_the_project_lacks_is_one_sentence_in_the_jobs_conditions(
    cluster: Cluster,
    namespace: str,
    tmp_path: Path,
    site: TestSite,
    core: client.CoreV1Api,
    kubelet: KubeletDouble,
    project_in_the_image: None,
) -> None:
    """Bad input at start (issue #16): each worker exits 2 with the project's verdict as its
    termination message, and the operator turns the repeated deaths into WorkersFailing."""
    install_crd(cluster)
    document = crawljob("books", site, crawler={"scrapy": {**SCRAPY, "spider": "books"}})
    document["spec"]["workers"]["image"] = IMAGE
    said = "spec.crawler.scrapy.spider: the project has no spider 'books'; its spiders: "
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, document, namespace=namespace)

        found = wait_condition(cluster, namespace, "books", "WorkersFailing", timeout=50)
        assert found["reason"] == "InvalidConfig", operator.log()
        listed = found["message"].partition(said)[2].split(", ")
        assert {"graph", "shop"} <= set(listed), found["message"]  # the project's spiders
        selector = "app.kubernetes.io/component=worker,crawlfleet.io/job=books"
        (pod,) = core.list_namespaced_pod(namespace, label_selector=selector).items
        (container,) = pod.status.container_statuses
        assert container.last_state.terminated.exit_code == 2
        message = container.last_state.terminated.message.rstrip("\n")
        assert message == f"InvalidConfig: {said}{', '.join(listed)}"
        assert "Traceback" not in operator.log()
    assert not fetches(site)  # nothing crawled
