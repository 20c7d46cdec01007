"""The Helm chart against real tools: `helm lint`, and the real API server of the e2e test bed.

- `helm lint` is clean for the default values and each mode, and refuses bad values with the
  message of values.schema.json (helm validates values against it);
- `helm template` output passes `kubectl apply --dry-run=server`: the API server's own schema
  validation, admission and RBAC checks, with the chart's CRDs installed for real first;
- `helm install` (with the operator scaled to 0, so no pod runs) creates everything, CRDs
  included, and the ServiceAccount's RBAC allows what the operator does and nothing more,
  checked by SubjectAccessReviews that the API server's RBAC authorizer answers;
- `crawlfleet operator`, authenticated by a token of the chart's ServiceAccount, goes through
  every path that calls the API and is refused nothing; the API server's audit log of its calls
  is then exactly what the chart's Role grants (a verb granted and never called fails);
- every rendered object loads with a strict YAML loader (no key twice in a mapping);
- the operator's /healthz (all three probes) fails until the API server accepts its login and
  again once it refuses it;
- every pod the chart makes, and every pod the operator makes, passes the `restricted` Pod
  Security Standard in a namespace that enforces it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from crawlfleet.config import Config, OperatorConfig
from crawlfleet.crawljob import SeedListBounds
from crawlfleet.operator.children import ChildNames, selector_string
from crawlfleet.operator.output import DefaultOutput
from crawlfleet.tenancy import SEED_LIST_LABEL, TenancyPolicy
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_established, wait_until
from tests.e2e.cluster.controlplane import ControlPlane, binary_dir
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    HUNG_WORKER_FETCH,
    OperatorProcess,
    apply,
    crawljob,
    wait_crawled,
    wait_for_phase,
)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "crawlfleet"
RELEASE = "crawlfleet"
SERVICE_ACCOUNT = "crawlfleet"  # the release is named like the chart, so the full name is short
PROMETHEUS_OPERATOR_API = "monitoring.coreos.com/v1"

# Modes of the chart, as --set arguments; {namespace} and {other} are filled in per test.
MODES: dict[str, list[str]] = {
    "default": [],
    "cluster-wide": ["watchAllNamespaces=true"],
    "two-namespaces": ["watchNamespaces={{{namespace},{other}}}"],
    "ha": ["replicas=2"],
    "no-peering": ["peering.enabled=false"],
    "object-store": ["objectStore.enabled=true"],
}


@dataclass(frozen=True)
class Helm:
    """The helm binary, with its cache and config kept in a directory of the test session."""

    binary: str
    home: Path

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        result = subprocess.run(
            [self.binary, *args], capture_output=True, text=True, timeout=120, env=env
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
        return result


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The helm the test bed built, else one on PATH."""
    built = binary_dir() / "helm"
    binary = str(built) if os.access(built, os.X_OK) else shutil.which("helm")
    if binary is None:
        pytest.fail(f"no helm: run {REPO / 'tests/e2e/cluster/build.sh'}", pytrace=False)
    return Helm(binary, tmp_path_factory.mktemp("helm"))


