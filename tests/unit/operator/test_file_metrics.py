"""The operator's file metrics: what a job with file rules stored, for its dashboard."""

from __future__ import annotations

from crawlfleet.frontier import FileStats
from crawlfleet.operator.metrics import OperatorMetrics

JOB = {"namespace": "media", "crawljob": "videos"}


def sample(metrics: OperatorMetrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, JOB)


def test_gauges_say_what_the_run_stored_and_go_with_the_job() -> None:
    metrics = OperatorMetrics()
    metrics.set_phase("media", "videos", "Running")
    metrics.files("media", "videos", FileStats(stored=3, bytes=3 * 2**30, duplicates=1))
    assert sample(metrics, "crawlfleet_job_files_stored") == 3
    assert sample(metrics, "crawlfleet_job_file_bytes") == 3 * 2**30
    # A new run counts from zero: a gauge follows it down.
    metrics.files("media", "videos", FileStats())
    assert sample(metrics, "crawlfleet_job_files_stored") == 0
    metrics.set_phase("media", "videos", None)
    assert sample(metrics, "crawlfleet_job_files_stored") is None
    assert sample(metrics, "crawlfleet_job_file_bytes") is None
