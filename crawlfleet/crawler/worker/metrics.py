"""Every Prometheus metric of a crawler worker, defined here and nowhere else.

Names follow ``crawlfleet_worker_<name>_<unit>`` in base units (seconds, bytes), counters end in
``_total``. Labels are closed sets (status class, failure class, Bloom result), never a URL or
a host: one series per label value and a crawl meets millions of URLs, so an open label would
exhaust Prometheus long before the crawl ends. Unknown failure classes are refused with
``ValueError`` rather than exported, for the same reason.

Metrics live in an explicit :class:`~prometheus_client.CollectorRegistry` owned by
:class:`WorkerMetrics`, not in the process-global one, so tests and several workers in one
process (local mode) never collide; every label value is created at zero up front so that
``rate()`` and alerts see a series before its first event.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable, Mapping
from typing import Final, Literal, get_args
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.memory import ByteBudget
from crawlfleet.crawler.links.scope import ScopeVerdict
from crawlfleet.crawljob import Change
from crawlfleet.frontier.models import LAG_BUCKETS_SECONDS
from crawlfleet.frontier.robots_cache import RobotsCacheState

__all__ = [
    "FETCH_SECONDS_BUCKETS",
    "FILE_OUTCOMES",
    "FILE_RESTART_REASONS",
    "LINK_DROP_REASONS",
    "OUTPUT_WRITE_ERRNOS",
    "BloomResult",
    "StatusClass",
    "WorkerMetrics",
    "status_class",
]

_PREFIX: Final = "crawlfleet_worker_"
#: The two robots.txt caches, as the ``cache`` label names them.
_ROBOTS_CACHES: Final = ("shared", "local")

#: Fetch latency buckets: 10 ms (a cached page on a LAN) up to 60 s (the total timeout).
FETCH_SECONDS_BUCKETS: Final = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    30.0,
    60.0,
)

#: Why a found link was not admitted: the closed set of ``links_dropped_total``'s labels.
LINK_DROP_REASONS: Final = frozenset(
    {
        "link_cap",
        "nofollow",
        "max_pages",
        # scope.maxQueuedPerHost / scope.maxPagesPerHost: the link's host's budget was spent
        "host_budget",
        "memory_pressure",
        # scope.sitemaps (crawler/links/sitemaps.py): entries past a sitemap's bound, sitemaps past
        # an index's (or robots.txt's) bound, sitemaps of an index nested too deep
        "sitemap_url_cap",
        "sitemap_count",
        "sitemap_depth",
        # RSS and Atom feeds (crawler/links/feeds.py): entries past a feed's bound
        "feed_entry_cap",
        # crawlfleet.scrapy: a request the frontier cannot carry (a lambda callback, a meta
        # value JSON cannot hold), and an item from a spider's start() (no page to hold it)
        "scrapy_unserializable",
        "scrapy_start_item",
        *(v.value for v in ScopeVerdict),
    }
)

#: The errno names of ``output_write_errors_total`` created at zero: what fills or breaks a
#: spool disk. Any other errno name of the platform is counted under its own name (a closed
#: set of about 130), an OSError without one under ``unknown``.
OUTPUT_WRITE_ERRNOS: Final = ("ENOSPC", "EDQUOT", "EFBIG", "EIO", "EROFS", "EACCES")
_ERRNO_NAMES: Final = frozenset(errno.errorcode.values())
#: The ``change`` label of ``revisits_total``: what a visit of a tracked URL found.
_CHANGES: Final[tuple[str, ...]] = get_args(Change)

#: The ``files`` subsystem (``spec.files``, DESIGN §11): its metrics are named after it, as the
#: contract of issue #24 fixes them (``crawlfleet_files_total``, not ``crawlfleet_worker_...``).
_FILES_PREFIX: Final = "crawlfleet_"
#: The worker's local layer of dedup (DESIGN §7, issue #25): named after the ``links``
#: subsystem as that issue's contract fixes them (``crawlfleet_links_local_hits_total``).
_LINKS_PREFIX: Final = "crawlfleet_links_"
#: What became of a file download that ended: the ``outcome`` label of ``files_total``.
FILE_OUTCOMES: Final = ("stored", "duplicate", "failed")
#: Why a download dropped its part and started from zero (``crawler/files/resume.py``).
FILE_RESTART_REASONS: Final = (
    "no_range",
    "validator_changed",
    "range_mismatch",
    "unsatisfiable",
    "no_validator",
)

StatusClass = Literal["2xx", "3xx", "4xx", "5xx", "none", "other"]
BloomResult = Literal["new", "duplicate"]

_STATUS_CLASSES: Final[tuple[StatusClass, ...]] = ("2xx", "3xx", "4xx", "5xx", "none", "other")
_BY_HUNDREDS: Final[dict[int, StatusClass]] = {2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}


def status_class(status: int | None) -> StatusClass:
    """The label of an HTTP status: ``none`` when no response came, ``other`` outside 200..599."""
    if status is None:
        return "none"
    return _BY_HUNDREDS.get(status // 100, "other") if status >= 0 else "other"


class WorkerMetrics:
    """A worker's metrics and the small verbs the fetch loop reports through."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._server: WSGIServer | None = None
        reg = self.registry
        self.pages_fetched = Counter(
            _PREFIX + "pages_fetched_total",
            "Fetches that completed, by HTTP status class (none: no response).",
            ["status_class"],
            registry=reg,
        )
        self.fetch_duration = Histogram(
            _PREFIX + "fetch_duration_seconds",
            "Time from sending a request to reading the whole body.",
            buckets=FETCH_SECONDS_BUCKETS,
            registry=reg,
        )
        self.in_flight = Gauge(
            _PREFIX + "fetches_in_flight",
            "Fetches running now.",
            registry=reg,
        )
        self.concurrency_limit = Gauge(
            _PREFIX + "concurrency_limit",
            "Fetches the worker allows at once (adaptive: AIMD on failures).",
            registry=reg,
        )
        self.retries = Counter(
            _PREFIX + "retries_total",
            "Attempts that failed and will be tried again, by failure class.",
            ["failure_class"],
            registry=reg,
        )
        self.failures = Counter(
            _PREFIX + "failures_total",
            "Attempts that failed, by failure class (retried or not).",
            ["failure_class"],
            registry=reg,
        )
        self.bloom = Counter(
            _PREFIX + "bloom_results_total",
            "Discovered links checked against the job's Bloom filter, by result.",
            ["result"],
            registry=reg,
        )
        self.response_bytes = Counter(
            _PREFIX + "response_bytes_total",
            "Body bytes read from responses (after decompression).",
            registry=reg,
        )
        self.leases_lost = Counter(
            _PREFIX + "leases_lost_total",
            "Leases the worker no longer owned when it tried to complete them.",
            registry=reg,
        )
        self.memory_budget = Gauge(
            _PREFIX + "memory_budget_bytes",
            "Body bytes the worker may hold (in flight and awaiting their flush), from its"
            " memory limit; 0 when the budget is off.",
            registry=reg,
        )
        self.memory_in_use = Gauge(
            _PREFIX + "memory_in_use_bytes",
            "Body bytes held now, in flight and awaiting their flush.",
            registry=reg,
        )
        self.memory_waits = Counter(
            _PREFIX + "memory_waits_total",
            "Times a body waited for room in the memory budget instead of exceeding it.",
            registry=reg,
        )
        self._memory_waits_seen = 0
        self.proxy_requests = Counter(
            _PREFIX + "proxy_requests_total",
            "Requests sent through a proxy (spec.proxy), by proxy (scheme://host:port, never"
            " its credentials) and outcome: ok, or failed by the proxy's fault.",
            ["proxy", "outcome"],
            registry=reg,
        )
        self.proxy_ejections = Counter(
            _PREFIX + "proxy_ejections_total",
            "Times a proxy was taken out of service after proxy.maxFailures failures in a row.",
            ["proxy"],
            registry=reg,
        )
        self.links_dropped = Counter(
            _PREFIX + "links_dropped_total",
            "Links found on pages and not admitted, by reason: the page's link cap, nofollow, a"
            " scope rule (too_deep, out_of_domain, excluded, not_included, the trap rules"
            " too_many_path_segments and repeated_path_segments), invalid_url, bad_scheme,"
            " max_pages, memory_pressure. Repeats the worker already settled are not counted.",
            ["reason"],
            registry=reg,
        )
        self.links_local_hits = Counter(
            _LINKS_PREFIX + "local_hits_total",
            "Extracted links the worker answered without the frontier: settled by the job's"
            " filter before (this worker's bounded cache of links it settled), or repeated"
            " within one flush. The fleet's local dedup hit rate is"
            " local_hits / (local_hits + remote_checks).",
            registry=reg,
        )
        self.links_remote_checks = Counter(
            _LINKS_PREFIX + "remote_checks_total",
            "Links the worker sent to the frontier's enqueue, each one check of the job's"
            " Bloom filter (the rest of the links found were answered locally or refused).",
            registry=reg,
        )
        self.feed_links_found = Counter(
            _PREFIX + "feed_links_found_total",
            "Feeds pages announce (<link rel=alternate> of an RSS or Atom type), found and"
            " handed to admission like any link (scope, robots and dedup then apply).",
            registry=reg,
        )
        self.robots_deferrals = Counter(
            _PREFIX + "robots_deferrals_total",
            "URLs given back to the frontier, no attempt counted, because their host's"
            " robots.txt could not be read yet (RFC 9309: the host waits).",
            registry=reg,
        )
        # The shared cache's size is the fleet's, as this worker last saw it: take the max
        # over workers. Evictions are this worker's (of the shared cache: by its stores).
        self.robots_cache_origins = Gauge(
            _PREFIX + "robots_cache_origins",
            "Origins whose robots.txt answer is cached: fleet-wide in Redis (cache=shared) or"
            " parsed in this worker (cache=local); each bounded, least recently used out first.",
            ["cache"],
            registry=reg,
        )
        self.robots_cache_bytes = Gauge(
            _PREFIX + "robots_cache_bytes",
            "Bytes of robots.txt answers cached (cache=shared: the entries in Redis;"
            " cache=local: the bodies behind this worker's parsed rules).",
            ["cache"],
            registry=reg,
        )
        self.robots_cache_evictions = Counter(
            _PREFIX + "robots_cache_evictions_total",
            "Origins dropped from a robots.txt cache past its bounds (fetched again if met"
            " again): from the shared cache by this worker's stores, or from its own.",
            ["cache"],
            registry=reg,
        )
        self._robots_evictions_seen = {cache: 0 for cache in _ROBOTS_CACHES}
        for cache in _ROBOTS_CACHES:
            self.robots_cache_origins.labels(cache=cache)
            self.robots_cache_bytes.labels(cache=cache)
            self.robots_cache_evictions.labels(cache=cache)
        self.claims = Counter(
            _PREFIX + "claims_total",
            "URLs leased from the frontier.",
            registry=reg,
        )
        self.output_files = Counter(
            _PREFIX + "output_files_total",
            "Output files made durable in the destination (uploaded, or fsynced and renamed).",
            registry=reg,
        )
        self.output_bytes = Counter(
            _PREFIX + "output_bytes_total",
            "Bytes of the output files made durable.",
            registry=reg,
        )
        self.output_failures = Counter(
            _PREFIX + "output_failures_total",
            "Attempts to make an output file durable that failed and will be retried.",
            registry=reg,
        )
        self.output_write_errors = Counter(
            _PREFIX + "output_write_errors_total",
            "Batches of records that could not be written into the worker's output spool, by"
            " errno name (ENOSPC: the disk is full); each is kept and written again after a"
            " backoff, and the worker claims nothing meanwhile.",
            ["errno"],
            registry=reg,
        )
        self.output_pending = Gauge(
            _PREFIX + "output_pending_files",
            "Output files closed and not yet durable (uploading, or waiting to retry).",
            registry=reg,
        )
        self.output_waiting = Gauge(
            _PREFIX + "output_waiting_pages",
            "Finished pages whose leases wait for their output file to become durable.",
            registry=reg,
        )
        self.output_blocked = Gauge(
            _PREFIX + "output_blocked",
            "1 while the worker claims nothing because its output spool (a full disk) or its"
            " destination is failing, or too many files wait to become durable"
            " (backpressure), else 0.",
            registry=reg,
        )
        self.revisits = Counter(
            _PREFIX + "revisits_total",
            "Visits of URLs with a recrawl rule, by what they found: new (first visit),"
            " changed, unchanged (same body digest), not_modified (a 304 to a conditional"
            " request), gone (404/410 after a 200).",
            ["change"],
            registry=reg,
        )
        self.revisit_lag = Histogram(
            _PREFIX + "revisit_lag_seconds",
            "Time from a tracked URL becoming due to its revisit's response (the frontier"
            " keeps the fleet's histogram in the same buckets).",
            buckets=LAG_BUCKETS_SECONDS,
            registry=reg,
        )
        self.files = Counter(
            _FILES_PREFIX + "files_total",
            "File downloads (spec.files) that ended, by outcome: stored (new bytes),"
            " duplicate (identical bytes already stored: the record points at them), failed"
            " (an attempt that failed; its class is in failures_total).",
            ["outcome"],
            registry=reg,
        )
        self.file_bytes = Counter(
            _FILES_PREFIX + "file_bytes_total",
            "Bytes of file downloads received into their parts (resumed bytes not again).",
            registry=reg,
        )
        self.file_restarts = Counter(
            _FILES_PREFIX + "file_restarts_total",
            "Downloads that dropped their part and started from zero, by reason: no_range (a"
            " 200 to a Range request), validator_changed, range_mismatch, unsatisfiable (416),"
            " no_validator (a part with no ETag or Last-Modified to resume it by).",
            ["reason"],
            registry=reg,
        )
        self.file_downloads_in_flight = Gauge(
            _FILES_PREFIX + "file_downloads_in_flight",
            "File downloads running now (each holds one of its host's file slots).",
            registry=reg,
        )
        self.file_resumed_bytes = Counter(
            _FILES_PREFIX + "file_resumed_bytes_total",
            "Bytes a download did not fetch again because its part already held them.",
            registry=reg,
        )
        for outcome in FILE_OUTCOMES:
            self.files.labels(outcome=outcome)
        for reason in FILE_RESTART_REASONS:
            self.file_restarts.labels(reason=reason)
        self._revisits_by_change = {
            change: self.revisits.labels(change=change) for change in _CHANGES
        }
        self._pages_by_class = {
            label: self.pages_fetched.labels(status_class=label) for label in _STATUS_CLASSES
        }
        for failure in FailureClass:
            self.retries.labels(failure_class=failure.value)
            self.failures.labels(failure_class=failure.value)
        for result in ("new", "duplicate"):
            self.bloom.labels(result=result)
        for reason in LINK_DROP_REASONS:
            self.links_dropped.labels(reason=reason)
        for name in OUTPUT_WRITE_ERRNOS:
            self.output_write_errors.labels(errno=name)

    # -- reporting verbs ------------------------------------------------------------------

    def observe_fetches(self, fetches: Iterable[tuple[int | None, float, int]]) -> None:
        """Fetches that finished, as (status, seconds, response bytes): one call per batch.

        Each counter is incremented once per batch, not once per page: every increment takes
        a lock and a label lookup, a visible share of a page's CPU on a fast site.
        """
        by_class: dict[StatusClass, int] = {}
        total_bytes = 0
        observe = self.fetch_duration.observe
        for status, seconds, response_bytes in fetches:
            label = status_class(status)
            by_class[label] = by_class.get(label, 0) + 1
            observe(max(0.0, seconds))
            total_bytes += max(0, response_bytes)
        for label, count in by_class.items():
            self._pages_by_class[label].inc(count)
        if total_bytes:
            self.response_bytes.inc(total_bytes)

    def observe_revisits(self, visits: Iterable[tuple[str, float | None]]) -> None:
        """Visits of tracked URLs, as (change, lag in seconds or None on a first visit): one
        call per batch. An unknown change is refused, like an unknown failure class."""
        counts: dict[str, int] = {}
        observe = self.revisit_lag.observe
        for change, lag_seconds in visits:
            if change not in self._revisits_by_change:
                raise ValueError(f"unknown change {change!r}")
            counts[change] = counts.get(change, 0) + 1
            if lag_seconds is not None:
                observe(max(0.0, lag_seconds))
        for change, count in counts.items():
            self._revisits_by_change[change].inc(count)

    def set_in_flight(self, count: int) -> None:
        self.in_flight.set(count)

    def set_concurrency_limit(self, limit: int) -> None:
        self.concurrency_limit.set(limit)

    def observe_failure(self, failure_class: FailureClass | str, *, retried: bool) -> None:
        """A failed attempt; ``retried`` when it will be tried again (then also a retry)."""
        label = FailureClass(failure_class).value  # ValueError for an unknown class
        self.failures.labels(failure_class=label).inc()
        if retried:
            self.retries.labels(failure_class=label).inc()

    def observe_bloom(self, results: Iterable[bool]) -> None:
        """Results of a Bloom "add if new" batch (True = new), as the frontier returns them."""
        new = duplicate = 0
        for is_new in results:
            if is_new:
                new += 1
            else:
                duplicate += 1
        if new:
            self.bloom.labels(result="new").inc(new)
        if duplicate:
            self.bloom.labels(result="duplicate").inc(duplicate)

    def observe_link_checks(self, local_hits: int, remote_checks: int) -> None:
        """One flush's links answered locally and sent to the frontier: per batch."""
        if local_hits > 0:
            self.links_local_hits.inc(local_hits)
        if remote_checks > 0:
            self.links_remote_checks.inc(remote_checks)

    def observe_leases_lost(self, count: int = 1) -> None:
        if count > 0:
            self.leases_lost.inc(count)

    def observe_dropped_links(self, dropped: Mapping[str, int]) -> None:
        """Links a flush left out, by reason (one of :data:`LINK_DROP_REASONS`): per batch."""
        for reason, count in dropped.items():
            if reason not in LINK_DROP_REASONS:
                raise ValueError(f"unknown link drop reason {reason!r}")
            if count:
                self.links_dropped.labels(reason=reason).inc(count)

    def observe_feed_links(self, count: int) -> None:
        if count > 0:
            self.feed_links_found.inc(count)

    def set_memory(self, budget: ByteBudget) -> None:
        """The memory budget's state, once per flush."""
        self.memory_budget.set(budget.capacity_bytes or 0)
        self.memory_in_use.set(budget.in_use_bytes)
        if budget.waits > self._memory_waits_seen:
            self.memory_waits.inc(budget.waits - self._memory_waits_seen)
            self._memory_waits_seen = budget.waits

    def set_robots_cache(self, shared: RobotsCacheState, local: RobotsCacheState) -> None:
        """The robots.txt caches' state, once per flush."""
        for cache, state in zip(_ROBOTS_CACHES, (shared, local), strict=True):
            self.robots_cache_origins.labels(cache=cache).set(state.origins)
            self.robots_cache_bytes.labels(cache=cache).set(state.bytes)
            if state.evictions > self._robots_evictions_seen[cache]:
                dropped = state.evictions - self._robots_evictions_seen[cache]
                self.robots_cache_evictions.labels(cache=cache).inc(dropped)
                self._robots_evictions_seen[cache] = state.evictions

    def observe_robots_deferral(self) -> None:
        self.robots_deferrals.inc()

    def observe_claims(self, count: int) -> None:
        if count > 0:
            self.claims.inc(count)

    def observe_output_durable(self, files: int, total_bytes: int) -> None:
        if files > 0:
            self.output_files.inc(files)
            self.output_bytes.inc(total_bytes)

    def observe_output_failure(self) -> None:
        self.output_failures.inc()

    def observe_output_write_error(self, errno_name: str) -> None:
        """A batch the spool could not take; ``errno_name`` as ``errno.errorcode`` names it."""
        label = errno_name if errno_name in _ERRNO_NAMES else "unknown"
        self.output_write_errors.labels(errno=label).inc()

    def set_output_state(self, *, pending_files: int, waiting_pages: int, blocked: bool) -> None:
        self.output_pending.set(pending_files)
        self.output_waiting.set(waiting_pages)
        self.output_blocked.set(1 if blocked else 0)

    def observe_file(
        self,
        outcome: str | None,
        *,
        received_bytes: int = 0,
        resumed_bytes: int = 0,
        restarts: Iterable[str] = (),
    ) -> None:
        """A file download that ended: its outcome (one of :data:`FILE_OUTCOMES`; None: it
        stopped at shutdown, to be resumed), the bytes it received, the bytes its part saved
        it, and its restarts (each one of :data:`FILE_RESTART_REASONS`; another is refused)."""
        if outcome is not None and outcome not in FILE_OUTCOMES:
            raise ValueError(f"unknown file outcome {outcome!r}")
        reasons = list(restarts)
        for reason in reasons:
            if reason not in FILE_RESTART_REASONS:
                raise ValueError(f"unknown file restart reason {reason!r}")
        if outcome is not None:
            self.files.labels(outcome=outcome).inc()
        if received_bytes > 0:
            self.file_bytes.inc(received_bytes)
        if resumed_bytes > 0:
            self.file_resumed_bytes.inc(resumed_bytes)
        for reason in reasons:
            self.file_restarts.labels(reason=reason).inc()

    def set_file_downloads(self, count: int) -> None:
        self.file_downloads_in_flight.set(count)

    # -- exposition -----------------------------------------------------------------------

    def observe_proxy(self, proxy: str, event: str) -> None:
        """What ``crawler/fetching/proxying.py`` reports: a request ("ok", "failed") through
        ``proxy``, or ``proxy`` taken out of service ("ejected")."""
        if event == "ejected":
            self.proxy_ejections.labels(proxy).inc()
        else:
            self.proxy_requests.labels(proxy, event).inc()

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """Expose ``/metrics`` on ``host:port`` in a daemon thread; port 0 disables it.

        ``0.0.0.0`` by default because Prometheus scrapes pods from outside; local mode passes
        ``127.0.0.1``. Calling it again while serving is refused: one endpoint per worker.
        """
        if port == 0:
            return
        if self._server is not None:
            raise RuntimeError("metrics are already being served")
        self._server, _ = start_http_server(port, host, registry=self.registry)

    @property
    def serving_port(self) -> int | None:
        """The port ``/metrics`` listens on, or None when not serving."""
        return None if self._server is None else int(self._server.server_port)

    def close(self) -> None:
        """Stop serving ``/metrics`` (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
