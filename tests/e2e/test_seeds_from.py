"""seedsFrom on the real API server: a 100,000-seed job runs, and a bad list is refused alike.

A CrawlJob holds at most 10,000 seeds (and about 1.5 MB); 100,000 URLs live in a ConfigMap
instead, gzip-compressed in binaryData (3.5 MB of text fits in a few hundred kB). The job's
own object stays small, and so does what kopf keeps on it: the last-handled configuration is a
digest of the spec (operator/main.py), whatever the list holds.
"""

from __future__ import annotations

import base64
import gzip
import subprocess
import sys
from pathlib import Path

from kubernetes import client

from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    REPO,
    apply,
    condition,
    crawljob,
    get_job,
    install_crd,
    running_operator,
    wait_for_phase,
)

SEEDS = 100_000


def _config_map(core: client.CoreV1Api, namespace: str, name: str, **entries: bytes) -> None:
    """A ConfigMap of ``entries``: text as data, gzip as binaryData (as kubectl makes them)."""
    data = {k: v.decode() for k, v in entries.items() if not v.startswith(b"\x1f\x8b")}
    binary = {k: base64.b64encode(v).decode() for k, v in entries.items() if k not in data}
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name), data=data or None, binary_data=binary or None
        ),
    )


def test_a_job_of_a_hundred_thousand_seeds_runs(
    cluster: Cluster,
    kubelet: KubeletDouble,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    install_crd(cluster)
    with TestSite(SiteConfig(hosts=2, pages_per_host=20, hostile=False)) as site:
        urls = [site.url(k % 2, f"/seed/{k}") for k in range(SEEDS)]
        listed = gzip.compress("\n".join(urls).encode())
        assert len(listed) < 1024 * 1024  # a ConfigMap's limit; the text alone is 3-4 MB
        _config_map(core, namespace, "seeds", **{"seeds.txt.gz": listed})
        # No inline seeds and no allowedDomains: the scope is the list's hosts.
        job = crawljob(
            "big",
            site,
            seeds=[],
            seedsFrom={"configMapKeyRef": {"name": "seeds", "key": "seeds.txt.gz"}},
            scope={"allowedDomains": [], "maxDepth": 0},
            dedup={"capacity": 200_000},
        )
        del job["spec"]["seeds"]
        with running_operator(cluster, namespace, tmp_path) as operator:
            apply(cluster, job, namespace=namespace)
            # Reading and checking 100,000 URLs is seconds of the operator's CPU (minutes on a
            # loaded 2-core machine): the bounds are generous, the outcome is what is tested.
            wait_for_phase(cluster, namespace, "big", "Running", timeout=300, operator=operator)

            def seeded() -> dict[str, int] | None:
                status = get_job(cluster, namespace, "big").get("status", {})
                # The Bloom filter's false positives (errorRate) spare no URL, seeds included.
                return status if status.get("seen", 0) >= SEEDS * 0.999 else None

            try:
                wait_until(seeded, timeout=300, what="the 100,000 seeds in the frontier")
            except AssertionError as error:
                status = get_job(cluster, namespace, "big").get("status")
                raise AssertionError(f"{error}\n{status}\n{operator.log()}") from None
            wait_until(
                lambda: (
                    (get_job(cluster, namespace, "big")["status"].get("crawled", 0)) > 0
                    or (get_job(cluster, namespace, "big")["status"].get("failed", 0)) > 0
                ),
                timeout=180,
                what="the workers fetching seeds",
            )
            served = {r.path for r in site.log.all_requests()}
            assert any(path.startswith("/seed/") for path in served)
            found = get_job(cluster, namespace, "big")
            assert SEEDS * 0.999 <= found["status"]["seen"] <= SEEDS
            invalid = condition(found, "InvalidSpec")
            assert invalid is None or invalid["status"] == "False"
            # What kopf keeps on the object stays small: a digest of the spec, not the list.
            annotations = found["metadata"].get("annotations") or {}
            assert sum(len(v) for v in annotations.values()) < 4096
            # The workers' scope is the list's hosts, written for them by the operator.
            spec_file = core.read_namespaced_config_map("big-config", namespace).data
            hosts = sorted({host.split(":")[0] for host in site.hosts})
            assert all(f"- {host}" in spec_file["job.yaml"] for host in hosts)
            assert "Traceback" not in operator.log()


def test_a_bad_seed_list_is_refused_by_the_operator_as_crawlfleet_validate_refuses_it(
    cluster: Cluster,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    install_crd(cluster)
    listed = b"https://a.example/\n# a comment\nhttps://b.example:99999/\n"
    _config_map(core, namespace, "bad-seeds", **{"seeds.txt": listed})
    spec = {"seedsFrom": {"configMapKeyRef": {"name": "bad-seeds", "key": "seeds.txt"}}}
    job = {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": "bad"},
        "spec": spec,
    }
    (tmp_path / "seeds.txt").write_bytes(listed)
    (tmp_path / "job.yaml").write_text(
        "apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: bad}\n"
        "spec:\n  seedsFrom: {file: seeds.txt}\n"
    )
    validate = subprocess.run(
        [sys.executable, "-m", "crawlfleet", "validate", str(tmp_path / "job.yaml")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert validate.returncode == 2
    local = validate.stderr.split("line 3: ", 1)[1].strip()
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, job, namespace=namespace)
        found = wait_for_phase(cluster, namespace, "bad", "Failed", timeout=60, operator=operator)
        invalid = condition(found, "InvalidSpec")
        assert invalid is not None
        where = "spec.seedsFrom.configMapKeyRef (ConfigMap bad-seeds, key seeds.txt)"
        assert f"{where}: line 3: {local}" in invalid["message"]
        assert "Traceback" not in operator.log()
