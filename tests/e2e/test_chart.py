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
  is then exactly what the chart's Role grants (a verb granted and never called fails).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from crawlfleet.config import Config
from crawlfleet.operator.output import DefaultOutput
from crawlfleet.tenancy import TenancyPolicy
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.controlplane import ControlPlane, binary_dir
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
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


def kinds(manifest: str) -> list[str]:
    return [doc["kind"] for doc in yaml.safe_load_all(manifest) if doc]


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
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=30s", *[f"crd/{n}" for n in names]
    )
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


# -- the output's default destination --------------------------------------------------------


def _operator_env(rendered: str) -> dict[str, str]:
    for doc in yaml.safe_load_all(rendered):
        if doc and doc["kind"] == "Deployment" and doc["metadata"]["name"] == RELEASE:
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
    found = {(doc["kind"], doc["metadata"]["name"]) for doc in yaml.safe_load_all(rendered) if doc}
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


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
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
    for doc in yaml.safe_load_all(rendered):
        if doc and doc["kind"] == "Deployment" and doc["metadata"]["name"] == RELEASE:
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


def service_account_kubeconfig(cluster: Cluster, namespace: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the release's ServiceAccount, by a real token from
    the TokenRequest API: what the operator's pod would get mounted."""
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
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"] == kind and doc["metadata"]["name"] == RELEASE
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
                metadata=client.V1ObjectMeta(name="seeds"),
                data={"seeds.txt": "\n".join(site.seeds)},
            ),
        )
        document = crawljob(
            "books",
            site,
            seedsFrom={"configMapKeyRef": {"name": "seeds", "key": "seeds.txt"}},
            workers={"minReplicas": 1, "maxReplicas": 1},
            lease={"deadAfterSeconds": 3},
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