def set_args(mode: str, **names: str) -> list[str]:
    arguments: list[str] = []
    for assignment in MODES[mode]:
        arguments += ["--set", assignment.format(**names)]
    return arguments


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key repeated in any mapping.

    YAML says the keys of a mapping are unique, and strict tools (kubectl's and the API
    server's strict decoding, yq, ruamel) refuse a repeated one; PyYAML keeps the last and says
    nothing, which is how a label repeated in a template passed this test before.
    """


def _unique_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> dict[object, object]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found the key {key!r} again",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def documents(manifest: str) -> list[dict[str, Any]]:
    """The objects of a rendered manifest, loaded strictly; a repeated key names its template
    (the ``# Source:`` comment helm writes above each object)."""
    try:
        return [doc for doc in yaml.load_all(manifest, Loader=UniqueKeyLoader) if doc]
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        before = manifest.splitlines()[: mark.line if mark else 0]
        source = next((line for line in reversed(before) if line.startswith("# Source:")), "")
        raise AssertionError(f"{source}\n{error}") from None


def kinds(manifest: str) -> list[str]:
    return [str(doc["kind"]) for doc in documents(manifest)]


@pytest.fixture(scope="session")
def chart_crds(cluster: Cluster) -> list[str]:
    """The chart's CRDs, installed for real (as `helm install` does first) and Established."""
    names = []
    for path in sorted((CHART / "crds").glob("*.yaml")):
        names += [doc["metadata"]["name"] for doc in yaml.safe_load_all(path.read_text()) if doc]
    # Server-side: client-side apply keeps a copy of the object in an annotation, which a CRD
    # with a full schema can outgrow (256 KiB).
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=chart-test",
        "-f", str(CHART / "crds"),
    )  # fmt: skip
    wait_established(cluster, *names)
    return names


@pytest.fixture
def other_namespace(core: client.CoreV1Api, namespace: str) -> Iterator[str]:
    """A second namespace for the operator to serve, next to the test's own."""
    name = f"{namespace}-b"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


# -- helm lint --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
def test_helm_lint_is_clean(helm: Helm, mode: str) -> None:
    result = helm("lint", "--strict", str(CHART), *set_args(mode, namespace="a", other="b"))
    problems = [
        line for line in result.stdout.splitlines() if line.startswith(("[WARNING]", "[ERROR]"))
    ]
    assert problems == []
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("flag", "assignment", "message"),
    [
        ("--set", "replicas=two", "at '/replicas': got string, want integer"),
        ("--set", "replica=2", "additional properties 'replica' not allowed"),
        ("--set-string", "watchAllNamespaces=yes", "at '/watchAllNamespaces': got string"),
        ("--set", "image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("--set-string", "metrics.serviceMonitor.interval=30", "/serviceMonitor/interval"),
        ("--set", "replicas=2,peering.enabled=false", "at '/peering/enabled': value must be true"),
        ("--set", "watchAllNamespaces=true,watchNamespaces={a}", "at '/watchNamespaces'"),
    ],
)
def test_helm_lint_refuses_a_bad_value_with_the_schema_message(
    helm: Helm, flag: str, assignment: str, message: str
) -> None:
    result = helm("lint", str(CHART), flag, assignment, check=False)
    assert result.returncode != 0
    assert message in result.stdout, result.stdout


# -- unique keys -----------------------------------------------------------------------------


def test_the_strict_loader_refuses_a_key_repeated_in_a_mapping() -> None:
    """What objectstore.yaml rendered before: the component label after the shared ones."""
    repeated = (
        "# Source: crawlfleet/templates/objectstore.yaml\n"
        "kind: Service\nspec:\n  selector:\n"
        "    app.kubernetes.io/component: operator\n"
        "    app.kubernetes.io/component: object-store\n"
    )
    with pytest.raises(AssertionError) as refused:
        documents(repeated)
    assert "found the key 'app.kubernetes.io/component' again" in str(refused.value)
    assert "# Source: crawlfleet/templates/objectstore.yaml" in str(refused.value)
    assert yaml.safe_load(repeated)["spec"]["selector"] == {  # what PyYAML alone lets through
        "app.kubernetes.io/component": "object-store"
    }


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_rendered_mapping_has_unique_keys(helm: Helm, mode: str) -> None:
    """Every object the chart renders in each mode (the monitors too) loads strictly."""
    rendered = helm(
        "template", RELEASE, str(CHART), "--namespace", "cf",
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.workerPodMonitor.enabled=true",
        "--api-versions", PROMETHEUS_OPERATOR_API,
        *set_args(mode, namespace="cf", other="cf-b"),
    ).stdout  # fmt: skip
    assert len(documents(rendered)) == rendered.count("\n# Source: ")


# -- the output's default destination --------------------------------------------------------


def _operator_env(rendered: str) -> dict[str, str]:
    for doc in documents(rendered):
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == RELEASE:
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            return {var["name"]: var.get("value", "") for var in container["env"]}
    raise AssertionError("no operator Deployment")


def test_the_quickstart_store_is_the_default_destination_and_the_operator_accepts_it(
    helm: Helm,
) -> None:
    rendered = helm(
        "template", RELEASE, str(CHART), "--namespace", "cf", "--set", "objectStore.enabled=true"
    ).stdout
    store = f"{RELEASE}-store"
    found = {(doc["kind"], doc["metadata"]["name"]) for doc in documents(rendered)}
    assert {
        ("Secret", store),
        ("PersistentVolumeClaim", store),
        ("Deployment", store),
        ("Service", store),
        ("Job", f"{store}-bucket"),
    } <= found
    default = DefaultOutput.parse(_operator_env(rendered)["CRAWLFLEET_DEFAULT_OUTPUT"])
    assert default.output.destination == "s3://crawls/"
    assert default.output.s3 is not None
    assert default.output.s3.endpoint == f"http://{store}.cf.svc:7070"
    assert default.output.s3.secret_ref is not None
    assert (default.secret_namespace, default.output.s3.secret_ref.name) == ("cf", store)

    # Off by default: no store, and no default destination (jobs must name one).
    plain = helm("template", RELEASE, str(CHART), "--namespace", "cf").stdout
    assert "CRAWLFLEET_DEFAULT_OUTPUT" not in _operator_env(plain)
    assert "versitygw" not in plain
    own = helm(
        "template", RELEASE, str(CHART), "--namespace", "cf",
        "--set", "defaultOutput.destination=s3://mine/crawls/",
        "--set", "defaultOutput.secretName=mine", "--set", "objectStore.enabled=true",
    ).stdout  # fmt: skip
    chosen = DefaultOutput.parse(_operator_env(own)["CRAWLFLEET_DEFAULT_OUTPUT"])
    assert chosen.output.destination == "s3://mine/crawls/"  # the user's wins over the store


def test_only_the_operators_pods_carry_the_labels_each_jobs_redis_admits(helm: Helm) -> None:
    """Each job's Redis NetworkPolicy admits pods with the operator's labels: the object store
    shares the chart's name label and must not match them (it would reach every job's Redis)."""
    rendered = helm(
        "template", RELEASE, str(CHART), "--namespace", "cf", "--set", "objectStore.enabled=true"
    ).stdout
    admitted = dict(OperatorConfig().operator_labels)
    matching = sorted(
        obj["metadata"]["name"]
        for obj in documents(rendered)
        if obj["kind"] in WORKLOADS
        and admitted.items()
        <= obj["spec"]["template"].get("metadata", {}).get("labels", {}).items()
    )
    assert matching == [RELEASE]


def test_each_namespace_gets_its_own_default_and_the_operator_may_read_only_those_secrets(
    helm: Helm,
) -> None:
    entries = {
        "team-a": {"destination": "s3://team-a/", "secretName": "team-a-keys"},
        "team-b": {
            "destination": "s3://team-b/crawls/",
            "secretName": "team-b-keys",
            "s3": {"endpoint": "http://store-b:9000"},
        },
    }
    rendered = helm(
        "template", RELEASE, str(CHART), "--namespace", "cf",
        "--set", "watchNamespaces={team-a,team-b}",
        "--set", "defaultOutput.s3.endpoint=http://store:7070",
        "--set-json", f"defaultOutput.namespaces={json.dumps(entries)}",
    ).stdout  # fmt: skip
    default = DefaultOutput.parse(_operator_env(rendered)["CRAWLFLEET_DEFAULT_OUTPUT"])
    assert default.output is None  # no shared default: an unlisted namespace gets none
    own_a, own_b = default.namespaces["team-a"], default.namespaces["team-b"]
    assert (own_a.destination, own_b.destination) == ("s3://team-a/", "s3://team-b/crawls/")
    assert own_a.s3 is not None
    assert own_b.s3 is not None
    assert (own_a.s3.endpoint, own_b.s3.endpoint) == ("http://store:7070", "http://store-b:9000")
    assert own_a.s3.secret_ref is not None
    assert own_a.s3.secret_ref.name == "team-a-keys"
    (role,) = [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"] == "Role" and doc["metadata"]["name"].endswith("-default-output")
    ]
    (rule,) = role["rules"]
    assert rule["resourceNames"] == ["team-a-keys", "team-b-keys"]
    assert rule["verbs"] == ["get"]
    # One shared key pair across namespaces: refused, unless the administrator says so.
    shared = ["--set", "watchAllNamespaces=true", "--set", "objectStore.enabled=true"]
    refused = helm("template", RELEASE, str(CHART), "--namespace", "cf", *shared, check=False)
    assert refused.returncode != 0
    assert "each tenant could read and overwrite the others' output" in refused.stderr
    allowed = [*shared, "--set", "defaultOutput.shareCredentials=true"]
    assert helm("template", RELEASE, str(CHART), "--namespace", "cf", *allowed).returncode == 0


# -- the tenancy policy ------------------------------------------------------------------------


def _operator_config(rendered: str) -> Config:
    """The configuration the operator reads from the rendered Deployment's env (fieldRefs as
    a pod would resolve them)."""
    env = _operator_env(rendered)
    env["CRAWLFLEET_POD_NAMESPACE"] = "cf"
    return Config.from_env(env)


def test_the_policy_values_reach_the_operator_as_its_policy(helm: Helm) -> None:
    plain = _operator_config(helm("template", RELEASE, str(CHART), "--namespace", "cf").stdout)
    assert TenancyPolicy.from_config(plain.operator) == TenancyPolicy(
        worker_images=("crawlfleet/worker",),
        redis_images=("redis", "docker.io/library/redis"),
        volume_types=frozenset({"emptyDir", "ephemeral", "persistentVolumeClaim"}),
        secret_label=("crawlfleet.io/crawljob-secret", "true"),
    )
    assert (plain.operator.pod_namespace, plain.operator.worker_egress) == ("cf", True)
    assert plain.operator.cluster_cidrs == ()
    chosen = _operator_config(
        helm(
            "template", RELEASE, str(CHART), "--namespace", "cf",
            "--set", "policy.workerImages={registry.example/crawl/,crawlfleet/worker}",
            "--set", "policy.volumeTypes={persistentVolumeClaim,nfs}",
            "--set", "policy.secretLabel=",
            "--set", "policy.redisUrls={redis.shared.svc,10.20.0.0/16}",
            "--set", "workerEgress.clusterCIDRs={203.0.113.0/24}",
            "--set", "bindAddress=127.0.0.1",
        ).stdout
    )  # fmt: skip
    policy = TenancyPolicy.from_config(chosen.operator)
    assert policy.worker_images == ("registry.example/crawl/", "crawlfleet/worker")
    assert policy.volume_types == {"persistentVolumeClaim", "nfs"}
    assert policy.secret_label is None
    assert policy.redis_hosts == ("redis.shared.svc", "10.20.0.0/16")
    assert chosen.operator.cluster_cidrs == ("203.0.113.0/24",)


def test_the_seed_list_policy_reaches_the_operator(helm: Helm) -> None:
    plain = _operator_config(helm("template", RELEASE, str(CHART), "--namespace", "cf").stdout)
    assert TenancyPolicy.from_config(plain.operator).seeds_label == SEED_LIST_LABEL
    assert plain.seed_list.bounds() == SeedListBounds()  # crawlfleet's own, not restated
    chosen = _operator_config(
        helm(
            "template", RELEASE, str(CHART), "--namespace", "cf",
            "--set", "policy.seedsLabel=",
            "--set", "policy.seedList.maxBytes=1048576",
            "--set", "policy.seedList.maxLines=5000",
        ).stdout
    )  # fmt: skip
    assert TenancyPolicy.from_config(chosen.operator).seeds_label is None
    assert chosen.seed_list.bounds() == SeedListBounds(max_bytes=1048576, max_lines=5000)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("policy.seedsLabel=seeds", "at '/policy/seedsLabel'"),
        ("policy.seedList.maxLines=-1", "at '/policy/seedList/maxLines'"),
        ("policy.secretLabel=crawl", "at '/policy/secretLabel'"),
        ("policy.volumeTypes={host-path}", "at '/policy/volumeTypes/0'"),
        ("workerEgress.clusterCIDRs={10.0.0.0}", "at '/workerEgress/clusterCIDRs/0'"),
        ("policy.workerImage={x}", "additional properties 'workerImage' not allowed"),
        ("policy.redisUrls={a b}", "at '/policy/redisUrls/0'"),
    ],
)
def test_helm_refuses_a_bad_policy_value(helm: Helm, assignment: str, message: str) -> None:
    result = helm("lint", str(CHART), "--set", assignment, check=False)
    assert result.returncode != 0
    assert message in result.stdout, result.stdout


