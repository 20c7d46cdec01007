"""How the operator logs in (crawlfleet.operator.kube.login): the API server's address from inside
a pod, and an exec credential plugin's token with its expiry."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import kopf
import pytest

from crawlfleet.operator import kube as kube_module
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


async def test_kopfs_session_has_bounded_connections_beside_its_watches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf's own session would open a connection per overlapping request (docs/benchmarks.md)."""
    from crawlfleet.operator import main as main_module

    info = kopf.ConnectionInfo(server="https://10.0.0.1:6443", token="t")
    monkeypatch.setattr(main_module, "login", lambda: info)
    context = await main_module._kopf_login(watched_namespaces=3)()
    try:
        assert isinstance(context, kopf.AiohttpSession)
        assert context.server == "https://10.0.0.1:6443"
        assert context.aiohttp_session.headers["Authorization"] == "Bearer t"
        limit = context.aiohttp_session.connector.limit  # type: ignore[union-attr]
        assert (
            limit == main_module._KOPF_REQUEST_CONNECTIONS + 3 * main_module._WATCHES_PER_NAMESPACE
        )
    finally:
        await context.aiohttp_session.close()
