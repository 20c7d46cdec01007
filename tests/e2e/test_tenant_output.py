"""Tenants apart in the output store: two namespaces with the chart's default output, each
holding only keys to its own.

The chart renders ``defaultOutput.namespaces`` (each namespace its own destination and Secret)
into the operator's configuration; the operator, on the real API server, serving both
namespaces, gives each job's worker pods their credentials (a copy of their namespace's Secret,
as env) and their destination (the job file). The test takes exactly that, what a pod of each
tenant receives, and calls the real S3 server (versitygw, one account and bucket per namespace)
with it: each tenant's pod can write and list its own output and can neither list nor write
the other's. A shared default is what let them (measured below), so the chart refuses shared
credentials across namespaces.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import obstore
import pytest
import yaml
from kubernetes import client
from obstore.exceptions import GenericError, PermissionDeniedError
from obstore.store import S3Store

from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.operator_support import apply, crawljob, install_crd, running_operator
from tests.e2e.test_chart import CHART, RELEASE, Helm, helm  # noqa: F401 (helm: a fixture)
from tests.support.s3 import REGION, S3Credentials, S3Server


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> None:
    install_crd(cluster)


@pytest.fixture
def tenants(core: client.CoreV1Api) -> Iterator[tuple[str, str]]:
    """Two namespaces of their own, for two tenants."""
    names = tuple(f"tenant-{side}-{uuid.uuid4().hex[:6]}" for side in "ab")
    for name in names:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield names[0], names[1]
    for name in names:
        core.delete_namespace(name)


def keys_secret(core: client.CoreV1Api, namespace: str, name: str, keys: S3Credentials) -> None:
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=name),
            string_data={
                "AWS_ACCESS_KEY_ID": keys.access_key_id,
                "AWS_SECRET_ACCESS_KEY": keys.secret_access_key,
            },
        ),
    )


def rendered_default_output(render: Helm, release_namespace: str, *sets: str) -> str:
    """CRAWLFLEET_DEFAULT_OUTPUT as the chart gives it to the operator."""
    rendered = render(
        "template", RELEASE, str(CHART), "--namespace", release_namespace, *sets
    ).stdout  # fmt: skip
    for doc in yaml.safe_load_all(rendered):
        if doc and doc["kind"] == "Deployment" and doc["metadata"]["name"] == RELEASE:
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            env = {var["name"]: var.get("value", "") for var in container["env"]}
            return env["CRAWLFLEET_DEFAULT_OUTPUT"]
    raise AssertionError("no operator Deployment")


@dataclass(frozen=True)
class PodOutput:
    """What a job's worker pod receives for its output: its keys and its destination."""

    keys: S3Credentials
    bucket: str
    prefix: str
    endpoint: str

    def store(self, bucket: str | None = None) -> S3Store:
        """An S3 client holding this pod's keys, on its bucket or another."""
        return S3Store(
            bucket or self.bucket,
            config={
                "endpoint": self.endpoint,
                "region": REGION,
                "access_key_id": self.keys.access_key_id,
                "secret_access_key": self.keys.secret_access_key,
                "virtual_hosted_style_request": False,
            },
            client_options={"allow_http": True},
            retry_config={"max_retries": 0},
        )


def received(apps: client.AppsV1Api, core: client.CoreV1Api, namespace: str, job: str) -> PodOutput:
    """The worker pods' output settings, read from their Deployment as the kubelet reads it:
    env from the Secret it names, the job file from its ConfigMap."""
    deployment = apps.read_namespaced_deployment(f"{job}-workers", namespace)
    (container,) = deployment.spec.template.spec.containers
    env: dict[str, str] = {}
    for var in container.env:
        ref = var.value_from.secret_key_ref if var.value_from else None
        if var.name.startswith("AWS_") and ref is not None:
            secret = core.read_namespaced_secret(ref.name, namespace)
            if ref.key in (secret.data or {}):
                env[var.name] = base64.b64decode(secret.data[ref.key]).decode()
    config = core.read_namespaced_config_map(f"{job}-config", namespace)
    (document,) = [yaml.safe_load(text) for text in config.data.values()]
    output: dict[str, Any] = document["spec"]["output"]
    bucket, _, prefix = output["destination"].removeprefix("s3://").partition("/")
    return PodOutput(
        S3Credentials(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]),
        bucket,
        prefix,
        output["s3"]["endpoint"],
    )


