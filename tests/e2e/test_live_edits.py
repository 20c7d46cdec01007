"""A running CrawlJob edited with ``kubectl patch`` on the real control plane: an exclusion
and a wider ``perHost`` take effect within the operator's tick, each said once in an Event
(ScopeChanged, LimitsChanged), and the site sees no request to the excluded URLs from a
heartbeat after the Event on; the URLs queued before are dead letters (excluded_live)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from kubernetes import client

from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    apply,
    crawljob,
    event_messages,
    frontier_command,
    install_crd,
    job_redis_url,
    running_operator,
    wait_crawled,
    wait_for_phase,
)


def test_a_patched_crawljob_follows_its_new_scope_and_limits(
    cluster: Cluster,
    kubelet: KubeletDouble,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    install_crd(cluster)
    # One host, one fetch at a time, 0.25 s apart: ~50 s of crawl to edit (the frontier
    # commands before the patch and the operator's tick after it take seconds each under load).
    config = SiteConfig(hosts=1, pages_per_host=160, hostile=False, latency_seconds=0.05)
    excluded = re.compile("/d[13]/")
    with TestSite(config) as site:
        job = crawljob(
            "edited",
            site,
            concurrency={"perWorker": 4, "perHost": 1, "hostDelaySeconds": 0.25},
            workers={"minReplicas": 1, "maxReplicas": 1},
        )
        with running_operator(cluster, namespace, tmp_path) as operator:
            apply(cluster, job, namespace=namespace)
            wait_crawled(cluster, namespace, "edited", 3, timeout=180)
            # looked at first, through the job's Service (a user's port-forward)
            target = f"{namespace}/edited"
            refused = frontier_command(cluster, target, "hosts")
            assert refused.returncode == 2, refused.stderr
            assert "port-forward svc/edited-redis" in refused.stderr, refused.stderr
            url = job_redis_url(kubelet, core, namespace, "edited")
            hosts = frontier_command(cluster, target, "hosts", "--json", redis_url=url)
            assert hosts.returncode == 0, hosts.stderr
            [row] = json.loads(hosts.stdout)["hosts"]
            assert row["host"] == site.hosts[0]
            assert row["in_flight"] <= 1  # perHost 1
            assert row["counts"]["queued"] > 0  # a slow crawl: work waits
            seed = frontier_command(cluster, target, "url", site.seeds[0], redis_url=url)
            assert seed.returncode == 0, seed.stderr
            assert "seen       yes" in seed.stdout, seed.stdout
            assert url.split("@")[0] not in hosts.stderr + seed.stderr + seed.stdout
            custom = client.CustomObjectsApi(cluster.api)
            custom.patch_namespaced_custom_object(
                "crawlfleet.io",
                "v1alpha1",
                namespace,
                "crawljobs",
                "edited",
                {"spec": {"scope": {"exclude": ["/d[13]/"]}, "concurrency": {"perHost": 2}}},
            )
            scoped = wait_until(
                lambda: event_messages(core, namespace, "ScopeChanged"),
                timeout=120,
                what=f"the ScopeChanged Event\n{operator.log()}",
            )
            said_at = time.monotonic()
            limits = wait_until(
                lambda: event_messages(core, namespace, "LimitsChanged"),
                timeout=60,
                what="the LimitsChanged Event",
            )
            done = wait_for_phase(
                cluster, namespace, "edited", "Succeeded", timeout=300, operator=operator
            )
            requests = site.log.all_requests()
            assert "Traceback" not in operator.log()
    assert len(scoped) == 1, scoped
    assert scoped[0].startswith("scope.exclude: +'/d[13]/':"), scoped
    assert limits == ["concurrency.perHost 1 -> 2: in force from the next claim and the next"
                      " batch of links"], limits  # fmt: skip
    # the workers follow at their next heartbeat; a fetch under way may finish
    late = [r.path for r in requests if excluded.search(r.path) and r.start > said_at + 5.0]
    assert late == [], late
    after = [r.path for r in requests if not excluded.search(r.path) and r.start > said_at]
    assert after, f"the crawl was over before the edit: {len(requests)} requests in all"
    assert done["status"]["failed"] > 0, done["status"]  # the excluded_live dead letters
