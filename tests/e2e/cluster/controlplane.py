"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager.

The e2e tests talk to the genuine API server -- admission, validation, RBAC, the garbage
collector, the Deployment and ReplicaSet controllers all run their real code -- so a test that
passes here passes for the reasons it would in a cluster. Only the node agent is missing (no
container runtime on this machine); ``kubelet.py`` stands in for it.

The binaries come from ``build.sh`` (built from source at pinned versions, cached outside the
repository). The flags follow controller-runtime's envtest, which is what operator authors test
against: a throwaway CA signs the serving certificate and an admin client certificate
(``O=system:masters``), the ServiceAccount admission plugin is off (pods need no token), and
RBAC is on so that the operator's Role can be tested for real later.

Every process is started by ``processes.spawn`` (its own session, a parent-death signal), so
even a pytest killed with SIGKILL leaves nothing behind; ``stop()`` sends SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.cluster.processes import spawn, terminate

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm")

# The controllers a Deployment needs to become pods, and to be cleaned up again; the binder that
# binds the claims to the volumes the kubelet double provisions, and the two protection
# controllers that lift the finalizers of claims and volumes once nothing uses them (without
# them a namespace with a claim never finishes deleting). Left out on
# purpose: node-lifecycle (it taints nodes that send no heartbeats and evicts their pods),
# pod-garbage-collector (it deletes pods on nodes it does not know), the scheduler (the kubelet
# double binds pods itself), and the endpoint controllers (EndpointSlices may not hold the
# loopback pod IPs the double hands out; the double routes Services itself).
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
)

