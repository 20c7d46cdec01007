"""``status``: what the operator observed, in the shape ``kubectl`` and status patches use.

Written by the operator only, so the models are tolerant (fields of other versions are ignored)
and counters default to 0, so printer columns never show blanks.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue, computed_field
from pydantic.alias_generators import to_camel

__all__ = [
    "Condition",
    "CrawlJobStatus",
    "FilesStatus",
    "FleetStatus",
    "FreshnessStatus",
    "Phase",
    "RunStatus",
]

#: Scheduled: a job with spec.schedule between two runs (no workers; status.nextRunAt says
#: when the next one starts).
Phase = Literal["Pending", "Running", "Scheduled", "Suspended", "Succeeded", "Failed"]


class _Observed(BaseModel):
    """Status models: written by the operator, so tolerant of fields from other versions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        use_attribute_docstrings=True,
    )


class Condition(_Observed):
    """One metav1.Condition."""

    type: str
    """What the condition is about: Ready, Progressing, Complete, Failed, Suspended,
    InvalidSpec, OutputNotDurable, OutputBlocked, FrontierLost, FrontierMemoryPressure,
    BloomNearlyFull, WorkersFailing, Waiting, Stalled or ChildConflict. At most one condition of
    each type."""
    status: Literal["True", "False", "Unknown"] = "Unknown"
    """Whether the condition holds: True, False or Unknown."""
    reason: str = ""
    """Why the condition last changed, as one CamelCase word that tools can match on."""
    message: str = ""
    """Why the condition last changed, in words for people."""
    last_transition_time: datetime | None = None
    """When status last changed."""
    observed_generation: int | None = None
    """The metadata.generation of the spec the condition was set from."""


class FleetStatus(_Observed):
    """What the fleet brain remembers between ticks, kept here so that an operator restart (or
    a standby taking over) resumes the same decisions instead of starting its clocks again."""

    replicas: int = 0
    """Worker pods the brain last decided on."""
    low_demand_since: datetime | None = None
    """Since when the backlog has asked for fewer workers than run: the scale-down delay runs
    from here."""
    idle_since: datetime | None = None
    """Since when nothing has been queued, delayed or in flight: the completion grace runs from
    here."""
    bloom_nearly_full: bool = False
    """The BloomNearlyFull warning was given (it is given once)."""
    pressure_base_rate: str | None = None
    """Pages a second when memory backpressure began (claims are slowed to shares of it), as
    a decimal string; unset while there is no pressure."""
    workers_failing: str | None = None
    """The error of workers that keep dying at start (``Reason: message``) that the
    WorkersFailing (or OutputUnavailable) Event was given for; unset while none is failing."""
    seeds_hash: str | None = None
    """A digest of the seed list the frontier was last seeded with: a different one on a
    running job queues the seeds again, once (the SeedsAdded Event says how many were new)."""
    waiting: str | None = None
    """The reason of the last Waiting Event (what the crawl waits for); unset once it has moved
    for a while with nothing to wait for."""
    moving_since: datetime | None = None
    """Since when the crawl has had nothing to wait for while a wait is still announced: the
    wait ends (a WaitEnded Event) once that has lasted."""
    stalled: str | None = None
    """The reason of the last Stalled Event (leases that stopped moving); unset once they move."""
    suspended_since: datetime | None = None
    """When the job was first seen suspended (spec.suspendExpiry counts from it); unset
    while it runs."""
    suspend_expired: bool = False
    """The suspension outlasted spec.suspendExpiry.after (the SuspendExpired Event was given)."""
    rate_limited_pause_since: datetime | None = None
    """When the job paused itself, every fetch pushed back for spec.autoPause.rateLimitedFor
    (the RateLimited Event); unset while it is not paused so."""
    pushback_counted_from: datetime | None = None
    """The earliest pushback spec.autoPause counts: when the job was last resumed (by itself
    after resumeAfter, or by hand), so an old run of pushback does not pause it at once."""


