"""What an e2e test holds: a cluster to talk to (built or external) and a polling wait."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kubernetes import client

T = TypeVar("T")


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call whose message carries kubectl's own words (its stderr)."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


@dataclass
class Cluster:
    """A kubeconfig, a kubectl and an API client: the same whether the cluster is ours or kind.

    ``built`` is True for the control plane the fixtures started (with the kubelet double);
    tests that need the double's internals (PIDs, Service addresses) ask for the ``kubelet``
    fixture, which skips on an external cluster.
    """

    kubeconfig: Path
    kubectl_binary: str
    api: client.ApiClient
    built: bool

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run kubectl on this cluster; with ``check``, a failure raises :class:`KubectlError`."""
        command = [self.kubectl_binary, f"--kubeconfig={self.kubeconfig}", *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise KubectlError(done.returncode, command, done.stdout, done.stderr)
        return done


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after ``timeout``.

    Every e2e wait goes through here, so no test can hang: the slowest is bounded.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def wait_established(cluster: Cluster, *crds: str, timeout: float = 30.0) -> None:
    """Wait until every named CRD (``crawljobs.crawlfleet.io``) is Established.

    Polled, not `kubectl wait`: that fails outright on a CRD whose status has no conditions
    yet (".status.conditions accessor error"), which a loaded machine shows; so does the
    jsonpath filter ("<nil> is not array or slice"): a failed read is "not yet".
    """
    established = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    for name in crds:
        wait_until(
            lambda name=name: (
                cluster.kubectl("get", f"crd/{name}", "-o", established, check=False).stdout
                == "True"
            ),
            timeout=timeout,
            what=f"the CRD {name} Established",
        )
