"""The operator's own API calls (crawlfleet.operator.kube) against the real kube-apiserver.

The operator makes its children over aiohttp with kopf's credentials, not the official client;
these tests pin the REST semantics it relies on: server-side apply (a field the operator stops
setting goes, others' fields stay, a volume may change type), create → 409 for objects made
once, 404 tolerated where
the operator means "already gone", other errors raised with the API server's message, a 401
answered by one fresh login, and a kubeconfig whose user is an exec credential plugin.
"""

from __future__ import annotations

import base64
import json
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kopf
import pytest
from kubernetes import client

from crawlfleet.config import DrainConfig
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.operator import children
from crawlfleet.operator.children import JobRef
from crawlfleet.operator.kube import FIELD_MANAGER, Kube, KubeError, login
from tests.e2e.cluster.client import Cluster


@pytest.fixture
def use_kubeconfig(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))


@pytest.fixture
async def kube(cluster: Cluster, use_kubeconfig: None) -> AsyncIterator[Kube]:
    api = Kube(login)
    try:
        yield api
    finally:
        await api.close()


def config_map(namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "spec", "namespace": namespace},
        "data": data,
    }


async def test_ensure_applies_and_create_leaves_alone(
    kube: Kube, core: client.CoreV1Api, namespace: str
) -> None:
    assert await kube.ensure(config_map(namespace, {"a": "1"})) is True
    assert await kube.ensure(config_map(namespace, {"a": "2"})) is False
    assert core.read_namespaced_config_map("spec", namespace).data == {"a": "2"}
    assert await kube.create(config_map(namespace, {"a": "3"})) is False
    assert core.read_namespaced_config_map("spec", namespace).data == {"a": "2"}


async def test_apply_drops_what_the_operator_no_longer_sets_and_keeps_what_others_set(
    kube: Kube, core: client.CoreV1Api, namespace: str
) -> None:
    await kube.ensure(config_map(namespace, {"a": "1", "b": "2"}))
    core.patch_namespaced_config_map(
        "spec", namespace, {"metadata": {"annotations": {"someone/else": "x"}}}
    )
    await kube.ensure(config_map(namespace, {"a": "1"}))
    found = core.read_namespaced_config_map("spec", namespace)
    assert found.data == {"a": "1"}
    assert found.metadata.annotations == {"someone/else": "x"}
    managers = {entry.manager for entry in found.metadata.managed_fields}
    assert FIELD_MANAGER in managers


def _workers(namespace: str, output: dict[str, Any]) -> dict[str, Any]:
    spec = CrawlJobSpec.from_mapping({"seeds": ["https://example.com/"], "output": output})
    return children.worker_deployment(
        JobRef(namespace, "job"), spec, replicas=0, image="none", drain=DrainConfig()
    )


async def test_an_output_volume_that_changes_type_is_a_clean_rollout(
    kube: Kube, apps: client.AppsV1Api, namespace: str
) -> None:
    """emptyDir to a claim: a merge patch would keep both sources (422, "may not specify more
    than 1 volume type"); the apply replaces the one the operator owns, and the replicas the
    tick set meanwhile stay."""
    assert await kube.ensure(_workers(namespace, {}), handed_over=["spec.replicas"]) is True
    name = JobRef(namespace, "job").names.workers
    assert apps.read_namespaced_deployment(name, namespace).spec.replicas == 0
    await kube.scale_deployment(namespace, name, 3)
    claim = {"ephemeral": True, "volume": {"persistentVolumeClaim": {"claimName": "out"}}}
    assert await kube.ensure(_workers(namespace, claim), handed_over=["spec.replicas"]) is False
    found = apps.read_namespaced_deployment(name, namespace)
    (volume,) = [v for v in found.spec.template.spec.volumes if v.name == "output"]
    assert volume.persistent_volume_claim.claim_name == "out"
    assert volume.empty_dir is None
    assert found.spec.replicas == 3
    assert found.metadata.generation == 3  # created, scaled, rolled out


async def test_reads_answer_none_for_missing_objects_and_values_for_present_ones(
    kube: Kube, core: client.CoreV1Api, namespace: str
) -> None:
    assert await kube.secret_value(namespace, "missing", "password") is None
    assert await kube.service_cluster_ip(namespace, "missing") is None
    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "redis"}, "data": {"password": base64.b64encode(b"s3cret").decode()}},
    )
    assert await kube.secret_value(namespace, "redis", "password") == "s3cret"
    assert await kube.secret_value(namespace, "redis", "other") is None
    core.create_namespaced_service(
        namespace, {"metadata": {"name": "redis"}, "spec": {"ports": [{"port": 6379}]}}
    )
    ip = await kube.service_cluster_ip(namespace, "redis")
    assert ip == core.read_namespaced_service("redis", namespace).spec.cluster_ip


async def test_gone_is_fine_where_the_operator_means_gone(kube: Kube, namespace: str) -> None:
    await kube.scale_deployment(namespace, "missing", 3)
    await kube.delete_pod(namespace, "missing")
    await kube.delete_crawljob(namespace, "missing")


async def test_other_errors_raise_with_the_api_servers_message(kube: Kube, namespace: str) -> None:
    bad = config_map(namespace, {"a": "1"})
    bad["metadata"]["name"] = "Not_A_Name"
    with pytest.raises(KubeError) as raised:
        await kube.ensure(bad)
    assert raised.value.status == 422
    assert "Not_A_Name" in str(raised.value)


async def test_scale_patches_the_deployments_replicas(
    kube: Kube, apps: client.AppsV1Api, namespace: str
) -> None:
    labels = {"app": "w"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "workers"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "w", "image": "none"}]},
                },
            },
        },
    )
    await kube.scale_deployment(namespace, "workers", 4)
    assert apps.read_namespaced_deployment("workers", namespace).spec.replicas == 4


async def test_a_401_logs_in_again_once(cluster: Cluster, use_kubeconfig: None) -> None:
    logins: list[str] = []

    def credentials() -> kopf.ConnectionInfo:
        info = login()
        if not logins:  # the first login's identity is refused (an expired token, say)
            info = kopf.ConnectionInfo(
                server=info.server, ca_path=info.ca_path, token="expired-token"
            )
        logins.append(info.token or "certificate")
        return info

    api = Kube(credentials)
    try:
        assert await api.secret_value("default", "missing", "x") is None
        assert logins == ["expired-token", "certificate"]
        assert await api.secret_value("default", "missing", "x") is None
        assert len(logins) == 2  # the fresh session is kept
    finally:
        await api.close()


async def test_a_kubeconfig_exec_plugin_supplies_the_credentials(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EKS- and GKE-style kubeconfigs: the user is a command printing an ExecCredential."""
    config = json.loads(cluster.kubeconfig.read_text())
    user = config["users"][0]["user"]
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {
            "clientCertificateData": Path(user["client-certificate"]).read_text(),
            "clientKeyData": Path(user["client-key"]).read_text(),
        },
    }
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(
        f"#!/bin/sh\n[ \"$PLUGIN_MODE\" = on ] || exit 3\ncat <<'EOF'\n"
        f"{json.dumps(credential)}\nEOF\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    config["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "env": [{"name": "PLUGIN_MODE", "value": "on"}],
        }
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))

    api = Kube(login)
    try:
        assert await api.secret_value("default", "missing", "x") is None
    finally:
        await api.close()