class RunStatus(_Observed):
    """One run of a scheduled job (spec.schedule), in status.runs."""

    id: str
    """The run's id: its due time in UTC (20261202T081500Z), which sorts as time does; its
    output is under <destination>/runs/<id>/."""
    started_at: datetime | None = None
    """When the run started."""
    ended_at: datetime | None = None
    """When the run ended; unset while it runs."""
    pages: int = 0
    """Pages fetched and done in the run."""
    changed: int = 0
    """Revisited pages whose content had changed."""
    unchanged: int = 0
    """Revisited pages that had not changed (304 Not Modified included)."""
    outcome: Literal["Running", "Succeeded", "Failed", "Cancelled"] = "Running"
    """Running; Succeeded (its state is committed: the next run starts from it); Failed or
    Cancelled (suspended, or replaced by the next run under concurrencyPolicy Replace): it
    committed nothing, and the next run starts from the last successful one's state."""


class FreshnessStatus(_Observed):
    """How fresh a job with revisit rules (spec.recrawl) keeps its pages: set for such jobs
    instead of a progress that never ends."""

    tracked: int = 0
    """URLs with a revisit schedule (those a recrawl rule matched)."""
    due: int = 0
    """Revisits that are due and not fetched yet: a number that keeps growing means the
    workers do not keep up with the rules' intervals."""
    next_revisit_at: datetime | None = None
    """When the next revisit is due; unset when none is scheduled."""
    lag_p50_seconds: float | None = None
    """Median time from a revisit's due time to its fetch, in seconds."""
    lag_p95_seconds: float | None = None
    """95th percentile of the time from a revisit's due time to its fetch, in seconds."""
    changed: int = 0
    """Revisits that found the page changed."""
    unchanged: int = 0
    """Revisits that found the same body (its digest), fetched in full."""
    not_modified: int = 0
    """Revisits answered 304 Not Modified: asked with the page's validators, no body sent."""
    gone: int = 0
    """Tracked pages that answered 404 or 410 on a revisit, and are no longer revisited."""


class FilesStatus(_Observed):
    """What a job with file rules (spec.files) downloaded in its run: set for such jobs only."""

    stored: int = 0
    """Files stored: new content, verified and durable in the destination."""
    bytes: int = 0
    """Bytes of the files stored (new content only)."""
    duplicates: int = 0
    """Files whose bytes were stored already (by this run or an earlier one): their records
    point at that copy, and they cost no storage."""


