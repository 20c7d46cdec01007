"""The few Kubernetes calls the operator makes, as coroutines over the official client.

kopf watches and posts status through its own client; the children are created and steered
here with ``kubernetes`` (the client the field trusts), whose calls block: each runs in a
worker thread, so one slow request never stalls the event loop that serves every job.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

__all__ = ["Kube", "load_api_client"]

Manifest = dict[str, Any]


def load_api_client() -> client.ApiClient:
    """In-cluster credentials in a pod, else the kubeconfig (``KUBECONFIG`` or ~/.kube)."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return client.ApiClient()
    except config.ConfigException:
        api: client.ApiClient = config.new_client_from_config()  # type: ignore[no-untyped-call]
        return api


class Kube:
    """Create-or-patch of children, and the reads and writes the fleet brain's backend needs."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", 30)
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _methods(self, kind: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
        table: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
            "Deployment": (
                self.apps.create_namespaced_deployment,
                self.apps.patch_namespaced_deployment,
            ),
            "Service": (self.core.create_namespaced_service, self.core.patch_namespaced_service),
            "Secret": (self.core.create_namespaced_secret, self.core.patch_namespaced_secret),
            "ConfigMap": (
                self.core.create_namespaced_config_map,
                self.core.patch_namespaced_config_map,
            ),
            "PersistentVolumeClaim": (
                self.core.create_namespaced_persistent_volume_claim,
                self.core.patch_namespaced_persistent_volume_claim,
            ),
            "NetworkPolicy": (
                self.networking.create_namespaced_network_policy,
                self.networking.patch_namespaced_network_policy,
            ),
        }
        return table[kind]

    async def ensure(self, manifest: Manifest, *, patch: Manifest | None = None) -> bool:
        """Create ``manifest``; when it exists (409), patch it with ``patch`` (default: itself).

        ``patch={}`` leaves an existing object alone (a Secret holding a generated password).
        Returns True when the object was created.
        """
        create, update = self._methods(manifest["kind"])
        namespace = manifest["metadata"]["namespace"]
        try:
            await self._call(create, namespace, manifest)
            return True
        except ApiException as error:
            if error.status != 409:
                raise
        body = manifest if patch is None else patch
        if body:
            await self._call(update, manifest["metadata"]["name"], namespace, body)
        return False

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        try:
            secret = await self._call(self.core.read_namespaced_secret, name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        data = secret.data or {}
        if key not in data:
            return None
        return base64.b64decode(data[key]).decode()

    async def service_cluster_ip(self, namespace: str, name: str) -> str | None:
        try:
            service = await self._call(self.core.read_namespaced_service, name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        ip = service.spec.cluster_ip
        return ip if ip and ip != "None" else None

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        try:
            await self._call(
                self.apps.patch_namespaced_deployment_scale,
                name,
                namespace,
                {"spec": {"replicas": replicas}},
            )
        except ApiException as error:
            if error.status != 404:  # gone already (deleted with its job): nothing to scale
                raise

    async def delete_pod(self, namespace: str, name: str) -> None:
        try:
            await self._call(self.core.delete_namespaced_pod, name, namespace)
        except ApiException as error:
            if error.status != 404:
                raise

    async def delete_crawljob(self, namespace: str, name: str) -> None:
        try:
            await self._call(
                self.custom.delete_namespaced_custom_object,
                "crawlfleet.io",
                "v1alpha1",
                namespace,
                "crawljobs",
                name,
            )
        except ApiException as error:
            if error.status != 404:
                raise