def test_the_operator_binds_where_the_chart_says(helm: Helm) -> None:
    rendered = helm("template", RELEASE, str(CHART), "--set", "bindAddress=10.1.2.3").stdout
    for doc in documents(rendered):
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == RELEASE:
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            assert "--bind-host=10.1.2.3" in container["args"]
            return
    raise AssertionError("no operator Deployment")


# -- prometheus-operator objects -------------------------------------------------------------


def test_monitors_render_only_where_the_prometheus_operator_api_is_served(helm: Helm) -> None:
    monitors = [
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.workerPodMonitor.enabled=true",
    ]  # fmt: skip
    rendered = helm(
        "template", RELEASE, str(CHART), *monitors, "--api-versions", PROMETHEUS_OPERATOR_API
    )
    assert {"ServiceMonitor", "PodMonitor"} <= set(kinds(rendered.stdout))

    refused = helm("template", RELEASE, str(CHART), *monitors, check=False)
    assert refused.returncode != 0
    assert "need the prometheus-operator CRDs (monitoring.coreos.com/v1)" in refused.stderr


# -- the real API server ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
def test_rendered_chart_passes_a_server_side_dry_run(
    helm: Helm,
    cluster: Cluster,
    chart_crds: list[str],
    namespace: str,
    other_namespace: str,
    tmp_path: Path,
    mode: str,
) -> None:
    # A peering name of the test's own: a ClusterKopfPeering is cluster-scoped.
    rendered = helm(
        "template", RELEASE, str(CHART), "--namespace", namespace,
        "--set", f"peering.name={namespace}",
        *set_args(mode, namespace=namespace, other=other_namespace),
    )  # fmt: skip
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(rendered.stdout)
    expected = kinds(rendered.stdout)
    assert {"ServiceAccount", "Deployment", "Service", "ConfigMap"} <= set(expected)

    # No --namespace: every namespaced object must name its own (the Roles of the other watched
    # namespaces included), as `helm install` would put them.
    applied = cluster.kubectl("apply", "--dry-run=server", "-f", str(manifest), check=False)
    assert applied.returncode == 0, applied.stderr
    lines = [line for line in applied.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(lines) == len(expected), applied.stdout


# -- helm install, and what the ServiceAccount may do ----------------------------------------

Call = tuple[str, str, str, str]  # verb, API group, resource, subresource

# What the operator calls in every namespace it serves (crawlfleet/operator/kube.py and kopf;
# test_the_charts_rbac_is_exactly_what_the_operator_calls derives it from the audit log).
OPERATOR_CALLS: list[Call] = [
    *[(verb, "crawlfleet.io", "crawljobs", "") for verb in ("list", "watch", "patch", "delete")],
    ("patch", "crawlfleet.io", "crawljobs", "status"),
    ("create", "", "events", ""),
    *[(verb, "apps", "deployments", "") for verb in ("get", "list", "watch", "create", "patch")],
    ("patch", "apps", "deployments", "scale"),
    *[
        (verb, "", resource, "")
        for resource in ("services", "secrets")
        for verb in ("get", "create", "patch")
    ],
    *[(verb, "", "configmaps", "") for verb in ("get", "create", "patch")],
    ("create", "", "persistentvolumeclaims", ""),
    ("create", "networking.k8s.io", "networkpolicies", ""),
    ("patch", "networking.k8s.io", "networkpolicies", ""),
    *[(verb, "", "pods", "") for verb in ("list", "watch", "delete")],
]
# What it never does, in any namespace: the children are deleted by the garbage collector, and
# no Secret of the namespace is listed, watched, rewritten or deleted.
NEVER: list[Call] = [
    ("create", "crawlfleet.io", "crawljobs", ""),
    ("update", "crawlfleet.io", "crawljobs", ""),
    ("deletecollection", "crawlfleet.io", "crawljobs", ""),
    ("create", "", "pods", ""),
    ("create", "", "pods", "exec"),
    ("create", "", "serviceaccounts", "token"),
    ("create", "rbac.authorization.k8s.io", "roles", ""),
    ("create", "rbac.authorization.k8s.io", "rolebindings", ""),
    ("create", "apps", "statefulsets", ""),
    ("create", "batch", "jobs", ""),
    *[(verb, "", "secrets", "") for verb in ("list", "watch", "update", "delete")],
    *[(verb, "apps", "deployments", "") for verb in ("update", "delete")],
    ("delete", "", "services", ""),
    ("delete", "", "persistentvolumeclaims", ""),
    ("delete", "networking.k8s.io", "networkpolicies", ""),
]
# Cluster-scoped: only an operator serving every namespace makes these calls.
CLUSTER_WIDE_CALLS: list[Call] = [
    ("list", "", "namespaces", ""),
    ("watch", "", "namespaces", ""),
    ("patch", "kopf.dev", "clusterkopfpeerings", ""),
]
CLUSTER_NEVER: list[Call] = [
    ("create", "", "namespaces", ""),
    ("list", "", "nodes", ""),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("create", "rbac.authorization.k8s.io", "clusterroles", ""),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
]


def allowed(
    cluster: Cluster, release_namespace: str, calls: list[Call], where: str | None
) -> set[Call]:
    """The calls the API server's authorizer allows the release's ServiceAccount in ``where``
    (None: cluster-scoped)."""
    authorization = client.AuthorizationV1Api(cluster.api)
    granted = set()
    for verb, group, resource, subresource in calls:
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=f"system:serviceaccount:{release_namespace}:{SERVICE_ACCOUNT}",
                groups=[
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{release_namespace}",
                    "system:authenticated",
                ],
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb,
                    group=group,
                    resource=resource,
                    subresource=subresource or None,
                    namespace=where,
                ),
            )
        )
        if authorization.create_subject_access_review(review).status.allowed:
            granted.add((verb, group, resource, subresource))
    return granted


