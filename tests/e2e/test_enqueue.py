"""Seeds added to a running CrawlJob, by ``crawlfleet enqueue namespace/name``, on the real
control plane: appended to spec.seeds, queued once by the operator's tick (SeedsAdded says how
many were new), crawled once; a finished job refuses them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from kubernetes import client

from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    OperatorProcess,
    apply,
    crawljob,
    enqueue,
    event_messages,
    get_job,
    install_crd,
    running_operator,
    wait_crawled,
    wait_for_phase,
)


def _seeds_added(core: client.CoreV1Api, namespace: str, operator: OperatorProcess) -> list[str]:
    """The SeedsAdded Events' messages, once there is one (the operator's log if none comes)."""
    try:
        return wait_until(
            lambda: event_messages(core, namespace, "SeedsAdded"),
            timeout=120,
            what="the SeedsAdded Event",
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{operator.log()}") from None


def _worker_pods(core: client.CoreV1Api, namespace: str) -> list[str]:
    selector = "app.kubernetes.io/component=worker"
    return sorted(
        p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=selector).items
    )


def test_seeds_added_to_a_running_crawljob_are_crawled_once(
    cluster: Cluster,
    kubelet: KubeletDouble,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    install_crd(cluster)
    # One host, one fetch at a time, 0.2 s apart: the crawl lasts at least 20 s, so it is
    # still running when the seeds come (three `crawlfleet enqueue` processes on a loaded
    # machine took longer than the 8 s a 40-page site lasted).
    config = SiteConfig(hosts=1, pages_per_host=100, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        job = crawljob(
            "grows",
            site,
            concurrency={"perWorker": 2, "perHost": 1, "hostDelaySeconds": 0.2},
            workers={"minReplicas": 1, "maxReplicas": 1},
        )
        added = [site.url(0, f"/unlinked/{k}") for k in range(2)]
        with running_operator(cluster, namespace, tmp_path) as operator:
            apply(cluster, job, namespace=namespace)
            wait_crawled(cluster, namespace, "grows", 3, timeout=180)
            workers = _worker_pods(core, namespace)
            many = "".join(site.url(0, f"/unlinked/{k}") + "\n" for k in range(100, 1101))
            bounded = enqueue(cluster, f"{namespace}/grows", "-", stdin=many)
            assert bounded.returncode == 2, bounded.stderr
            assert "1001 new seeds: more than the 1000" in bounded.stderr
            assert "seedsFrom" in bounded.stderr
            given = [*added, site.seeds[0], "http://elsewhere.example/"]
            result = enqueue(cluster, f"{namespace}/grows", *given)
            assert result.returncode == 1, result.stderr  # one refused, named with its reason
            assert result.stdout.strip() == (
                f"{namespace}/grows: 2 appended to spec.seeds, 1 already seeds, 1 refused"
            )
            assert "refused (out_of_domain): http://elsewhere.example/" in result.stderr
            assert get_job(cluster, namespace, "grows")["spec"]["seeds"] == [*site.seeds, *added]

            messages = _seeds_added(core, namespace, operator)
            assert len(messages) == 1  # once per change of the list, not once per tick
            assert "2 of 3 seeds new" in messages[0]
            # Seeds on the job's own hosts change nothing the workers act on: no rollout.
            assert _worker_pods(core, namespace) == workers
            done = wait_for_phase(
                cluster, namespace, "grows", "Succeeded", timeout=300, operator=operator
            )
            served = Counter(r.path for r in site.log.all_requests() if r.status == 200)
            assert served["/unlinked/0"] == 1
            assert served["/unlinked/1"] == 1
            assert served["/"] == 1  # the seed given again was not crawled again
            assert done["status"]["fleet"]["seedsHash"]
            # Succeeded is terminal: more seeds are refused, with what to do instead.
            late = enqueue(cluster, f"{namespace}/grows", site.url(0, "/unlinked/9"))
            assert late.returncode == 2
            assert "is Succeeded" in late.stderr
            # Edited in by hand: not crawled, and a warning says why, once.
            custom = client.CustomObjectsApi(cluster.api)
            seeds = [*site.seeds, *added, site.url(0, "/unlinked/9")]
            custom.patch_namespaced_custom_object(
                "crawlfleet.io",
                "v1alpha1",
                namespace,
                "crawljobs",
                "grows",
                {"spec": {"seeds": seeds}},
            )

            [warning] = wait_until(
                lambda: event_messages(core, namespace, "SeedsIgnored"),
                timeout=60,
                what="the SeedsIgnored Event",
            )
            assert "create a new CrawlJob" in warning
            assert get_job(cluster, namespace, "grows")["status"]["phase"] == "Succeeded"
            assert all(r.path != "/unlinked/9" for r in site.log.all_requests())
            assert "Traceback" not in result.stderr + late.stderr + operator.log()


def test_a_seed_list_edited_in_its_configmap_is_queued_again_once(
    cluster: Cluster,
    kubelet: KubeletDouble,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_crd(cluster)
    monkeypatch.setenv("CRAWLFLEET_SEEDS_FROM_CHECK_SECONDS", "1")  # the operator's, inherited
    config = SiteConfig(hosts=1, pages_per_host=40, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        listed = f"{site.seeds[0]}\n"
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                # The label that lets a CrawlJob read it (the tenancy policy's default).
                metadata=client.V1ObjectMeta(
                    name="seeds", labels={"crawlfleet.io/crawljob-seeds": "true"}
                ),
                data={"seeds.txt": listed},
            ),
        )
        job = crawljob(
            "listed",
            site,
            seedsFrom={"configMapKeyRef": {"name": "seeds", "key": "seeds.txt"}},
            concurrency={"perWorker": 2, "perHost": 1, "hostDelaySeconds": 0.2},
            workers={"minReplicas": 1, "maxReplicas": 1},
        )
        del job["spec"]["seeds"]
        added = site.url(0, "/unlinked/5")
        with running_operator(cluster, namespace, tmp_path) as operator:
            apply(cluster, job, namespace=namespace)
            wait_crawled(cluster, namespace, "listed", 3, timeout=180)
            core.patch_namespaced_config_map(
                "seeds", namespace, {"data": {"seeds.txt": f"{listed}{added}\n"}}
            )
            messages = _seeds_added(core, namespace, operator)
            wait_for_phase(
                cluster, namespace, "listed", "Succeeded", timeout=300, operator=operator
            )
            assert messages == [
                "the seed list changed: 1 of 2 seeds new, queued ahead of discovered links"
            ]
            assert event_messages(core, namespace, "SeedsAdded") == messages  # once
            served = Counter(r.path for r in site.log.all_requests() if r.status == 200)
            assert served["/unlinked/5"] == 1
            assert served["/"] == 1
            assert "Traceback" not in operator.log()
