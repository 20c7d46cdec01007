"""The operator's gauge of the workers' local dedup hit rate."""

from __future__ import annotations

from crawlfleet.fleet.link_checks import LinkChecks
from crawlfleet.operator.metrics import OperatorMetrics

JOB = {"namespace": "web", "crawljob": "docs"}


def test_the_gauge_follows_the_fleet_s_rate_and_goes_with_the_job() -> None:
    metrics = OperatorMetrics()
    sample = metrics.registry.get_sample_value
    metrics.set_phase("web", "docs", "Running")
    metrics.link_checks("web", "docs", LinkChecks())  # nothing checked yet: no series
    assert sample("crawlfleet_local_dedup_hit_rate", JOB) is None
    metrics.link_checks("web", "docs", LinkChecks(local_hits=45, remote_checks=5))
    assert sample("crawlfleet_local_dedup_hit_rate", JOB) == 0.9
    metrics.set_phase("web", "docs", None)
    assert sample("crawlfleet_local_dedup_hit_rate", JOB) is None