@pytest.fixture
def install(
    helm: Helm, cluster: Cluster, chart_crds: list[str], namespace: str
) -> Iterator[list[str]]:
    """The arguments of `helm install` into the test's namespace; `helm uninstall` afterwards
    (cluster-scoped objects outlive the namespace). The operator is scaled to 0: no pod of it
    runs on the test bed."""
    where = ["--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace]
    yield [
        *where, "install", RELEASE, str(CHART), "--set", "replicas=0",
        "--set", f"peering.name={namespace}",
    ]  # fmt: skip
    helm(*where, "uninstall", RELEASE, "--wait", "--timeout=60s", check=False)


def test_helm_install_in_one_namespace_grants_exactly_the_operators_calls(
    helm: Helm, install: list[str], cluster: Cluster, namespace: str, other_namespace: str
) -> None:
    installed = helm(*install)
    assert f"serves CrawlJobs in: {namespace}." in installed.stdout  # NOTES.txt
    client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        "kopf.dev", "v1", namespace, "kopfpeerings", namespace
    )

    peering: Call = ("patch", "kopf.dev", "kopfpeerings", "")
    assert allowed(cluster, namespace, [*OPERATOR_CALLS, peering], namespace) == {
        *OPERATOR_CALLS,
        peering,
    }
    assert allowed(cluster, namespace, [*OPERATOR_CALLS, peering], other_namespace) == set()
    assert allowed(cluster, namespace, NEVER, namespace) == set()
    assert allowed(cluster, namespace, CLUSTER_WIDE_CALLS + CLUSTER_NEVER, None) == set()


