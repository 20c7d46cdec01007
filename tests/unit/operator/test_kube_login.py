"""Where the operator finds the API server from inside a pod (crawlfleet.operator.kube.login)."""

from __future__ import annotations

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