def can_list(store: S3Store, prefix: str) -> bool:
    try:
        obstore.list(store, prefix=prefix).collect()
    except (PermissionDeniedError, GenericError) as error:
        return _refused(error)
    return True


def can_write(store: S3Store, key: str, data: bytes = b"written by the other tenant") -> bool:
    try:
        obstore.put(store, key, data)
    except (PermissionDeniedError, GenericError) as error:
        return _refused(error)
    return True


def _refused(error: Exception) -> bool:
    """False for the store's 403 AccessDenied; anything else is the test's failure."""
    if "AccessDenied" not in str(error):
        raise error
    return False


@dataclass
class Bed:
    """The parts both tests use: the cluster, the store, a Redis, the chart."""

    cluster: Cluster
    core: client.CoreV1Api
    apps: client.AppsV1Api
    s3: S3Server
    redis: RedisServer
    helm: Helm
    release_namespace: str
    tenants: tuple[str, str]
    log_dir: Path
    monkeypatch: pytest.MonkeyPatch

    def pods(self, *chart_values: str) -> tuple[PodOutput, PodOutput]:
        """Render the chart with ``chart_values``, run the operator on both tenants' namespaces
        with its default output, create a job ``books`` in each (no destination: the
        default's) and return what each job's worker pods receive."""
        served = f"watchNamespaces={{{','.join(self.tenants)}}}"
        default = rendered_default_output(
            self.helm, self.release_namespace, *chart_values, "--set", served
        )
        self.monkeypatch.setenv("CRAWLFLEET_DEFAULT_OUTPUT", default)
        a, b = self.tenants
        with (
            TestSite(SiteConfig(hosts=1, pages_per_host=5, hostile=False)) as site,
            running_operator(self.cluster, a, self.log_dir, "--namespace", b) as operator,
        ):
            for tenant in self.tenants:
                job = crawljob("books", site, redis={"url": self.redis.url})
                apply(self.cluster, job, namespace=tenant)
            for tenant in self.tenants:
                wait_until(
                    lambda tenant=tenant: _has_workers(self.apps, tenant, "books"),
                    timeout=60,
                    what=f"the workers of {tenant}/books\n{operator.log()}",
                )
        pod_a, pod_b = (received(self.apps, self.core, tenant, "books") for tenant in self.tenants)
        return pod_a, pod_b


@pytest.fixture
def bed(
    cluster: Cluster,
    crd: None,
    namespace: str,
    tenants: tuple[str, str],
    tmp_path: Path,
    core: client.CoreV1Api,
    apps: client.AppsV1Api,
    s3_server: S3Server,
    redis_server: RedisServer,
    helm: Helm,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
) -> Bed:
    """``namespace`` is the release's (the operator's, holding the keys' Secrets)."""
    return Bed(
        cluster, core, apps, s3_server, redis_server, helm, namespace, tenants, tmp_path,
        monkeypatch,
    )  # fmt: skip


