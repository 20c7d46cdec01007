"""A real Redis Cluster on loopback: six redis-servers, three masters with a replica each.

Each node is crawlfleet's own :class:`~crawlfleet.local.redis_cluster.ClusterNode` (a
RedisServer with cluster mode on, its own port, bus port and directory: what ``crawlfleet run
--shards`` starts); ``redis-cli --cluster create`` joins them with replicas, as an operator of a
real cluster would (``crawlfleet run`` joins masters only, by hand). Failover is the real
thing: the master that owns a slot is killed (SIGKILL, no SHUTDOWN) and the cluster promotes
its replica once ``cluster-node-timeout`` has passed.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from crawlfleet.local.redis_cluster import ClusterNode as LocalClusterNode
from crawlfleet.local.redis_cluster import LocalRedisCluster

__all__ = ["ClusterNode", "RedisCluster"]

#: How long a master may be silent before the others mark it failed and its replica takes
#: over: the test's failover window. Redis's default is 15 s; short keeps each test short.
NODE_TIMEOUT_MILLISECONDS = 1000
_MASTERS = 3
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
        ]  # fmt: skip

    def cli(self, *args: str) -> str:
        """``redis-cli`` against this node: its reply as text."""
        return _redis_cli("-h", self.host, "-p", str(self.port), *args)

    def kill(self) -> None:
        """SIGKILL: a crash, not a shutdown (nothing synced, no goodbye to the cluster)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _redis_cli(*args: str) -> str:
    executable = shutil.which("redis-cli")
    if executable is None:
        raise RuntimeError("redis-cli is not on PATH (it comes with redis-server: redis-tools)")
    done = subprocess.run(
        [executable, *args], capture_output=True, text=True, timeout=_READY_SECONDS, check=False
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
        for line in self.live()[0].cli("cluster", "nodes").splitlines():
            fields = line.split()
            if "master" not in fields[2] or "fail" in fields[2]:
                continue
            for span in fields[8:]:
                first, _, last = span.partition("-")
                if first.isdecimal() and int(first) <= slot <= int(last or first):
                    port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
                    return next(node for node in self.nodes if node.port == port)
        raise RuntimeError(f"no master serves slot {slot}")

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

    def stop(self, timeout_seconds: float = 0.0) -> None:
        """Every process goes, whatever state the cluster is in."""
        for node in self.nodes:
            node.kill()
