"""Ownership, not names, on the real API server: the operator changes only what it made.

A user who may create CrawlJobs chooses the job's name, and so the names of its children
(``<job>-redis-auth``, ``<job>-config``, …). Objects of the namespace that already carry those
names -- made by hand, or controlled by another CrawlJob -- must come out of the job's life as
they went in: not applied over, not mounted or read, not given an ownerReference, so the
garbage collector does not delete them with the job. The job says which objects hold it
(condition ChildConflict, a warning Event), makes nothing, and starts once they are gone.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from crawlfleet.operator.kube import Child, Kube, KubeError, login
from crawlfleet.operator.ownership import RECHECK_SECONDS
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.operator_support import (
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    apply,
    condition,
    get_job,
    install_crd,
    running_operator,
)

SECRET_DATA = {"password": "dGhlaXJz"}  # base64 of "theirs": nobody's but its maker's
UNIQUE = "not-the-operators-content"


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> None:
    install_crd(cluster)


def job(name: str) -> dict[str, Any]:
    """A job with a managed Redis (a password Secret, a claim) that needs no test site: it
    is never expected to crawl, only to be made or held."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CrawlJob",
        "metadata": {"name": name},
        "spec": {
            "seeds": ["http://127.0.0.1:9/"],
            "scope": {"allowPrivateNetworks": True},
            "workers": {"image": "crawlfleet/worker:dev"},
            "output": {"ephemeral": True},
        },
    }


def controller_of(uid: str, name: str) -> client.V1OwnerReference:
    return client.V1OwnerReference(
        api_version=f"{GROUP}/{VERSION}", kind="CrawlJob", name=name, uid=uid, controller=True
    )


def identity(metadata: client.V1ObjectMeta) -> tuple[str, list[str]]:
    """The uid and the writers of an object, the cluster's controllers left out."""
    writers = {entry.manager for entry in metadata.managed_fields or ()}
    return metadata.uid, sorted(writers - {"kube-controller-manager"})


def snapshot(core: client.CoreV1Api, namespace: str) -> dict[str, tuple[Any, ...]]:
    """What a test can see change: the object's uid (a delete and make again), who wrote it
    (every field manager but the cluster's own controllers, which keep writing to a claim), its
    ownerReferences and content. Not the resourceVersion: the claim controllers move it."""
    seen: dict[str, tuple[Any, ...]] = {}
    for item in core.list_namespaced_secret(namespace).items:
        seen[f"Secret/{item.metadata.name}"] = (
            *identity(item.metadata),
            item.metadata.owner_references,
            item.data,
        )
    for item in core.list_namespaced_config_map(namespace).items:
        seen[f"ConfigMap/{item.metadata.name}"] = (
            *identity(item.metadata),
            item.metadata.owner_references,
            item.data,
        )
    for item in core.list_namespaced_service(namespace).items:
        seen[f"Service/{item.metadata.name}"] = (
            *identity(item.metadata),
            item.metadata.owner_references,
            item.spec.ports[0].port,
        )
    for item in core.list_namespaced_persistent_volume_claim(namespace).items:
        seen[f"PersistentVolumeClaim/{item.metadata.name}"] = (
            *identity(item.metadata),
            item.metadata.owner_references,
            item.spec.resources.requests,
        )
    return seen


def labelled_children(cluster: Cluster, namespace: str, job_name: str) -> list[str]:
    """Every object the operator made for ``job_name`` (its children carry its label)."""
    selector = f"crawlfleet.io/job={job_name}"
    core = client.CoreV1Api(cluster.api)
    listed = [
        *client.AppsV1Api(cluster.api)
        .list_namespaced_deployment(namespace, label_selector=selector)
        .items,
        *core.list_namespaced_service(namespace, label_selector=selector).items,
        *core.list_namespaced_config_map(namespace, label_selector=selector).items,
        *core.list_namespaced_secret(namespace, label_selector=selector).items,
        *core.list_namespaced_persistent_volume_claim(namespace, label_selector=selector).items,
        *client.NetworkingV1Api(cluster.api)
        .list_namespaced_network_policy(namespace, label_selector=selector)
        .items,
    ]
    return sorted(
        f"{type(item).__name__.removeprefix('V1')}/{item.metadata.name}" for item in listed
    )


def held(cluster: Cluster, namespace: str, name: str, operator: OperatorProcess) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        entry = condition(get_job(cluster, namespace, name), "ChildConflict")
        return entry if entry and entry["status"] == "True" else None

    try:
        entry: dict[str, Any] = wait_until(found, timeout=60, interval=0.5, what=f"{name} held")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{operator.log()}") from None
    return entry


