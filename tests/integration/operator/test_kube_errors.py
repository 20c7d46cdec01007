"""API errors become decisions: the Kubernetes client's errors, and what the handlers make of them.

A real HTTP server on loopback plays an API server that throttles, fails and refuses (the
answers Kubernetes gives: a Status object, Retry-After); a closed port is an API server that
does not answer at all. The client here has no retry budget: these are the errors a handler
sees once the client's own retries (tests/integration/operator/test_kube_retries.py) are spent.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import kopf
import pytest
from aiohttp import web

from crawlfleet.errors import CrawlfleetError, KubeError
from crawlfleet.operator.handlers import _retry_later
from crawlfleet.operator.kube import Kube


def _status(code: int, message: str, **headers: str) -> web.Response:
    body = {"kind": "Status", "status": "Failure", "message": message, "code": code}
    return web.json_response(body, status=code, headers=headers)


@pytest.fixture
async def api() -> AsyncIterator[str]:
    async def throttled(_: web.Request) -> web.Response:
        return _status(429, "too many requests", **{"Retry-After": "3"})

    async def broken(_: web.Request) -> web.Response:
        return _status(503, "etcd leader changed")

    async def forbidden(_: web.Request) -> web.Response:
        return _status(403, 'deployments.apps "x" is forbidden')

    app = web.Application()
    app.router.add_get("/throttled", throttled)
    app.router.add_get("/broken", broken)
    app.router.add_get("/forbidden", forbidden)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _kube(server: str) -> Kube:
    return Kube(lambda: kopf.ConnectionInfo(server=server), retry_budget_seconds=0)


async def _error(kube: Kube, path: str) -> KubeError:
    with pytest.raises(KubeError) as caught:
        await kube.request("GET", path)
    return caught.value


async def test_throttling_is_retried_after_the_servers_delay(api: str) -> None:
    kube = _kube(api)
    try:
        error = await _error(kube, "/throttled")
    finally:
        await kube.close()
    assert isinstance(error, CrawlfleetError)
    assert (error.status, error.retry_after_seconds, error.transient) == (429, 3.0, True)
    assert "too many requests" in str(error)
    decision = _retry_later(error)
    assert isinstance(decision, kopf.TemporaryError)
    assert decision.delay == 3.0


async def test_server_errors_are_retried_soon_and_refusals_slowly(api: str) -> None:
    kube = _kube(api)
    try:
        broken = await _error(kube, "/broken")
        forbidden = await _error(kube, "/forbidden")
    finally:
        await kube.close()
    assert broken.transient
    assert _retry_later(broken).delay == 5.0
    assert not forbidden.transient  # a person must fix RBAC: retried, but slowly
    assert _retry_later(forbidden).delay == 60.0
    assert "forbidden" in str(_retry_later(forbidden))


async def test_no_answer_at_all_is_a_transient_kube_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kube = _kube(f"http://127.0.0.1:{port}")
    try:
        error = await _error(kube, "/api/v1/namespaces/x/pods/y")
    finally:
        await kube.close()
    assert error.status == 0
    assert error.transient
    assert _retry_later(error).delay == 5.0
