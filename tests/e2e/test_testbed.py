"""Self-tests of the e2e test bed: the real controllers plus the process kubelet behave as a node.

Each test checks a claim the module docstring of tests/e2e/cluster/kubelet.py makes, against
real processes (PIDs in /proc) and the real API server, so later operator tests can trust that
a Ready pod is a running process and a deleted one is gone.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.controlplane import LOOPBACK_LOCK_DIR, LoopbackBlock
from tests.e2e.cluster.kubelet import KubeletDouble

REPO = Path(__file__).resolve().parents[2]


def redis_deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    labels = {"app": name}
    container: dict[str, Any] = {
        "name": "redis",
        "image": "redis:7",
        "args": ["--save", "", "--appendonly", "no"],
        "ports": [{"name": "redis", "containerPort": 6379}],
        "readinessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 1},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 5},
            },
        },
    }


def bare_pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": list(containers), **spec},
    }


def first_container(core: client.CoreV1Api, namespace: str, name: str) -> Any:
    """The first container status of a pod, or None before the kubelet has reported one."""
    statuses = core.read_namespaced_pod(name, namespace).status.container_statuses
    return statuses[0] if statuses else None


def in_phase(core: client.CoreV1Api, namespace: str, name: str, *phases: str) -> Any:
    """The pod when its phase is one of ``phases``, else None (for wait_until)."""
    pod = core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase in phases else None


def redis_service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 6379, "targetPort": "redis"}]},
    }


def pods(core: client.CoreV1Api, namespace: str, app: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"app={app}").items)


def ready_pods(core: client.CoreV1Api, namespace: str, app: str) -> list[client.V1Pod]:
    return [
        pod
        for pod in pods(core, namespace, app)
        if pod.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    ]


def pid_of(pod: client.V1Pod) -> int:
    """The real PID behind a running container (the double reports ``process://<pid>``)."""
    container_id = pod.status.container_statuses[0].container_id
    assert container_id, pod.status.container_statuses
    assert container_id.startswith("process://"), container_id
    return int(container_id.removeprefix("process://"))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def command_line(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def wait_ready(core: client.CoreV1Api, namespace: str, app: str, count: int) -> list[client.V1Pod]:
    return wait_until(
        lambda: found if len(found := ready_pods(core, namespace, app)) == count else None,
        timeout=30,
        what=f"{count} Ready pods of {app}",
    )


@pytest.fixture
def deployment(
    apps: client.AppsV1Api, core: client.CoreV1Api, namespace: str, kubelet: KubeletDouble
) -> str:
    """A one-replica redis Deployment with its Service, Ready."""
    apps.create_namespaced_deployment(namespace, redis_deployment("redis"))
    core.create_namespaced_service(namespace, redis_service("redis"))
    wait_ready(core, namespace, "redis", 1)
    return "redis"


def test_redis_deployment_answers_ping_through_its_service(
    kubelet: KubeletDouble, core: client.CoreV1Api, namespace: str, deployment: str
) -> None:
    [pod] = ready_pods(core, namespace, deployment)
    pid = pid_of(pod)
    assert alive(pid)
    assert "redis-server" in command_line(pid)[0]
    assert pod.spec.node_name == kubelet.node_name
    assert pod.status.pod_ip.startswith("127.")

    host, port = wait_until(
        lambda: (
            kubelet.endpoints(namespace, deployment)
            and kubelet.service_address(f"{deployment}.{namespace}.svc.cluster.local", 6379)
        ),
        what="the Service's endpoints",
    )
    service = core.read_namespaced_service(deployment, namespace)
    assert (host, port) == (service.spec.cluster_ip, 6379)
    connection = redis.Redis(host=host, port=port, socket_timeout=2)
    try:
        assert connection.ping()
    finally:
        connection.close()


def test_scaling_starts_and_stops_processes(
    apps: client.AppsV1Api, core: client.CoreV1Api, namespace: str, deployment: str
) -> None:
    apps.patch_namespaced_deployment_scale(deployment, namespace, {"spec": {"replicas": 3}})
    three = wait_ready(core, namespace, deployment, 3)
    pids = {pod.metadata.name: pid_of(pod) for pod in three}
    assert len(set(pids.values())) == 3
    assert all(alive(pid) for pid in pids.values())
    assert len({pod.status.pod_ip for pod in three}) == 3, "each pod has its own IP"

    apps.patch_namespaced_deployment_scale(deployment, namespace, {"spec": {"replicas": 1}})
    wait_until(lambda: len(pods(core, namespace, deployment)) == 1, what="the scale-down to finish")
    [kept] = pods(core, namespace, deployment)
    stopped = [pid for name, pid in pids.items() if name != kept.metadata.name]
    assert len(stopped) == 2
    wait_until(lambda: not any(alive(pid) for pid in stopped), what="removed pods' processes")
    assert alive(pids[kept.metadata.name])


def test_deleted_pod_is_killed_and_replaced(
    core: client.CoreV1Api, namespace: str, deployment: str
) -> None:
    [old] = ready_pods(core, namespace, deployment)
    old_pid = pid_of(old)
    core.delete_namespaced_pod(old.metadata.name, namespace)

    wait_until(lambda: not alive(old_pid), what="the deleted pod's process to exit")
    [new] = wait_until(
        lambda: [
            p for p in ready_pods(core, namespace, deployment) if p.metadata.uid != old.metadata.uid
        ],
        what="a replacement pod",
    )
    assert new.metadata.name != old.metadata.name
    assert alive(pid_of(new))
    wait_until(
        lambda: (
            old.metadata.name not in {p.metadata.name for p in pods(core, namespace, deployment)}
        ),
        what="the old pod object to be removed",
    )


def test_deleting_the_deployment_cascades(
    apps: client.AppsV1Api, core: client.CoreV1Api, namespace: str, deployment: str
) -> None:
    apps.patch_namespaced_deployment_scale(deployment, namespace, {"spec": {"replicas": 2}})
    pids = [pid_of(pod) for pod in wait_ready(core, namespace, deployment, 2)]
    assert apps.list_namespaced_replica_set(namespace).items

    apps.delete_namespaced_deployment(
        deployment, namespace, body=client.V1DeleteOptions(propagation_policy="Background")
    )
    wait_until(
        lambda: not apps.list_namespaced_replica_set(namespace).items,
        what="the garbage collector to delete the ReplicaSet",
    )
    wait_until(lambda: not pods(core, namespace, deployment), what="the pods to be deleted")
    assert not any(alive(pid) for pid in pids)


def test_kubectl_shows_the_node_ip_and_status(
    cluster: Cluster,
    kubelet: KubeletDouble,
    core: client.CoreV1Api,
    namespace: str,
    deployment: str,
) -> None:
    [pod] = ready_pods(core, namespace, deployment)
    out = cluster.kubectl("get", "pods", "-o", "wide", "-n", namespace).stdout
    header, row = out.splitlines()
    assert header.split()[:8] == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
    ]
    columns = row.split()
    assert columns[0] == pod.metadata.name
    assert columns[1:3] == ["1/1", "Running"]
    assert columns[5:7] == [pod.status.pod_ip, kubelet.node_name]
    nodes = cluster.kubectl("get", "nodes").stdout
    assert kubelet.node_name in nodes
    assert " Ready " in nodes


def test_crashing_container_reports_exit_code_and_restarts(
    core: client.CoreV1Api, namespace: str, kubelet: KubeletDouble
) -> None:
    redis = {"name": "redis", "image": "redis:7", "args": ["--port", "x"]}
    core.create_namespaced_pod(namespace, bare_pod("crasher", redis))

    def restarted_twice() -> Any:
        status = first_container(core, namespace, "crasher")
        return status if status and status.restart_count >= 2 else None

    status = wait_until(restarted_twice, timeout=30, what="two restarts")
    assert status.last_state.terminated.exit_code == 1
    assert status.last_state.terminated.reason == "Error"
    assert not status.ready
    assert "Invalid" in kubelet.logs(namespace, "crasher") or "FATAL" in kubelet.logs(
        namespace, "crasher"
    )


def test_termination_messages_come_from_the_file_or_the_logs_tail(
    core: client.CoreV1Api, namespace: str, kubelet: KubeletDouble
) -> None:
    writes = (
        "import sys; open(sys.argv[1], 'w').write('OutputUnavailable: no bucket');"
        " print('a log line'); sys.exit(2)"
    )
    says = (
        "import sys; print('starting', flush=True); print('KeyError: boom', file=sys.stderr);"
        " sys.exit(1)"
    )
    quiet = "import sys; print('nothing to say'); sys.exit(3)"
    containers = [
        {  # the file wins over the log
            "name": "writes",
            "image": "crawlfleet:dev",
            "command": ["python", "-c", writes],
            "args": ["/dev/termination-log"],
            "terminationMessagePolicy": "FallbackToLogsOnError",
        },
        {  # nothing written, a failure: the log's tail, this run's only
            "name": "says",
            "image": "crawlfleet:dev",
            "command": ["python", "-c", says],
            "terminationMessagePolicy": "FallbackToLogsOnError",
        },
        {  # nothing written, policy File (the default): no message
            "name": "quiet",
            "image": "crawlfleet:dev",
            "command": ["python", "-c", quiet],
            "terminationMessagePath": "/var/run/why",
        },
    ]
    core.create_namespaced_pod(namespace, bare_pod("talker", *containers))

    def all_restarted() -> Any:
        statuses = core.read_namespaced_pod("talker", namespace).status.container_statuses
        done = {s.name: s for s in statuses or [] if s.restart_count >= 1 and s.last_state}
        return done if len(done) == 3 else None

    statuses = wait_until(all_restarted, timeout=30, what="three containers that restarted")
    written = statuses["writes"].last_state.terminated
    assert (written.exit_code, written.message) == (2, "OutputUnavailable: no bucket")
    tail = statuses["says"].last_state.terminated.message
    assert tail.splitlines() == ["starting", "KeyError: boom"]  # no line of the run before
    assert statuses["quiet"].last_state.terminated.message is None


def test_unknown_image_is_a_failure_not_a_running_pod(
    core: client.CoreV1Api, namespace: str, kubelet: KubeletDouble
) -> None:
    mystery = {"name": "main", "image": "example/mystery:1"}
    core.create_namespaced_pod(namespace, bare_pod("mystery", mystery))

    def waiting() -> Any:
        status = first_container(core, namespace, "mystery")
        return status.state.waiting if status else None

    state = wait_until(waiting, what="a waiting status")
    assert state.reason == "ErrImagePull"
    assert "example/mystery:1" in state.message
    read = core.read_namespaced_pod("mystery", namespace)
    assert read.status.phase == "Pending"
    assert read.status.container_statuses[0].container_id is None


def test_env_sources_and_config_volume_reach_the_process(
    core: client.CoreV1Api, namespace: str, kubelet: KubeletDouble
) -> None:
    job = (REPO / "examples" / "crawljob.yaml").read_text()
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "job"}, "data": {"job.yaml": job, "mode": "strict"}}
    )
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "creds"}, "stringData": {"password": "s3cret"}}
    )
    script = (
        "import os;"
        "print('ENV', os.environ['PASSWORD'], os.environ['MODE'], os.environ['POD'],"
        " os.environ['IP'], os.environ['GREETING'])"
    )
    env = [
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "job", "key": "mode"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "GREETING", "value": "hello $(POD)"},
    ]
    image = "images.example/team/crawlfleet:dev"
    printer = {"name": "env", "image": image, "command": ["python", "-c", script], "env": env}
    validator = {
        "name": "validate",
        "image": image,
        "command": ["crawlfleet", "validate", "/etc/crawlfleet/job.yaml"],
        "volumeMounts": [{"name": "job", "mountPath": "/etc/crawlfleet"}],
    }
    pod = bare_pod(
        "probe-env",
        printer,
        validator,
        restartPolicy="Never",
        volumes=[{"name": "job", "configMap": {"name": "job"}}],
    )
    core.create_namespaced_pod(namespace, pod)
    read = wait_until(
        lambda: in_phase(core, namespace, "probe-env", "Succeeded", "Failed"),
        what="the pod to finish",
    )
    logs = kubelet.logs(namespace, "probe-env", "env")
    assert read.status.phase == "Succeeded", (
        logs,
        kubelet.logs(namespace, "probe-env", "validate"),
    )
    assert f"ENV s3cret strict probe-env {read.status.pod_ip} hello probe-env" in logs
    assert {c.state.terminated.exit_code for c in read.status.container_statuses} == {0}


