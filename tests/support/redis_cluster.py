"""A real Redis Cluster on loopback: six redis-servers, three masters with a replica each.

Each node is crawlfleet's own :class:`~crawlfleet.local.redis_cluster.ClusterNode` (a
RedisServer with cluster mode on, its own port, bus port and directory: what ``crawlfleet run
--shards`` starts); ``redis-cli --cluster create`` joins them with replicas, as an operator of a
real cluster would (``crawlfleet run`` joins masters only, by hand). Failover is the real
thing: the master that owns a slot is killed (SIGKILL, no SHUTDOWN) and the cluster promotes
its replica once ``cluster-node-timeout`` has passed. A shard (a master and its replica) may be
stopped and started again on its data, and a slot moved to another master with ``redis-cli
--cluster reshard``, as an operator growing a cluster does.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from crawlfleet.local.redis_cluster import ClusterNode as LocalClusterNode
from crawlfleet.local.redis_cluster import LocalRedisCluster

__all__ = ["ClusterNode", "RedisCluster", "first_slots"]

#: How long a master may be silent before the others mark it failed and its replica takes
#: over: the test's failover window. Redis's default is 15 s; short keeps each test short.
NODE_TIMEOUT_MILLISECONDS = 1000
_MASTERS = 3
CLUSTER_SLOTS = 16384
_READY_SECONDS = 30.0


class ClusterNode(LocalClusterNode):
    """One redis-server of the cluster (crawlfleet's own cluster node: cluster mode, its own
    nodes.conf and bus port), made to fail over fast, with ``redis-cli`` and a crash at hand."""

    def cluster_options(self) -> list[str]:
        return [
            *super().cluster_options(),
            # a replica promotes however long it was cut off (the test kills its master)
            "--cluster-replica-validity-factor", "0",
            # a replica's first sync starts at once, not 5 s later waiting for others
            "--repl-diskless-sync-delay", "0",
            # a shard down whole (master and replica) leaves the others serving their slots,
            # as docs/scale.md asks of a cluster that holds a partitioned job
            "--cluster-require-full-coverage", "no",
        ]  # fmt: skip

    def cli(self, *args: str) -> str:
        """``redis-cli`` against this node: its reply as text."""
        return _redis_cli("-h", self.host, "-p", str(self.port), *args)

    @property
    def node_id(self) -> str:
        """Its id in the cluster (kept in nodes.conf, so the same after a restart)."""
        return self.cli("cluster", "myid").strip()

    def kill(self) -> None:
        """SIGKILL: a crash, not a shutdown (nothing synced, no goodbye to the cluster)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _redis_cli(*args: str, timeout_seconds: float = _READY_SECONDS) -> str:
    executable = shutil.which("redis-cli")
    if executable is None:
        raise RuntimeError("redis-cli is not on PATH (it comes with redis-server: redis-tools)")
    done = subprocess.run(
        [executable, *args], capture_output=True, text=True, timeout=timeout_seconds, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"redis-cli {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout


class RedisCluster(LocalRedisCluster):
    """Six nodes joined by ``redis-cli --cluster create`` (three masters, a replica each);
    started, waited for and stopped as crawlfleet's own local cluster is, but stopped by a
    crash (whatever state the test left it in)."""

    node_class = ClusterNode
    nodes: list[ClusterNode]  # type: ignore[assignment]

    def __init__(self, data_dir: Path, *, appendonly: bool = True) -> None:
        super().__init__(
            data_dir,
            2 * _MASTERS,
            appendonly=appendonly,
            node_timeout_milliseconds=NODE_TIMEOUT_MILLISECONDS,
        )

    def join(self) -> None:
        _redis_cli(
            "--cluster", "create",
            *(f"{node.host}:{node.port}" for node in self.nodes),
            "--cluster-replicas", "1",
            "--cluster-yes",
        )  # fmt: skip

    def live(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.exited() is None]

    def wait_ok(self, timeout_seconds: float = _READY_SECONDS) -> None:
        """Until every live node reports ``cluster_state:ok`` and every live replica is in
        sync with its master: a replica promoted while its first sync is under way would
        come up empty, which no real cluster's failover does."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            states = [node.cli("cluster", "info") for node in self.live()]
            links = [node.cli("info", "replication") for node in self.live()]
            if all("cluster_state:ok" in state for state in states) and all(
                "role:master" in link or "master_link_status:up" in link for link in links
            ):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not become ok: {states}")
            time.sleep(0.05)

    def master_of(self, slot: int) -> ClusterNode:
        """The live node serving ``slot`` now, as the live nodes' view says."""
        for master, ranges in self.masters().items():
            if any(first <= slot <= last for first, last in ranges):
                return master
        raise RuntimeError(f"no master serves slot {slot}")

    def masters(self) -> dict[ClusterNode, list[tuple[int, int]]]:
        """Each live master and the slot ranges it serves (first, last), as the live nodes'
        view says."""
        served: dict[ClusterNode, list[tuple[int, int]]] = {}
        for fields in self._node_lines():
            if "master" not in fields[2] or "fail" in fields[2]:
                continue
            ranges = served.setdefault(self._node(fields), [])
            for span in fields[8:]:
                first, _, last = span.partition("-")
                if first.isdecimal():  # not an open slot's [slot->-id]
                    ranges.append((int(first), int(last or first)))
        return served

    def replica_of(self, master: ClusterNode) -> ClusterNode:
        """The node that replicates ``master`` now."""
        master_id = master.node_id
        for fields in self._node_lines():
            if "slave" in fields[2] and fields[3] == master_id:
                return self._node(fields)
        raise RuntimeError(f"{master!r} has no replica")

    def _node_lines(self) -> list[list[str]]:
        return [line.split() for line in self.live()[0].cli("cluster", "nodes").splitlines()]

    def _node(self, fields: list[str]) -> ClusterNode:
        port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
        return next(node for node in self.nodes if node.port == port)

    def slot(self, key: str) -> int:
        return int(self.live()[0].cli("cluster", "keyslot", key).strip())

    def kill_master(self, slot: int) -> ClusterNode:
        """Crash the master of ``slot``; the node killed (its replica takes over later)."""
        master = self.master_of(slot)
        master.kill()
        return master

    def promoted(
        self, slot: int, old: ClusterNode, timeout_seconds: float = _READY_SECONDS
    ) -> ClusterNode:
        """Wait until a node other than ``old`` (killed) serves ``slot`` and every live node
        is ok again: the promoted replica."""
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            try:
                new = self.master_of(slot)
            except RuntimeError:
                new = old  # no master for the slot yet: the failover is under way
            if new is not old:
                self.wait_ok(max(0.1, deadline - time.monotonic()))
                return new
            time.sleep(0.05)
        raise RuntimeError(f"no replica took over slot {slot}")

    def failover(self, slot: int) -> ClusterNode:
        """Crash the master of ``slot`` and wait until its replica serves it: the new master."""
        return self.promoted(slot, self.kill_master(slot))

    def reshard(self, slot: int, to: ClusterNode) -> str:
        """Move ``slot`` to the master ``to`` with ``redis-cli --cluster reshard``, one key per
        MIGRATE (the slowest move it makes: the slot stays half moved longest); its output.

        redis-cli moves the lowest slots of the master it takes them from, so ``slot`` must be
        the first its master serves (pick the job's name for it: :func:`first_slots`)."""
        source = self.master_of(slot)
        if min(first for first, _ in self.masters()[source]) != slot:
            raise ValueError(
                f"slot {slot} is not the first of its master's: redis-cli would move another"
            )
        moved = _redis_cli(
            "--cluster", "reshard", f"{source.host}:{source.port}",
            "--cluster-from", source.node_id,
            "--cluster-to", to.node_id,
            "--cluster-slots", "1",
            "--cluster-pipeline", "1",
            "--cluster-yes",
            timeout_seconds=120,
        )  # fmt: skip
        if self.master_of(slot) is not to:
            raise RuntimeError(f"slot {slot} did not move: {moved}")
        return moved

    def move_slot(self, slot: int, to: ClusterNode, *, pause_seconds: float) -> int:
        """Move ``slot`` to the master ``to`` as redis-cli's reshard does (IMPORTING on the
        target, MIGRATING on the source, MIGRATE key by key, then the slot's new owner told
        to every master), pausing ``pause_seconds`` after each key: the slot of a job with
        many hosts' queues and a large filter stays half moved for seconds, and this one
        does too. The number of keys moved."""
        source = self.master_of(slot)
        source_id, target_id = source.node_id, to.node_id
        to.cli("cluster", "setslot", str(slot), "importing", source_id)
        source.cli("cluster", "setslot", str(slot), "migrating", target_id)
        moved = 0
        while keys := source.cli("cluster", "getkeysinslot", str(slot), "1").split():
            source.cli("migrate", to.host, str(to.port), "", "0", "10000", "keys", *keys)
            moved += len(keys)
            time.sleep(pause_seconds)
        for node in (to, source, *(m for m in self.masters() if m not in (to, source))):
            node.cli("cluster", "setslot", str(slot), "node", target_id)
        return moved

    def stop_shard(self, slot: int) -> list[ClusterNode]:
        """Stop the master of ``slot`` and its replica (replica first: nothing left to take
        over), each with a SHUTDOWN that completes its AOF: the shard is down, the slot
        served by nobody until :meth:`restart`. The nodes stopped."""
        master = self.master_of(slot)
        replica = self.replica_of(master)
        for node in (replica, master):
            node.stop()
        return [master, replica]

    def restart(self, nodes: list[ClusterNode]) -> None:
        """Start stopped nodes again on their data and nodes.conf, and wait until the cluster
        is ok with them."""
        for node in nodes:
            node.start()
        self.wait_ok()

    def stop(self, timeout_seconds: float = 0.0) -> None:
        """Every process goes, whatever state the cluster is in."""
        for node in self.nodes:
            node.kill()


def first_slots(masters: int = _MASTERS) -> tuple[int, ...]:
    """The first slot of each master's range as ``redis-cli --cluster create`` deals them
    (16384 slots in equal runs): the slots :meth:`RedisCluster.reshard` can move."""
    return tuple(round(index * CLUSTER_SLOTS / masters) for index in range(masters))
