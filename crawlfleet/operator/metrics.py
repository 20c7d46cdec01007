"""The operator's Prometheus metrics: what an on-call engineer graphs and alerts on.

One registry of its own (not the process-global default), so tests can build several.
Per-job series carry ``namespace`` and ``crawljob`` labels (not ``job``: Prometheus puts its
own ``job`` label on every scraped series) and are removed when the job goes, so a
long-lived operator does not accumulate the series of every job it ever ran.
"""

from __future__ import annotations

import contextlib
from typing import get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from crawlfleet.crawljob import Phase
from crawlfleet.fleet.freshness import Freshness
from crawlfleet.fleet.link_checks import LinkChecks
from crawlfleet.fleet.waiting import WAIT_REASONS, Waiting
from crawlfleet.fleet.watchdog import STALL_REASONS, Stall
from crawlfleet.frontier import FileStats, FrontierStats, MemoryState, PressureLevel

__all__ = ["OperatorMetrics"]

_PHASES: tuple[str, ...] = get_args(Phase)
#: The quantiles of the revisit lag exported (the frontier keeps it in fixed buckets).
_LAG_QUANTILES = (0.5, 0.95)
#: What a revisit found (the ``change`` label), as Freshness counts it.
_CHANGES = ("changed", "unchanged", "not_modified", "gone")


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
        # The frontier's health: what the "Redis memory" and "Bloom filter" alerts read.
        self.memory_used = Gauge(
            "crawlfleet_frontier_memory_used_bytes",
            "memory the job's Redis uses (INFO used_memory)",
            job,
            registry=self.registry,
        )
        self.memory_max = Gauge(
            "crawlfleet_frontier_memory_max_bytes",
            "the job's Redis's maxmemory (0: no limit)",
            job,
            registry=self.registry,
        )
        self.pressure = Gauge(
            "crawlfleet_frontier_pressure_level",
            "memory backpressure on the frontier: 0 none, 1 high, 2 critical",
            job,
            registry=self.registry,
        )
        self.bloom_fill = Gauge(
            "crawlfleet_bloom_fill_ratio",
            "distinct URLs seen over dedup.capacity (past 1 the filter has grown layers)",
            job,
            registry=self.registry,
        )
        self.bloom_layer_fill = Gauge(
            "crawlfleet_bloom_layer_fill_ratio",
            "fill of the Bloom filter's newest layer (at 1 it grows another)",
            job,
            registry=self.registry,
        )
        self.bloom_false_positives = Gauge(
            "crawlfleet_bloom_false_positive_rate",
            "estimated share of new URLs the Bloom filter takes for seen",
            job,
            registry=self.registry,
        )
        self.bloom_layers = Gauge(
            "crawlfleet_bloom_layers", "layers of the Bloom filter", job, registry=self.registry
        )
        self.frontier_lost = Counter(
            "crawlfleet_frontier_lost",
            "frontiers found lost (emptied or replaced Redis): jobs failed or re-seeded",
            registry=self.registry,
        )
        # What a crawl that does not move waits for, and leases that stopped: the "crawl
        # stuck" alerts read these (a reason label of a fixed, small set: never a host).
        self.waiting = Gauge(
            "crawlfleet_job_waiting",
            "1 while URLs are queued, none is fetched and this holds them back, by reason"
            " (RobotsTxt, NoLiveWorker, OutputBlocked, HeldSlots, MemoryPressure, RetryBackoff,"
            " HostDelay, Downloading, Suspended); 0 otherwise",
            (*job, "reason"),
            registry=self.registry,
        )
        self.stalled_leases = Gauge(
            "crawlfleet_job_stalled_leases",
            "leases of live workers stuck in one stage past the stall threshold, by reason"
            " (StuckFetching, StuckProcessing, StuckOutput)",
            (*job, "reason"),
            registry=self.registry,
        )
        # How fresh a job that revisits its pages keeps them (crawlfleet.fleet.freshness):
        # the "revisits fall behind" alert reads the due gauge.
        self.revisits_tracked = Gauge(
            "crawlfleet_job_revisits_tracked",
            "URLs with a revisit schedule (matched by a spec.recrawl rule)",
            job,
            registry=self.registry,
        )
        self.revisits_due = Gauge(
            "crawlfleet_job_revisits_due",
            "revisits due and not fetched yet (growing: the workers do not keep up)",
            job,
            registry=self.registry,
        )
        self.revisit_lag = Gauge(
            "crawlfleet_job_revisit_lag_seconds",
            "time from a revisit's due time to its fetch, by quantile (0.5, 0.95)",
            (*job, "quantile"),
            registry=self.registry,
        )
        self.revisits = Counter(
            "crawlfleet_job_revisits",
            "revisits by what they found (changed, unchanged, not_modified, gone)",
            (*job, "change"),
            registry=self.registry,
        )
        # What a job with file rules (spec.files) stored in its run: gauges, as crawled is
        # (a recurring run counts from zero again).
        self.files_stored = Gauge(
            "crawlfleet_job_files_stored",
            "files stored (new content, verified and durable) in the job's run",
            job,
            registry=self.registry,
        )
        self.file_bytes = Gauge(
            "crawlfleet_job_file_bytes",
            "bytes of the files stored in the job's run (duplicates cost none)",
            job,
            registry=self.registry,
        )
        # The workers' local layer of dedup (crawlfleet.fleet.link_checks): what share of the
        # links found never needed a round trip to the job's filter.
        self.local_dedup_hit_rate = Gauge(
            "crawlfleet_local_dedup_hit_rate",
            "share of the links the live workers found that their own caches answered, not the"
            " job's Bloom filter: local hits / (local hits + remote checks)",
            job,
            registry=self.registry,
        )
        #: The frontier's cumulative revisit counts last seen, per job: the counter grows by
        #: the difference.
        self._revisits_seen: dict[tuple[str, str, str], int] = {}
        self._per_job = (
            self.queued,
            self.in_flight,
            self.crawled,
            self.desired,
            self.ready,
            self.memory_used,
            self.memory_max,
            self.pressure,
            self.bloom_fill,
            self.bloom_layer_fill,
            self.bloom_false_positives,
            self.bloom_layers,
            self.revisits_tracked,
            self.revisits_due,
            self.files_stored,
            self.file_bytes,
            self.local_dedup_hit_rate,
        )
        self._phases: dict[tuple[str, str], str] = {}

    def set_phase(self, namespace: str, name: str, phase: str | None) -> None:
        """Track one job's phase (None: the job is gone) and refresh the per-phase gauge."""
        key = (namespace, name)
        if phase is None:
            self._phases.pop(key, None)
            for gauge in self._per_job:
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, name)
            for labelled, values in (
                (self.waiting, WAIT_REASONS),
                (self.stalled_leases, STALL_REASONS),
                (self.revisit_lag, tuple(str(q) for q in _LAG_QUANTILES)),
                (self.revisits, _CHANGES),
            ):
                for value in values:
                    with contextlib.suppress(KeyError):
                        labelled.remove(namespace, name, value)
                    self._revisits_seen.pop((namespace, name, value), None)
        else:
            self._phases[key] = phase
        for each in _PHASES:
            self.jobs.labels(each).set(sum(1 for p in self._phases.values() if p == each))

    def frontier(
        self,
        namespace: str,
        name: str,
        stats: FrontierStats,
        memory: MemoryState | None,
        pressure: PressureLevel,
        capacity: int,
    ) -> None:
        """One job's frontier health, as its tick read it."""
        job = (namespace, name)
        if memory is not None:
            self.memory_used.labels(*job).set(memory.used_bytes)
            self.memory_max.labels(*job).set(memory.max_bytes)
        self.pressure.labels(*job).set(int(pressure))
        self.bloom_fill.labels(*job).set(stats.seen / capacity if capacity else 0.0)
        self.bloom_layer_fill.labels(*job).set(stats.bloom_fill_ratio)
        self.bloom_false_positives.labels(*job).set(stats.bloom_false_positive_rate)
        self.bloom_layers.labels(*job).set(stats.bloom_layers)

    def freshness(self, namespace: str, name: str, freshness: Freshness) -> None:
        """One job's freshness, as its tick read it. The frontier counts revisits since the
        job began; the counter grows by what is new since the last tick (a first reading
        starts the series at the whole count, which ``rate()`` does not take for a jump)."""
        job = (namespace, name)
        self.revisits_tracked.labels(*job).set(freshness.tracked)
        self.revisits_due.labels(*job).set(freshness.due)
        for quantile, lag in zip(
            _LAG_QUANTILES, (freshness.lag_p50_seconds, freshness.lag_p95_seconds), strict=True
        ):
            if lag is not None:
                self.revisit_lag.labels(*job, str(quantile)).set(lag)
        counts = {
            "changed": freshness.changed,
            "unchanged": freshness.unchanged,
            "not_modified": freshness.not_modified,
            "gone": freshness.gone,
        }
        for change, count in counts.items():
            key = (namespace, name, change)
            before = self._revisits_seen.get(key, 0)
            if count < before:  # a new frontier (re-seeded) counts from zero: a new series
                with contextlib.suppress(KeyError):
                    self.revisits.remove(*key)
                before = 0
            self.revisits.labels(*key).inc(count - before)
            self._revisits_seen[key] = count

    def files(self, namespace: str, name: str, files: FileStats) -> None:
        """One job's file downloads, as its tick read them."""
        self.files_stored.labels(namespace, name).set(files.stored)
        self.file_bytes.labels(namespace, name).set(files.bytes)

    def link_checks(self, namespace: str, name: str, checks: LinkChecks) -> None:
        """One job's local dedup hit rate, as its tick summed it (unset before any check)."""
        rate = checks.hit_rate
        if rate is not None:
            self.local_dedup_hit_rate.labels(namespace, name).set(rate)

    def motion(
        self, namespace: str, name: str, waiting: Waiting | None, stall: Stall | None
    ) -> None:
        """What one job waits for and its stalled leases, as its tick judged them: every
        reason's series is set (0 when it does not hold), so a query never finds it missing."""
        causes = {cause.reason for cause in waiting.causes} if waiting is not None else set()
        for cause in WAIT_REASONS:
            self.waiting.labels(namespace, name, cause).set(1 if cause in causes else 0)
        stuck = {stall.reason: stall.leases} if stall is not None else {}
        for stage in STALL_REASONS:
            self.stalled_leases.labels(namespace, name, stage).set(stuck.get(stage, 0))

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        if port:
            start_http_server(port, host, registry=self.registry)
