"""WorkerMetrics: names, labels, verbs, and the /metrics endpoint on loopback."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import REGISTRY

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.worker.metrics import WorkerMetrics, status_class
from crawlfleet.frontier.robots_cache import RobotsCacheState
from crawlfleet.local.redis_server import free_port

P = "crawlfleet_worker_"


def value(metrics: WorkerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(P + name, labels or None)


@pytest.mark.parametrize(
    ("status", "label"),
    [(200, "2xx"), (204, "2xx"), (301, "3xx"), (404, "4xx"), (503, "5xx"), (None, "none"),
     (101, "other"), (999, "other"), (-1, "other")],
)  # fmt: skip
def test_status_class(status: int | None, label: str) -> None:
    assert status_class(status) == label


def test_observations_land_in_the_right_series() -> None:
    metrics = WorkerMetrics()
    metrics.observe_fetches([(200, 0.2, 1000), (200, 0.02, 500)])
    metrics.observe_fetches([(503, 3.0, 0), (None, 30.0, 0)])
    assert value(metrics, "pages_fetched_total", status_class="2xx") == 2
    assert value(metrics, "pages_fetched_total", status_class="5xx") == 1
    assert value(metrics, "pages_fetched_total", status_class="none") == 1
    assert value(metrics, "pages_fetched_total", status_class="4xx") == 0  # created at zero
    assert value(metrics, "fetch_duration_seconds_count") == 4
    assert value(metrics, "fetch_duration_seconds_sum") == pytest.approx(33.22)
    assert value(metrics, "fetch_duration_seconds_bucket", le="0.025") == 1
    assert value(metrics, "fetch_duration_seconds_bucket", le="60.0") == 4
    assert value(metrics, "response_bytes_total") == 1500

    metrics.set_in_flight(7)
    metrics.set_concurrency_limit(16)
    assert value(metrics, "fetches_in_flight") == 7
    assert value(metrics, "concurrency_limit") == 16

    metrics.observe_failure(FailureClass.TIMEOUT, retried=True)
    metrics.observe_failure("http_404", retried=False)
    assert value(metrics, "failures_total", failure_class="timeout") == 1
    assert value(metrics, "retries_total", failure_class="timeout") == 1
    assert value(metrics, "failures_total", failure_class="http_404") == 1
    assert value(metrics, "retries_total", failure_class="http_404") == 0
    with pytest.raises(ValueError, match="https://"):  # never a free-form (URL) label
        metrics.observe_failure("https://example.com/", retried=False)

    metrics.observe_bloom([True, False, True, True])
    assert value(metrics, "bloom_results_total", result="new") == 3
    assert value(metrics, "bloom_results_total", result="duplicate") == 1

    metrics.observe_claims(10)
    metrics.observe_leases_lost()
    metrics.observe_leases_lost(2)
    assert value(metrics, "claims_total") == 10
    assert value(metrics, "leases_lost_total") == 3


def test_a_batch_of_fetches_counts_as_its_fetches_one_by_one() -> None:
    fetches = [(200, 0.2, 1000), (200, 0.02, 500), (503, 3.0, 0), (None, 30.0, 0), (404, 0.1, 9)]
    batched, single = WorkerMetrics(), WorkerMetrics()
    batched.observe_fetches(fetches)
    for fetch in fetches:
        single.observe_fetches([fetch])
    for family in single.registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue  # creation time stamps
            assert batched.registry.get_sample_value(sample.name, sample.labels) == sample.value
    assert value(batched, "pages_fetched_total", status_class="2xx") == 2
    assert value(batched, "fetch_duration_seconds_count") == 5


def test_registries_are_private() -> None:
    first, second = WorkerMetrics(), WorkerMetrics()  # no "Duplicated timeseries" error
    first.observe_claims(5)
    assert value(second, "claims_total") == 0
    assert REGISTRY.get_sample_value(P + "claims_total") is None


def test_every_metric_follows_the_naming_rule() -> None:
    for family in WorkerMetrics().registry.collect():
        # The file downloads' and the links' own subsystems (issues #24, #25 name them so).
        assert family.name.startswith((P, "crawlfleet_file", "crawlfleet_links_"))
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)


def test_serve_exposes_metrics_on_loopback() -> None:
    metrics = WorkerMetrics()
    metrics.observe_fetches([(200, 0.1, 42)])
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    try:
        assert metrics.serving_port == port
        with pytest.raises(RuntimeError):
            metrics.serve(port, "127.0.0.1")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        assert 'crawlfleet_worker_pages_fetched_total{status_class="2xx"} 1.0' in text
        assert "crawlfleet_worker_response_bytes_total 42.0" in text
    finally:
        metrics.close()
    metrics.close()
    assert metrics.serving_port is None


def test_port_zero_disables_serving() -> None:
    metrics = WorkerMetrics()
    metrics.serve(0)
    assert metrics.serving_port is None


def test_dropped_links_are_counted_by_a_closed_set_of_reasons() -> None:
    metrics = WorkerMetrics()
    metrics.observe_dropped_links({"link_cap": 190, "too_deep": 3, "repeated_path_segments": 1})
    assert (
        metrics.registry.get_sample_value(
            "crawlfleet_worker_links_dropped_total", {"reason": "link_cap"}
        )
        == 190
    )
    assert (
        metrics.registry.get_sample_value(
            "crawlfleet_worker_links_dropped_total", {"reason": "max_pages"}
        )
        == 0
    )  # every reason exists from the start
    with pytest.raises(ValueError, match="unknown"):
        metrics.observe_dropped_links({"https://a.test/": 1})


def test_feeds_pages_announce_and_entries_past_a_feeds_cap_are_counted() -> None:
    metrics = WorkerMetrics()
    metrics.observe_feed_links(0)
    metrics.observe_feed_links(2)
    assert metrics.registry.get_sample_value("crawlfleet_worker_feed_links_found_total") == 2
    metrics.observe_dropped_links({"feed_entry_cap": 5})
    assert (
        metrics.registry.get_sample_value(
            "crawlfleet_worker_links_dropped_total", {"reason": "feed_entry_cap"}
        )
        == 5
    )


def test_output_write_errors_are_counted_by_errno_name_a_closed_set() -> None:
    metrics = WorkerMetrics()
    # The usual ones exist at zero before the first error, so an alert sees the series.
    assert value(metrics, "output_write_errors_total", errno="ENOSPC") == 0
    assert value(metrics, "output_write_errors_total", errno="EDQUOT") == 0
    metrics.observe_output_write_error("ENOSPC")
    metrics.observe_output_write_error("ENOSPC")
    metrics.observe_output_write_error("EMFILE")  # another errno: its own (platform's) name
    metrics.observe_output_write_error("Disk quota exceeded on /data")  # never a free text
    assert value(metrics, "output_write_errors_total", errno="ENOSPC") == 2
    assert value(metrics, "output_write_errors_total", errno="EMFILE") == 1
    assert value(metrics, "output_write_errors_total", errno="unknown") == 1


def test_the_robots_caches_say_what_they_hold_and_count_what_they_drop() -> None:
    metrics = WorkerMetrics()
    assert value(metrics, "robots_cache_evictions_total", cache="shared") == 0  # at zero
    metrics.set_robots_cache(RobotsCacheState(100, 5000, 2), RobotsCacheState(4, 800, 1))
    metrics.set_robots_cache(RobotsCacheState(90, 4000, 7), RobotsCacheState(4, 900, 1))
    assert value(metrics, "robots_cache_origins", cache="shared") == 90
    assert value(metrics, "robots_cache_bytes", cache="shared") == 4000
    assert value(metrics, "robots_cache_bytes", cache="local") == 900
    assert value(metrics, "robots_cache_evictions_total", cache="shared") == 7  # 2, then 5 more
    assert value(metrics, "robots_cache_evictions_total", cache="local") == 1


def test_revisits_are_counted_by_change_and_their_lag_observed() -> None:
    metrics = WorkerMetrics()
    assert value(metrics, "revisits_total", change="gone") == 0  # created at zero
    metrics.observe_revisits([("new", None), ("not_modified", 12.0), ("unchanged", 400.0)])
    metrics.observe_revisits([("not_modified", 0.5)])
    assert value(metrics, "revisits_total", change="not_modified") == 2
    assert value(metrics, "revisits_total", change="new") == 1
    assert value(metrics, "revisit_lag_seconds_count") == 3  # a first visit has no lag
    assert value(metrics, "revisit_lag_seconds_bucket", le="15.0") == 2
    with pytest.raises(ValueError, match="unknown change"):
        metrics.observe_revisits([("moved", None)])


def test_file_downloads_are_counted_by_outcome_and_restart_reason() -> None:
    metrics = WorkerMetrics()
    metrics.observe_file(
        "stored", received_bytes=700, resumed_bytes=300, restarts=["no_range", "no_range"]
    )
    metrics.observe_file("duplicate", received_bytes=1000)
    sample = metrics.registry.get_sample_value
    assert sample("crawlfleet_files_total", {"outcome": "stored"}) == 1
    assert sample("crawlfleet_files_total", {"outcome": "failed"}) == 0  # made at zero
    assert sample("crawlfleet_file_bytes_total") == 1700
    assert sample("crawlfleet_file_resumed_bytes_total") == 300
    assert sample("crawlfleet_file_restarts_total", {"reason": "no_range"}) == 2
    with pytest.raises(ValueError, match="restart reason"):
        metrics.observe_file("stored", restarts=["https://example.com/a.mp4"])


def test_links_answered_locally_and_sent_to_the_frontier_are_counted_per_batch() -> None:
    metrics = WorkerMetrics()
    sample = metrics.registry.get_sample_value
    assert sample("crawlfleet_links_local_hits_total") == 0  # a series before any batch
    assert sample("crawlfleet_links_remote_checks_total") == 0
    metrics.observe_link_checks(45, 5)
    metrics.observe_link_checks(50, 0)
    assert sample("crawlfleet_links_local_hits_total") == 95
    assert sample("crawlfleet_links_remote_checks_total") == 5
