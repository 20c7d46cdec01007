"""``crawlfleet run --shards N``: a job on a loopback Redis Cluster of N private redis-servers.

The run starts the nodes, joins them (``CLUSTER ADDSLOTSRANGE`` + ``CLUSTER MEET``: one and
two masters, which ``redis-cli --cluster create`` refuses), crawls every page once with its
frontier partitioned over them (each partition on the master its hash tag falls on), says how
many nodes it ran on, and stops them all at the end, as it stops its one private Redis. The
cluster it leaves in its folder starts again as it was (its slots, and its job's partitions on
both masters): what ``--resume`` relies on.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
import redis
import yaml
from redis.crc import key_slot

from crawlfleet.frontier import JobKeys, canonicalize
from crawlfleet.local.redis_cluster import ClusterNode, LocalRedisCluster, slot_ranges
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.crawls import requested_urls
from tests.support.runs import crawlfleet, crawlfleet_done, job_for_site, no_stray_runs  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("nodes", [2])
def test_a_run_on_a_local_cluster_crawls_every_page_once_and_stops_every_node(
    tmp_path: Path, nodes: int
) -> None:
    config = SiteConfig(hosts=4, pages_per_host=30, hostile=False, latency_seconds=0.01)
    with TestSite(config) as site:
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job_for_site(site, "sharded")))
        out = tmp_path / "out"
        since = time.monotonic()
        run = crawlfleet(
            "run", str(job_file), "--out", str(out), "--workers", "2", "--json",
            "--shards", str(nodes), cwd=tmp_path,
        )  # fmt: skip
        stdout, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-3000:]
        summary = json.loads(stdout.strip().splitlines()[-1])
        expected = {canonicalize(url) for url in site.expected_pages()}
        requested = requested_urls(site, since)
    assert f"redis cluster of {nodes} local nodes at 127.0.0.1:" in err
    assert f"{nodes} frontier partitions" in err

    assert summary["crawled"] == len(expected)
    assert summary["dead_lettered"] == 0
    assert set(requested) == expected
    assert max(requested.values()) == 1
    assert (summary["redis_nodes"], summary["frontier_shards"]) == (nodes, nodes)
    state = json.loads((out / "state.json").read_text())
    assert (state["redisNodes"], state["frontierShards"]) == (nodes, nodes)
    assert state["redisUrl"].startswith("redis+cluster://127.0.0.1:")

    data = out / "redis"
    assert LocalRedisCluster.nodes_in(data) == nodes
    ports = [ClusterNode.remembered_ports(data / f"node-{index}") for index in range(nodes)]
    assert all(ports)
    # every node stopped by the run, with a SHUTDOWN that completed its append-only file
    assert not [port for port, _ in filter(None, ports) if _listening(port)]
    for index in range(nodes):
        log = (data / f"node-{index}" / "redis.log").read_text()
        assert "ready to exit, bye bye" in log

    # Started again from its folder, the cluster is whole: its slots, and each partition's
    # keys on the master that serves the partition's hash tag (the job's name is one whose
    # two tags fall on different masters: both hold a share of the job).
    tags = [JobKeys("default.sharded", partition) for partition in range(nodes)]
    owners = [
        next(
            index
            for index, (low, high) in enumerate(slot_ranges(nodes))
            if low <= key_slot(keys.prefix.encode()) <= high
        )
        for keys in tags
    ]
    assert sorted(owners) == list(range(nodes))
    password = (data / "password").read_text().strip()
    with LocalRedisCluster(data, nodes, password=password) as cluster:
        for index, node in enumerate(cluster.nodes):
            client = redis.Redis(port=node.port, password=password, decode_responses=True)
            try:
                held = {key.split("}")[0] + "}" for key in client.scan_iter(count=1000)}
            finally:
                client.close()
            assert held == {
                "cf:{" + keys.tag + "}"
                for keys, owner in zip(tags, owners, strict=True)
                if owner == index
            }


def test_shards_are_refused_where_they_cannot_apply(tmp_path: Path) -> None:
    job = {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": "refused"},
        "spec": {"seeds": ["http://127.0.0.1:9/"], "schedule": {"cron": "@daily"}},
    }
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(job))

    def refusal(*flags: str) -> str:
        done = crawlfleet_done("run", str(job_file), "--out", str(tmp_path / "out"), *flags,
                               cwd=tmp_path)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        return done.stderr

    assert "--shards must be between 1 and 16 (got 17)" in refusal("--shards", "17")
    assert "--shards must be between 1 and 16 (got 0)" in refusal("--shards", "0")
    assert "--shards starts a local Redis Cluster and --redis-url names a Redis of yours" in (
        refusal("--shards", "2", "--redis-url", "redis://127.0.0.1:9/0")
    )
    said = refusal("--shards", "2")
    assert "--shards 2: " in said
    assert "spec.frontier.shards: must be 1 with schedule" in said
    assert not (tmp_path / "out" / "redis").exists()  # refused before anything started


def test_an_interrupted_run_resumes_on_its_cluster_without_being_told(tmp_path: Path) -> None:
    config = SiteConfig(hosts=2, pages_per_host=60, hostile=False, latency_seconds=0.05)
    with TestSite(config) as site:
        job = job_for_site(
            site, "resumed", concurrency={"perWorker": 4, "perHost": 2, "hostDelaySeconds": 0.02}
        )
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        out = tmp_path / "out"
        first = crawlfleet(
            "run", str(job_file), "--out", str(out), "--workers", "2", "--shards", "2",
            cwd=tmp_path, own_group=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while len([r for r in site.all_requests() if r.status == 200]) < 30:
            assert time.monotonic() < deadline, "the crawl did not start"
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGINT)  # the terminal's Ctrl-C: the nodes are not in it
        _, err = first.communicate(timeout=120)
        assert first.returncode == 130, err[-3000:]
        assert f"crawlfleet run {job_file} --resume --out {out}" in err
        ports = [ClusterNode.remembered_ports(out / "redis" / f"node-{i}") for i in range(2)]
        assert not [port for port, _ in filter(None, ports) if _listening(port)]

        told = crawlfleet_done(
            "run", str(job_file), "--out", str(out), "--resume", "--shards", "3", cwd=tmp_path
        )
        assert told.returncode == 2, told.stderr
        assert "ran on a local Redis Cluster of 2 nodes" in told.stderr
        assert "resume it with --shards 2" in told.stderr

        again = crawlfleet("run", str(job_file), "--out", str(out), "--resume", "--json",
                           cwd=tmp_path)  # fmt: skip
        stdout, err = again.communicate(timeout=180)
        assert again.returncode == 0, err[-3000:]
        summary = json.loads(stdout.strip().splitlines()[-1])
        expected = {canonicalize(url) for url in site.expected_pages()}
    assert summary["crawled"] == len(expected)
    assert (summary["redis_nodes"], summary["frontier_shards"]) == (2, 2)
    written = [
        json.loads(line)["url"]
        for path in sorted((out / "pages").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert sorted(written) == sorted(expected)  # every page once, across both runs
    assert not [port for port, _ in filter(None, ports) if _listening(port)]
