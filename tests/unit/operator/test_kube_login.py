"""How the operator logs in (crawlfleet.operator.kube.login): the API server's address from inside
a pod, an exec credential plugin's token with its expiry, and the login kopf gets: checked with
the API server before kopf uses it, its outcome what the operator's probes report
(crawlfleet.operator.health)."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import kopf
import pytest
from aiohttp import web

from crawlfleet.errors import KubeError
from crawlfleet.operator import kube as kube_module
from crawlfleet.operator.health import LOGIN_RETRY_SECONDS, LoginHealth
from crawlfleet.operator.kube import login


def test_in_a_pod_the_server_comes_from_the_service_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the official clients do: no cluster DNS needed to find the API server."""
    account = kopf.ConnectionInfo(server="https://kubernetes.default.svc", token="t")
    monkeypatch.setattr(kube_module.kopf, "login_with_service_account", lambda **_: account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    assert login().server == "https://10.96.0.1:6443"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    assert login().server == "https://[fd00::1]:6443"
    assert login().token == "t"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert login().server == "https://kubernetes.default.svc"


def _exec_kubeconfig(tmp_path: Path, status: dict[str, str]) -> Path:
    """A kubeconfig whose user is an exec credential plugin printing ``status``."""
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(
        f"#!/bin/sh\ncat <<'EOF'\n{json.dumps({**credential, 'status': status})}\nEOF\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"exec": {"command": str(plugin)}}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def _no_service_account(monkeypatch: pytest.MonkeyPatch, kubeconfig: Path) -> None:
    monkeypatch.setattr(kube_module.kopf, "login_with_service_account", lambda **_: None)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))


def test_an_exec_credentials_expiration_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So the client (and kopf, from the same login) renews it before the API server refuses."""
    status = {"token": "t", "expirationTimestamp": "2031-05-04T03:02:01Z"}
    _no_service_account(monkeypatch, _exec_kubeconfig(tmp_path, status))
    info = login()
    assert info.token == "t"
    assert info.expiration == datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)


def test_an_exec_credential_without_expiration_never_expires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_service_account(monkeypatch, _exec_kubeconfig(tmp_path, {"token": "t"}))
    assert login().expiration is None


def test_an_unreadable_expiration_is_a_login_error_that_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status = {"token": "t", "expirationTimestamp": "next tuesday"}
    _no_service_account(monkeypatch, _exec_kubeconfig(tmp_path, status))
    with pytest.raises(kopf.LoginError, match="expirationTimestamp 'next tuesday'"):
        login()


class APIServerDouble:
    """A test double of the API server's authentication, over loopback: every path answers
    200 to a bearer token it accepts and 401 to any other, as kube-apiserver does.

    The real API server refuses a login in tests/e2e/test_chart.py; this one lets the unit
    tests change its mind between two logins (a token revoked, another issued)."""

    def __init__(self, accepted_token: str) -> None:
        self.accepted_token = accepted_token
        self.versions = 0  # requests of the login check's path
        self._runner: web.AppRunner | None = None
        self.server = ""

    async def _answer(self, request: web.Request) -> web.Response:
        if request.path == "/version":
            self.versions += 1
        if request.headers.get("Authorization") != f"Bearer {self.accepted_token}":
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response({"kind": "Status", "path": request.path})

    async def __aenter__(self) -> APIServerDouble:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._answer)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.server = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


def _logs_in_with(monkeypatch: pytest.MonkeyPatch, server: str, token: str) -> None:
    from crawlfleet.operator import main as main_module

    info = kopf.ConnectionInfo(server=server, token=token)
    monkeypatch.setattr(main_module, "login", lambda: info)


async def test_kopfs_session_has_bounded_connections_beside_its_watches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf's own session would open a connection per overlapping request (docs/benchmarks.md)."""
    from crawlfleet.operator import main as main_module

    async with APIServerDouble(accepted_token="t") as api:
        _logs_in_with(monkeypatch, api.server, "t")
        context = await main_module._kopf_login(watched_namespaces=3, health=LoginHealth())()
        try:
            assert isinstance(context, kopf.AiohttpSession)
            assert context.server == api.server
            assert context.aiohttp_session.headers["Authorization"] == "Bearer t"
            limit = context.aiohttp_session.connector.limit  # type: ignore[union-attr]
            assert limit == (
                main_module._KOPF_REQUEST_CONNECTIONS + 3 * main_module._WATCHES_PER_NAMESPACE
            )
        finally:
            await context.aiohttp_session.close()


