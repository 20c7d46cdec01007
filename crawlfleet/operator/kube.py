"""The few Kubernetes calls the operator makes, as coroutines over aiohttp.

kopf watches and posts status through its own aiohttp client; the children are created and
steered here over the same library, with credentials from the same login (:func:`login`).
The official ``kubernetes`` client would add its generated models' memory, and kr8s or
lightkube their own HTTP stack beside kopf's (docs/benchmarks.md has the measurement), for the
handful of REST calls below, so the operator keeps this one.

What rides out a busy API server, and why each retry is safe:

- **Retries.** No answer (a refused or reset connection, a timeout), 429 and 5xx are retried
  with exponential backoff (±30 % jitter), the server's ``Retry-After`` honoured, for at most
  ``retry_budget_seconds`` per call (:attr:`~crawlfleet.config.OperatorConfig.api_retry_seconds`);
  after that the :class:`KubeError` goes to the handler, which hands kopf the delay. Every call
  the operator makes may run twice: GET reads; DELETE of a fixed name answers 404 the second
  time, which the callers already take for "gone"; server-side apply is declarative (the same
  configuration applied twice is the same object); the scale patch sets an absolute replica
  count; and the one POST (:meth:`Kube.create`, for objects made once and never rewritten)
  names its object, so a repeat answers 409, which is "it exists". A 4xx other than 429 is a
  decision (RBAC, validation) and is never retried.
- **One re-login.** A 401 (a rotated service-account token, an expired plugin token) retires
  the connection it came on and logs in again once for all the calls that hit it at the same
  time; a retired session is closed only after its last call is done, never under one.
- **Exec credentials** carry their ``expirationTimestamp``: a connection is replaced shortly
  before it, instead of waiting for the first 401 (kopf does the same for its own calls from
  the same login).
- **Server-side apply** (``fieldManager: crawlfleet``, forced: the operator owns its children's
  fields) instead of strategic-merge patches of whole manifests: a field the operator no longer
  sets is removed, so a volume that changes type (emptyDir to a claim) is a clean rollout
  instead of a 422 for "more than one volume type". Fields of other managers (an HPA's
  replicas, a user's annotation) are left alone. (An object made by POST and applied after
  is not such a rollout: its fields stay with the POST's manager, so re-applied children are
  created by apply too.)
- **Ownership before apply** (:meth:`Kube.ensure_children`): a forced apply takes over any
  object of that name, so each child's metadata is read first and only the job's own
  (operator/ownership.py) is applied, with its uid in the configuration: should it have been
  replaced since the read, the API server refuses the apply ("metadata.uid: field is
  immutable") instead of changing the newcomer. A child that is absent is created by apply,
  or by POST when it is made once (a 409 there is read again, never taken over); the one
  round trip between a read that found nothing and an apply that creates is the window in
  which an object made by someone else at that very moment would be applied over.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import aiohttp
import kopf
import yaml

from crawlfleet.errors import KubeError
from crawlfleet.operator.ownership import ChildConflict, ownership

__all__ = ["FIELD_MANAGER", "HANDOVER_MANAGER", "Child", "Kube", "KubeError", "login"]

log = logging.getLogger(__name__)

Manifest = dict[str, Any]
Login = Callable[[], kopf.ConnectionInfo]

#: The field manager of everything the operator applies (``kubectl get -o yaml
#: --show-managed-fields`` shows it).
FIELD_MANAGER: Final = "crawlfleet"
#: The manager that keeps fields the operator sets once and then leaves to others (a worker
#: Deployment's replicas, which the tick, ``kubectl scale`` or an HPA move afterwards).
HANDOVER_MANAGER: Final = "crawlfleet-handover"

#: One attempt; a call's retries together get ``retry_budget_seconds``.
_ATTEMPT_TIMEOUT: Final = aiohttp.ClientTimeout(total=15, sock_connect=5)
_CONNECTIONS: Final = 8
_RETRY_BASE_SECONDS: Final = 0.25
_RETRY_FACTOR: Final = 2.0
_RETRY_MAX_SECONDS: Final = 5.0
_RETRY_JITTER: Final = 0.3
#: A connection whose credentials expire within this many seconds is replaced first.
_EXPIRY_MARGIN_SECONDS: Final = 30.0
_APPLY: Final = "application/apply-patch+yaml"  # JSON is YAML
# A GET answered with the object's metadata only (PartialObjectMetadata), JSON otherwise.
_METADATA_ONLY: Final = (
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
)
# The scale subresource takes a JSON merge patch.
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
        expiration=_timestamp(status.get("expirationTimestamp")),
    )


def _timestamp(value: object) -> datetime | None:
    """An ExecCredential's RFC 3339 ``expirationTimestamp`` (None: it does not expire)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as error:
        raise kopf.LoginError(
            f"kubeconfig exec plugin: expirationTimestamp {value!r} is not an RFC 3339 time"
        ) from error
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


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


