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
  ports.
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import json
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from crawlfleet.config import Config, OperatorConfig
from crawlfleet.operator.handlers import CrawlJobOperator
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
    """Hand memory freed after a burst (a thousand jobs created at once) back to the OS."""
    libc = _glibc()
    if libc is None:
        return
    while True:
        await asyncio.sleep(interval_seconds)
        libc.malloc_trim(0)


_M_ARENA_MAX = -8  # from glibc's malloc.h


_background: set[asyncio.Task[None]] = set()


def _login(**_: Any) -> kopf.ConnectionInfo:
    return login()


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
    kube = Kube(login, retry_budget_seconds=knobs.api_retry_seconds)
    operator = CrawlJobOperator(kube, config, metrics)
    operator.register(registry)
    kopf.on.startup(registry=registry)(
        _configure(knobs, all_namespaces=all_namespaces, standalone=standalone)
    )
    # A registry of our own starts without kopf's default login handlers: ours, the same
    # credentials the children are made with (service account in a pod, else the kubeconfig).
    kopf.on.login(registry=registry)(_login)
    kopf.on.cleanup(registry=registry)(_closer(kube))
    kopf.on.startup(registry=registry)(_start_trimmer)
    metrics.serve(knobs.metrics_port, knobs.bind_host)
    liveness = (
        f"http://{knobs.bind_host}:{knobs.health_port}/healthz" if knobs.health_port else None
    )
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
