"""The operator's freshness metrics: what the "revisits falling behind" alert and the dashboard's
Freshness panels read."""

from __future__ import annotations

import dataclasses

from crawlfleet.operator.metrics import OperatorMetrics
from tests.unit.fleet.test_freshness import FRESH

JOB = {"namespace": "news", "crawljob": "listings"}


def sample(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {**JOB, **labels})


def test_gauges_say_what_is_tracked_due_and_how_late() -> None:
    metrics = OperatorMetrics()
    metrics.freshness("news", "listings", FRESH)
    assert sample(metrics, "crawlfleet_job_revisits_tracked") == 120
    assert sample(metrics, "crawlfleet_job_revisits_due") == 4
    assert sample(metrics, "crawlfleet_job_revisit_lag_seconds", quantile="0.5") == 5.0
    assert sample(metrics, "crawlfleet_job_revisit_lag_seconds", quantile="0.95") == 60.0


def test_the_counters_follow_the_frontiers_counts_and_restart_with_a_new_frontier() -> None:
    metrics = OperatorMetrics()
    metrics.freshness("news", "listings", FRESH)
    assert sample(metrics, "crawlfleet_job_revisits_total", change="not_modified") == 40
    metrics.freshness("news", "listings", dataclasses.replace(FRESH, not_modified=45))
    assert sample(metrics, "crawlfleet_job_revisits_total", change="not_modified") == 45
    assert sample(metrics, "crawlfleet_job_revisits_total", change="changed") == 3
    # A frontier re-created (redis.onLoss: Reseed) counts from zero again: a new series.
    metrics.freshness("news", "listings", dataclasses.replace(FRESH, not_modified=2))
    assert sample(metrics, "crawlfleet_job_revisits_total", change="not_modified") == 2


def test_a_job_gone_takes_its_freshness_series_with_it() -> None:
    metrics = OperatorMetrics()
    metrics.set_phase("news", "listings", "Running")
    metrics.freshness("news", "listings", FRESH)
    metrics.set_phase("news", "listings", None)
    assert sample(metrics, "crawlfleet_job_revisits_due") is None
    assert sample(metrics, "crawlfleet_job_revisit_lag_seconds", quantile="0.95") is None
    assert sample(metrics, "crawlfleet_job_revisits_total", change="changed") is None
    # And comes back from zero when a job of that name is made again.
    metrics.freshness("news", "listings", dataclasses.replace(FRESH, changed=1))
    assert sample(metrics, "crawlfleet_job_revisits_total", change="changed") == 1
