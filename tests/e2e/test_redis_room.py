"""A job whose Bloom filter would not fit its Redis is refused before it starts, never OOM.

A managed Redis is the model's to measure (tests/bad_specs/dedup-capacity-past-the-managed-
redis.yaml: InvalidSpec); an external one (redis.url) is measured when the operator creates the
job's frontier there, against its maxmemory less what it holds: the job stays Pending with both
figures in its Ready condition and one RedisRefused Event, and nothing is written to that Redis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    apply,
    crawljob,
    get_job,
    install_crd,
    posted_events,
    running_operator,
)

MIB = 1024 * 1024


def test_a_filter_past_an_external_redis_is_refused_with_both_figures(
    cluster: Cluster,
    kubelet: KubeletDouble,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_crd(cluster)
    # The tenancy policy lets jobs name this Redis (the operator's environment, inherited).
    monkeypatch.setenv("CRAWLFLEET_ALLOWED_REDIS_HOSTS", "127.0.0.1")
    with (
        TestSite(SiteConfig(hosts=1, pages_per_host=5, hostile=False)) as site,
        RedisServer(tmp_path / "redis") as server,
        running_operator(cluster, namespace, tmp_path),
    ):
        redis_client = redis.Redis.from_url(server.url)
        redis_client.config_set("maxmemory", 64 * MIB)
        # 50 million URLs at 1 %: a 58 MiB first layer, past 3/4 of the 64 MiB.
        job = crawljob("large", site, redis={"url": server.url}, dedup={"capacity": 50_000_000})
        apply(cluster, job, namespace=namespace)

        def refused() -> dict[str, Any] | None:
            found = get_job(cluster, namespace, "large")
            return found if "Bloom filter" in found.get("status", {}).get("message", "") else None

        found = wait_until(refused, timeout=60, what="the job to say why its Redis is refused")
        assert found["status"]["phase"] == "Pending"
        ready = next(c for c in found["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False"
        assert (
            "the Bloom filter of 50,000,000 URLs at errorRate 0.01 needs 58.0 MiB"
            in (ready["message"])
        )
        assert "it may take of this Redis (maxmemory 64.0 MiB" in ready["message"]
        assert len(posted_events(core, namespace, "RedisRefused")) == 1
        assert redis_client.keys("cf:*") == []  # nothing written
        assert not [r for r in site.log.all_requests() if r.path != "/robots.txt"]
