"""seedsFrom on the real API server: a 100,000-seed job runs, and a bad list is refused alike.

A CrawlJob holds at most 10,000 seeds (and about 1.5 MB); 100,000 URLs live in a ConfigMap
instead, gzip-compressed in binaryData (3.5 MB of text fits in a few hundred kB). The job's
own object stays small, and so does what kopf keeps on it: the last-handled configuration is a
digest of the spec (operator/main.py), whatever the list holds.

The list is hostile input to the operator every tenant shares: a gzip bomb is refused at the
bound with the operator's memory flat, and a ConfigMap the tenancy policy does not let the job
read is refused unread, nothing of any list quoted in status or Events.
"""

from __future__ import annotations

import base64
import gzip
import subprocess
import sys
import zlib
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
MIB = 1024 * 1024
#: The label the tenancy policy asks of a seed list's ConfigMap (crawlfleet.tenancy).
SEEDS_LABEL = {"crawlfleet.io/crawljob-seeds": "true"}


def _config_map(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    labels: dict[str, str] | None = None,
    **entries: bytes,
) -> None:
    """A ConfigMap of ``entries``: text as data, gzip as binaryData (as kubectl makes them);
    labelled for seed lists unless ``labels`` says otherwise."""
    data = {k: v.decode() for k, v in entries.items() if not v.startswith(b"\x1f\x8b")}
    binary = {k: base64.b64encode(v).decode() for k, v in entries.items() if k not in data}
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=name, labels=SEEDS_LABEL if labels is None else labels
            ),
            data=data or None,
            binary_data=binary or None,
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


def _seed_list_job(name: str, config_map: str, key: str) -> dict[str, object]:
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": name},
        "spec": {"seedsFrom": {"configMapKeyRef": {"name": config_map, "key": key}}},
    }


def _bomb_member(line: bytes, decompressed_bytes: int) -> bytes:
    """One gzip member of ``line`` repeated, compressed a MiB at a time (never held whole)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = line * (MIB // len(line))
    parts = [packer.compress(chunk) for _ in range(decompressed_bytes // len(chunk))]
    return b"".join([*parts, packer.flush()])


def _peak_rss_kib(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def _said_about(core: client.CoreV1Api, namespace: str, job: dict[str, object]) -> str:
    """Everything a job's author reads about it: its status and its Events."""
    events = core.list_namespaced_event(namespace).items
    return f"{job.get('status')}\n" + "\n".join(str(e.message) for e in events)


def test_a_gzip_bomb_and_a_list_outside_the_policy_are_refused_with_nothing_quoted(
    cluster: Cluster, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    install_crd(cluster)
    secret_looking = b"DB_PASSWORD=hunter2\n"
    # Another application's ConfigMap, not labelled for seed lists: the job names it anyway.
    _config_map(core, namespace, "app-env", labels={}, env=secret_looking + b"https://a.example/\n")
    # A labelled list with the same line in it: refused by line number and reason alone.
    _config_map(core, namespace, "mixed", list=b"https://a.example/\n" + secret_looking)
    # Five gzip members of 128 MiB of 4 KiB lines each: 0.8 MiB stored, 640 MiB decompressed.
    member = _bomb_member(b"#" + b"x" * 4094 + b"\n", 128 * MIB)
    bomb = member * 5
    assert len(bomb) < MIB  # what a ConfigMap holds
    _config_map(core, namespace, "bomb", **{"seeds.txt.gz": bomb})
    with running_operator(cluster, namespace, tmp_path) as operator:
        assert operator.process is not None
        apply(cluster, _seed_list_job("outside", "app-env", "env"), namespace=namespace)
        found = wait_for_phase(
            cluster, namespace, "outside", "Failed", timeout=60, operator=operator
        )
        invalid = condition(found, "InvalidSpec")
        assert invalid is not None
        assert invalid["message"] == (
            "spec.seedsFrom.configMapKeyRef (ConfigMap app-env, key env): ConfigMap app-env is"
            " not labelled crawlfleet.io/crawljob-seeds=true, the label that lets CrawlJobs read"
            " a ConfigMap as their seed list (add it if this ConfigMap is meant for crawlfleet);"
            " its content was not read"
        )
        apply(cluster, _seed_list_job("mixed", "mixed", "list"), namespace=namespace)
        found = wait_for_phase(cluster, namespace, "mixed", "Failed", timeout=60, operator=operator)
        invalid = condition(found, "InvalidSpec")
        assert invalid is not None
        assert invalid["message"].endswith(
            "spec.seedsFrom.configMapKeyRef (ConfigMap mixed, key list): line 2: must be an"
            " absolute http(s) URL with a host, at most 2048 characters"
        )
        # The operator has handled two jobs: what it holds from here on is its steady state.
        before_kib = _peak_rss_kib(operator.process.pid)
        apply(cluster, _seed_list_job("bomb", "bomb", "seeds.txt.gz"), namespace=namespace)
        found = wait_for_phase(cluster, namespace, "bomb", "Failed", timeout=120, operator=operator)
        after_kib = _peak_rss_kib(operator.process.pid)
        invalid = condition(found, "InvalidSpec")
        assert invalid is not None
        assert invalid["message"] == (
            "spec.seedsFrom.configMapKeyRef (ConfigMap bomb, key seeds.txt.gz): is larger than"
            " 64 MiB once decompressed, the most a seed list may hold (its administrator sets the"
            " bound: CRAWLFLEET_SEED_LIST_MAX_BYTES, chart value policy.seedList.maxBytes)"
        )
        # Flat: the ConfigMap's megabyte and the reader's buffers, not the 64 MiB it read
        # before the bound, nor the 640 MiB the bomb expands to.
        grown_mib = (after_kib - before_kib) / 1024
        print(f"operator peak RSS {before_kib} KiB -> {after_kib} KiB (+{grown_mib:.1f} MiB)")
        assert grown_mib < 16, (before_kib, after_kib)
        said = "\n".join(
            _said_about(core, namespace, get_job(cluster, namespace, name))
            for name in ("outside", "mixed", "bomb")
        )
        for quoted in ("hunter2", "DB_PASSWORD", "https://a.example"):
            assert quoted not in said
            assert quoted not in operator.log()
        assert "Traceback" not in operator.log()