def test_helm_install_cluster_wide_grants_the_operators_calls_everywhere(
    helm: Helm, install: list[str], cluster: Cluster, namespace: str, other_namespace: str
) -> None:
    installed = helm(*install, "--set", "watchAllNamespaces=true")
    assert "serves CrawlJobs in every namespace" in installed.stdout  # NOTES.txt
    client.CustomObjectsApi(cluster.api).get_cluster_custom_object(
        "kopf.dev", "v1", "clusterkopfpeerings", namespace
    )

    for where in (namespace, other_namespace):
        assert allowed(cluster, namespace, OPERATOR_CALLS, where) == set(OPERATOR_CALLS)
        assert allowed(cluster, namespace, NEVER, where) == set()
    assert allowed(cluster, namespace, CLUSTER_WIDE_CALLS, None) == set(CLUSTER_WIDE_CALLS)
    assert allowed(cluster, namespace, CLUSTER_NEVER, None) == set()


# -- the operator itself, with nothing but the chart's RBAC ----------------------------------


def service_account_kubeconfig(
    cluster: Cluster, namespace: str, path: Path, token: str | None = None
) -> Path:
    """A kubeconfig that authenticates as the release's ServiceAccount, by a real token from
    the TokenRequest API: what the operator's pod would get mounted (or by ``token``)."""
    if token is None:
        token = cluster.kubectl(
            "create", "token", SERVICE_ACCOUNT, "--namespace", namespace, "--duration=1h"
        ).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    (entry,) = admin["clusters"]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "e2e", "cluster": entry["cluster"]}],
                "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": "e2e",
                        "context": {
                            "cluster": "e2e",
                            "user": SERVICE_ACCOUNT,
                            "namespace": namespace,
                        },
                    }
                ],
                "current-context": "e2e",
            }
        )
    )
    return path


