"""The few Kubernetes calls the operator makes, as coroutines over aiohttp.

kopf watches and posts status through its own aiohttp client; the children are created and
steered here over the same library, with credentials from the same login (:func:`login`).
The official ``kubernetes`` client would add its generated models' memory (docs/benchmarks.md)
and a thread per blocking call for the REST calls below, so the operator does not use it.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import subprocess
from collections.abc import Callable, Mapping
from typing import Any, Final

import aiohttp
import kopf
import yaml

from crawlfleet.errors import KubeError

__all__ = ["Kube", "KubeError", "login"]

Manifest = dict[str, Any]
Login = Callable[[], kopf.ConnectionInfo]

_TIMEOUT: Final = aiohttp.ClientTimeout(total=30)
# The built-in kinds take a strategic merge patch (lists of containers merge by name, as
# `kubectl apply` does); the scale subresource and custom objects only a JSON merge patch.
_STRATEGIC: Final = "application/strategic-merge-patch+json"
_MERGE: Final = "application/merge-patch+json"

# kind → (API group path, plural) for what the operator creates.
_KINDS: Final[Mapping[str, tuple[str, str]]] = {
    "Deployment": ("/apis/apps/v1", "deployments"),
    "Service": ("/api/v1", "services"),
    "Secret": ("/api/v1", "secrets"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims"),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),
}


def login() -> kopf.ConnectionInfo:
    """The operator's credentials: the pod's service account, else the kubeconfig.

    Registered as kopf's login handler too, so watches and child calls use one identity. In a
    pod the API server's address comes from ``KUBERNETES_SERVICE_HOST``/``_PORT``, as the
    official clients do, so no cluster DNS is needed. A kubeconfig user with an ``exec``
    credential plugin (cloud clusters) gets its token or certificate from the plugin.
    """
    settings = kopf.OperatorSettings()
    info = kopf.login_with_service_account(settings=settings)
    if info is not None:
        host, port = (
            os.environ.get("KUBERNETES_SERVICE_HOST"),
            os.environ.get("KUBERNETES_SERVICE_PORT", "443"),
        )
        if host:
            netloc = f"[{host}]" if ":" in host else host
            info = dataclasses.replace(info, server=f"https://{netloc}:{port}")
        return info
    info = kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        raise kopf.LoginError(
            "no credentials: not in a pod with a service account, and no kubeconfig "
            "(set KUBECONFIG or create ~/.kube/config)"
        )
    if not (info.token or info.certificate_path or info.certificate_data or info.username):
        info = _with_exec_credential(info)
    return info


def _with_exec_credential(info: kopf.ConnectionInfo) -> kopf.ConnectionInfo:
    """Run the current kubeconfig user's ``exec`` plugin and add what it prints."""
    user = _current_kubeconfig_user()
    plugin = user.get("exec")
    if not plugin:
        return info
    env = dict(os.environ)
    env.update({item["name"]: item["value"] for item in plugin.get("env") or ()})
    try:
        done = subprocess.run(
            [plugin["command"], *(plugin.get("args") or ())],
            env=env,
            capture_output=True,
            check=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise kopf.LoginError(f"kubeconfig exec plugin {plugin['command']!r}: {error}") from error
    status = json.loads(done.stdout).get("status") or {}
    return dataclasses.replace(
        info,
        token=status.get("token"),
        certificate_data=status.get("clientCertificateData"),
        private_key_data=status.get("clientKeyData"),
    )


def _current_kubeconfig_user() -> dict[str, Any]:
    paths = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    contexts: dict[str, Any] = {}
    users: dict[str, Any] = {}
    current: str | None = None
    for path in filter(None, paths.split(os.pathsep)):
        with open(os.path.expanduser(path), encoding="utf-8") as file:
            config = yaml.safe_load(file) or {}
        current = current or config.get("current-context")
        for item in config.get("contexts") or ():
            contexts.setdefault(item["name"], item.get("context") or {})
        for item in config.get("users") or ():
            users.setdefault(item["name"], item.get("user") or {})
    user_name = contexts.get(current or "", {}).get("user")
    found: dict[str, Any] = users.get(user_name or "", {})
    return found


class Kube:
    """Create-or-patch of children, and the reads and writes the fleet brain's backend needs.

    One aiohttp session per process, opened at the first call; a 401 (a rotated service
    account token, an expired plugin token) logs in again and retries once.
    """

    def __init__(self, credentials: Login = login) -> None:
        self._login = credentials
        self._session: aiohttp.ClientSession | None = None
        self._server = ""
        self._lock = asyncio.Lock()

    async def _connect(self) -> aiohttp.ClientSession:
        async with self._lock:
            if self._session is None:
                info = await asyncio.to_thread(self._login)
                self._server = info.server.rstrip("/")
                self._session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(ssl=info.as_ssl_context(), limit=16),
                    headers=info.as_http_headers(),
                    timeout=_TIMEOUT,
                )
            return self._session

    async def close(self) -> None:
        async with self._lock:
            if self._session is not None:
                await self._session.close()
                self._session = None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str | None = None,
        missing_ok: bool = False,
    ) -> Any:
        """One API call; the decoded JSON answer, or :class:`KubeError` for an error status
        (status 0 when no answer came at all).

        ``missing_ok``: a 404 answers None (reads of what may not exist yet, deletes and
        scales of what may be gone already).
        """
        for attempt in (1, 2):
            session = await self._connect()
            headers = {"Content-Type": content_type or "application/json"}
            data = None if body is None else json.dumps(body)
            try:
                async with session.request(
                    method, self._server + path, data=data, headers=headers
                ) as response:
                    if response.status == 401 and attempt == 1:
                        await self._forget(session)
                        continue
                    if response.status == 404 and missing_ok:
                        return None
                    text = await response.text()
                    if response.status >= 400:
                        raise KubeError(
                            response.status,
                            method,
                            path,
                            _message(text),
                            _retry_after(response.headers.get("Retry-After")),
                        )
                    return json.loads(text) if text else None
            except (aiohttp.ClientError, TimeoutError) as error:
                # No answer at all (connection refused or reset, a timeout): status 0.
                raise KubeError(0, method, path, f"no answer: {error!r}") from error
        raise AssertionError("unreachable")  # pragma: no cover

    async def _forget(self, session: aiohttp.ClientSession) -> None:
        async with self._lock:
            if self._session is session:
                self._session = None
        await session.close()

    async def ensure(self, manifest: Manifest, *, patch: Manifest | None = None) -> bool:
        """Create ``manifest``; when it exists (409), patch it with ``patch`` (default: itself).

        ``patch={}`` leaves an existing object alone (a Secret holding a generated password).
        Returns True when the object was created.
        """
        group, plural = _KINDS[manifest["kind"]]
        collection = f"{group}/namespaces/{manifest['metadata']['namespace']}/{plural}"
        try:
            await self.request("POST", collection, manifest)
            return True
        except KubeError as error:
            if error.status != 409:
                raise
        body = manifest if patch is None else patch
        if body:
            path = f"{collection}/{manifest['metadata']['name']}"
            await self.request("PATCH", path, body, content_type=_STRATEGIC)
        return False

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        secret = await self.request("GET", path, missing_ok=True)
        value = ((secret or {}).get("data") or {}).get(key)
        return None if value is None else base64.b64decode(value).decode()

    async def service_cluster_ip(self, namespace: str, name: str) -> str | None:
        path = f"/api/v1/namespaces/{namespace}/services/{name}"
        service = await self.request("GET", path, missing_ok=True)
        ip = ((service or {}).get("spec") or {}).get("clusterIP")
        return ip if ip and ip != "None" else None

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"
        # Gone already (deleted with its job): nothing to scale.
        body = {"spec": {"replicas": replicas}}
        await self.request("PATCH", path, body, content_type=_MERGE, missing_ok=True)

    async def delete_pod(self, namespace: str, name: str) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        await self.request("DELETE", path, missing_ok=True)

    async def delete_crawljob(self, namespace: str, name: str) -> None:
        path = f"/apis/crawlfleet.io/v1alpha1/namespaces/{namespace}/crawljobs/{name}"
        await self.request("DELETE", path, missing_ok=True)


def _retry_after(value: str | None) -> float | None:
    """A Retry-After in seconds (the API server sends whole seconds, never a date)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _message(text: str) -> str:
    """The ``message`` of a Kubernetes Status answer, else the raw text (shortened)."""
    try:
        status = json.loads(text)
    except ValueError:
        return text[:500]
    return str(status.get("message", text[:500])) if isinstance(status, dict) else text[:500]
