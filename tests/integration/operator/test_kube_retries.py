"""The Kubernetes client rides out a busy API server: retries, Retry-After, one re-login, expiry.

:class:`ApiServerDouble` is a test double of the API server: a real aiohttp server on loopback
that answers as Kubernetes does (Status objects, Retry-After, 401 for a token it does not
accept) and records every request it got, so each case asserts what reached the server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import kopf
import pytest
from aiohttp import web

from crawlfleet.errors import KubeError
from crawlfleet.operator.kube import Kube

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def status(code: int, message: str, **headers: str) -> web.Response:
    body = {"kind": "Status", "status": "Failure", "message": message, "code": code}
    return web.json_response(body, status=code, headers=headers)


@dataclass
class Seen:
    method: str
    path: str
    token: str
    at: float


@dataclass
class ApiServerDouble:
    """A test double of the API server; ``answer`` decides each response."""

    answer: Handler
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.seen.append(Seen(request.method, request.path, token, time.monotonic()))
        return await self.answer(request)


@pytest.fixture
async def api() -> AsyncIterator[ApiServerDouble]:
    async def unset(_: web.Request) -> web.Response:
        return web.json_response({})

    double = ApiServerDouble(unset)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", double._handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    double.url = f"http://127.0.0.1:{port}"
    try:
        yield double
    finally:
        await runner.cleanup()


def tokens(*values: str, expires_in: float | None = None) -> Callable[[], kopf.ConnectionInfo]:
    """Logins that hand out ``values`` in turn (the last one from then on)."""
    issued = iter(values)
    last = values[-1]

    def login() -> kopf.ConnectionInfo:
        token = next(issued, last)
        expiration = None
        if expires_in is not None:
            expiration = datetime.now(UTC) + timedelta(seconds=expires_in)
        return kopf.ConnectionInfo(server=server[0], token=token, expiration=expiration)

    server = [""]
    login.server = server  # type: ignore[attr-defined]
    return login


def client(api: ApiServerDouble, login: Callable[[], kopf.ConnectionInfo], **kw: float) -> Kube:
    login.server[0] = api.url  # type: ignore[attr-defined]
    return Kube(login, **kw)


async def failure(kube: Kube) -> KubeError:
    """The error a read ends with, once the client's retries are spent."""
    try:
        with pytest.raises(KubeError) as raised:
            await kube.secret_value("ns", "s", "k")
    finally:
        await kube.close()
    return raised.value


async def test_throttling_and_server_errors_are_retried_until_an_answer(
    api: ApiServerDouble,
) -> None:
    answers = [status(429, "slow down", **{"Retry-After": "1"}), status(503, "etcd leader changed")]

    async def answer(_: web.Request) -> web.Response:
        return answers.pop(0) if answers else web.json_response({"data": {"k": "djE="}})

    api.answer = answer
    kube = client(api, tokens("t"))
    try:
        assert await kube.secret_value("ns", "s", "k") == "v1"
    finally:
        await kube.close()
    assert len(api.seen) == 3
    # The server asked for a second's pause after its 429, and got it.
    assert api.seen[1].at - api.seen[0].at >= 0.95


async def test_a_retry_after_past_the_budget_is_handed_to_the_handler_at_once(
    api: ApiServerDouble,
) -> None:
    async def answer(_: web.Request) -> web.Response:
        return status(429, "slow down", **{"Retry-After": "60"})

    api.answer = answer
    kube = client(api, tokens("t"), retry_budget_seconds=5)
    started = time.monotonic()
    error = await failure(kube)
    assert time.monotonic() - started < 5  # no minute of sleeping inside the call
    assert (error.status, error.retry_after_seconds) == (429, 60.0)
    assert len(api.seen) == 1


async def test_the_old_style_retry_hint_in_the_status_details_is_honoured(
    api: ApiServerDouble,
) -> None:
    async def answer(_: web.Request) -> web.Response:
        body = {
            "kind": "Status",
            "code": 503,
            "message": "busy",
            "details": {"retryAfterSeconds": 7},
        }
        return web.json_response(body, status=503)

    api.answer = answer
    kube = client(api, tokens("t"), retry_budget_seconds=1)
    error = await failure(kube)
    assert error.retry_after_seconds == 7.0


async def test_a_refusal_is_a_decision_and_is_not_retried(api: ApiServerDouble) -> None:
    async def answer(_: web.Request) -> web.Response:
        return status(403, 'secrets "s" is forbidden')

    api.answer = answer
    kube = client(api, tokens("t"))
    error = await failure(kube)
    assert error.status == 403
    assert len(api.seen) == 1


async def test_a_create_whose_answer_was_lost_is_retried_and_finds_its_object(
    api: ApiServerDouble,
) -> None:
    """The POST landed but the connection dropped before the answer: the retry's 409 is the
    object this very call made, so create() reports it exists and nothing is made twice."""
    made: list[str] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        name = (await request.json())["metadata"]["name"]
        if name in made:
            return status(409, f'secrets "{name}" already exists')
        made.append(name)
        assert request.transport is not None
        request.transport.close()  # the answer is lost on the way back
        return web.Response()

    api.answer = answer
    kube = client(api, tokens("t"))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}}
    try:
        assert await kube.create(secret) is False
    finally:
        await kube.close()
    assert made == ["s"]
    assert [(seen.method, seen.path) for seen in api.seen] == [
        ("POST", "/api/v1/namespaces/ns/secrets")
    ] * 2


async def test_concurrent_401s_log_in_once_and_no_call_loses_its_session(
    api: ApiServerDouble,
) -> None:
    """A token revoked while a slow call is under way on the same session: the calls that get
    401 share one re-login, and the slow call still gets its answer."""
    accepted = {"first"}
    slow_started = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        token = api.seen[-1].token
        if token not in accepted:
            return status(401, "Unauthorized")
        if request.path.endswith("/slow"):
            slow_started.set()
            await asyncio.sleep(1.0)
        return web.json_response({"spec": {"clusterIP": "10.0.0.1"}})

    api.answer = answer
    kube = client(api, tokens("first", "second"))
    try:
        slow = asyncio.create_task(kube.service_cluster_ip("ns", "slow"))
        await slow_started.wait()
        accepted.clear()
        accepted.add("second")  # "first" is rotated away while the slow call runs
        answers = await asyncio.gather(*(kube.service_cluster_ip("ns", f"s{i}") for i in range(20)))
        assert answers == ["10.0.0.1"] * 20
        assert await slow == "10.0.0.1"
    finally:
        await kube.close()
    assert kube.logins == 2
    assert sum(1 for seen in api.seen if seen.token == "second") == 20


async def test_credentials_are_renewed_before_their_expiration(api: ApiServerDouble) -> None:
    """An exec plugin's token that expires: the next call after its expiry (less a margin)
    logs in again instead of waiting for a 401."""

    async def answer(_: web.Request) -> web.Response:
        return web.json_response({})

    api.answer = answer
    # The client renews credentials 30 s before they expire: these are due in half a second.
    kube = client(api, tokens("one", "two", expires_in=30.5))
    try:
        await kube.secret_value("ns", "s", "k")
        await kube.secret_value("ns", "s", "k")
        await asyncio.sleep(0.6)
        await kube.secret_value("ns", "s", "k")
    finally:
        await kube.close()
    assert [seen.token for seen in api.seen] == ["one", "one", "two"]
    assert kube.logins == 2