def audited_calls(audit_log: Path, user: str) -> set[Call]:
    """What ``user`` called, by the API server's audit log: every request it was not refused.

    A patch that created its object (201: a server-side apply of something new) needed
    ``create`` as well, so it counts as both.
    """
    calls: set[Call] = set()
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef")
        if event["user"]["username"] != user or not ref:
            continue  # another identity, or a non-resource URL (discovery: not the chart's)
        code = (event.get("responseStatus") or {}).get("code", 0)
        if code == 403:
            continue
        call = (event["verb"], ref.get("apiGroup", ""), ref["resource"], ref.get("subresource", ""))
        calls.add(call)
        if event["verb"] == "patch" and code == 201:
            calls.add(("create", *call[1:]))
    return calls


def granted_calls(rendered: str, kind: str) -> set[Call]:
    """Every (verb, group, resource, subresource) the chart's Role or ClusterRole grants."""
    (role,) = [
        doc
        for doc in documents(rendered)
        if doc["kind"] == kind and doc["metadata"]["name"] == RELEASE
    ]
    calls: set[Call] = set()
    for rule in role["rules"]:
        assert "resourceNames" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                name, _, subresource = resource.partition("/")
                calls |= {(verb, group, name, subresource) for verb in rule["verbs"]}
    return calls


def worker_pid(core: client.CoreV1Api, namespace: str) -> tuple[str, int] | None:
    """A running worker pod and its process (the kubelet double's container id is its PID)."""
    for pod in core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=worker"
    ).items:
        statuses = pod.status.container_statuses or ()
        if pod.metadata.deletion_timestamp or not statuses or not statuses[0].state.running:
            continue
        return pod.metadata.name, int(statuses[0].container_id.removeprefix("process://"))
    return None


