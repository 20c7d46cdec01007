"""``crawlfleet operator``: kopf, configured for a long-lived controller of CrawlJobs.

Settings that matter in production, and why:

- progress and the last-handled spec live in annotations (``crawlfleet.io/…``), not in
  ``status.kopf``: the CRD's status schema is structural and stays ours. The last-handled spec
  is kept as a digest (``SpecDigestDiffBase``): Kubernetes caps an object's annotations at
  256 kB, a spec may be four times that, and kopf's patch would then fail on every event;
- watch requests carry a server-side timeout (and a client-side one a little longer), so a
  stream that went silent through a load balancer is re-established instead of hanging;
- peering (``KopfPeering`` objects) lets two replicas run while only one acts; the other
  takes over when the first stops refreshing its peering record;
- a liveness endpoint (``/healthz``) and a Prometheus endpoint (``/metrics``) on their own
  ports; ``/healthz`` fails (500) until the operator has logged in to the API server, and
  whenever its latest login failed (:mod:`crawlfleet.operator.health`).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import hashlib
import json
import logging
import random
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import kopf

from crawlfleet.config import Config, OperatorConfig
from crawlfleet.operator.handlers import CrawlJobOperator
from crawlfleet.operator.health import LOGIN_RETRY_SECONDS, LoginHealth
from crawlfleet.operator.kube import Kube, login
from crawlfleet.operator.metrics import OperatorMetrics

__all__ = ["SpecDigestDiffBase", "run_operator"]


class SpecDigestDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's last-handled configuration with the spec replaced by its SHA-256.

    kopf compares this essence with the one it stored to decide that a CrawlJob changed; the
    handlers re-read the whole spec and never look at kopf's diff, so a digest tells them all
    they use, and fits in an annotation however many seeds the job has.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        spec = essence.get("spec")
        if spec is not None:
            encoded = json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()
            essence["spec"] = {"sha256": hashlib.sha256(encoded).hexdigest()}
        return essence


def _configure(config: OperatorConfig, *, all_namespaces: bool, standalone: bool) -> Any:
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix="crawlfleet.io"
        )
        settings.persistence.diffbase_storage = SpecDigestDiffBase(
            prefix="crawlfleet.io", key="last-handled-configuration"
        )
        settings.persistence.finalizer = "crawlfleet.io/finalizer"
        settings.watching.server_timeout = 120
        settings.watching.client_timeout = 150
        settings.watching.connect_timeout = 10
        settings.posting.level = logging.INFO
        settings.peering.name = config.peering
        settings.peering.standalone = standalone
        settings.peering.mandatory = not standalone
        # Peers of equal priority all pause; distinct ones let exactly one (the highest) act.
        settings.peering.priority = random.randint(1, 1_000_000)
        # Namespaced: no cluster-wide listing of namespaces and CRDs, which the namespaced
        # RBAC (rightly) refuses; the resources are known in advance.
        settings.scanning.disabled = not all_namespaces
        # A Kubernetes API hiccup: retry soon, but do not hammer (kopf's default is 60 s).
        settings.networking.request_timeout = 30
        # A deleted job's finalizer goes once its tick timer has exited. The tick that
        # deletes a finished job (ttlSecondsAfterFinished) is itself still running when
        # kopf sees the deletion, and kopf's default is to look again only after 60 s.
        settings.background.cancellation_polling = 1.0

    return configure


def _glibc() -> Any | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 - glibc only (musl has neither call)
    except (OSError, AttributeError):
        return None
    return libc


def _limit_malloc_arenas() -> None:
    """Two malloc arenas instead of eight per core: the API client's worker threads would
    otherwise each keep an arena of freed memory, most of an idle operator's RSS."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_ARENA_MAX, 2)


async def _trim_memory(interval_seconds: float = 10.0) -> None:
    """Collect cyclic garbage, then hand freed memory back to the OS, every ``interval``.

    kopf and aiohttp leave cycles behind at every event and call (tasks, exceptions with
    their tracebacks, response objects); the collector's oldest generation runs only when
    the heap has grown by a quarter, so between two runs the garbage piles up, and how much
    of it the RSS shows when it is read was a matter of luck (85 to 108 MB for the same 100
    jobs, docs/benchmarks.md). A full collection is cheap here: the start-up objects are
    frozen out of it (:func:`run_operator`).
    """
    libc = _glibc()
    while True:
        await asyncio.sleep(interval_seconds)
        gc.collect()
        if libc is not None:
            libc.malloc_trim(0)


_M_ARENA_MAX = -8  # from glibc's malloc.h


_background: set[asyncio.Task[None]] = set()


#: kopf's own requests (status patches, Events, peering) at once, beside its watch streams.
_KOPF_REQUEST_CONNECTIONS = 8
#: Watch streams per namespace (CrawlJobs, pods, Deployments, peering), each holding a
#: connection for as long as it runs.
_WATCHES_PER_NAMESPACE = 5