def test_two_tenants_with_the_default_output_cannot_reach_each_others_prefix(bed: Bed) -> None:
    # The administrator's part: an account and a bucket per namespace in the store, their keys
    # in Secrets of the release namespace, and the chart's values naming them.
    run = uuid.uuid4().hex[:6]
    entries: dict[str, dict[str, str]] = {}
    for tenant in bed.tenants:
        keys = bed.s3.create_user(f"{tenant}-keys")
        bed.s3.create_bucket(f"{tenant}-{run}", owner=keys.access_key_id)
        keys_secret(bed.core, bed.release_namespace, f"{tenant}-output", keys)
        entries[tenant] = {"destination": f"s3://{tenant}-{run}/", "secretName": f"{tenant}-output"}
    pod_a, pod_b = bed.pods(
        "--set-json", f"defaultOutput.namespaces={json.dumps(entries)}",
        "--set", f"defaultOutput.s3.endpoint={bed.s3.endpoint_url}",
        "--set", f"defaultOutput.s3.region={REGION}",
    )  # fmt: skip

    # Each tenant's pod holds its namespace's keys and writes under its own bucket.
    a, b = bed.tenants
    assert (pod_a.bucket, pod_a.prefix) == (f"{a}-{run}", "books/")
    assert (pod_b.bucket, pod_b.prefix) == (f"{b}-{run}", "books/")
    assert pod_a.keys.access_key_id == f"{a}-keys"
    assert pod_b.keys.access_key_id == f"{b}-keys"
    for mine in (pod_a, pod_b):
        assert can_write(mine.store(), mine.prefix + "pages/probe.jsonl")
        assert can_list(mine.store(), mine.prefix)
    # With what it receives, neither can list or write the other's output.
    for mine, theirs in ((pod_a, pod_b), (pod_b, pod_a)):
        other = mine.store(theirs.bucket)
        assert not can_list(other, theirs.prefix)
        assert not can_write(other, theirs.prefix + "pages/overwritten.jsonl")
    for theirs in (pod_a, pod_b):  # (with the kubelet double, the jobs' pods wrote there too)
        stored = bed.s3.stored_objects(theirs.bucket)
        assert theirs.prefix + "pages/probe.jsonl" in stored
        assert theirs.prefix + "pages/overwritten.jsonl" not in stored

    # The chart refuses a shared default that would give both the same keys.
    shared = bed.helm(
        "template", RELEASE, str(CHART), "--namespace", bed.release_namespace,
        "--set", "defaultOutput.destination=s3://crawls/", "--set", "defaultOutput.secretName=x",
        "--set", f"watchNamespaces={{{','.join(bed.tenants)}}}",
        check=False,
    )  # fmt: skip
    assert shared.returncode != 0
    assert "give each namespace its own (defaultOutput.namespaces)" in shared.stderr


def test_a_shared_default_gives_every_tenant_the_keys_to_the_others_output(bed: Bed) -> None:
    """The measurement behind the choice: one key pair for all namespaces (the old default,
    now only with defaultOutput.shareCredentials) reaches across, whatever the prefixes."""
    run = uuid.uuid4().hex[:6]
    keys = bed.s3.create_user(f"shared-{run}")
    bed.s3.create_bucket(f"crawls-{run}", owner=keys.access_key_id)
    keys_secret(bed.core, bed.release_namespace, "shared-output", keys)
    pod_a, pod_b = bed.pods(
        "--set", f"defaultOutput.destination=s3://crawls-{run}/jobs/",
        "--set", "defaultOutput.secretName=shared-output",
        "--set", f"defaultOutput.s3.endpoint={bed.s3.endpoint_url}",
        "--set", "defaultOutput.shareCredentials=true",
    )  # fmt: skip
    a, b = bed.tenants
    assert (pod_a.prefix, pod_b.prefix) == (f"jobs/{a}/books/", f"jobs/{b}/books/")
    assert pod_a.keys == pod_b.keys
    assert can_write(pod_b.store(), pod_b.prefix + "pages/probe.jsonl", b"tenant b's page")
    assert can_list(pod_a.store(), pod_b.prefix)
    assert can_write(pod_a.store(), pod_b.prefix + "pages/probe.jsonl")  # overwritten
    stored = bed.s3.stored_objects(f"crawls-{run}")[pod_b.prefix + "pages/probe.jsonl"]
    assert stored.read_bytes() == b"written by the other tenant"


def _has_workers(apps: client.AppsV1Api, namespace: str, job: str) -> bool:
    names = {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items}
    return f"{job}-workers" in names
