"""Output in a cluster (DESIGN §8), end to end: a job whose files would die with its pods does
not start; with the operator's default destination it crawls into a real bucket (versitygw),
its workers' credentials copied from the operator's Secret; a scale-down loses no record.

Real kube-apiserver and controllers, the process kubelet, the real operator and workers, the
loopback test site and the S3 test server, whose own disk says what landed.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    GROUP,
    PLURAL,
    VERSION,
    apply,
    condition,
    crawljob,
    get_job,
    install_crd,
    posted_events,
    running_operator,
    wait_crawled,
    wait_for_phase,
)
from tests.support.s3 import REGION, S3Server


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> None:
    install_crd(cluster)


@pytest.fixture
def site() -> Iterator[TestSite]:
    config = SiteConfig(hosts=2, pages_per_host=60, hostile=False, latency_seconds=0.05)
    with TestSite(config) as running:
        yield running


def credentials_secret(core: client.CoreV1Api, namespace: str, server: S3Server, name: str) -> None:
    """A Secret with the server's root access key pair, as a user makes one for a bucket:
    labelled for CrawlJobs, or the operator's policy would not let a job name it
    (docs/security.md)."""
    keys = server.root_credentials
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name=name, labels={"crawlfleet.io/crawljob-secret": "true"}
            ),
            string_data={
                "AWS_ACCESS_KEY_ID": keys.access_key_id,
                "AWS_SECRET_ACCESS_KEY": keys.secret_access_key,
            },
        ),
    )


def own_bucket(server: S3Server, bucket: str) -> dict[str, Any]:
    """A job's own output section: ``s3://<bucket>/crawl/``, keys from Secret store-keys."""
    return {
        "maxFileAgeSeconds": 1,
        "destination": f"s3://{bucket}/crawl/",
        "s3": {
            "endpoint": server.endpoint_url,
            "region": REGION,
            "secretRef": {"name": "store-keys"},
        },
    }


def default_output(core: client.CoreV1Api, namespace: str, server: S3Server, bucket: str) -> str:
    """The chart's defaultOutput as the operator reads it, and its credentials Secret."""
    credentials_secret(core, namespace, server, "crawl-store")
    return json.dumps(
        {
            "destination": f"s3://{bucket}/crawls/",
            "s3": {
                "endpoint": server.endpoint_url,
                "region": REGION,
                "secretRef": {"name": "crawl-store"},
            },
            "secretNamespace": namespace,
        }
    )