def test_the_charts_rbac_is_exactly_what_the_operator_calls(
    helm: Helm,
    install: list[str],
    cluster: Cluster,
    control_plane: ControlPlane | None,
    kubelet: KubeletDouble,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The operator, authenticated by a token of the chart's ServiceAccount, goes through every
    path that calls the API (children created, then patched by a spec edit; status, Events,
    scaling, the peering; a hung worker's pod deleted; the finished job deleted by its ttl) and
    is refused nothing; the API server's audit log then says what it called, and the chart's
    Role must grant exactly that: no verb it never uses."""
    assert control_plane is not None  # the kubelet fixture skips on an external cluster
    helm(*install)
    identity = dataclasses.replace(
        cluster, kubeconfig=service_account_kubeconfig(cluster, namespace, tmp_path / "sa.yaml")
    )
    user = f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"
    whoami = identity.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert whoami.stdout == user

    config = SiteConfig(hosts=2, pages_per_host=40, hostile=False, latency_seconds=0.5)
    with TestSite(config) as site:
        # Part of the seeds from a list in a ConfigMap (seedsFrom), which the operator reads.
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                # The label that lets a CrawlJob read it (the tenancy policy's default).
                metadata=client.V1ObjectMeta(
                    name="seeds", labels={"crawlfleet.io/crawljob-seeds": "true"}
                ),
                data={"seeds.txt": "\n".join(site.seeds)},
            ),
        )
        document = crawljob(
            "books",
            site,
            seedsFrom={"configMapKeyRef": {"name": "seeds", "key": "seeds.txt"}},
            workers={"minReplicas": 1, "maxReplicas": 1},
            lease={"deadAfterSeconds": 3},
            fetch=HUNG_WORKER_FETCH,  # its slots held seconds, not a minute, once hung
            ttlSecondsAfterFinished=1,
        )
        operator = OperatorProcess(identity, namespace, tmp_path, peering=namespace).start()
        try:
            apply(cluster, document, namespace=namespace)
            wait_crawled(cluster, namespace, "books", 3, timeout=90)
            # A hung worker (alive, silent): the operator deletes its pod to replace it.
            found = wait_until(lambda: worker_pid(core, namespace), what="a running worker")
            pod, pid = found
            os.kill(pid, signal.SIGSTOP)
            try:
                wait_until(
                    lambda: core.read_namespaced_pod(pod, namespace).metadata.deletion_timestamp,
                    timeout=60,
                    what="the hung worker's pod deleted",
                )
            finally:
                os.kill(pid, signal.SIGCONT)
            # A spec edit: ensure() runs again and brings every child up to date.
            cluster.kubectl(
                "patch", "crawljob/books", "-n", namespace, "--type=merge",
                "-p", json.dumps({"spec": {"workers": {"scaleDownDelaySeconds": 3}}}),
            )  # fmt: skip
            wait_for_phase(cluster, namespace, "books", "Succeeded", timeout=150, operator=operator)
            custom = client.CustomObjectsApi(cluster.api)
            wait_until(
                lambda: (
                    not custom.list_namespaced_custom_object(
                        "crawlfleet.io", "v1alpha1", namespace, "crawljobs"
                    )["items"]
                ),
                timeout=60,
                what="the finished job deleted by its ttlSecondsAfterFinished",
            )
        except AssertionError as exc:
            left = cluster.kubectl("get", "crawljobs", "-n", namespace, "-o", "yaml", check=False)
            raise AssertionError(f"{exc}\n{left.stdout}\n{operator.log()}") from None
        finally:
            operator.stop()
    log = operator.log_file.read_text(errors="replace")  # all of it, not the tail
    # Enough is not all: the operator must not even try what the chart does not grant. (kopf,
    # left to scan, lists namespaces cluster-wide; a namespaced operator turns scanning off.)
    refused = [line for line in log.splitlines() if "forbidden" in line.lower()]
    assert refused == [], "\n".join(refused)

    # kubectl auth whoami above is the test's call, allowed to everyone (system:basic-user).
    used = audited_calls(control_plane.audit_log, user) - {
        ("create", "authentication.k8s.io", "selfsubjectreviews", "")
    }
    rendered = helm(
        "template", RELEASE, str(CHART), "--namespace", namespace,
        "--set", f"peering.name={namespace}",
    ).stdout  # fmt: skip
    granted = granted_calls(rendered, "Role")
    assert sorted(granted - used) == [], f"granted, never called; called: {sorted(used)}"
    assert sorted(used - granted) == [], "called, not granted"

    # Serving every namespace takes the same calls, cluster-wide, plus what only a cluster-wide
    # kopf makes: following namespaces, and the peering's keep-alive in the cluster-scoped kind.
    everywhere = helm("template", RELEASE, str(CHART), "--set", "watchAllNamespaces=true").stdout
    peering = {call for call in used if call[2] == "kopfpeerings"}
    assert granted_calls(everywhere, "ClusterRole") == {
        *(used - peering),
        *((verb, group, "clusterkopfpeerings", sub) for verb, group, _, sub in peering),
        ("list", "", "namespaces", ""),
        ("watch", "", "namespaces", ""),
    }


# -- the operator's probes --------------------------------------------------------------------


def health(operator: OperatorProcess) -> tuple[int, str] | None:
    """What the operator's /healthz (every probe of the chart's Deployment) answers; None while
    nothing listens yet."""
    if operator.process is not None and operator.process.poll() is not None:
        raise AssertionError(
            f"the operator exited ({operator.process.returncode}):\n{operator.log()}"
        )
    url = f"http://127.0.0.1:{operator.health_port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None


def test_the_probes_fail_until_the_api_server_accepts_the_operators_login_and_while_it_refuses(
    helm: Helm, install: list[str], cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """Started with a token the API server refuses, the operator answers /healthz 500 and keeps
    trying; the ServiceAccount's real token in the same kubeconfig turns it 200 at the next
    try; that ServiceAccount deleted (its tokens refused), the next call kopf makes gets a
    401, kopf logs in again, and /healthz answers 500 again."""
    helm(*install)
    kubeconfig = service_account_kubeconfig(
        cluster, namespace, tmp_path / "sa.yaml", token="not-a-token"
    )
    identity = dataclasses.replace(cluster, kubeconfig=kubeconfig)
    operator = OperatorProcess(identity, namespace, tmp_path).start()
    try:
        refused = wait_until(lambda: health(operator), timeout=60, what="/healthz to answer")
        assert refused[0] == 500, refused
        # Not a first answer that happens to be early: it stays 500 over failed logins.
        wait_until(
            lambda: operator.log_file.read_text().count("login failed: GET") >= 2,
            timeout=30,
            what="two logins refused",
        )
        assert (health(operator) or (0, ""))[0] == 500
        assert "/version: 401 Unauthorized" in operator.log_file.read_text()

        service_account_kubeconfig(cluster, namespace, kubeconfig)  # a real token
        accepted = wait_until(
            lambda: (answer := health(operator)) and answer[0] == 200 and answer,
            timeout=30,
            what="/healthz to answer 200",
        )
        assert json.loads(accepted[1])["login"]["server"] == cluster.api.configuration.host

        cluster.kubectl("delete", "serviceaccount", SERVICE_ACCOUNT, "--namespace", namespace)
        with TestSite(SiteConfig(hosts=1, pages_per_host=1, hostile=False)) as site:
            apply(cluster, crawljob("after-revocation", site), namespace=namespace)
        wait_until(
            lambda: (answer := health(operator)) and answer[0] == 500,
            timeout=60,
            what="/healthz to answer 500 once the token is refused",
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{operator.log()}") from None
    finally:
        operator.stop()


# -- the restricted Pod Security Standard ----------------------------------------------------

#: A namespace that refuses pods below the restricted standard, and warns of workload objects
#: (Deployments, Jobs) whose pods would be refused.
RESTRICTED = {
    f"pod-security.kubernetes.io/{mode}{suffix}": value
    for mode in ("enforce", "warn")
    for suffix, value in (("", "restricted"), ("-version", "latest"))
}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


@pytest.fixture
def restricted_namespace(core: client.CoreV1Api, namespace: str) -> str:
    core.patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    return namespace


def pods_of(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A Pod for each workload's pod template, named after the workload."""
    pods = {}
    for obj in objects:
        if obj["kind"] in WORKLOADS:
            name = f"{obj['kind'].lower()}-{obj['metadata']['name']}"
            template = obj["spec"]["template"]
            pods[name] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "labels": template.get("metadata", {}).get("labels", {}),
                },
                "spec": template["spec"],
            }
    return pods


def pod_security_refusals(
    cluster: Cluster, namespace: str, pods: dict[str, dict[str, Any]], tmp_path: Path
) -> dict[str, str]:
    """What the API server says of each pod, created with a server-side dry run in
    ``namespace``: PodSecurity admission runs on a dry run, so a pod below the namespace's
    standard is refused (and only admitted pods are left out)."""
    said = {}
    for name, pod in pods.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(pod))
        created = cluster.kubectl(
            "create", "--dry-run=server", "--namespace", namespace, "-f", str(path), check=False
        )
        if created.returncode != 0 or created.stderr:
            said[name] = created.stderr.strip()
    return said


