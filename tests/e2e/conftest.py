"""Fixtures of the e2e layer: a real control plane, the kubelet double, a namespace per test.

By default the session builds nothing and starts its own cluster from the binaries that
``tests/e2e/cluster/build.sh`` made (missing binaries fail every e2e test with that command in
the message; ``./scripts/test`` runs it first). With ``CRAWLFLEET_E2E_KUBECONFIG`` set, the
tests run against that cluster instead (kind, say) and the kubelet double is not started:
tests that need it skip there, everything else runs unchanged. See docs/development.md.
"""

from __future__ import annotations

import itertools
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.e2e.cluster.client import Cluster
from tests.e2e.cluster.controlplane import ControlPlane, ControlPlaneError, binary_dir
from tests.e2e.cluster.janitor import NamespaceJanitor
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.cluster.node import NodeError, RealNode

EXTERNAL_KUBECONFIG = "CRAWLFLEET_E2E_KUBECONFIG"
_E2E_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/e2e is marked ``e2e`` (select with -m e2e, skip with -m 'not e2e')."""
    for item in items:
        if _E2E_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane | None]:
    """The built control plane, or None when the tests target an external cluster."""
    if os.environ.get(EXTERNAL_KUBECONFIG):
        yield None
        return
    plane = ControlPlane(binary_dir(), tmp_path_factory.mktemp("control-plane"))
    failure = None
    try:
        plane.start()
    except ControlPlaneError as error:
        failure = str(error)
    if failure is not None:  # outside the except block: the message alone, no chained traceback
        pytest.fail(failure, pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def cluster(control_plane: ControlPlane | None) -> Iterator[Cluster]:
    if control_plane is None:
        kubeconfig = Path(os.environ[EXTERNAL_KUBECONFIG])
        kubectl = shutil.which("kubectl") or str(binary_dir() / "kubectl")
    else:
        kubeconfig = control_plane.kubeconfig
        kubectl = str(control_plane.bin_dir / "kubectl")
    api = config.new_client_from_config(config_file=str(kubeconfig))
    janitor_api = config.new_client_from_config(config_file=str(kubeconfig))
    janitor = NamespaceJanitor(janitor_api).start()
    try:
        yield Cluster(kubeconfig, kubectl, api, built=control_plane is not None)
    finally:
        janitor.stop()
        janitor_api.close()
        api.close()


@pytest.fixture(scope="session")
def kubelet(
    cluster: Cluster, control_plane: ControlPlane | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeletDouble]:
    """The process kubelet on the built control plane; tests that need it skip elsewhere."""
    if control_plane is None:
        pytest.skip(
            f"needs the kubelet double, which does not run when {EXTERNAL_KUBECONFIG} is set"
        )
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    double = KubeletDouble(api, tmp_path_factory.mktemp("kubelet"))
    double.start()
    try:
        yield double
    finally:
        double.stop()
        api.close()
    assert not double.errors, f"the kubelet double hit errors: {double.errors}"


@pytest.fixture(scope="module")
def real_node(
    control_plane: ControlPlane | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealNode]:
    """A real kubelet + containerd node (cluster/node.py), for the module that asks for it.

    Module-scoped on purpose: while it runs, so does kube-scheduler, which would bind other
    modules' pods too; the kubelet double stays the node of every other test.
    """
    if control_plane is None:
        pytest.skip(f"the real node joins the built control plane; {EXTERNAL_KUBECONFIG} is set")
    node = RealNode(control_plane, tmp_path_factory.mktemp("real-node"))
    failure = None
    try:
        node.start()
    except NodeError as error:
        failure = str(error)
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api)


@pytest.fixture(scope="session")
def apps(cluster: Cluster) -> client.AppsV1Api:
    return client.AppsV1Api(cluster.api)


_namespaces = itertools.count()


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace per test; deleting it lets the namespace controller clean up."""
    name = f"e2e-{next(_namespaces)}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)