def not_owned(kind: str, namespace: str, name: str, why: str) -> str:
    return f"{kind} {namespace}/{name} exists and is not owned by this CrawlJob ({why})"


BY_HAND = "the operator did not make it for this job"
CONTROLLED = "another object is its controller"


def test_deleting_the_object_in_the_way_lets_the_job_start(
    cluster: Cluster, crd: None, namespace: str, tmp_path: Path, core: client.CoreV1Api
) -> None:
    apps = client.AppsV1Api(cluster.api)
    core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="solo-metrics"),
            spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=4242)]),
        ),
    )
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, job("solo"), namespace=namespace)
        entry = held(cluster, namespace, "solo", operator)
        assert entry["message"].startswith(not_owned("Service", namespace, "solo-metrics", BY_HAND))
        assert labelled_children(cluster, namespace, "solo") == []
        core.delete_namespaced_service("solo-metrics", namespace)

        def started() -> dict[str, Any] | None:
            found = condition(get_job(cluster, namespace, "solo"), "ChildConflict")
            return found if found and found["status"] == "False" else None

        try:  # one recheck after the delete, and the apply
            cleared = wait_until(
                started, timeout=RECHECK_SECONDS + 30, interval=0.5, what="solo to start"
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\n{operator.log()}") from None
        uid = get_job(cluster, namespace, "solo")["metadata"]["uid"]
        workers = apps.read_namespaced_deployment("solo-workers", namespace)
        metrics = core.read_namespaced_service("solo-metrics", namespace)

        # A child replaced behind the job's back is not taken over at the next apply either,
        # and the job's workers (scaled up by hand here: no Redis runs) stop while it is held.
        apps.patch_namespaced_deployment_scale("solo-workers", namespace, {"spec": {"replicas": 2}})
        core.delete_namespaced_service("solo-metrics", namespace)
        core.create_namespaced_service(
            namespace,
            client.V1Service(
                metadata=client.V1ObjectMeta(name="solo-metrics"),
                spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=4343)]),
            ),
        )
        replaced = core.read_namespaced_service("solo-metrics", namespace).metadata
        client.CustomObjectsApi(cluster.api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "solo", {"spec": {"concurrency": {"perHost": 3}}}
        )
        wait_until(
            lambda: apps.read_namespaced_deployment("solo-workers", namespace).spec.replicas == 0,
            timeout=60,
            what="the held job's workers scaled to 0",
        )
        again = held(cluster, namespace, "solo", operator)
        job_now = get_job(cluster, namespace, "solo")
        after = core.read_namespaced_service("solo-metrics", namespace).metadata

    assert cleared["reason"] == "NoConflict"
    for made in (workers, metrics):
        (reference,) = made.metadata.owner_references
        assert (reference.uid, reference.controller) == (uid, True)
    assert metrics.spec.ports[0].port != 4242  # the job's own Service, not the one deleted
    assert again["message"].startswith(not_owned("Service", namespace, "solo-metrics", BY_HAND))
    assert job_now["status"]["phase"] == "Pending"
    assert (after.resource_version, after.owner_references) == (replaced.resource_version, None)


