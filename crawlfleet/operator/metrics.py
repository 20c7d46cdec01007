"""The operator's Prometheus metrics: what an on-call engineer graphs and alerts on.

One registry of its own (not the process-global default), so tests can build several.
Per-job series carry ``namespace`` and ``crawljob`` labels (not ``job``: Prometheus puts its
own ``job`` label on every scraped series) and are removed when the job goes, so a
long-lived operator does not accumulate the series of every job it ever ran.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["OperatorMetrics"]

_PHASES = ("Pending", "Running", "Suspended", "Succeeded", "Failed")


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        job = ("namespace", "crawljob")
        self.jobs = Gauge(
            "crawlfleet_jobs", "CrawlJobs by phase", ("phase",), registry=self.registry
        )
        self.queued = Gauge(
            "crawlfleet_job_queued", "URLs queued or waiting to retry", job, registry=self.registry
        )
        self.in_flight = Gauge(
            "crawlfleet_job_in_flight", "URLs leased to workers", job, registry=self.registry
        )
        self.crawled = Gauge("crawlfleet_job_crawled", "pages crawled", job, registry=self.registry)
        self.desired = Gauge(
            "crawlfleet_job_desired_replicas",
            "worker replicas the fleet brain wants",
            job,
            registry=self.registry,
        )
        self.ready = Gauge(
            "crawlfleet_job_ready_replicas", "worker replicas ready", job, registry=self.registry
        )
        self.requeued = Counter(
            "crawlfleet_requeued_leases",
            "leases returned to the queue, by why (gone, exited, stale_heartbeat, expired, ...)",
            ("reason",),
            registry=self.registry,
        )
        self.scale_decisions = Counter(
            "crawlfleet_scale_decisions",
            "changes of a worker Deployment's replicas, by direction",
            ("direction",),
            registry=self.registry,
        )
        self.reconcile_duration = Histogram(
            "crawlfleet_reconcile_duration_seconds",
            "time of one reconcile tick of one job",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.reconcile_errors = Counter(
            "crawlfleet_reconcile_errors",
            "reconcile ticks that failed (retried at the next tick)",
            registry=self.registry,
        )
        self._phases: dict[tuple[str, str], str] = {}

    def set_phase(self, namespace: str, name: str, phase: str | None) -> None:
        """Track one job's phase (None: the job is gone) and refresh the per-phase gauge."""
        key = (namespace, name)
        if phase is None:
            self._phases.pop(key, None)
            for gauge in (self.queued, self.in_flight, self.crawled, self.desired, self.ready):
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, name)
        else:
            self._phases[key] = phase
        for each in _PHASES:
            self.jobs.labels(each).set(sum(1 for p in self._phases.values() if p == each))

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        if port:
            start_http_server(port, host, registry=self.registry)
