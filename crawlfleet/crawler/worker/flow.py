"""What every kind of worker process shares in its flow layer: how the process runs (its
options), the counters it heartbeats, its output sink, its periodic tasks and its wake-ups.

crawlfleet's own worker (``worker.py``) and the Scrapy runtime (``crawlfleet/scrapy/``) are
two loops over one frontier; the fleet brain reads both through the same heartbeat counters,
so they are named once, here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from crawlfleet.config import ENV_PREFIX, LINK_CACHE_GENERATION_SIZE, LINK_SPOOL_BYTES
from crawlfleet.crawler.worker.leases import LeaseBook, Stage
from crawlfleet.crawler.worker.sinks import OnDurable, OutputSink, safe_file_token
from crawlfleet.errors import ConfigError, FrontierUnavailable, OutputWriteError
from crawlfleet.frontier import HeartbeatValue

if TYPE_CHECKING:
    from crawlfleet.config import WorkerConfig
    from crawlfleet.crawler.worker.metrics import WorkerMetrics
    from crawlfleet.crawler.worker.spool import LinkSpool
    from crawlfleet.crawljob import OutputSpec
    from crawlfleet.output.stores import OutputStore

__all__ = [
    "OUTPUT_BLOCKED_REASON_CHARS",
    "WORKER_COUNTERS",
    "WorkerOptions",
    "every",
    "flush_at_shutdown",
    "heartbeat_fields",
    "log_unavailable",
    "wait_for_wake",
    "worker_counters",
    "worker_output",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How this process runs, as opposed to what the job asks (the spec).

    Flat copies of the process knobs (:class:`crawlfleet.config.WorkerConfig`), read in the
    claim loop; build it with :meth:`from_config`.
    """

    worker_id: str
    exit_when_done: bool
    grace_seconds: float
    settle_seconds: float
    flush_linger_seconds: float
    idle_poll_seconds: float
    claim_batch_wait_seconds: float
    max_buffered: int
    output_drain_seconds: float
    max_records_per_file: int
    max_pending_files: int
    output_retry_max_seconds: float
    #: Links per generation of the worker's local link cache (crawler/links/admission.py).
    link_cache_generation_size: int = LINK_CACHE_GENERATION_SIZE
    #: Where links bound for a frontier partition that is down wait (crawler/worker/spool.py),
    #: and their bound in bytes. None: a private temporary folder.
    link_spool_dir: Path | None = None
    link_spool_bytes: int = LINK_SPOOL_BYTES
    #: Write the output's closing files (manifest.json, dead-letters.jsonl) when the job is
    #: complete, if no other worker has: a worker that keeps running is in a fleet (a pod,
    #: or a child of crawlfleet run), whose first idle or draining worker writes them.
    finish_output: bool = False

    @classmethod
    def from_config(
        cls, worker_id: str, config: WorkerConfig, *, exit_when_done: bool
    ) -> WorkerOptions:
        link_cache = config.link_cache_generation_size
        if link_cache < 1:
            raise ConfigError(
                f"{ENV_PREFIX}LINK_CACHE_GENERATION_SIZE: must be at least 1 (got {link_cache})"
            )
        return cls(
            worker_id=worker_id,
            exit_when_done=exit_when_done,
            grace_seconds=config.drain.grace_seconds,
            settle_seconds=config.drain.settle_seconds,
            flush_linger_seconds=config.flush_linger_seconds,
            idle_poll_seconds=config.idle_poll_seconds,
            claim_batch_wait_seconds=config.claim_batch_wait_seconds,
            max_buffered=config.max_buffered,
            output_drain_seconds=config.drain.output_seconds,
            max_records_per_file=config.output.max_records_per_file,
            max_pending_files=config.output.max_pending_files,
            output_retry_max_seconds=config.output.retry_max_seconds,
            finish_output=not exit_when_done,
            link_cache_generation_size=link_cache,
            link_spool_dir=(
                config.link_spool_dir / safe_file_token(worker_id)
                if config.link_spool_dir is not None
                else None
            ),
            link_spool_bytes=config.link_spool_bytes,
        )