def test_the_default_output_credentials_are_never_written_into_an_object_of_that_name(
    cluster: Cluster,
    crd: None,
    namespace: str,
    tmp_path: Path,
    core: client.CoreV1Api,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator copies its default output's keys into ``<job>-output``: into the job's own
    Secret only, never into one someone else made (and may read) under that name."""
    keys = {"AWS_ACCESS_KEY_ID": "operator-key-id", "AWS_SECRET_ACCESS_KEY": "operator-secret"}
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="crawl-store"), string_data=keys),
    )
    default = {
        "destination": "s3://crawls/jobs/",
        "s3": {"endpoint": "http://127.0.0.1:9", "secretRef": {"name": "crawl-store"}},
        "secretNamespace": namespace,
    }
    monkeypatch.setenv("CRAWLFLEET_DEFAULT_OUTPUT", json.dumps(default))
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="out-output"), data=SECRET_DATA),
    )
    before = core.read_namespaced_secret("out-output", namespace)
    document = job("out")
    document["spec"]["output"] = {}  # no destination: the operator's default, and its keys
    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, document, namespace=namespace)
        entry = held(cluster, namespace, "out", operator)
        made = labelled_children(cluster, namespace, "out")
    after = core.read_namespaced_secret("out-output", namespace)

    assert entry["message"].startswith(not_owned("Secret", namespace, "out-output", BY_HAND))
    assert made == []
    assert (after.metadata.resource_version, after.data) == (
        before.metadata.resource_version,
        SECRET_DATA,
    )


# -- the client's rule, without the operator ------------------------------------------------


@pytest.fixture
def use_kubeconfig(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))


@pytest.fixture
async def kube(use_kubeconfig: None) -> AsyncIterator[Kube]:
    api = Kube(login)
    try:
        yield api
    finally:
        await api.close()


@pytest.fixture
def owner(cluster: Cluster, crd: None, namespace: str) -> Callable[[str], str]:
    """CrawlJobs to own things (no operator runs: nothing acts on them); their uids."""

    def make(name: str) -> str:
        apply(cluster, job(name), namespace=namespace)
        found = client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
        return str(found["metadata"]["uid"])

    return make


def config_map(namespace: str, name: str, uid: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "CrawlJob",
                    "name": "mine",
                    "uid": uid,
                    "controller": True,
                }
            ],
        },
        "data": data,
    }


async def test_ensure_children_applies_the_owners_own_and_nothing_beside_a_foreign_one(
    kube: Kube, owner: Callable[[str], str], core: client.CoreV1Api, namespace: str
) -> None:
    mine = owner("mine")
    first = [Child(config_map(namespace, "a", mine, {"v": "1"}))]
    first.append(Child(config_map(namespace, "b", mine, {"v": "1"}), once=True))
    assert await kube.ensure_children(first, mine) == []
    again = [Child(config_map(namespace, "a", mine, {"v": "2"}))]
    again.append(Child(config_map(namespace, "b", mine, {"v": "2"}), once=True))
    assert await kube.ensure_children(again, mine) == []
    assert core.read_namespaced_config_map("a", namespace).data == {"v": "2"}
    assert core.read_namespaced_config_map("b", namespace).data == {"v": "1"}  # made once

    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"), data={"v": "x"})
    )
    version = core.read_namespaced_config_map("c", namespace).metadata.resource_version
    blocked = [
        Child(config_map(namespace, "a", mine, {"v": "3"})),
        Child(config_map(namespace, "c", mine, {"v": "3"})),
        Child(config_map(namespace, "d", mine, {"v": "3"})),
    ]
    (conflict,) = await kube.ensure_children(blocked, mine)
    assert (conflict.kind, conflict.name, conflict.controlled) == ("ConfigMap", "c", False)
    assert core.read_namespaced_config_map("a", namespace).data == {"v": "2"}  # not applied
    untouched = core.read_namespaced_config_map("c", namespace)
    assert (untouched.metadata.resource_version, untouched.data) == (version, {"v": "x"})
    assert not core.list_namespaced_config_map(namespace, field_selector="metadata.name=d").items


class ReadTooEarly(Kube):
    """A test double of timing, over the real client: the read of each name in ``stale``
    answers what it was before (once), as if someone acted between the operator's read and
    its write; everything else is the real call."""

    def __init__(self, stale: dict[str, dict[str, Any] | None]) -> None:
        super().__init__(login)
        self.stale = stale

    async def metadata(self, manifest: dict[str, Any]) -> dict[str, Any] | None:
        name = manifest["metadata"]["name"]
        if name in self.stale:
            return self.stale.pop(name)
        return await super().metadata(manifest)


def by_hand(core: client.CoreV1Api, namespace: str, name: str) -> str:
    """A ConfigMap someone made under a child's name; its resourceVersion."""
    made = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"v": "x"})
    )
    return str(made.metadata.resource_version)


async def test_a_child_made_by_someone_else_after_the_read_is_never_written(
    kube: Kube,
    owner: Callable[[str], str],
    core: client.CoreV1Api,
    namespace: str,
    use_kubeconfig: None,
) -> None:
    """Between the read and the write: a made-once child created by someone else meanwhile
    answers the POST with 409 and is read again (a conflict, not taken over); an applied
    child deleted and made anew by someone else is refused by the API server, because the
    uid read before goes with the apply."""
    mine = owner("mine")
    assert await kube.ensure_children([Child(config_map(namespace, "a", mine, {}))], mine) == []
    read = await kube.metadata(config_map(namespace, "a", mine, {}))
    core.delete_namespaced_config_map("a", namespace)
    versions = {name: by_hand(core, namespace, name) for name in ("a", "b")}
    late = ReadTooEarly({"a": read, "b": None})
    try:
        once = [Child(config_map(namespace, "b", mine, {"v": "mine"}), once=True)]
        (conflict,) = await late.ensure_children(once, mine)
        with pytest.raises(KubeError) as refused:
            await late.ensure_children(
                [Child(config_map(namespace, "a", mine, {"v": "mine"}))], mine
            )
    finally:
        await late.close()

    assert (conflict.kind, conflict.name, conflict.controlled) == ("ConfigMap", "b", False)
    assert refused.value.status == 422
    assert "metadata.uid" in str(refused.value)
    for name, version in versions.items():
        found = core.read_namespaced_config_map(name, namespace)
        assert (found.metadata.resource_version, found.data) == (version, {"v": "x"})
        assert found.metadata.owner_references is None


