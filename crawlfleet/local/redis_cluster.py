"""A loopback Redis Cluster of private redis-servers: ``crawlfleet run --shards N``.

One Redis runs its commands on one core; a job's frontier split into partitions
(``spec.frontier.shards``) can use more, once the partitions live on several servers. N
:class:`ClusterNode` processes (each a :class:`~crawlfleet.local.redis_server.RedisServer`
with cluster mode on: its own port, cluster bus port, ``nodes.conf`` and append-only file under
``<data_dir>/node-<i>``) are joined into one cluster of masters without replicas, the slots
split evenly among them.

They are joined by hand, ``CLUSTER ADDSLOTSRANGE`` on each node and ``CLUSTER MEET`` of each
with the first, not by ``redis-cli --cluster create``, which refuses fewer than three masters:
one and two nodes are what a laptop runs. The cluster is ready when every node says
``cluster_state:ok`` and knows all the others.

A cluster remembers itself in each node's ``nodes.conf`` (who owns which slots, where the
others listen): a resumed run starts the nodes again on the ports written there, so they
find each other and their slots as they were, and only a fresh cluster is joined.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import TracebackType
from typing import ClassVar
from urllib.parse import quote

from crawlfleet.errors import ConfigError, FrontierUnavailable
from crawlfleet.local.redis_server import RedisServer, free_port

__all__ = ["MAX_LOCAL_NODES", "SLOTS", "ClusterNode", "LocalRedisCluster", "slot_ranges"]

#: Hash slots of a Redis Cluster (fixed by the protocol).
SLOTS = 16384
#: Nodes ``crawlfleet run --shards`` starts at most: each is a process and a core's worth of
#: work at full speed, and a machine with more cores than this runs a real cluster.
MAX_LOCAL_NODES = 16
#: How long a fresh (or restarted) cluster may take to agree it is ok.
_READY_SECONDS = 30.0
_NODE_DIR = "node-{index}"
# The "myself" line of nodes.conf: "<id> <ip>:<port>@<bus port>[,<hostname>] myself,master ..."
_MYSELF = re.compile(r"^\S+ [^ :]*:(\d+)@(\d+)\S* \S*myself")


def slot_ranges(nodes: int) -> list[tuple[int, int]]:
    """The slots of each of ``nodes`` masters: contiguous, as even as can be, all covered."""
    bounds = [SLOTS * index // nodes for index in range(nodes + 1)]
    return [(bounds[index], bounds[index + 1] - 1) for index in range(nodes)]


class ClusterNode(RedisServer):
    """One redis-server in cluster mode: its cluster bus port named (by default it is the
    port + 10000, which a free port above 55535 does not have) and its ``nodes.conf`` in its
    own folder. ``node_timeout_milliseconds``: how long a silent node may be before the others
    mark it failed (None: Redis's default, 15 s)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        bus_port: int | None = None,
        node_timeout_milliseconds: int | None = None,
        appendonly: bool = False,
        password: str | None = None,
        die_with_parent: bool = False,
        own_session: bool = False,
    ) -> None:
        super().__init__(
            data_dir,
            port=port,
            appendonly=appendonly,
            password=password,
            die_with_parent=die_with_parent,
            own_session=own_session,
        )
        self.bus_port = bus_port or free_port(self.host)
        self.node_timeout_milliseconds = node_timeout_milliseconds

    def command(self) -> list[str]:
        args = super().command()
        # The rest of the configuration from stdin ("-", the password) stays last.
        stdin = args[-1:] if args[-1] == "-" else []
        return [*args[: len(args) - len(stdin)], *self.cluster_options(), *stdin]

    def cluster_options(self) -> list[str]:
        """The command line's cluster part (a subclass adds to it: a test's failover knobs)."""
        options = [
            "--cluster-enabled", "yes",
            "--cluster-port", str(self.bus_port),
            "--cluster-config-file", str(self.data_dir / "nodes.conf"),
        ]  # fmt: skip
        if self.node_timeout_milliseconds is not None:
            options += ["--cluster-node-timeout", str(self.node_timeout_milliseconds)]
        return options

    def info(self) -> dict[str, str]:
        """``CLUSTER INFO`` as a mapping (``cluster_state`` -> ``ok``)."""
        text = self.call("CLUSTER", "INFO")
        assert isinstance(text, str)
        fields = (line.partition(":") for line in text.splitlines() if ":" in line)
        return {key: value.strip() for key, _, value in fields}

    @staticmethod
    def remembered_ports(data_dir: Path) -> tuple[int, int] | None:
        """The port and bus port a node that ran in ``data_dir`` wrote in its ``nodes.conf``
        (None: it never ran): where the other nodes will look for it."""
        try:
            text = (data_dir / "nodes.conf").read_text()
        except FileNotFoundError:
            return None
        for line in text.splitlines():
            found = _MYSELF.match(line)
            if found:
                return int(found.group(1)), int(found.group(2))
        return None