def test_grace_period_ends_in_sigkill(
    core: client.CoreV1Api, namespace: str, kubelet: KubeletDouble
) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    main = {"name": "main", "image": "crawlfleet:dev", "command": ["python", "-c", stubborn]}
    core.create_namespaced_pod(
        namespace, bare_pod("stubborn", main, terminationGracePeriodSeconds=2)
    )
    running = wait_until(
        lambda: in_phase(core, namespace, "stubborn", "Running"), what="the pod to run"
    )
    pid = pid_of(running)
    deleted = time.monotonic()
    core.delete_namespaced_pod("stubborn", namespace)
    wait_until(lambda: not alive(pid), timeout=10, what="SIGKILL after the grace period")
    assert time.monotonic() - deleted > 1.5, "killed before its 2 s grace period ran out"
    wait_until(lambda: not core.list_namespaced_pod(namespace).items, what="the pod object to go")


def test_a_pod_reaches_a_service_by_name_and_runs_the_worker_entrypoint(
    core: client.CoreV1Api, namespace: str, kubelet: KubeletDouble, deployment: str
) -> None:
    script = (
        "import os, sys, redis;"
        "print('PING', redis.Redis(host=sys.argv[1], port=6379, socket_timeout=2).ping(),"
        " os.environ['REDIS_SERVICE_HOST'], os.environ['REDIS_SERVICE_PORT'])"
    )
    client_container = {
        "name": "client",
        "image": "crawlfleet:dev",
        "command": ["python", "-c", script],
        "args": [f"{deployment}.{namespace}.svc.cluster.local"],
    }
    worker = {"name": "worker", "image": "crawlfleet:dev", "args": ["--help"]}
    core.create_namespaced_pod(
        namespace, bare_pod("client", client_container, worker, restartPolicy="Never")
    )
    read = wait_until(
        lambda: in_phase(core, namespace, "client", "Succeeded", "Failed"),
        what="the pod to finish",
    )
    logs = kubelet.logs(namespace, "client", "client")
    assert read.status.phase == "Succeeded", logs
    cluster_ip = core.read_namespaced_service(deployment, namespace).spec.cluster_ip
    assert f"PING True {cluster_ip} 6379" in logs
    assert "usage: crawlfleet worker" in kubelet.logs(namespace, "client", "worker")


def test_loopback_blocks_are_never_shared_while_held() -> None:
    held = [LoopbackBlock.claim() for _ in range(5)]
    try:
        assert len({block.number for block in held}) == 5
        # Another session holds one until it dies, however it dies.
        other = subprocess.Popen(
            [
                sys.executable, "-c",
                "from tests.e2e.cluster.controlplane import LoopbackBlock; import time;"
                "print(LoopbackBlock.claim().number, flush=True); time.sleep(60)",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert other.stdout is not None
        theirs = int(other.stdout.readline())
        assert theirs not in {block.number for block in held}
        assert not _lockable(theirs)
        other.kill()
        other.wait()
        assert _lockable(theirs)
    finally:
        for block in held:
            block.release()
    assert _lockable(held[0].number)


def _lockable(number: int) -> bool:
    """Whether block ``number`` is free: its lock file can be flocked now."""
    fd = os.open(LOOPBACK_LOCK_DIR / f"{number}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True
