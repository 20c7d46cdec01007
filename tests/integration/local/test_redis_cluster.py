"""The loopback Redis Cluster ``crawlfleet run --shards`` starts: real redis-servers.

One and two masters (which ``redis-cli --cluster create`` refuses) become a cluster whose
slots are all served; a cluster stopped and started again from its folder is the same cluster
(its nodes on their ports, their slots, its keys), as ``--resume`` needs; a password guards
every node; and stopping it leaves no redis-server behind.
"""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest
import redis.cluster

from crawlfleet.errors import ConfigError, FrontierUnavailable
from crawlfleet.local.redis_cluster import SLOTS, ClusterNode, LocalRedisCluster, slot_ranges


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("nodes", [1, 2, 3, 16])
def test_the_slots_are_split_evenly_and_all_covered(nodes: int) -> None:
    ranges = slot_ranges(nodes)
    assert len(ranges) == nodes
    assert ranges[0][0] == 0
    assert ranges[-1][1] == SLOTS - 1
    assert all(high + 1 == low for (_, high), (low, _) in itertools.pairwise(ranges))
    sizes = {high - low + 1 for low, high in ranges}
    assert max(sizes) - min(sizes) <= 1


def test_a_node_count_outside_one_to_sixteen_is_refused(tmp_path: Path) -> None:
    for nodes in (0, 17):
        with pytest.raises(ConfigError, match="a local cluster has 1 to 16 nodes"):
            LocalRedisCluster(tmp_path, nodes)


@pytest.mark.parametrize("nodes", [1, 2])
def test_one_or_two_masters_form_a_cluster_that_starts_again_as_it_was(
    tmp_path: Path, nodes: int
) -> None:
    password = "a pass/word@with:parts"
    cluster = LocalRedisCluster(tmp_path / "redis", nodes, password=password)
    with cluster:
        assert all(node.info()["cluster_state"] == "ok" for node in cluster.nodes)
        assert all(node.info()["cluster_slots_assigned"] == str(SLOTS) for node in cluster.nodes)
        # the URL the frontier gets: any node, the password, and the client finds the rest
        client = redis.cluster.RedisCluster.from_url(cluster.url.replace("+cluster", ""))
        try:
            keys = [f"key-{index}" for index in range(50)]
            for key in keys:
                client.set(key, key)
            masters = {client.get_node_from_key(key).port for key in keys}
        finally:
            client.close()
        assert masters == {node.port for node in cluster.nodes}
        with pytest.raises(FrontierUnavailable, match="refused GET: NOAUTH"):
            ClusterNode(cluster.nodes[0].data_dir, port=cluster.nodes[0].port).call("GET", "x")
    ports = [node.port for node in cluster.nodes]
    assert not [port for port in ports if _listening(port)]

    assert LocalRedisCluster.nodes_in(tmp_path / "redis") == nodes
    remembered = [ClusterNode.remembered_ports(node.data_dir) for node in cluster.nodes]
    assert remembered == [(node.port, node.bus_port) for node in cluster.nodes]
    again = LocalRedisCluster(tmp_path / "redis", nodes, password=password)
    assert [node.port for node in again.nodes] == ports
    with again:
        client = redis.cluster.RedisCluster.from_url(again.url.replace("+cluster", ""))
        try:
            assert [client.get(f"key-{index}") for index in range(50)] == [
                f"key-{index}".encode() for index in range(50)
            ]
        finally:
            client.close()
    assert not [port for port in ports if _listening(port)]