async def test_kopfs_login_fails_the_probe_until_the_api_server_accepts_it_and_while_it_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf answers /healthz with 500 when a probe handler fails: before the first accepted
    login, after one the API server refused (a revoked token), and when it cannot be reached;
    each refusal is kopf's retry after LOGIN_RETRY_SECONDS, not its default minute."""
    from crawlfleet.operator import main as main_module

    health = LoginHealth()
    kopf_login = main_module._kopf_login(watched_namespaces=1, health=health)
    with pytest.raises(kopf.PermanentError, match="not logged in yet"):
        await health.probe()

    async with APIServerDouble(accepted_token="good") as api:
        _logs_in_with(monkeypatch, api.server, "revoked")
        with pytest.raises(kopf.TemporaryError, match="401 Unauthorized") as refused:
            await kopf_login()
        assert refused.value.delay == LOGIN_RETRY_SECONDS
        assert api.versions == 1  # the login was put to the API server, not guessed
        with pytest.raises(kopf.PermanentError, match="401 Unauthorized"):
            await health.probe()

        _logs_in_with(monkeypatch, api.server, "good")
        context = await kopf_login()
        await context.aiohttp_session.close()
        assert (await health.probe())["server"] == api.server

        _logs_in_with(monkeypatch, api.server, "revoked")  # kopf logs in again after a 401
        with pytest.raises(kopf.TemporaryError):
            await kopf_login()
        with pytest.raises(kopf.PermanentError, match="401 Unauthorized"):
            await health.probe()
        gone = api.server

    with pytest.raises(kopf.TemporaryError, match="0 no answer"):
        await kopf_login()  # nothing listens there any more
    with pytest.raises(kopf.PermanentError, match=f"GET {gone}/version: 0 no answer"):
        await health.probe()


async def test_the_operators_own_client_fails_the_probe_when_its_login_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The children's client logs in again after a 401 (a revoked token): refused, its call
    fails with that 401 and the probe fails; its next call logs in again, and a token the API
    server accepts makes the probe pass again."""
    from crawlfleet.operator import main as main_module

    health = LoginHealth()
    kube = main_module.Kube(main_module._recorded_login(health), retry_budget_seconds=1)
    async with APIServerDouble(accepted_token="first") as api:
        try:
            _logs_in_with(monkeypatch, api.server, "first")
            assert await kube.request("GET", "/api/v1/namespaces/a/secrets/s") is not None
            assert (await health.probe())["server"] == api.server

            api.accepted_token = "second"  # "first" revoked
            with pytest.raises(KubeError) as refused:
                await kube.request("GET", "/api/v1/namespaces/a/secrets/s")
            assert refused.value.status == 401
            assert str(refused.value) == f"GET {api.server}/version: 401 Unauthorized"
            with pytest.raises(kopf.PermanentError, match="401 Unauthorized"):
                await health.probe()

            _logs_in_with(monkeypatch, api.server, "second")  # the rotated token
            assert await kube.request("GET", "/api/v1/namespaces/a/secrets/s") is not None
            assert (await health.probe())["server"] == api.server
            assert api.versions == 3  # one check per login: first, refused, second
        finally:
            await kube.close()


async def test_a_login_that_cannot_read_its_credentials_fails_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crawlfleet.operator import main as main_module

    monkeypatch.setattr(kube_module.kopf, "login_with_service_account", lambda **_: None)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    health = LoginHealth()
    with pytest.raises(kopf.TemporaryError, match=r"login failed: .*No such file") as failed:
        await main_module._kopf_login(watched_namespaces=1, health=health)()
    assert failed.value.delay == LOGIN_RETRY_SECONDS
    with pytest.raises(kopf.PermanentError, match="not logged in to the API server: FileNotFound"):
        await health.probe()