def test_the_restricted_namespace_refuses_a_pod_without_a_security_context(
    cluster: Cluster, restricted_namespace: str, tmp_path: Path
) -> None:
    """The check below can fail: the same dry run refuses a pod that does not meet the
    standard (the object store's pod as it was)."""
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "c", "image": "versity/versitygw:v1.8.0"}]},
    }
    said = pod_security_refusals(cluster, restricted_namespace, {"bare": bare}, tmp_path)
    assert 'violates PodSecurity "restricted:latest"' in said["bare"], said


def test_every_pod_of_the_chart_passes_the_restricted_pod_security_standard(
    helm: Helm,
    install: list[str],
    cluster: Cluster,
    core: client.CoreV1Api,
    restricted_namespace: str,
    tmp_path: Path,
) -> None:
    """The README's quickstart (the object store on) in a namespace enforcing the restricted
    standard: `helm install` gets no PodSecurity warning, the store's ReplicaSet gets its pod
    admitted for real, and a pod of every pod template the chart renders (the operator's at
    any replica count, the bucket Job's, which no controller here runs) passes the dry run."""
    namespace = restricted_namespace
    # --no-hooks: the bucket Job would wait for a job controller the test bed does not run.
    installed = helm(*install, "--set", "objectStore.enabled=true", "--no-hooks")
    assert "PodSecurity" not in installed.stderr, installed.stderr

    selector = "app.kubernetes.io/component=object-store"
    try:
        wait_until(
            lambda: core.list_namespaced_pod(namespace, label_selector=selector).items,
            timeout=30,
            what="the object store's pod admitted",
        )
    except AssertionError as error:
        events = cluster.kubectl("get", "events", "-n", namespace, check=False).stdout
        raise AssertionError(f"{error}\n{events}") from None

    rendered = helm(
        "template", RELEASE, str(CHART), "--namespace", namespace,
        "--set", "objectStore.enabled=true", "--set", f"peering.name={namespace}",
    ).stdout  # fmt: skip
    objects = documents(rendered)
    pods = pods_of(objects)
    assert set(pods) == {
        f"deployment-{RELEASE}",
        f"deployment-{RELEASE}-store",
        f"job-{RELEASE}-store-bucket",
    }
    assert pod_security_refusals(cluster, namespace, pods, tmp_path) == {}
    # The workload objects themselves (copies, under names of their own): a namespace warns
    # of a template it would refuse, and helm would have shown it.
    copies = [
        {**obj, "metadata": {**obj["metadata"], "name": f"{obj['metadata']['name']}-copy"}}
        for obj in objects
        if obj["kind"] in WORKLOADS
    ]
    manifest = tmp_path / "workloads.yaml"
    manifest.write_text(yaml.safe_dump_all(copies))
    created = cluster.kubectl(
        "create", "--dry-run=server", "--namespace", namespace, "-f", str(manifest)
    )
    assert created.stdout.count("(server dry run)") == len(copies) == 3, created.stdout
    assert created.stderr == ""


def test_every_pod_the_operator_makes_passes_the_restricted_pod_security_standard(
    cluster: Cluster,
    chart_crds: list[str],
    core: client.CoreV1Api,
    apps: client.AppsV1Api,
    restricted_namespace: str,
    tmp_path: Path,
) -> None:
    """A CrawlJob (managed Redis, the workers) in a namespace enforcing the restricted
    standard: the Redis Deployment's ReplicaSet gets its pod admitted for real, and a pod of
    the workers' template (at 0 replicas until Redis answers) passes the dry run."""
    namespace = restricted_namespace
    names = ChildNames.of("restricted")
    operator = OperatorProcess(cluster, namespace, tmp_path).start()
    try:
        with TestSite(SiteConfig(hosts=1, pages_per_host=1, hostile=False)) as site:
            apply(cluster, crawljob("restricted", site), namespace=namespace)

            def deployments() -> list[client.V1Deployment] | None:
                found = apps.list_namespaced_deployment(namespace).items
                named = {deployment.metadata.name for deployment in found}
                return found if named >= {names.redis, names.workers} else None

            made = wait_until(deployments, timeout=60, what="the job's Deployments")
        redis = apps.read_namespaced_deployment(names.redis, namespace)
        wait_until(
            lambda: (
                core.list_namespaced_pod(
                    namespace, label_selector=selector_string(redis.spec.selector.match_labels)
                ).items
            ),
            timeout=30,
            what="the Redis pod admitted",
        )
    except AssertionError as error:
        events = cluster.kubectl("get", "events", "-n", namespace, check=False).stdout
        raise AssertionError(f"{error}\n{events}\n{operator.log()}") from None
    finally:
        operator.stop()
    objects = [{**cluster.api.sanitize_for_serialization(d), "kind": "Deployment"} for d in made]
    pods = pods_of(objects)
    assert set(pods) == {f"deployment-{names.redis}", f"deployment-{names.workers}"}
    assert pod_security_refusals(cluster, namespace, pods, tmp_path) == {}