class Child(NamedTuple):
    """A child of a job as :meth:`Kube.ensure_children` makes it."""

    manifest: Manifest
    #: Made once and never rewritten (a generated password, a claim's immutable spec).
    once: bool = False
    #: Dotted paths set only when the object is created (:meth:`Kube.ensure`).
    handed_over: tuple[str, ...] = ()


@dataclass(eq=False)
class _Connection:
    """One login's session, and the calls using it (a retired one closes after the last)."""

    session: aiohttp.ClientSession
    server: str
    #: time.time() at which the credentials expire; None: they do not say.
    expires_at: float | None
    calls: int = 0
    retired: bool = False

    def expiring(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at - _EXPIRY_MARGIN_SECONDS


class Kube:
    """Apply of children, and the reads and writes the fleet brain's backend needs.

    One aiohttp session per login, opened at the first call and shared by every call until a
    401 or the credentials' expiry replaces it (the module docstring has the retry rules).
    """

    def __init__(self, credentials: Login = login, *, retry_budget_seconds: float = 30.0) -> None:
        self._login = credentials
        self._retry_budget_seconds = retry_budget_seconds
        self._current: _Connection | None = None
        self._lock = asyncio.Lock()
        #: How many times this client logged in (one per credentials' lifetime, ideally).
        self.logins = 0

    async def _acquire(self) -> _Connection:
        async with self._lock:
            current = self._current
            if current is None or current.expiring(time.time()):
                if current is not None:
                    await self._retire(current)
                current = self._current = await self._connect()
            current.calls += 1
            return current

    async def _connect(self) -> _Connection:
        info = await asyncio.to_thread(self._login)
        self.logins += 1
        expiration = info.expiration
        if expiration is not None and expiration.tzinfo is None:
            expiration = expiration.replace(tzinfo=UTC)  # kopf's convention: naive is UTC
        session = aiohttp.ClientSession(
            # Each TLS connection holds asyncio's 256 KiB read buffer: a few serve a hundred
            # jobs' calls, which are short (a call waits for a free one).
            connector=aiohttp.TCPConnector(ssl=info.as_ssl_context(), limit=_CONNECTIONS),
            headers=info.as_http_headers(),
            timeout=_ATTEMPT_TIMEOUT,
        )
        return _Connection(
            session,
            info.server.rstrip("/"),
            None if expiration is None else expiration.timestamp(),
        )

    async def _release(self, connection: _Connection) -> None:
        connection.calls -= 1
        if connection.retired and connection.calls == 0:
            await connection.session.close()

    async def _retire(self, connection: _Connection) -> None:
        """No new call uses it; it closes when its last call is done (now, if none is)."""
        if self._current is connection:
            self._current = None
        if not connection.retired:
            connection.retired = True
            if connection.calls == 0:
                await connection.session.close()

    async def _refused(self, connection: _Connection) -> None:
        """A 401 on ``connection``: the first call to see it retires it, and the next
        :meth:`_acquire` logs in once for all of them."""
        async with self._lock:
            await self._retire(connection)

    async def close(self) -> None:
        async with self._lock:
            if self._current is not None:
                await self._retire(self._current)

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str | None = None,
        missing_ok: bool = False,
        query: Mapping[str, str] | None = None,
    ) -> Any:
        """One API call, retried as the module docstring says; the decoded JSON answer, or
        :class:`KubeError` for an error status (status 0 when no answer came at all).

        ``missing_ok``: a 404 answers None (reads of what may not exist yet, deletes and
        scales of what may be gone already).
        """
        answer = await self._call(method, path, body, content_type, missing_ok, query, decode=True)
        return None if answer is None else answer[1]

    async def _call(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str | None,
        missing_ok: bool,
        query: Mapping[str, str] | None,
        *,
        decode: bool,
        accept: str = "application/json",
    ) -> tuple[int, Any] | None:
        """(status, decoded answer), None for a tolerated 404; the retry loop.

        ``decode=False`` for the writes whose answer (the whole object, managedFields and all)
        nobody reads: a burst of a hundred jobs' applies is not a hundred decoded objects.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_budget_seconds
        headers = {"Content-Type": content_type or "application/json", "Accept": accept}
        data = None if body is None else json.dumps(body)
        relogged = False
        for attempt in _attempts():
            connection = await self._acquire()
            try:
                async with connection.session.request(
                    method, connection.server + path, data=data, headers=headers, params=query
                ) as response:
                    status, text = response.status, await response.text()
                    retry_after = _retry_after(response.headers.get("Retry-After"))
            except (aiohttp.ClientError, TimeoutError) as error:
                # No answer at all (connection refused or reset, a timeout): status 0.
                failure = KubeError(0, method, path, f"no answer: {error!r}")
                failure.__cause__ = error
            else:
                if status == 401 and not relogged:
                    relogged = True
                    await self._refused(connection)
                    continue
                if status == 404 and missing_ok:
                    return None
                if status < 400:
                    return status, json.loads(text) if text and decode else None
                message, hinted = _status_message(text)
                failure = KubeError(status, method, path, message, retry_after or hinted)
            finally:
                await self._release(connection)
            if not failure.transient:
                raise failure
            delay = _delay(attempt, failure.retry_after_seconds)
            if loop.time() + delay > deadline:
                raise failure
            log.info("Kubernetes API %s; retrying in %.1f s", failure, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _object_path(self, manifest: Manifest) -> str:
        group, plural = _KINDS[manifest["kind"]]
        meta = manifest["metadata"]
        return f"{group}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"

    async def create(self, manifest: Manifest) -> bool:
        """Create an object that is made once and never rewritten (a Secret holding a generated
        password, a claim whose spec is immutable); False when it exists already (409), also
        when an earlier attempt of this very call made it."""
        collection = self._object_path(manifest).rsplit("/", 1)[0]
        query = {"fieldManager": FIELD_MANAGER}
        try:
            await self._call("POST", collection, manifest, None, False, query, decode=False)
        except KubeError as error:
            if error.status != 409:
                raise
            return False
        return True

    async def apply(self, manifest: Manifest, *, field_manager: str = FIELD_MANAGER) -> bool:
        """Server-side apply, forced (the operator owns these fields); True when it created
        the object."""
        query = {"fieldManager": field_manager, "force": "true"}
        answer = await self._call(
            "PATCH", self._object_path(manifest), manifest, _APPLY, False, query, decode=False
        )
        return answer is not None and answer[0] == 201

    async def ensure(
        self, manifest: Manifest, *, handed_over: Iterable[str] = (), exists: bool | None = None
    ) -> bool:
        """The object exists and its operator-owned fields are ``manifest``'s; True when made.

        ``handed_over``: dotted paths (``spec.replicas``) the operator sets only when it
        creates the object. They are applied once with the new object and kept by
        :data:`HANDOVER_MANAGER`, so the later applies, which leave them out, do not reset
        them; whoever changes them after (the tick's scale, an HPA) owns them. ``exists``:
        whether the object is there, when the caller has just read it (None: read it here,
        if ``handed_over`` needs to know).
        """
        paths = [path.split(".") for path in handed_over]
        if not paths:
            return await self.apply(manifest)
        if exists is None:
            exists = await self.metadata(manifest) is not None
        if exists:
            return await self.apply(_without(manifest, paths))
        created = await self.apply(manifest)
        await self.apply(_only(manifest, paths), field_manager=HANDOVER_MANAGER)
        return created

    async def metadata(self, manifest: Manifest) -> Manifest | None:
        """The metadata of the object ``manifest`` names (None: there is none), read without
        its content: a Secret's data or a seed list of megabytes is not sent for it."""
        return await self._metadata(self._object_path(manifest))

    async def _metadata(self, path: str) -> Manifest | None:
        answer = await self._call(
            "GET", path, None, None, True, None, decode=True, accept=_METADATA_ONLY
        )
        found: Manifest | None = None if answer is None else answer[1].get("metadata") or {}
        return found

    async def ensure_children(
        self, children: Sequence[Child], owner_uid: str
    ) -> list[ChildConflict]:
        """Make or update the children that are the owner's; change nothing if one is not.

        Every child's metadata is read first (one GET each): when any name is taken by an
        object the owner does not control, the conflicts are returned and nothing is created
        or applied, so a job never runs half made. Otherwise each child is applied (a made-once
        child that exists is left as it is) and the answer is empty, unless a made-once child
        appeared since its read and is not the owner's.
        """
        found = [await self.metadata(child.manifest) for child in children]
        conflicts = [
            ChildConflict.of(child.manifest, meta)
            for child, meta in zip(children, found, strict=True)
            if meta is not None and ownership(meta, owner_uid) == "foreign"
        ]
        if conflicts:
            return conflicts
        for child, meta in zip(children, found, strict=True):
            manifest = child.manifest
            if child.once:
                if meta is not None:
                    continue  # the owner's already, and never rewritten
                created = await self.create(manifest)
                if not created:  # made since the read: by an earlier try of ours, or not
                    again = await self.metadata(manifest)
                    if again is not None and ownership(again, owner_uid) == "foreign":
                        return [ChildConflict.of(manifest, again)]
            else:
                if meta is not None:  # the apply is refused if it was replaced meanwhile
                    manifest = {
                        **manifest,
                        "metadata": {**manifest["metadata"], "uid": meta["uid"]},
                    }
                created = await self.ensure(
                    manifest, handed_over=child.handed_over, exists=meta is not None
                )
            if created:
                log.info(
                    "created %s %s/%s",
                    manifest["kind"],
                    manifest["metadata"]["namespace"],
                    manifest["metadata"]["name"],
                )
        return []

    async def secret_value(
        self, namespace: str, name: str, key: str, *, owner_uid: str | None = None
    ) -> str | None:
        """A Secret's value; None when it is missing, and with ``owner_uid`` also when the
        Secret is not that owner's child (a Secret someone put under a child's name)."""
        path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        secret = await self.request("GET", path, missing_ok=True)
        if secret is not None and not _owned(secret, owner_uid):
            return None
        value = ((secret or {}).get("data") or {}).get(key)
        return None if value is None else base64.b64decode(value).decode()

    async def config_map_value(self, namespace: str, name: str, key: str) -> bytes | None:
        """A ConfigMap's ``data`` (as UTF-8) or ``binaryData`` entry; None when either is
        missing."""
        path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        found = await self.request("GET", path, missing_ok=True) or {}
        text = (found.get("data") or {}).get(key)
        if text is not None:
            return str(text).encode()
        binary = (found.get("binaryData") or {}).get(key)
        return None if binary is None else base64.b64decode(binary)

    async def config_map_metadata(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ConfigMap's metadata alone (a seed list of megabytes is not sent for it, nor read
        before its labels allow); None when it is missing."""
        path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        found = await self._metadata(path)
        return None if found is None else dict(found)

    async def config_map_version(self, namespace: str, name: str) -> str | None:
        """A ConfigMap's resourceVersion (its metadata alone); None when it is missing."""
        version = ((await self.config_map_metadata(namespace, name)) or {}).get("resourceVersion")
        return str(version) if version else None

    async def secret_labels(self, namespace: str, name: str) -> dict[str, str] | None:
        """A Secret's labels (None: no such Secret), to judge whether a job may use it: its
        metadata alone, as for a seed list's ConfigMap, so that judging a Secret a job may
        not use never brings its data into the operator."""
        found = await self._metadata(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        return None if found is None else dict(found.get("labels") or {})

    async def service_cluster_ip(
        self, namespace: str, name: str, *, owner_uid: str | None = None
    ) -> str | None:
        """A Service's cluster IP; None as :meth:`secret_value` answers None."""
        path = f"/api/v1/namespaces/{namespace}/services/{name}"
        service = await self.request("GET", path, missing_ok=True)
        if service is not None and not _owned(service, owner_uid):
            return None
        ip = ((service or {}).get("spec") or {}).get("clusterIP")
        return ip if ip and ip != "None" else None

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"
        # Gone already (deleted with its job): nothing to scale. An absolute count: a retry
        # of a patch that landed sets the same number again.
        body = {"spec": {"replicas": replicas}}
        query = {"fieldManager": FIELD_MANAGER}
        await self.request("PATCH", path, body, content_type=_MERGE, missing_ok=True, query=query)

    async def delete_pod(self, namespace: str, name: str) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        await self.request("DELETE", path, missing_ok=True)

    async def delete_crawljob(self, namespace: str, name: str) -> None:
        path = f"/apis/crawlfleet.io/v1alpha1/namespaces/{namespace}/crawljobs/{name}"
        await self.request("DELETE", path, missing_ok=True)


def _owned(found: Manifest, owner_uid: str | None) -> bool:
    """Whether ``found`` may be used: no owner asked for, or that owner's child."""
    return owner_uid is None or ownership(found.get("metadata") or {}, owner_uid) == "owned"


def _attempts() -> Iterable[int]:
    attempt = 0
    while True:
        attempt += 1
        yield attempt


def _delay(attempt: int, retry_after_seconds: float | None) -> float:
    """The wait before attempt ``attempt + 1``: the server's word if it gave one, else an
    exponential backoff with jitter, so a hundred jobs' calls do not come back together."""
    if retry_after_seconds is not None:
        return retry_after_seconds
    backoff = min(_RETRY_MAX_SECONDS, _RETRY_BASE_SECONDS * _RETRY_FACTOR ** (attempt - 1))
    return backoff * random.uniform(1 - _RETRY_JITTER, 1 + _RETRY_JITTER)


def _without(manifest: Manifest, paths: list[list[str]]) -> Manifest:
    """A copy of ``manifest`` without the fields at ``paths``."""
    copy: Manifest = json.loads(json.dumps(manifest))
    for path in paths:
        parent = copy
        for key in path[:-1]:
            parent = parent.get(key) or {}
        parent.pop(path[-1], None)
    return copy


def _only(manifest: Manifest, paths: list[list[str]]) -> Manifest:
    """The object's identity and the fields at ``paths``: an apply configuration of them."""
    meta = manifest["metadata"]
    only: Manifest = {
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }
    for path in paths:
        source: Any = manifest
        target = only
        for key in path[:-1]:
            source = source[key]
            target = target.setdefault(key, {})
        target[path[-1]] = source[path[-1]]
    return only


def _retry_after(value: str | None) -> float | None:
    """A Retry-After in seconds (the API server sends whole seconds, never a date)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _status_message(text: str) -> tuple[str, float | None]:
    """The ``message`` of a Kubernetes Status answer (else the raw text, shortened), and its
    ``details.retryAfterSeconds`` (the older form of Retry-After)."""
    try:
        status = json.loads(text)
    except ValueError:
        return text[:500], None
    if not isinstance(status, dict):
        return text[:500], None
    details = status.get("details")
    hint = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    hinted = float(hint) if isinstance(hint, int | float) and hint >= 0 else None
    return str(status.get("message", text[:500])), hinted