def bucket_pages(server: S3Server, bucket: str, prefix: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key, path in server.stored_objects(bucket).items():
        if key.startswith(prefix + "pages/"):
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if record["status"] == 200 and not record["failure_class"]:
                    counts[record["url"]] = counts.get(record["url"], 0) + 1
    return counts


def output_verify(server: S3Server, destination: str) -> subprocess.CompletedProcess[str]:
    """``crawlfleet output verify`` of a bucket's destination, with the server's keys."""
    keys = server.root_credentials
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet", "output", "verify", destination],
        env={
            **os.environ,
            "AWS_ACCESS_KEY_ID": keys.access_key_id,
            "AWS_SECRET_ACCESS_KEY": keys.secret_access_key,
            "AWS_ENDPOINT_URL": server.endpoint_url,
            "AWS_REGION": REGION,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_job_whose_output_would_die_with_its_pods_does_not_start(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    site: TestSite,
    tmp_path: Path,
    apps: client.AppsV1Api,
) -> None:
    document = crawljob("nowhere", site)
    document["spec"]["output"] = {"format": "jsonl"}  # no destination, volume or ephemeral
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, document, namespace=namespace)

        def refused() -> dict[str, Any] | None:
            job = get_job(cluster, namespace, "nowhere")
            found = condition(job, "OutputNotDurable")
            return found if found and found["status"] == "True" else None

        found = wait_until(refused, timeout=60, what="OutputNotDurable")
        assert "output.ephemeral: true" in found["message"], operator.log()
        assert "s3://bucket/prefix/" in found["message"]
        job = get_job(cluster, namespace, "nowhere")
        assert job["status"]["phase"] == "Pending"
        deployments = apps.list_namespaced_deployment(namespace).items
        assert [d.metadata.name for d in deployments] == []  # no workers, not even Redis
        assert site.log.all_requests() == []


def test_with_a_default_destination_a_job_crawls_into_the_bucket_and_scales_down_losing_nothing(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
    s3_server: S3Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = s3_server.create_bucket(f"cluster-{namespace}")
    monkeypatch.setenv(
        "CRAWLFLEET_DEFAULT_OUTPUT", default_output(core, namespace, s3_server, bucket)
    )
    document = crawljob(
        "to-bucket",
        site,
        workers={"autoscale": "external", "replicas": 3, "maxReplicas": 3},
        concurrency={"perWorker": 2, "perHost": 2},
    )
    document["spec"]["output"] = {"maxFileAgeSeconds": 2}  # no destination: the default's
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, document, namespace=namespace)
        wait_crawled(cluster, namespace, "to-bucket", 20, timeout=120)
        custom = client.CustomObjectsApi(cluster.api)
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "to-bucket",
            {"spec": {"workers": {"replicas": 1}}},
        )  # fmt: skip
        job = wait_for_phase(
            cluster, namespace, "to-bucket", "Succeeded", timeout=240, operator=operator
        )
        expected = {canonicalize(u) for u in site.expected_pages()}
        prefix = f"crawls/{namespace}/to-bucket/"
        durable = condition(job, "OutputNotDurable")
        assert durable is not None
        assert durable["status"] == "False"
        assert f"s3://{bucket}/{prefix}" in durable["message"]

        # Every page the job counts as crawled has its record in the bucket, including those
        # of the two workers removed mid-crawl; the manifest is written once, by a worker.
        pages = bucket_pages(s3_server, bucket, prefix)
        assert set(pages) == expected
        assert job["status"]["crawled"] == len(expected)
        # Written before the job said Succeeded: a reader who sees the phase finds it.
        assert prefix + "manifest.json" in s3_server.stored_objects(bucket)
        manifest = json.loads(
            s3_server.stored_objects(bucket)[prefix + "manifest.json"].read_text()
        )
        assert manifest["job"] == f"{namespace}.to-bucket"
        assert manifest["counts"]["crawled"] == len(expected)
        assert prefix + "dead-letters.jsonl" in s3_server.stored_objects(bucket)
        workers = {
            str(json.loads(line)["worker"]).split("#")[0]
            for key, path in s3_server.stored_objects(bucket).items()
            if key.startswith(prefix + "pages/")
            for line in path.read_text().splitlines()
        }
        # More pods wrote than the one left after the scale-down: the files of pods removed
        # mid-crawl were durable before those pods were gone.
        assert len(workers) >= 2, workers

    # The credentials came from the job's own copy of the operator's Secret, by env.
    copy = core.read_namespaced_secret("to-bucket-output", namespace)
    assert base64.b64decode(copy.data["AWS_ACCESS_KEY_ID"]).decode() == (
        s3_server.root_credentials.access_key_id
    )
    config = core.read_namespaced_config_map("to-bucket-config", namespace)
    assert s3_server.root_credentials.secret_access_key not in json.dumps(config.data)


def test_workers_whose_bucket_is_missing_say_so_and_the_job_completes_once_it_exists(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
    s3_server: S3Server,
) -> None:
    """The job's own s3:// destination names a bucket that does not exist: each worker's
    test write is refused at start, the worker writes why to its termination message, the
    kubelet copies it into the pod's status and restarts it with back-off, and the operator
    turns the repeated deaths into the WorkersFailing condition (reason OutputUnavailable,
    the worker's sentence) and one Event. Nothing is crawled meanwhile. Once the bucket
    exists the restarted workers start, the condition clears, and the job succeeds with its
    manifest already in the bucket."""
    bucket = f"later-{namespace}"
    credentials_secret(core, namespace, s3_server, "store-keys")
    document = crawljob("no-bucket", site)
    document["spec"]["output"] = own_bucket(s3_server, bucket)
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, document, namespace=namespace)

        def failing() -> dict[str, Any] | None:
            found = condition(get_job(cluster, namespace, "no-bucket"), "WorkersFailing")
            return found if found and found["status"] == "True" else None

        found = wait_until(failing, timeout=120, what="WorkersFailing")
        assert found["reason"] == "OutputUnavailable", operator.log()
        assert "workers in a row died at start" in found["message"]
        assert (
            f"output destination s3://{bucket}/crawl/ at {s3_server.endpoint_url}"
            in (found["message"])
        )
        assert found["message"].endswith("the bucket does not exist (NoSuchBucket)")
        job = get_job(cluster, namespace, "no-bucket")
        assert job["status"]["phase"] in ("Pending", "Running")  # retried, not failed
        ready = condition(job, "Ready")
        assert ready is not None
        assert ready["reason"] == "WorkersFailing"
        selector = "app.kubernetes.io/component=worker,crawlfleet.io/job=no-bucket"
        (pod,) = core.list_namespaced_pod(namespace, label_selector=selector).items
        (container,) = pod.status.container_statuses
        said = container.last_state.terminated
        assert said.exit_code == 2
        assert said.message.startswith(f"OutputUnavailable: output destination s3://{bucket}/")
        warned = posted_events(core, namespace, "OutputUnavailable")
        assert len(warned) == 1  # once, however many ticks saw it
        assert warned[0].type == "Warning"
        assert "NoSuchBucket" in warned[0].message
        assert s3_server.root_credentials.secret_access_key not in warned[0].message
        assert site.log.all_requests() == []  # nothing crawled into the void

        s3_server.create_bucket(bucket)
        job = wait_for_phase(
            cluster, namespace, "no-bucket", "Succeeded", timeout=240, operator=operator
        )
        # Written before the job said Succeeded: a reader who sees the phase finds it.
        stored = s3_server.stored_objects(bucket)
        assert "crawl/manifest.json" in stored
        manifest = json.loads(stored["crawl/manifest.json"].read_text())
        expected = {canonicalize(u) for u in site.expected_pages()}
        assert manifest["counts"]["crawled"] == len(expected)
        assert set(bucket_pages(s3_server, bucket, "crawl/")) == expected
        verify = output_verify(s3_server, f"s3://{bucket}/crawl/")
        assert verify.returncode == 0, verify.stderr
        cleared = condition(job, "WorkersFailing")
        assert cleared is not None
        assert (cleared["status"], cleared["reason"]) == ("False", "NotFailing")
        recovered = posted_events(core, namespace, "WorkersRecovered")
        assert len(recovered) == 1