# Last in the module: by then the garbage collector has long watched CrawlJobs (it finds a new
# kind by discovery, every 30 s), so the witness below goes within seconds of its owner.
def test_objects_with_a_jobs_child_names_are_left_untouched_reported_and_outlive_the_job(
    cluster: Cluster, crd: None, namespace: str, tmp_path: Path, core: client.CoreV1Api
) -> None:
    # Another tenant's CrawlJob, and a ConfigMap it controls that happens to be called what
    # "web" calls its job document.
    apply(cluster, job("other"), namespace=namespace)
    custom = client.CustomObjectsApi(cluster.api)
    other = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "other")
    meta = client.V1ObjectMeta
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=meta(
                name="web-config",
                owner_references=[controller_of(other["metadata"]["uid"], "other")],
            ),
            data={"job.yaml": UNIQUE},
        ),
    )
    # Objects made by hand with the names of web's password Secret, claim and metrics Service.
    core.create_namespaced_secret(
        namespace, client.V1Secret(metadata=meta(name="web-redis-auth"), data=SECRET_DATA)
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=meta(name="web-redis-data"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                resources=client.V1VolumeResourceRequirements(requests={"storage": "3Gi"}),
            ),
        ),
    )
    core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=meta(name="web-metrics"),
            spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=4242)]),
        ),
    )
    foreign = ("Secret/web-redis-auth", "PersistentVolumeClaim/web-redis-data")
    foreign += ("Service/web-metrics", "ConfigMap/web-config")
    before = {key: value for key, value in snapshot(core, namespace).items() if key in foreign}
    assert sorted(before) == sorted(foreign)

    with running_operator(cluster, namespace, tmp_path) as operator:
        apply(cluster, job("web"), namespace=namespace)
        entry = held(cluster, namespace, "web", operator)
        web = get_job(cluster, namespace, "web")
        made_for_web = labelled_children(cluster, namespace, "web")
        events = core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=web,reason=ChildConflict"
        ).items
        # The GC's witness: a dependent of web (a plain ownerReference, not a controller
        # one), which the garbage collector deletes once web is gone.
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=meta(
                    name="web-witness",
                    owner_references=[
                        client.V1OwnerReference(
                            api_version=f"{GROUP}/{VERSION}",
                            kind="CrawlJob",
                            name="web",
                            uid=web["metadata"]["uid"],
                        )
                    ],
                )
            ),
        )
        cluster.kubectl("delete", "crawljob/web", "-n", namespace, "--timeout=60s")
        wait_until(
            lambda: (
                not core.list_namespaced_config_map(
                    namespace, field_selector="metadata.name=web-witness"
                ).items
            ),
            timeout=60,
            what="the garbage collector to delete web's dependents",
        )
        after = snapshot(core, namespace)
        log = operator.log()

    assert entry["reason"] == "NotOwned"
    for sentence in (
        not_owned("Secret", namespace, "web-redis-auth", BY_HAND),
        not_owned("PersistentVolumeClaim", namespace, "web-redis-data", BY_HAND),
        not_owned("ConfigMap", namespace, "web-config", CONTROLLED),
        not_owned("Service", namespace, "web-metrics", BY_HAND),
    ):
        assert sentence in entry["message"], entry["message"]
    assert web["status"]["phase"] == "Pending"
    assert web["status"]["message"] == entry["message"]
    # Nothing of web was made: no Redis, no workers, not even the children whose names were
    # free; and the objects in the way are exactly as they were, before and after the job.
    assert made_for_web == [], log
    assert {key: after.get(key) for key in foreign} == before
    assert [event.type for event in events] == ["Warning"]
    assert events[0].message == entry["message"]
    assert UNIQUE not in events[0].message
    assert "theirs" not in events[0].message
    # The other tenant's job got its own children, under its own names.
    assert "Deployment/other-workers" in labelled_children(cluster, namespace, "other")
    assert "Traceback" not in log