#: The counters a worker's heartbeat carries besides its gauges (in_flight, limit, output_*).
#: ``links_local_hits`` and ``links_remote_checks``: extracted links the worker's own cache
#: answered, and links it sent to the frontier's filter (crawler/links/admission.py); the
#: fleet reads their share as ``local_dedup_hit_rate`` (crawlfleet/fleet/link_checks.py).
WORKER_COUNTERS: Final = (
    "fetched",
    "succeeded",
    "failed",
    "links_new",
    "links_local_hits",
    "links_remote_checks",
    "leases_lost",
    "released",
    "output_failures",
    "links_spooled",
    "links_replayed",
)


#: The longest ``output_blocked_reason`` a heartbeat carries: a sentence, not a log.
OUTPUT_BLOCKED_REASON_CHARS: Final = 300


def worker_counters() -> dict[str, float]:
    """A worker's heartbeat counters, from zero."""
    return dict.fromkeys(WORKER_COUNTERS, 0.0)


def heartbeat_fields(
    counters: dict[str, float],
    leases: LeaseBook,
    output: OutputSink,
    *,
    in_flight: int,
    limit: int,
    file_downloads: int = 0,
    spool: LinkSpool | None = None,
) -> dict[str, HeartbeatValue]:
    """What a worker's heartbeat tells the fleet: its counters, its leases' account (how many
    in each stage and how long the oldest has been there: the fleet's watchdog reads it), and
    its output's state, with why it is blocked when it is (``output_blocked_reason``), and
    its file downloads in progress (``file_downloads``: the fleet's Waiting cause
    ``Downloading`` reads it, since a download counts as fetched while it runs)."""
    fields: dict[str, HeartbeatValue] = {
        **counters,
        **leases.account(),
        "in_flight": in_flight,
        "limit": limit,
        "output_waiting": leases.count(Stage.OUTPUT),
        "output_blocked": 1 if output.blocked else 0,
        "file_downloads": file_downloads,
    }
    reason = output.blocked_reason
    if output.blocked and reason:
        fields["output_blocked_reason"] = reason[:OUTPUT_BLOCKED_REASON_CHARS]
    if spool is not None:  # a partitioned frontier: links waiting for a partition that is down
        fields["spooled_links"] = spool.links
        fields["link_spool_full"] = 1 if spool.full else 0
        fields["spooled_for"] = ",".join(map(str, spool.partitions))
    return fields


def worker_output(
    store: OutputStore | None,
    options: WorkerOptions,
    output: OutputSpec,
    *,
    on_durable: OnDurable,
    metrics: WorkerMetrics,
) -> OutputSink:
    """The worker's output sink: the spec's format and sizes, the process's counts."""
    return OutputSink.from_spec(
        store,
        options.worker_id,
        output,
        on_durable=on_durable,
        max_records_per_file=options.max_records_per_file,
        max_pending_files=options.max_pending_files,
        retry_max_seconds=options.output_retry_max_seconds,
        metrics=metrics,
    )


async def wait_for_wake(wake: asyncio.Event, seconds: float) -> None:
    """Wait for ``wake`` at most ``seconds``, then clear it."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await wake.wait()
    wake.clear()


async def every(
    seconds: float, action: Callable[[], Awaitable[None]], closed: asyncio.Event
) -> None:
    """Run ``action`` every ``seconds`` until ``closed``; log, never die, on errors.

    Redis away (restarting, failing over, a cluster slot moving) is an outage the next round
    waits out, not a bug: one line each round, no traceback (a 20-second outage used to fill
    a worker's log with forty of them)."""
    while not closed.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await closed.wait()
        if closed.is_set():
            return
        try:
            await action()
        except FrontierUnavailable as exc:
            log_unavailable(action.__name__, exc)
        except Exception:
            log.exception("%s failed", action.__name__, extra={"layer": "flow"})


def log_unavailable(what: str, error: FrontierUnavailable) -> None:
    """One warning line for a periodic task that Redis did not answer (tried again later)."""
    log.warning("%s failed, tried again later: %s", what, error, extra={"layer": "flow"})


async def flush_at_shutdown(flush: Callable[[], Awaitable[object]]) -> None:
    """A last flush while the worker stops: what the output spool or Redis cannot take now
    stays in hand, and the caller releases those leases (no attempt counted) instead of
    stopping short of releasing them."""
    try:
        await flush()
    except (OutputWriteError, FrontierUnavailable) as exc:
        log.warning("last flush failed, its leases are released: %s", exc, extra={"layer": "flow"})
