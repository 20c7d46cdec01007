"""A pod's one container run by podman as a kubelet would run it: the tests' way to run the
images under the exact pod spec the operator or the chart writes.

What the pod spec says becomes podman's flags, and what podman cannot honour is refused
rather than dropped: the user and group from the security contexts, a read-only root
filesystem (podman's own tmpfs mounts turned off: only the pod's volumes are writable), dropped
capabilities, no privilege escalation, the runtime's default seccomp profile, the termination
grace as podman's stop timeout, the termination message file. ``emptyDir`` volumes are tmpfs
mounts; ``configMap`` and ``secret`` volumes are directories the caller wrote, mounted read-only.
Env follows the kubelet's rules for literal values (``$(VAR)`` expansion), the downward API
fields the pods here use, and ``secretKeyRef``/``configMapKeyRef`` from values the caller
resolves; env goes in through a file (0600), never argv. The network is the host's: a pod's
addresses (Redis, the test site, the S3 server, the API server) are the host's loopback.
Not done: resource limits, probes, restarts (tests/e2e/cluster/kubelet.py plays the node for
those).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.images import podman_env

__all__ = ["PodmanError", "inspect", "podman", "run_container"]

Json = dict[str, Any]
#: What a container in the pod's network sees as the pod's own address (--network host).
POD_IP = "127.0.0.1"
_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class PodmanError(RuntimeError):
    """podman refused a command; the message carries its output."""


def podman(*args: str, timeout: float = 120.0, check: bool = True) -> str:
    """Run podman with the configuration the images were built under; its stdout."""
    done = subprocess.run(
        ["podman", *args],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and done.returncode != 0:
        raise PodmanError(f"podman {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def inspect(name: str) -> Json:
    """``podman inspect`` of one container."""
    (found,) = json.loads(podman("inspect", "--type", "container", name))
    return dict(found)


def _field(path: str, pod_name: str, namespace: str) -> str:
    fields = {
        "metadata.name": pod_name,
        "metadata.namespace": namespace,
        "status.podIP": POD_IP,
        "status.hostIP": POD_IP,
    }
    if path not in fields:
        raise ValueError(f"no downward API field {path!r} here")
    return fields[path]


def _environment(
    container: Json, pod_name: str, namespace: str, refs: Mapping[tuple[str, str], str]
) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in container.get("env") or ():
        name = entry["name"]
        if "value" in entry:
            env[name] = _VARIABLE.sub(lambda m: env.get(m.group(1), m.group(0)), entry["value"])
            continue
        source = entry["valueFrom"]
        if "fieldRef" in source:
            env[name] = _field(source["fieldRef"]["fieldPath"], pod_name, namespace)
            continue
        (kind,) = source
        ref = source[kind]
        key = (ref["name"], ref["key"])
        if key in refs:
            env[name] = refs[key]
        elif not ref.get("optional"):
            raise ValueError(f"{name}: no value for {kind} {key}")
    return env


def _security_flags(pod: Json, container: Json) -> list[str]:
    pod_context = pod.get("securityContext") or {}
    context = {**pod_context, **(container.get("securityContext") or {})}
    uid, gid = context["runAsUser"], context.get("runAsGroup", 0)
    if context.get("runAsNonRoot") and uid == 0:
        raise ValueError("runAsNonRoot with runAsUser 0: a kubelet refuses to start it")
    flags = ["--user", f"{uid}:{gid}"]
    if "fsGroup" in pod_context:
        flags += ["--group-add", str(pod_context["fsGroup"])]
    if context.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]
    for capability in (context.get("capabilities") or {}).get("drop") or ():
        flags += ["--cap-drop", capability]
    if (context.get("capabilities") or {}).get("add"):
        raise ValueError("added capabilities: not run here")
    if context.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    if context.get("privileged"):
        raise ValueError("a privileged container: not run here")
    seccomp = (context.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp != "RuntimeDefault":
        raise ValueError(f"seccomp profile {seccomp}: podman runs its default profile only")
    return flags


def run_container(
    pod: Json,
    *,
    name: str,
    pod_name: str,
    namespace: str,
    image: str,
    workdir: Path,
    refs: Mapping[tuple[str, str], str] = {},
    directories: Mapping[str, Path] = {},
) -> str:
    """Start the pod spec's only container, detached, as container ``name``; its id.

    ``refs`` resolves env ``secretKeyRef``/``configMapKeyRef`` by (object, key); ``directories``
    gives each ``configMap``/``secret`` volume (by volume name) its files; ``image`` replaces
    the spec's (the tests' build tag); ``workdir`` holds the env and termination files.
    """
    (container,) = pod["containers"]
    flags = ["run", "--detach", "--name", name, "--network", "host"]
    flags += _security_flags(pod, container)
    grace = pod.get("terminationGracePeriodSeconds", 30)
    flags += ["--stop-timeout", str(grace)]

    volumes = {volume["name"]: volume for volume in pod.get("volumes") or ()}
    for mount in container.get("volumeMounts") or ():
        volume = volumes[mount["name"]]
        target = mount["mountPath"]
        if "emptyDir" in volume:
            flags += ["--mount", f"type=tmpfs,destination={target},tmpfs-mode=1777"]
        elif "configMap" in volume or "secret" in volume:
            flags += ["--volume", f"{directories[mount['name']]}:{target}:ro"]
        else:
            raise ValueError(f"volume {mount['name']}: {sorted(volume)} is not run here")

    message = container.get("terminationMessagePath", "/dev/termination-log")
    termination = workdir / f"{name}.termination-log"
    termination.write_text("")
    termination.chmod(0o666)
    flags += ["--volume", f"{termination}:{message}"]

    env_file = workdir / f"{name}.env"
    env_file.touch(0o600)
    env = _environment(container, pod_name, namespace, refs)
    env_file.write_text("".join(f"{key}={value}\n" for key, value in env.items()))
    flags += ["--env-file", str(env_file)]

    command = container.get("command") or []
    if command:
        flags += ["--entrypoint", json.dumps(command)]
    return podman(*flags, image, *(container.get("args") or [])).strip()