START_TIMEOUT_SECONDS = 60.0


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reached."""


def binary_dir() -> Path:
    """Where build.sh puts (or has put) the binaries for the pinned versions."""
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--bin-dir"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def missing_binaries(bin_dir: Path) -> list[str]:
    return [name for name in BINARIES if not os.access(bin_dir / name, os.X_OK)]


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just had free on ``host`` (bound and released: racy but standard)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


LOOPBACK_BLOCKS = range(64, 251)
LOOPBACK_LOCK_DIR = Path(tempfile.gettempdir()) / "crawlfleet-e2e-loopback-blocks"


@dataclass
class LoopbackBlock:
    """A /16 of loopback, ``127.N.0.0/16``, that no other session on this machine uses meanwhile.

    The test bed's pod IPs and Service cluster IPs live in such blocks. Several sessions share
    a machine (CI jobs, developers' runs, benchmarks); when each picked N at random, two could
    hand out the same addresses, and a pod of one then failed to bind, or a Service of one
    forwarded to the other's pods. A block is held by an flock on its file, which the kernel
    drops when the holder releases it or dies, however it dies.
    """

    number: int
    _lock_fd: int

    @classmethod
    def claim(cls) -> LoopbackBlock:
        LOOPBACK_LOCK_DIR.mkdir(exist_ok=True)
        candidates = list(LOOPBACK_BLOCKS)
        random.shuffle(candidates)  # sessions rarely even try the same block
        for number in candidates:
            fd = os.open(LOOPBACK_LOCK_DIR / f"{number}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return cls(number, fd)
        raise ControlPlaneError(
            f"every loopback block 127.{LOOPBACK_BLOCKS[0]}-{LOOPBACK_BLOCKS[-1]}.0.0/16 is "
            f"held by another session (locks in {LOOPBACK_LOCK_DIR})"
        )

    def release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing the only descriptor drops the flock
            self._lock_fd = -1


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Pki:
    """Certificates and keys of one throwaway cluster, made with the openssl CLI."""

    directory: Path

    def __post_init__(self) -> None:
        self.ca_cert = self.directory / "ca.crt"
        self.ca_key = self.directory / "ca.key"
        self.serving_cert = self.directory / "apiserver.crt"
        self.serving_key = self.directory / "apiserver.key"
        self.admin_cert = self.directory / "admin.crt"
        self.admin_key = self.directory / "admin.key"
        self.service_account_key = self.directory / "sa.key"
        self.service_account_public_key = self.directory / "sa.pub"

    def generate(self) -> None:
        """EC P-256 everywhere: key generation takes milliseconds, unlike RSA."""
        if shutil.which("openssl") is None:
            raise ControlPlaneError(
                "the e2e fixtures need the openssl CLI (apt-get install openssl)"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2"]
        self._openssl(
            "req", "-x509", *new_key, "-subj", "/CN=crawlfleet-e2e-ca",
            "-keyout", self.ca_key, "-out", self.ca_cert,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        signed_by_ca = ["-CA", self.ca_cert, "-CAkey", self.ca_key]
        self._openssl(
            "req", "-x509", *new_key, *signed_by_ca, "-subj", "/CN=kube-apiserver",
            "-keyout", self.serving_key, "-out", self.serving_cert,
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc",
            "-addext", "extendedKeyUsage=serverAuth",
        )  # fmt: skip
        self._openssl(
            "req", "-x509", *new_key, *signed_by_ca, "-subj", "/O=system:masters/CN=admin",
            "-keyout", self.admin_key, "-out", self.admin_cert,
            "-addext", "extendedKeyUsage=clientAuth",
        )  # fmt: skip
        self._openssl(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", self.service_account_key,
        )  # fmt: skip
        self._openssl(
            "pkey", "-in", self.service_account_key, "-pubout",
            "-out", self.service_account_public_key,
        )  # fmt: skip

    @staticmethod
    def _openssl(*args: str | Path) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        context.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        return context


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on 127.0.0.1, data under ``directory``.

    ``service_block`` is the Service cluster-IP range 127.N.0.0/16: cluster IPs are then
    loopback addresses that the kubelet double can really listen on (see kubelet.py).
    """

    bin_dir: Path
    directory: Path
    service_block: LoopbackBlock = field(default_factory=LoopbackBlock.claim)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pki = Pki(self.directory / "pki")
        self.kubeconfig = self.directory / "kubeconfig"
        self.etcd_url = ""
        self.server = ""

    @property
    def service_cidr(self) -> str:
        return f"127.{self.service_block.number}.0.0/16"

    def log(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    def start(self) -> None:
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ControlPlaneError(
                f"control-plane binaries missing in {self.bin_dir}: {', '.join(missing)}. "
                "Build them once with tests/e2e/cluster/build.sh (minutes on a cold machine; "
                "./scripts/test runs it for you)."
            )
        started = time.monotonic()
        self.pki.generate()
        try:
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def stop(self) -> None:
        """Stop in reverse order of start; the API server drains before etcd goes."""
        for name in reversed(list(self.processes)):
            terminate(self.processes.pop(name))
        self.service_block.release()

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.processes[name] = spawn([str(self.bin_dir / name), *argv], log=self.log(name))

    def _start_etcd(self) -> None:
        port = free_port()
        self.etcd_url = f"http://127.0.0.1:{port}"
        self._spawn(
            "etcd",
            [
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{free_port()}",
                "--unsafe-no-fsync",  # a test cluster: speed over durability
                "--log-level=warn",
            ],
        )
        self._wait_http("etcd", f"{self.etcd_url}/health", None)

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: one JSON line per request of a ServiceAccount (the
        operator's, in the RBAC tests), so a test can read what it really called."""
        return self.directory / "logs" / "audit.log"

    def _audit_policy(self) -> Path:
        """Metadata (who, which verb on what, the answer's code) of ServiceAccounts' requests
        only: the control plane's own clients and the tests' admin stay out of the log."""
        policy = self.directory / "audit-policy.json"
        policy.write_text(
            json.dumps(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [
                        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
                        {"level": "None"},
                    ],
                }
            )
        )
        return policy

    def _start_apiserver(self) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        pki = self.pki
        self.audit_log.parent.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                f"--cert-dir={pki.directory}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--service-cluster-ip-range={self.service_cidr}",
                "--allow-privileged=true",
                "--disable-admission-plugins=ServiceAccount",
                # The real node's namespaces send their pods to it (node.py); others' unchanged.
                "--enable-admission-plugins=PodNodeSelector",
                # kubectl logs/exec on the real node: the API server dials the kubelet at its
                # InternalIP (there is no DNS for its hostname) as the admin.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={pki.admin_cert}",
                f"--kubelet-client-key={pki.admin_key}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki.service_account_public_key}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                f"--audit-policy-file={self._audit_policy()}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--v=1",
            ],
        )
        self._wait_http("kube-apiserver", f"{self.server}/readyz", pki.ssl_context())

    def _write_kubeconfig(self) -> None:
        """A kubeconfig for the admin user; kubectl, the Python client and kopf all read it."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.pki.ca_cert),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(self.pki.admin_cert),
                        "client-key": str(self.pki.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
        }
        # JSON is YAML: no YAML writer needed, and kubectl reads it as it is.
        self.kubeconfig.write_text(json.dumps(config, indent=2))

    def _start_controller_manager(self) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--service-account-private-key-file={self.pki.service_account_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                f"--service-cluster-ip-range={self.service_cidr}",
                "--secure-port=0",
                "--concurrent-gc-syncs=5",
                "--v=1",
            ],
        )
        time.sleep(0.2)
        if (code := self.processes["kube-controller-manager"].poll()) is not None:
            raise ControlPlaneError(
                f"kube-controller-manager exited with {code}:\n"
                f"{tail(self.log('kube-controller-manager'))}"
            )

    def _wait_http(self, name: str, url: str, context: ssl.SSLContext | None) -> None:
        """Poll a health endpoint until it answers 200, failing fast if the process exits."""
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        process = self.processes[name]
        last_error = ""
        while time.monotonic() < deadline:
            if (code := process.poll()) is not None:
                raise ControlPlaneError(f"{name} exited with {code}:\n{tail(self.log(name))}")
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as error:
                last_error = str(error)
            time.sleep(0.1)
        raise ControlPlaneError(
            f"{name} not ready at {url} after {START_TIMEOUT_SECONDS:.0f} s ({last_error}):\n"
            f"{tail(self.log(name))}"
        )