def _kopf_login(
    watched_namespaces: int, health: LoginHealth
) -> Callable[..., Awaitable[kopf.AiohttpSession]]:
    """kopf's login: our credentials, accepted by the API server before kopf gets them
    (``health`` records the outcome for the probes; a failure is tried again after
    ``LOGIN_RETRY_SECONDS``), on a session whose connections are bounded.

    kopf's own session has no connection limit: a hundred jobs' status patches at once open
    a hundred TLS connections, each with asyncio's 256 KiB read buffer and OpenSSL's, kept
    alive after; how many were open when RSS was read made 20 MB of difference between runs
    of the same benchmark. Here its requests share ``_KOPF_REQUEST_CONNECTIONS`` (a request
    waits for one), with room beside them for every watch stream. kopf closes the session
    when it drops the credentials (a 401, an expiry).
    """
    limit = _KOPF_REQUEST_CONNECTIONS + _WATCHES_PER_NAMESPACE * max(1, watched_namespaces)

    async def kopf_login(**_: Any) -> kopf.AiohttpSession:
        try:
            info, refusal = await asyncio.to_thread(health.log_in, login)
            tls = info.as_ssl_context()
        except Exception as error:  # no credentials, a CA that cannot be read: retried too
            raise kopf.TemporaryError(
                f"login failed: {error}", delay=LOGIN_RETRY_SECONDS
            ) from error
        if refusal is not None:
            raise kopf.TemporaryError(f"login failed: {refusal}", delay=LOGIN_RETRY_SECONDS)
        with warnings.catch_warnings():  # aiohttp's BasicAuth warns; None for token users
            warnings.simplefilter("ignore", DeprecationWarning)
            auth = info.as_aiohttp_basic_auth()
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, ssl=tls),
            headers=info.as_http_headers(),
            auth=auth,
        )
        return kopf.AiohttpSession(
            server=info.server,
            default_namespace=info.default_namespace,
            expiration=info.expiration,
            priority=info.priority,
            aiohttp_session=session,
        )

    return kopf_login


def _recorded_login(health: LoginHealth) -> Callable[[], kopf.ConnectionInfo]:
    """The operator's own client's login (at its first call, and after a 401), recorded for
    the probes like kopf's. A refusal is the call's :class:`KubeError`, which its handler
    already takes for "later"; the client keeps no session, so its next call logs in again
    (and records an API server that answers again)."""

    def recorded() -> kopf.ConnectionInfo:
        info, refusal = health.log_in(login)
        if refusal is not None:
            raise refusal
        return info

    return recorded


def _closer(kube: Kube) -> Callable[..., Awaitable[None]]:
    async def close(**_: Any) -> None:
        await kube.close()

    return close


async def _start_trimmer(**_: Any) -> None:
    task = asyncio.create_task(_trim_memory())
    _background.add(task)
    task.add_done_callback(_background.discard)


def run_operator(config: Config, *, all_namespaces: bool = False, standalone: bool = False) -> int:
    """Run until SIGTERM/SIGINT (kopf handles both and stops the handlers gracefully)."""
    knobs = config.operator
    if not all_namespaces and not knobs.namespaces:
        raise ValueError("name the namespaces to watch, or pass --all-namespaces")
    _limit_malloc_arenas()
    registry = kopf.OperatorRegistry()
    metrics = OperatorMetrics()
    health = LoginHealth()
    kube = Kube(_recorded_login(health), retry_budget_seconds=knobs.api_retry_seconds)
    operator = CrawlJobOperator(kube, config, metrics)
    operator.register(registry)
    kopf.on.startup(registry=registry)(
        _configure(knobs, all_namespaces=all_namespaces, standalone=standalone)
    )
    # A registry of our own starts without kopf's default login handlers: ours, the same
    # credentials the children are made with (service account in a pod, else the kubeconfig).
    kopf.on.login(registry=registry)(_kopf_login(len(knobs.namespaces), health))
    kopf.on.probe(registry=registry, id="login")(health.probe)
    kopf.on.cleanup(registry=registry)(_closer(kube))
    kopf.on.startup(registry=registry)(_start_trimmer)
    metrics.serve(knobs.metrics_port, knobs.bind_host)
    liveness = (
        f"http://{knobs.bind_host}:{knobs.health_port}/healthz" if knobs.health_port else None
    )
    # Imports and registrations live as long as the process: out of every collection.
    gc.collect()
    gc.freeze()
    asyncio.run(
        kopf.operator(
            registry=registry,
            clusterwide=all_namespaces,
            namespaces=list(knobs.namespaces),
            standalone=standalone,
            peering_name=knobs.peering,
            liveness_endpoint=liveness,
        )
    )
    return 0
