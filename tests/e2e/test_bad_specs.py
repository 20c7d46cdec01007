"""The bad-spec corpus through the cluster's two doors: the API server, then the operator.

Every case of tests/bad_specs/ (see tests/support/bad_specs.py) is refused by ``crawlfleet
validate`` with ``field: message`` (tests/unit/test_bad_specs.py). Here the same files meet the
real kube-apiserver, which must refuse the ``cel`` cases at the same field in the same words and
the ``schema`` cases at the same field in its own, and admit the ``operator`` cases; and a real
operator, which must mark each admitted case ``InvalidSpec`` with the model's ``field: message``
and go on running (no traceback, no crash loop, no retry storm).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.operator_support import (
    GROUP,
    PLURAL,
    VERSION,
    apply,
    condition,
    get_job,
    install_crd,
    running_operator,
)
from tests.support.bad_specs import BadSpec, bad_specs

CASES = bad_specs()


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> None:
    install_crd(cluster)


def admission(cluster: Cluster, case: BadSpec, namespace: str) -> str | None:
    """The API server's refusal of the case (a server-side dry run), or None if it admits it."""
    api = client.CustomObjectsApi(cluster.api)
    try:
        api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, case.document(), dry_run="All",
            field_validation="Strict",
        )  # fmt: skip
    except ApiException as error:
        # 422 Invalid from validation; 400 BadRequest from strict decoding (an unknown field)
        status, message = error.status, str(json.loads(error.body)["message"])
    else:
        return None
    assert status in (400, 422), (status, message)
    return message


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_api_server_answers_each_bad_spec_as_the_corpus_says(
    cluster: Cluster, crd: None, case: BadSpec
) -> None:
    refusal = admission(cluster, case, "default")

    if case.door == "operator":
        assert refusal is None, f"refused what the corpus leaves to the operator: {refusal}"
        return
    assert refusal is not None, "admitted"
    lines = [line for line in refusal.splitlines() if case.field in line]
    assert lines, refusal  # the same field, however the API server words it
    if case.door == "cel":
        assert any(case.message in line for line in lines), refusal
        assert "some validation rules were not checked" not in refusal


def test_the_operator_marks_each_admitted_bad_spec_invalid_and_keeps_running(
    cluster: Cluster, crd: None, namespace: str, tmp_path: Path, core: client.CoreV1Api
) -> None:
    cases = bad_specs("operator")
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, *(case.document() for case in cases), namespace=namespace)
        # Too large to keep as a file: the API server stores it (up to ~1.5 MB), the workers'
        # ConfigMap could not hold it (1 MiB). Created directly: kubectl apply would also copy
        # it into an annotation, which is capped at 256 kB.
        longest = [f"https://books.example/{index:05d}".ljust(2048, "p") for index in range(600)]
        oversized = BadSpec(
            path=Path("spec-too-large-for-the-workers-config-map.yaml"),
            door="operator",
            field="spec",
            message="must be at most 880000 bytes as JSON to fit in the ConfigMap",
        )
        client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL,
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "CrawlJob",
             "metadata": {"name": oversized.name}, "spec": {"seeds": longest}},
        )  # fmt: skip
        cases = [*cases, oversized]

        for case in cases:

            def invalid(case: BadSpec = case) -> dict[str, object] | None:
                return condition(get_job(cluster, namespace, case.name), "InvalidSpec")

            found = wait_until(invalid, timeout=60, interval=0.5, what=f"{case.name} InvalidSpec")
            assert found["status"] == "True", found
            assert case.expected in str(found["message"]), (case.name, found["message"])
            assert get_job(cluster, namespace, case.name)["status"]["phase"] == "Failed"

        time.sleep(3)  # ticks keep coming: nothing may be retried, nothing may crash
        warned = core.list_namespaced_event(namespace, field_selector="reason=InvalidSpec").items
        assert sorted(event.involved_object.name for event in warned) == sorted(
            case.name for case in cases
        )  # one Event per job, not one per tick
        assert not client.AppsV1Api(cluster.api).list_namespaced_deployment(namespace).items
        assert operator.process is not None
        assert operator.process.poll() is None
        assert "Traceback" not in operator.log()


def test_the_operator_refuses_a_partition_count_its_frontier_was_not_created_with(
    cluster: Cluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    # A client past the API server's transition rule (here: the frontier's count written in
    # the status as a job made with 4 partitions would have it, then a spec that says 2).
    name = "shards-changed"
    apply(
        cluster,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "CrawlJob", "metadata": {"name": name},
         "spec": {"seeds": ["https://books.example/"], "frontier": {"shards": 2}}},
        namespace=namespace,
    )  # fmt: skip
    client.CustomObjectsApi(cluster.api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name,
        {"status": {"frontierEpoch": "0123456789abcdef", "frontierShards": 4}},
    )  # fmt: skip
    with running_operator(cluster, namespace, tmp_path) as operator:

        def invalid() -> dict[str, object] | None:
            return condition(get_job(cluster, namespace, name), "InvalidSpec")

        found = wait_until(invalid, timeout=60, interval=0.5, what="InvalidSpec")
        assert found["status"] == "True", found
        message = str(found["message"])
        assert message.startswith("spec.frontier.shards: shards cannot change on a running job")
        assert "created with 4 and the spec asks for 2: set it back to 4" in message
        job = get_job(cluster, namespace, name)
        assert job["status"]["phase"] == "Failed"
        assert job["status"]["frontierShards"] == 4  # the frontier's count is kept
        assert not client.AppsV1Api(cluster.api).list_namespaced_deployment(namespace).items
        assert "Traceback" not in operator.log()
