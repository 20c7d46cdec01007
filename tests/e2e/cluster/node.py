"""A real Kubernetes node beside the kubelet double: kubelet + containerd + runc + CNI.

The kubelet double (kubelet.py) runs containers as local processes, which is fast and enough
for the operator's logic, but proves nothing about the images: their user, read-only root,
dropped capabilities, probes, signals and the network a pod really has. This node runs them as
a cluster does. kubelet and kube-scheduler are built by build.sh from the same wrapper module as
the control plane; containerd, runc and the CNI plugins are Debian's (scripts/test installs
them). The recipe, and why each odd setting is there, is ../shared/notes/real-node.md; in short:

- **one node per machine**: the kubelet's device-plugin socket and runc's and containerd's
  ``/run/containerd/{fifo,runc,s}`` are fixed paths, so a node holds ``NODE_LOCK`` (an flock the
  kernel drops when its holder dies) and every name below is fixed. Each start first undoes
  whatever a session that died hard left behind.
- **addresses**: the kubelet refuses a loopback node IP, so a port-less bridge (``NODE_BRIDGE``)
  holds private /32s: the node's address and ``SERVICE_ADDRESSES`` for what pods must reach (a
  pod's 127.0.0.1 is its own). Pods get addresses from ``POD_SUBNET`` on a CNI bridge; there is
  no kube-proxy and no cluster DNS, so a test gives pods addresses, not Service names.
- **scheduling**: the real kube-scheduler runs while the node does. The API server's
  PodNodeSelector admission plugin puts ``NODE_SELECTOR_ANNOTATION`` of a namespace into its
  pods, so pods of :meth:`RealNode.create_namespace` namespaces land here, never on the double's
  node, and the double leaves them alone (it honours ``nodeSelector``).
- **cgroups**: the kubelet's ``cgroupRoot`` is a tree inside this session's own cgroups, made in
  every hierarchy before the kubelet starts and removed depth-first after.
- **images**: no registry: the sandbox's pause image is built from pause.c (``gcc -static``,
  FROM scratch) and every image is copied from podman's store into containerd's
  (:meth:`RealNode.import_image`).

Teardown runs in the order the notes give, on success and on failure alike: pods deleted
through the API, kubelet and scheduler stopped, containers removed, containerd stopped, mounts,
cgroups, bridges, iptables chains and fixed-path files removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.e2e.cluster.client import wait_until
from tests.e2e.cluster.controlplane import ControlPlane, free_port, tail
from tests.e2e.cluster.processes import spawn, terminate

HERE = Path(__file__).resolve().parent
PAUSE_SOURCE = HERE / "pause.c"
NODE_NAME = "crawlfleet-real-node"
NODE_LOCK = Path(tempfile.gettempdir()) / "crawlfleet-real-node.lock"
#: Where the running node records its directory, so the next start can clean up after it.
NODE_STATE = Path(tempfile.gettempdir()) / "crawlfleet-real-node.state"
NODE_LOCK_TIMEOUT_SECONDS = 600.0
NODE_BRIDGE = "cfnode0"
NODE_ADDRESS = "172.30.255.1"
#: More addresses on the node bridge, for servers pods must reach (test site, Redis, S3).
SERVICE_ADDRESSES = tuple(f"172.30.255.{i}" for i in range(2, 8))
POD_BRIDGE = "cfpods0"
POD_SUBNET = "172.30.254.0/24"
CGROUP_LEAF = "crawlfleet-real-node"
NODE_SELECTOR_ANNOTATION = "scheduler.alpha.kubernetes.io/node-selector"
CONTAINERD_NAMESPACE = "k8s.io"
#: Shared by every containerd on the machine whatever its root (the notes' teardown list).
FIXED_RUNTIME_PATHS = ("/run/containerd/fifo", "/run/containerd/runc", "/run/containerd/s")
DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
#: The chains the kubelet adds (filter, nat and mangle tables).
IPTABLES_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")
START_TIMEOUT_SECONDS = 60.0
#: How long a dead node's containers may take to leave their cgroups once SIGKILLed.
CGROUP_EMPTY_SECONDS = 5.0


class NodeError(RuntimeError):
    """The real node could not be set up, started or reached."""


def _run(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    if check and done.returncode != 0:
        raise NodeError(
            f"{' '.join(argv)} failed ({done.returncode}): "
            f"{done.stderr.decode(errors='replace').strip()}"
        )
    return done.stdout.decode(errors="replace")


def missing_packages() -> list[str]:
    """The Debian packages a node needs that are not installed (scripts/test installs them)."""
    needs = {
        "containerd": "containerd",
        "ctr": "containerd",
        "runc": "runc",
        "iptables": "iptables",
        "podman": "podman",
        "gcc": "gcc",
    }
    missing = {package for tool, package in needs.items() if shutil.which(tool) is None}
    if not Path("/usr/lib/cni/bridge").exists():
        missing.add("containernetworking-plugins")
    return sorted(missing)


@dataclass
class NodeLock:
    """The machine's one real node: an flock on ``NODE_LOCK``, waited for, dropped on death."""

    fd: int = -1

    def acquire(self, timeout_seconds: float = NODE_LOCK_TIMEOUT_SECONDS) -> None:
        self.fd = os.open(NODE_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        deadline = time.monotonic() + timeout_seconds
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    self.fd = -1
                    raise NodeError(
                        f"another session's real node held {NODE_LOCK} for {timeout_seconds:.0f} s"
                    ) from None
                time.sleep(1)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _own_cgroups() -> dict[Path, str]:
    """Every cgroup hierarchy mounted here and this process's path in it."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller.removeprefix("name=")] = path
    hierarchies: dict[Path, str] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        mount_point, fs_type = Path(fields[4]), fields[fields.index("-") + 1]
        options = fields[-1].split(",")
        if fs_type == "cgroup2":
            hierarchies[mount_point] = paths.get("", "/")
        elif fs_type == "cgroup":
            for option in options:
                if option.removeprefix("name=") in paths:
                    hierarchies[mount_point] = paths[option.removeprefix("name=")]
    return hierarchies


def cgroup_root() -> str:
    """The kubelet's ``cgroupRoot``: one relative path, made in every hierarchy.

    Inside the memory cgroup this session runs in (the machine may hold it to a limit), so the
    pods count against the session's own memory, not the machine's.
    """
    hierarchies = _own_cgroups()
    memory = next(
        (path for mount, path in hierarchies.items() if mount.name == "memory"),
        "/",
    )
    return f"{memory.rstrip('/')}/{CGROUP_LEAF}"


def _make_cgroups(root: str) -> list[str]:
    """``root`` in every hierarchy; returns the directories it made (parents included: in the
    hierarchies this session does not use, even ``root``'s parent is new)."""
    made = []
    for mount in _own_cgroups():
        path = mount
        for part in Path(root).parts[1:]:
            parent, path = path, path / part
            if not path.exists():
                path.mkdir()
                made.append(str(path))
            elif path.name == CGROUP_LEAF:  # ours by name, left by a node that died
                made.append(str(path))
                for name in ("cpuset.cpus", "cpuset.mems"):  # empty: no task may join
                    if (parent / name).exists():
                        (path / name).write_text((parent / name).read_text())
    return made


def _remove_cgroups(made: list[str]) -> None:
    """What :func:`_make_cgroups` made and the kubelet made inside, depth-first (a cgroup with
    children or tasks cannot be removed; one that still has them stays)."""
    trees = [Path(path) for path in made]
    inside = [p for top in trees if top.exists() for p in top.rglob("*") if p.is_dir()]
    for directory in sorted({*inside, *trees}, key=lambda p: len(p.parts), reverse=True):
        # Only a dead session's containers can still be here: their shims are gone.
        deadline = time.monotonic() + CGROUP_EMPTY_SECONDS
        while (pids := _cgroup_pids(directory)) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            directory.rmdir()


def _cgroup_pids(directory: Path) -> list[int]:
    try:
        return [int(pid) for pid in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _mounts_under(directory: Path) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(directory) or point.startswith(f"{directory}/"):
            found.append(point)
    return found


def _unmount_under(directory: Path) -> None:
    """Every mount at or under ``directory``, deepest first (the kubelet bind-mounts its root
    dir onto itself, pods' Secret volumes are tmpfs, the sandboxes' netns files are binds)."""
    for point in sorted(set(_mounts_under(directory)), key=len, reverse=True):
        _run("umount", "-l", point, check=False)


def _delete_link(name: str) -> None:
    _run("ip", "link", "delete", name, check=False)


def _delete_iptables_chains() -> None:
    """The kubelet's chains, the jumps to them first; nothing else in the tables is touched.

    The CNI list has no portmap plugin (no test needs a hostPort): its ``CNI-HOSTPORT-*``
    chains are shared with podman's own CNI network on this machine, so they are not ours to
    delete.
    """
    for table in ("filter", "nat", "mangle"):
        rules = _run("iptables", "-t", table, "-S", check=False).splitlines()
        ours = {words[1] for words in map(str.split, rules) if words[:1] == ["-N"]}
        ours &= set(IPTABLES_CHAINS)
        for words in map(str.split, rules):
            jump = words[words.index("-j") + 1] if "-j" in words[:-1] else None
            if words[:1] == ["-A"] and jump in ours and words[1] not in ours:
                _run("iptables", "-t", table, "-D", *words[1:], check=False)
        for chain in ours:
            _run("iptables", "-t", table, "-F", chain, check=False)
        for chain in ours:
            _run("iptables", "-t", table, "-X", chain, check=False)


def _kill_shims(socket: Path) -> None:
    """The containerd shims of the containerd at ``socket``: they outlive containerd on purpose
    (containers survive a containerd restart), so a node that died hard leaves them running."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


@dataclass
class RealNode:
    """kubelet + containerd + kube-scheduler joined to ``plane``; state under ``directory``."""

    plane: ControlPlane
    directory: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    lock: NodeLock = field(default_factory=NodeLock)
    #: Seconds each step of start() took (the CI cost in docs/development.md).
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.directory = self.directory.resolve()
        self.socket = self.directory / "containerd" / "containerd.sock"
        self.cgroup_root = cgroup_root()
        self.cgroups_made: list[str] = []
        self.kubelet_port = 0
        self.pause_image = ""
        self.api = config.new_client_from_config(config_file=str(self.plane.kubeconfig))

    # -- start ---------------------------------------------------------------------------------

    @property
    def binaries(self) -> dict[str, Path]:
        return {name: self.plane.bin_dir / name for name in ("kubelet", "kube-scheduler")}

    def start(self) -> None:
        missing = [str(path) for path in self.binaries.values() if not os.access(path, os.X_OK)]
        if missing:
            raise NodeError(
                f"node binaries missing: {', '.join(missing)}. Build them with "
                "tests/e2e/cluster/build.sh (./scripts/test runs it)."
            )
        if packages := missing_packages():
            raise NodeError(
                f"the real node needs Debian's {' '.join(packages)} (scripts/test installs them)"
            )
        if os.geteuid() != 0:
            raise NodeError("the real node needs root (bridges, mounts, cgroups, iptables)")
        self.lock.acquire()
        try:
            self._timed("clean", self.clean_stale)
            self._record_state()
            self._timed("network", self._network)
            self._timed("cgroups", self._make_cgroups)
            self._timed("pause image", self._pause_image)
            self._timed("containerd", self._start_containerd)
            self._timed("pause import", lambda: self.import_image(self.pause_image))
            self._timed("kubelet", self._start_kubelet)
            self._timed("kube-scheduler", self._start_scheduler)
        except BaseException:
            self.stop()
            raise

    def _timed(self, step: str, action: Callable[[], object]) -> None:
        started = time.monotonic()
        action()
        self.timings[step] = time.monotonic() - started

    def _make_cgroups(self) -> None:
        self.cgroups_made = _make_cgroups(self.cgroup_root)
        self._record_state()

    def _record_state(self) -> None:
        """What the next start must undo should this session die without its teardown."""
        state = {"directory": str(self.directory), "cgroups": self.cgroups_made}
        NODE_STATE.write_text(json.dumps(state))

    def log(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        process = spawn(argv, log=self.log(name))
        self.processes[name] = process
        return process

    def _network(self) -> None:
        ours = [
            ipaddress.ip_network(f"{NODE_ADDRESS}/24", strict=False),
            ipaddress.ip_network(POD_SUBNET),
        ]
        for route in _run("ip", "-4", "route", "show").splitlines():
            destination = route.split()[0]
            if destination != "default" and any(
                net.overlaps(ipaddress.ip_network(destination, strict=False)) for net in ours
            ):
                raise NodeError(
                    f"this machine already routes {destination}, which the real node's "
                    f"addresses ({NODE_ADDRESS}, {POD_SUBNET}) overlap: {route}"
                )
        _run("ip", "link", "add", NODE_BRIDGE, "type", "bridge")
        for address in (NODE_ADDRESS, *SERVICE_ADDRESSES):
            _run("ip", "addr", "add", f"{address}/32", "dev", NODE_BRIDGE)
        _run("ip", "link", "set", NODE_BRIDGE, "up")

    def _pause_image(self) -> None:
        """The sandbox image, built once per version of pause.c into podman's store."""
        digest = hashlib.sha256(PAUSE_SOURCE.read_bytes()).hexdigest()[:12]
        self.pause_image = f"localhost/crawlfleet/pause:{digest}"
        if subprocess.run(["podman", "image", "exists", self.pause_image]).returncode == 0:
            return
        build = self.directory / "pause"
        build.mkdir(parents=True, exist_ok=True)
        _run("gcc", "-static", "-Os", "-s", "-o", str(build / "pause"), str(PAUSE_SOURCE))
        (build / "Containerfile").write_text(
            'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
        )
        _run("podman", "build", "-q", "-t", self.pause_image, str(build))

    def _containerd_config(self) -> Path:
        root = self.directory / "containerd"
        cni = self.directory / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-crawlfleet.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "crawlfleet-real-node",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": POD_BRIDGE,
                            "isGateway": True,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_SUBNET}]],
                                # Through the bridge, whose address is the gateway: to the
                                # node's addresses (and no further: no forwarding, no NAT).
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(cni / "ipam"),
                            },
                        },
                    ],
                }
            )
        )
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        root.mkdir(parents=True, exist_ok=True)
        path = root / "config.toml"
        path.write_text(
            f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[{cri}]
  sandbox_image = "{self.pause_image}"
  # Root here cannot lower oom_score_adj (no CAP_SYS_RESOURCE): runc fails every sandbox
  # unless containerd keeps the scores at or above its own.
  restrict_oom_score_adj = true
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{cni / "net.d"}"
"""
        )
        return path

    def _start_containerd(self) -> None:
        settings = self._containerd_config()
        process = self._spawn("containerd", ["containerd", "--config", str(settings)])
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise NodeError(
                    f"containerd exited with {process.returncode}:\n{tail(self.log('containerd'))}"
                )
            if self.socket.exists() and self._containerd_answers():
                return
            time.sleep(0.1)
        raise NodeError(
            f"containerd did not answer on {self.socket}:\n{tail(self.log('containerd'))}"
        )

    def _containerd_answers(self) -> bool:
        return subprocess.run(self.ctr("version"), capture_output=True).returncode == 0

    def ctr(self, *args: str) -> list[str]:
        """A ``ctr`` command line for this node's containerd, in the kubelet's namespace."""
        return ["ctr", "--address", str(self.socket), "--namespace", CONTAINERD_NAMESPACE, *args]

    def import_image(self, image: str) -> None:
        """Copy ``image`` from podman's store into containerd's, under the name a pod uses.

        podman names a local image ``localhost/<name>``; a pod's ``crawlfleet/worker:dev`` is
        ``docker.io/crawlfleet/worker:dev`` to containerd, so the import is tagged that too.
        """
        save = subprocess.Popen(
            ["podman", "save", "--format", "oci-archive", image], stdout=subprocess.PIPE
        )
        assert save.stdout is not None
        try:
            imported = subprocess.run(
                self.ctr("images", "import", "--all-platforms", "-"),
                stdin=save.stdout,
                capture_output=True,
                timeout=300,
                check=False,
            )
        finally:
            save.stdout.close()
            save.wait()
        if save.returncode != 0 or imported.returncode != 0:
            raise NodeError(
                f"importing {image} into containerd failed (podman save {save.returncode}, "
                f"ctr import {imported.returncode}): {imported.stderr.decode(errors='replace')}"
            )
        names = set(_run(*self.ctr("images", "list", "--quiet")).split())
        source = next(
            (name for name in names if name.endswith(image.removeprefix("localhost/"))), None
        )
        if source is None:
            raise NodeError(f"{image} imported, but containerd lists no such name: {sorted(names)}")
        short = image.removeprefix("localhost/")
        target = f"docker.io/{short if '/' in short.split(':')[0] else f'library/{short}'}"
        if target not in names:
            _run(*self.ctr("images", "tag", source, target))

    def _kubelet_config(self) -> Path:
        self.kubelet_port = free_port(NODE_ADDRESS)
        pki = self.plane.pki
        settings = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_ADDRESS,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "failSwapOn": False,
            "failCgroupV1": False,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "podLogsDir": str(self.directory / "pod-logs"),
            "volumePluginDir": str(self.directory / "volume-plugins"),
            "rotateCertificates": False,
            "serializeImagePulls": False,
            # A shared test machine's disk and memory are what they are: no evictions, and no
            # image garbage collection of the images the suite imported.
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "maxPods": 30,
            # No DNS for pods at all (no cluster DNS either): the tests give them addresses.
            "resolvConf": "",
        }
        path = self.directory / "kubelet.json"
        path.write_text(json.dumps(settings, indent=2))
        return path

    def _start_kubelet(self) -> None:
        settings = self._kubelet_config()
        process = self._spawn(
            "kubelet",
            [
                str(self.binaries["kubelet"]),
                f"--config={settings}",
                f"--kubeconfig={self.plane.kubeconfig}",
                f"--root-dir={self.directory / 'kubelet'}",
                f"--cert-dir={self.directory / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_ADDRESS}",
                "--v=1",
            ],
        )
        core = client.CoreV1Api(self.api)

        def ready() -> bool:
            if process.poll() is not None:
                raise NodeError(
                    f"kubelet exited with {process.returncode}:\n{tail(self.log('kubelet'))}"
                )
            try:
                node = core.read_node(NODE_NAME)
            except ApiException as error:
                if error.status == 404:
                    return False
                raise
            return any(
                c.type == "Ready" and c.status == "True" for c in node.status.conditions or ()
            )

        try:
            wait_until(
                ready, timeout=START_TIMEOUT_SECONDS, interval=0.2, what=f"{NODE_NAME} Ready"
            )
        except AssertionError as error:
            raise NodeError(f"{error}\n{tail(self.log('kubelet'))}") from None
        # The node-lifecycle controller, which would lift it, is not running (controlplane.py).
        core.patch_node(NODE_NAME, {"spec": {"taints": None}})

    def _start_scheduler(self) -> None:
        process = self._spawn(
            "kube-scheduler",
            [
                str(self.binaries["kube-scheduler"]),
                f"--kubeconfig={self.plane.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                "--v=1",
            ],
        )
        time.sleep(0.3)
        if process.poll() is not None:
            log = tail(self.log("kube-scheduler"))
            raise NodeError(f"kube-scheduler exited with {process.returncode}:\n{log}")

    # -- what tests use ------------------------------------------------------------------------

    def create_namespace(self, name: str) -> str:
        """A namespace whose pods the scheduler puts on this node (PodNodeSelector)."""
        core = client.CoreV1Api(self.api)
        core.create_namespace(
            client.V1Namespace(
                metadata=client.V1ObjectMeta(
                    name=name,
                    annotations={NODE_SELECTOR_ANNOTATION: f"kubernetes.io/hostname={NODE_NAME}"},
                )
            )
        )
        return name

    def container_pid(self, container_id: str) -> int:
        """The host PID of a container's process, from containerd (``containerd://<id>``)."""
        task = container_id.removeprefix("containerd://")
        for line in _run(*self.ctr("tasks", "list")).splitlines()[1:]:
            words = line.split()
            if words and words[0] == task:
                return int(words[1])
        raise LookupError(f"no task {task} on {NODE_NAME}")

    # -- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Everything down in the notes' order; each step runs whatever the others did."""
        started = time.monotonic()
        try:
            self._delete_pods()
        finally:
            for name in ("kube-scheduler", "kubelet"):
                if name in self.processes:
                    terminate(self.processes.pop(name))
            self._remove_containers()
            if "containerd" in self.processes:
                terminate(self.processes.pop("containerd"))
            _kill_shims(self.socket)
            self._clean_host(self.directory, self.cgroups_made)
            # The images' layers (hundreds of MB): pytest keeps its last three temp dirs.
            shutil.rmtree(self.directory / "containerd" / "root", ignore_errors=True)
            with contextlib.suppress(ApiException):
                client.CoreV1Api(self.api).delete_node(NODE_NAME)
            self.api.close()
            NODE_STATE.unlink(missing_ok=True)
            self.lock.release()
            self.timings["stop"] = time.monotonic() - started
            with contextlib.suppress(OSError):
                (self.directory / "timings.json").write_text(json.dumps(self.timings, indent=1))

    def _delete_pods(self) -> None:
        """Graceful deletes, through the API, while the kubelet still runs to carry them out."""
        if "kubelet" not in self.processes:
            return
        core = client.CoreV1Api(self.api)
        selector = f"spec.nodeName={NODE_NAME}"
        for pod in core.list_pod_for_all_namespaces(field_selector=selector).items:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, grace_period_seconds=5
                )
        with contextlib.suppress(AssertionError):
            wait_until(
                lambda: not core.list_pod_for_all_namespaces(field_selector=selector).items,
                timeout=30,
                what=f"pods on {NODE_NAME} gone",
            )

    def _remove_containers(self) -> None:
        if not self.socket.exists():
            return
        for task in _run(*self.ctr("tasks", "list", "--quiet"), check=False).split():
            _run(*self.ctr("tasks", "kill", "--signal", "SIGKILL", task), check=False)
        for container in _run(*self.ctr("containers", "list", "--quiet"), check=False).split():
            _run(*self.ctr("tasks", "delete", "--force", container), check=False)
            _run(*self.ctr("containers", "delete", container), check=False)

    def _clean_host(self, directory: Path, cgroups: list[str]) -> None:
        _unmount_under(directory)
        for netns in Path("/run/netns").glob("cni-*"):  # containerd's sandboxes' (podman's
            _run("umount", "-l", str(netns), check=False)  # are netns-*: left alone)
            netns.unlink(missing_ok=True)
        _remove_cgroups(cgroups)
        _delete_link(NODE_BRIDGE)
        _delete_link(POD_BRIDGE)
        _delete_iptables_chains()
        DEVICE_PLUGIN_SOCKET.unlink(missing_ok=True)
        for link in CONTAINER_LOG_LINKS.glob("*.log"):  # the kubelet's links to its pod logs
            with contextlib.suppress(OSError):
                if Path(os.readlink(link)).is_relative_to(directory):
                    link.unlink()
        for path in FIXED_RUNTIME_PATHS:
            shutil.rmtree(path, ignore_errors=True)

    def clean_stale(self) -> None:
        """Undo what a node of a session that died hard left (the lock is ours: it is dead)."""
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            stale = json.loads(NODE_STATE.read_text())
            directory = Path(stale["directory"])
            _kill_shims(directory / "containerd" / "containerd.sock")
            self._clean_host(directory, list(stale["cgroups"]))
        self._clean_host(self.directory, [])