def test_a_running_job_edited_to_a_destination_that_is_not_durable_stops_its_workers(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    site: TestSite,
    tmp_path: Path,
    core: client.CoreV1Api,
    apps: client.AppsV1Api,
    s3_server: S3Server,
) -> None:
    """The rule at creation holds for an edit: a crawl into a bucket whose destination is
    edited away (no destination, no volume, not ephemeral, no default) is marked
    OutputNotDurable and its workers are scaled to 0, draining into the bucket; nothing is
    written to an emptyDir. Edited back, it goes on and completes with every page there."""
    bucket = s3_server.create_bucket(f"edited-{namespace}")
    credentials_secret(core, namespace, s3_server, "store-keys")
    output = {**own_bucket(s3_server, bucket), "ephemeral": False}
    document = crawljob(
        "edited",
        site,
        concurrency={"perWorker": 1, "perHost": 1, "hostDelaySeconds": 0.2},
        output=output,
    )
    custom = client.CustomObjectsApi(cluster.api)
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, document, namespace=namespace)
        wait_crawled(cluster, namespace, "edited", 5, timeout=120)
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "edited",
            {"spec": {"output": {"destination": None, "s3": None}}},
        )  # fmt: skip

        def refused() -> dict[str, Any] | None:
            found = condition(get_job(cluster, namespace, "edited"), "OutputNotDurable")
            return found if found and found["status"] == "True" else None

        found = wait_until(refused, timeout=60, what="OutputNotDurable after the edit")
        assert "output.ephemeral: true" in found["message"], operator.log()
        assert "workers are stopped until then" in found["message"]
        assert f"s3://{bucket}/crawl/" in found["message"]
        deployment = apps.read_namespaced_deployment("edited-workers", namespace)
        assert deployment.spec.replicas == 0
        # The Deployment still names the bucket: no worker writes to its emptyDir meanwhile.
        config = core.read_namespaced_config_map("edited-config", namespace)
        assert f"s3://{bucket}/crawl/" in json.dumps(config.data)
        selector = "app.kubernetes.io/component=worker,crawlfleet.io/job=edited"
        wait_until(
            lambda: not core.list_namespaced_pod(namespace, label_selector=selector).items,
            timeout=120,
            what="the workers drained and gone",
        )
        paused = get_job(cluster, namespace, "edited")["status"]
        assert paused["phase"] == "Pending"
        assert len(bucket_pages(s3_server, bucket, "crawl/")) >= paused["crawled"]

        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "edited", {"spec": {"output": output}}
        )
        job = wait_for_phase(
            cluster, namespace, "edited", "Succeeded", timeout=300, operator=operator
        )
    durable = condition(job, "OutputNotDurable")
    assert durable is not None
    assert durable["status"] == "False"
    expected = {canonicalize(u) for u in site.expected_pages()}
    assert set(bucket_pages(s3_server, bucket, "crawl/")) == expected