class LocalRedisCluster:
    """N private redis-servers joined into one cluster of masters on loopback.

    ``node_class`` makes each node and :meth:`join` joins them: a subclass may join them
    otherwise (tests/support/redis_cluster.py: masters with replicas, as redis-cli does).

    The options are each node's, as :class:`RedisServer` takes them. Start with :meth:`start`
    (or ``with``), stop with :meth:`stop` (a SHUTDOWN each: their append-only files complete).
    """

    node_class: ClassVar[type[ClusterNode]] = ClusterNode

    def __init__(
        self,
        data_dir: Path,
        nodes: int,
        *,
        password: str | None = None,
        node_timeout_milliseconds: int | None = None,
        appendonly: bool = True,
        die_with_parent: bool = False,
        own_session: bool = False,
    ) -> None:
        if not 1 <= nodes <= MAX_LOCAL_NODES:
            raise ConfigError(f"a local cluster has 1 to {MAX_LOCAL_NODES} nodes (got {nodes})")
        self.data_dir = Path(data_dir).resolve()
        self.password = password
        folders = [self.data_dir / _NODE_DIR.format(index=index) for index in range(nodes)]
        remembered = [ClusterNode.remembered_ports(folder) for folder in folders]
        while True:  # each free port asked of the kernel alone: 2N that differ
            self.nodes = [
                self.node_class(
                    folder,
                    port=ports[0] if ports else None,
                    bus_port=ports[1] if ports else None,
                    node_timeout_milliseconds=node_timeout_milliseconds,
                    appendonly=appendonly,
                    password=password,
                    die_with_parent=die_with_parent,
                    own_session=own_session,
                )
                for folder, ports in zip(folders, remembered, strict=True)
            ]
            taken = [port for node in self.nodes for port in (node.port, node.bus_port)]
            if len(set(taken)) == len(taken):
                break

    @staticmethod
    def nodes_in(data_dir: Path) -> int:
        """How many nodes a cluster that ran in ``data_dir`` had (0: none ran there)."""
        count = 0
        while (Path(data_dir) / _NODE_DIR.format(index=count)).is_dir():
            count += 1
        return count

    @property
    def url(self) -> str:
        """The frontier's URL of the cluster (any one node: the client finds the rest), with
        the password."""
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis+cluster://{auth}{self.nodes[0].host}:{self.nodes[0].port}"

    @property
    def address(self) -> str:
        """The URL without the password: what may be written down or shown."""
        return f"redis+cluster://{self.nodes[0].host}:{self.nodes[0].port}"

    def write_password(self, path: Path) -> None:
        """The password in a file only this user can read (RedisServer.write_password)."""
        self.nodes[0].write_password(path)

    def start(self, timeout_seconds: float = _READY_SECONDS) -> LocalRedisCluster:
        """Start every node, join them if they are a fresh cluster, wait until it is ok."""
        try:
            self.launch()
            for node in self.nodes:
                node.wait_ready(timeout_seconds)
            self.join()
            self.wait_ok(timeout_seconds)
        except BaseException:
            self.stop()
            raise
        return self

    def launch(self) -> None:
        """Start every node's process without waiting (from the thread that is their parent)."""
        for node in self.nodes:
            node.launch()

    def join(self) -> None:
        """Slots to each node that has none yet, and every node met with the first.

        A node that ran before keeps its slots in ``nodes.conf`` (and ADDSLOTSRANGE of a slot
        it knows to be another's fails), so only a fresh node is given its range; MEET of a
        node already known is harmless and mends one whose address changed.
        """
        first = self.nodes[0]
        fresh = all(node.info().get("cluster_slots_assigned") == "0" for node in self.nodes)
        for node, (low, high) in zip(self.nodes, slot_ranges(len(self.nodes)), strict=True):
            if fresh:
                node.call("CLUSTER", "ADDSLOTSRANGE", str(low), str(high))
            if node is not first:
                node.call("CLUSTER", "MEET", first.host, str(first.port), str(first.bus_port))

    def wait_ok(self, timeout_seconds: float = _READY_SECONDS) -> None:
        """Until every node reports ``cluster_state:ok`` and knows every other node."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            infos = [node.info() for node in self.nodes]
            if all(
                info.get("cluster_state") == "ok"
                and info.get("cluster_known_nodes") == str(len(self.nodes))
                for info in infos
            ):
                return
            if time.monotonic() > deadline:
                states = [info.get("cluster_state") for info in infos]
                raise FrontierUnavailable(
                    f"the local Redis Cluster of {len(self.nodes)} nodes did not become ok"
                    f" within {timeout_seconds:g} s (states {states}); see redis.log in"
                    f" {self.data_dir}/node-*"
                )
            time.sleep(0.02)

    def exited(self) -> list[ClusterNode]:
        """The nodes that were started and are gone (one waitpid each)."""
        return [node for node in self.nodes if node.exited() is not None]

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """SHUTDOWN each node (their append-only files complete), whatever state it is in."""
        for node in self.nodes:
            node.stop(timeout_seconds)

    def __repr__(self) -> str:
        ports = ", ".join(str(node.port) for node in self.nodes)
        return f"LocalRedisCluster(ports=[{ports}], data_dir={str(self.data_dir)!r})"

    def __enter__(self) -> LocalRedisCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