class CrawlJobStatus(_Observed):
    """What the operator observed; counters default to 0 so printer columns never show blanks."""

    phase: Phase = "Pending"
    """Where the job is in its life: Pending (setting up), Running, Scheduled (a scheduled
    job between runs), Suspended, Succeeded (nothing left to crawl) or Failed."""
    conditions: tuple[Condition, ...] = ()
    """The latest observations of the job's state, one per type, in the standard Kubernetes
    shape (kubectl wait --for=condition=Complete works)."""
    observed_generation: int | None = None
    """The metadata.generation this status describes; less than metadata.generation means the
    operator has not acted on the latest spec change yet."""
    replicas: int = 0
    """Worker pods that exist (the scale subresource's current replicas)."""
    ready_replicas: int = 0
    """Worker pods that are ready."""
    desired_replicas: int = 0
    """Worker pods wanted right now: the autoscaler's decision, or workers.replicas when
    autoscale is external."""
    selector: str | None = None
    """Label selector of the job's worker pods, as a string: what an HPA or KEDA read through
    the scale subresource."""
    queued: int = 0
    """URLs waiting to be fetched, retries waiting out their backoff included."""
    in_flight: int = 0
    """URLs leased to workers and being fetched right now."""
    seen: int = 0
    """Distinct URLs admitted to the crawl so far (seeds included)."""
    crawled: int = 0
    """URLs fetched and done."""
    failed: int = 0
    """URLs given up on: out of task attempts, or failed for good (they are in the dead-letter
    set)."""
    pages_per_second: float = 0.0
    """Recent crawl rate, in pages per second."""
    start_time: datetime | None = None
    """When the crawl started."""
    completion_time: datetime | None = None
    """When the crawl succeeded or failed."""
    last_scale_time: datetime | None = None
    """When the number of workers last changed."""
    message: str | None = None
    """The latest news about the job, in words for people."""
    waiting: str = ""
    """What the crawl waits for, in one word, while URLs are queued and none is fetched: the
    Waiting condition's reason (RobotsTxt, NoLiveWorker, OutputBlocked, HeldSlots,
    MemoryPressure, RetryBackoff, HostDelay, Downloading, Suspended; NextRevisit for a job that
    keeps going and has nothing to do until its next revisit is due), else the Stalled condition's
    (StuckFetching, StuckProcessing, StuckOutput) while leases do not move; empty while the
    crawl moves. The conditions' messages say the rest."""
    freshness: FreshnessStatus | None = None
    """For a job with revisit rules: what is tracked, due, how late revisits are, and what
    they found."""
    files: FilesStatus | None = None
    """For a job with file rules: the files it stored, their bytes, and the duplicates."""
    fleet: FleetStatus | None = None
    """The fleet brain's memory (scale-down window, completion grace), for the operator."""
    frontier_epoch: str | None = None
    """The epoch the job's frontier was created with. A Redis that answers with another epoch,
    or with none, has lost the frontier (condition FrontierLost)."""
    frontier_shards: int | None = None
    """The partitions the job's frontier was created with (spec.frontier.shards then): a spec
    that asks for another count is refused (InvalidSpec), since each host's keys stay where
    this count put them. Unset until the frontier exists (and for a frontier made before
    partitions: 1)."""
    bloom_fill_ratio: float = 0.0
    """Distinct URLs seen as a share of dedup.capacity; past 0.8 the BloomNearlyFull condition
    is set (the filter grows past 1.0, at a tighter error rate per layer)."""
    bloom_false_positive_rate: float = 0.0
    """The Bloom filter's estimated false-positive rate now: the share of new URLs wrongly taken
    for seen."""
    bloom_layers: int = 0
    """Layers of the Bloom filter: 1 until the URLs seen pass a layer's capacity."""
    local_dedup_hit_rate: float | None = None
    """Share of the links the live workers found that they answered themselves, from their
    bounded caches of links the job's filter already saw, instead of asking the frontier:
    local hits / (local hits + remote checks), summed over the live workers' heartbeats. Unset
    until a worker has checked a link."""
    frontier_memory_used_bytes: int = 0
    """Memory the job's Redis uses, in bytes (used_memory)."""
    frontier_memory_max_bytes: int = 0
    """The Redis's maxmemory, in bytes; 0: no limit set."""
    next_run_at: datetime | None = None
    """A scheduled job's next due time (unset while suspended, and for a job without
    spec.schedule)."""
    current_run: str | None = None
    """The id of the run going now, of a scheduled job; unset between runs."""
    runs: tuple[RunStatus, ...] = ()
    """A scheduled job's last runs, newest first, at most spec.schedule.historyLimit."""
    runs_skipped: int = 0
    """Due times of a scheduled job that started no run because the last run was still going
    (concurrencyPolicy Forbid; each a RunSkipped Event)."""
    frontier_pressure: Literal["None", "High", "Critical"] = "None"
    """Memory backpressure on the frontier: High past 80% of maxmemory (fewer claims, a budget
    of new links per page), Critical past 95% (no new links admitted); None again below 70%."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def workers(self) -> str:
        """Ready/desired worker replicas, for kubectl get."""
        return f"{self.ready_replicas}/{self.desired_replicas}"

    def to_mapping(self) -> dict[str, JsonValue]:
        """The camelCase status, ready for a status patch."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
