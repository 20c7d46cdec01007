"""Process knobs: how crawlfleet's own processes run, once, as frozen documented values.

What a crawl does belongs to the CrawlJob (``crawlfleet/crawljob/`` holds every default and
bound of the spec). How the processes that run it behave -- how long a worker drains, how often
the steering tick runs, which ports a process listens on -- is here, and nowhere else: the CLI,
the local runner, the operator, the workers and the manifests the operator writes all read these
values.

Precedence, lowest first: the defaults below; ``CRAWLFLEET_*`` environment variables, read once
at start-up by :meth:`Config.from_env` (each field names its variable); command-line flags
(``cli.py`` applies them with :func:`dataclasses.replace`); the job's spec, where it has a say.

The drain budget is the one figure two processes must agree on: a worker told to stop gives its
fetches ``grace_seconds``, its last output files ``output_seconds`` to become durable, its loops
``settle_seconds`` and its last flush ``exit_seconds``, so the pod's
``terminationGracePeriodSeconds`` and the local runner's wait are
:attr:`DrainConfig.budget_seconds`, derived, never typed a second time.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from crawlfleet import __version__
from crawlfleet.errors import ConfigError

if TYPE_CHECKING:
    from crawlfleet.crawljob.seed_list import SeedListBounds

__all__ = [
    "ENV_PREFIX",
    "LINK_CACHE_GENERATION_SIZE",
    "LINK_SPOOL_BYTES",
    "Config",
    "DrainConfig",
    "OperatorConfig",
    "OutputConfig",
    "RunConfig",
    "SeedListConfig",
    "SteeringConfig",
    "WorkerConfig",
    "environment_variables",
]

ENV_PREFIX: Final = "CRAWLFLEET_"

#: Links in each of the two generations of a worker's local link cache
#: (crawler/links/admission.py, which states the memory it bounds: about 24 MB at this size).
LINK_CACHE_GENERATION_SIZE: Final = 65_536

#: The bytes of links a worker may spool for a frontier partition that is down
#: (crawler/worker/spool.py): about 400,000 links of 100-character URLs.
LINK_SPOOL_BYTES: Final = 64 * 1024 * 1024


def _env(name: str) -> dict[str, str]:
    """Field metadata: the field is read from ``CRAWLFLEET_<name>``."""
    return {"env": ENV_PREFIX + name}


@dataclass(frozen=True, slots=True)
class OutputConfig:
    """How a worker makes its output durable (DESIGN §8); what it writes is the spec's."""

    #: A generation of output files is sealed at this many records, whatever its size or
    #: age, so the leases waiting for it (extended at every heartbeat) stay a bounded batch.
    max_records_per_file: int = 10_000
    #: Generations sealed and not yet durable before the worker stops claiming (backpressure).
    max_pending_files: int = 4
    #: Longest wait between two attempts to make a file durable (the backoff's cap).
    retry_max_seconds: float = 30.0
    #: One request to an S3-compatible store: connecting, then the whole exchange.
    connect_timeout_seconds: float = 5.0
    request_timeout_seconds: float = 30.0
    #: Where files bound for a bucket are written before their upload. None: the temporary
    #: folder (an emptyDir at /tmp in a pod).
    spool_dir: Path | None = field(default=None, metadata=_env("SPOOL_DIR"))

    @property
    def upload_attempt_seconds(self) -> float:
        """The longest one upload attempt takes before it fails: the drain's output budget."""
        return self.connect_timeout_seconds + self.request_timeout_seconds


@dataclass(frozen=True, slots=True)
class DrainConfig:
    """A worker's shutdown after SIGTERM, in four steps with a budget each.

    It stops claiming at once; in-flight fetches get ``grace_seconds`` to finish (what is left
    is released, not failed: no attempt counted); its open output files are then sealed and
    get ``output_seconds`` to become durable and their pages acked (pages whose file is still
    not durable are released, to be crawled again); the heartbeat and flush loops then get
    ``settle_seconds`` to end; the last flush and closing get ``exit_seconds``. A worker that
    overruns the sum is killed, and only then are its leftover leases requeued.
    """

    grace_seconds: float = field(default=25.0, metadata=_env("GRACE_SECONDS"))
    #: One upload attempt's worst case (OutputConfig.upload_attempt_seconds), so the last
    #: files get at least one whole try; a destination down for longer costs a re-crawl.
    output_seconds: float = field(default=35.0, metadata=_env("OUTPUT_DRAIN_SECONDS"))
    settle_seconds: float = 10.0
    exit_seconds: float = 5.0

    @property
    def budget_seconds(self) -> int:
        """Whole seconds from SIGTERM to exit, at the most: the pod's termination grace."""
        return math.ceil(
            self.grace_seconds + self.output_seconds + self.settle_seconds + self.exit_seconds
        )


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """``crawlfleet worker``: one crawl process (a pod's container, or a child of a run)."""

    job_file: str | None = field(default=None, metadata=_env("JOB_FILE"))
    #: The job's Redis; may hold a password, so it is kept out of ``repr``.
    redis_url: str | None = field(default=None, repr=False, metadata=_env("REDIS_URL"))
    #: None: the pod name (POD_NAME), else ``<host>-<pid>``.
    worker_id: str | None = field(default=None, metadata=_env("WORKER_ID"))
    #: Append ``#<random>``: a restarted container is a new worker (pods keep their name).
    incarnation: bool = field(default=False, metadata=_env("INCARNATION"))
    output_dir: Path = field(default=Path("crawl-output"), metadata=_env("OUTPUT_DIR"))
    #: 0: no /metrics endpoint.
    metrics_port: int = field(default=0, metadata=_env("METRICS_PORT"))
    metrics_host: str = field(default="0.0.0.0", metadata=_env("METRICS_HOST"))
    drain: DrainConfig = field(default_factory=DrainConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    #: Where pages go (``--output``): a folder, file:// or s3:// URL, over the job's own
    #: output.destination; with neither, the folder ``output_dir``.
    destination: str | None = field(default=None, metadata=_env("OUTPUT"))
    #: Where a worker that must stop writes why (``<Reason>: <sentence>``), for whatever
    #: runs it: a pod's terminationMessagePath, or the local runner's ``logs/<worker>.exit``
    #: (crawlfleet.fleet.exits). None: only stderr says it.
    termination_log: Path | None = field(default=None, metadata=_env("TERMINATION_LOG"))
    #: How long a finished fetch waits for others to share its flush (one ack per batch).
    flush_linger_seconds: float = 0.005
    #: How long the claim loop sleeps when it has no room or found nothing.
    idle_poll_seconds: float = 0.05
    #: With little room, how long to wait for more before claiming (claims in batches).
    claim_batch_wait_seconds: float = 0.005
    #: Finished pages held before the claim loop stops claiming (backpressure).
    max_buffered: int = 512
    #: The memory this worker may use, in bytes, from which its body budget is derived
    #: (crawler/fetching/memory.py). None: the container's cgroup limit, or 1 GiB without one; set
    #: it where several workers share one limit. 0: no budget (the benchmark's A/B comparison).
    memory_limit_bytes: int | None = field(default=None, metadata=_env("MEMORY_LIMIT_BYTES"))
    #: Links per generation of the worker's local link cache (two are kept): a larger one
    #: answers more repeats on a site with a wide menu, for more memory; 1 or more.
    link_cache_generation_size: int = field(
        default=LINK_CACHE_GENERATION_SIZE, metadata=_env("LINK_CACHE_GENERATION_SIZE")
    )
    #: With a partitioned frontier, where links bound for a partition that is down wait until
    #: it answers (crawler/worker/spool.py; a folder per worker under it), and how many bytes
    #: they may take before the worker stops claiming. None: a temporary folder.
    link_spool_dir: Path | None = field(default=None, metadata=_env("LINK_SPOOL_DIR"))
    link_spool_bytes: int = field(default=LINK_SPOOL_BYTES, metadata=_env("LINK_SPOOL_BYTES"))


@dataclass(frozen=True, slots=True)
class SteeringConfig:
    """Knobs of the steering tick that a CrawlJob does not set (shared by run and operator)."""

    #: How long a started worker may take to send its first heartbeat (imports, a pulled
    #: image, a loaded node) before it counts as dead: a startup probe's budget. It claims
    #: nothing before that heartbeat, so waiting costs no leases.
    startup_grace_seconds: float = field(default=60.0, metadata=_env("STARTUP_GRACE_SECONDS"))
    #: A delayed retry due within this many seconds asks for one worker (a worker takes about
    #: this long to start), so a fleet scaled to zero wakes in time for it; see
    #: docs/steering.md, "Delayed retries are demand".
    retry_lead_seconds: float = field(default=10.0, metadata=_env("RETRY_LEAD_SECONDS"))
    #: Workers that die this many times in a row within ``startup_grace_seconds`` of their
    #: start, with the same error, are failing, not unlucky: ``crawlfleet run`` stops with
    #: the error, the operator sets the ``WorkersFailing`` condition (docs/steering.md).
    crash_loop_deaths: int = field(default=3, metadata=_env("CRASH_LOOP_DEATHS"))
    #: For tests: a file whose ISO 8601 text is the time a scheduled job's due times are read
    #: against (crawlfleet.fleet.clock.FileClock), instead of the wall clock. Unset: the clock.
    schedule_clock_file: Path | None = field(default=None, metadata=_env("SCHEDULE_CLOCK_FILE"))


@dataclass(frozen=True, slots=True)
class RunConfig:
    """``crawlfleet run``: a whole job on one machine."""

    #: Use this Redis instead of starting a private one; may hold a password.
    redis_url: str | None = field(default=None, repr=False, metadata=_env("REDIS_URL"))
    #: A full steering tick at least this often.
    tick_seconds: float = field(default=0.25, metadata=_env("RUN_TICK_SECONDS"))
    #: In between, one read of the job's counters and a waitpid per worker this often: the
    #: end of the crawl or a dead worker is acted on within a poll, not a tick.
    poll_seconds: float = field(default=0.05, metadata=_env("RUN_POLL_SECONDS"))
    #: The frontier's counters are exact and read in one command (a page's links are enqueued
    #: before it is acked, in one script), so "seeded, nothing queued, delayed or leased" is
    #: final the moment it is seen: no worker can undo it, and a run needs no grace.
    completion_grace_seconds: float = 0.0
    #: A plain progress line this often when stderr is not a terminal.
    progress_seconds: float = field(default=5.0, metadata=_env("PROGRESS_SECONDS"))


@dataclass(frozen=True, slots=True)
class SeedListConfig:
    """The bounds of a seedsFrom list (crawljob/seed_list.py holds the defaults and the why),
    as the administrator moves them: the operator's (the chart's ``policy.seedList``), and those
    of ``crawlfleet validate`` and ``crawlfleet run``. None: the default."""

    #: Bytes a list may hold once decompressed.
    max_bytes: int | None = field(default=None, metadata=_env("SEED_LIST_MAX_BYTES"))
    #: Lines a list may have, blank and comment lines included.
    max_lines: int | None = field(default=None, metadata=_env("SEED_LIST_MAX_LINES"))

    def bounds(self) -> SeedListBounds:
        """As the reader takes them (a bound below 1 is a ConfigError naming its variable)."""
        from crawlfleet.crawljob.seed_list import SeedListBounds  # the model, when it is read

        return SeedListBounds.of(self.max_bytes, self.max_lines)


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    """``crawlfleet operator``: the kopf controller of CrawlJobs."""

    namespaces: tuple[str, ...] = field(default=(), metadata=_env("NAMESPACES"))
    peering: str = field(default="crawlfleet", metadata=_env("PEERING"))
    metrics_port: int = field(default=9090, metadata=_env("METRICS_PORT"))
    health_port: int = field(default=8080, metadata=_env("HEALTH_PORT"))
    bind_host: str = field(default="0.0.0.0", metadata=_env("BIND_HOST"))
    #: The image of jobs that name none.
    worker_image: str = field(
        default=f"crawlfleet/worker:{__version__}", metadata=_env("WORKER_IMAGE")
    )
    #: A full steering tick of each job at least this often (status, heartbeats, requeues).
    tick_seconds: float = field(default=5.0, metadata=_env("TICK_SECONDS"))
    #: The destination of jobs that name none (the chart's ``defaultOutput``), as JSON:
    #: ``{"destination": "s3://bucket/prefix/", "s3": {"endpoint", "region", "pathStyle",
    #: "secretRef": {"name"}}, "secretNamespace": "...", "namespaces": {NAME: {"destination",
    #: "s3"}}}`` (each namespace its own; the shared part optional); parsed by operator/output.py.
    #: None: such jobs get OutputNotDurable unless they say output.ephemeral.
    default_output: str | None = field(default=None, metadata=_env("DEFAULT_OUTPUT"))
    #: In between, a one-read check of the frontier's counters: a backlog that needs more
    #: workers, or a queue that ran dry, is acted on within this time.
    check_seconds: float = field(default=1.0, metadata=_env("CHECK_SECONDS"))
    #: How late a check may be, at random, so a thousand jobs created at once do not all hit
    #: their Redis and the API server in the same instant.
    tick_jitter_seconds: float = field(default=0.2, metadata=_env("TICK_JITTER_SECONDS"))
    #: How often a running job's seedsFrom ConfigMap is looked at (its metadata only, one small
    #: GET) for a changed list, whose new seeds the tick then queues (SeedsAdded).
    seeds_from_check_seconds: float = field(default=30.0, metadata=_env("SEEDS_FROM_CHECK_SECONDS"))
    #: Seeded and nothing left for this long: the job is complete. Longer than a run's zero,
    #: since the operator reads the counters through a network that may lag behind.
    completion_grace_seconds: float = field(default=5.0, metadata=_env("COMPLETION_GRACE_SECONDS"))
    #: How long one of the operator's own API calls keeps retrying a throttled (429), failing
    #: (5xx) or unreachable API server, with backoff and its Retry-After, before the handler
    #: gives up and kopf retries it later: an API server restart or a burst of load is ridden
    #: out inside the call, so the decision it carries (a scale, a child) is not dropped.
    api_retry_seconds: float = field(default=30.0, metadata=_env("API_RETRY_SECONDS"))
    #: The tenancy policy (crawlfleet/tenancy.py, docs/security.md): image prefixes a job may
    #: name in workers.image (empty: the repository of ``worker_image``) and in
    #: redis.managed.image; ``*`` allows any.
    allowed_worker_images: tuple[str, ...] = field(
        default=(), metadata=_env("ALLOWED_WORKER_IMAGES")
    )
    allowed_redis_images: tuple[str, ...] = field(
        default=("redis", "docker.io/library/redis"), metadata=_env("ALLOWED_REDIS_IMAGES")
    )
    #: Volume types output.volume may be. The defaults reach no further than the tenant already
    #: does: a claim of its own namespace (bound by its StorageClasses and quotas), a generic
    #: ephemeral claim, scratch space on the pod. Every other kind reaches the node (hostPath),
    #: storage by the node's network or identity (nfs, iscsi, cephfs, cloud disks, inline CSI
    #: drivers) or the namespace's configuration and tokens (secret, configMap, projected).
    allowed_volume_types: tuple[str, ...] = field(
        default=("emptyDir", "ephemeral", "persistentVolumeClaim"),
        metadata=_env("ALLOWED_VOLUME_TYPES"),
    )
    #: ``key=value`` that a Secret named by a job (redis.secretRef, output.s3.secretRef) must
    #: carry; empty: any Secret of the job's namespace.
    secret_label: str = field(
        default="crawlfleet.io/crawljob-secret=true", metadata=_env("SECRET_LABEL")
    )
    #: Hosts an external Redis of a job (redis.url, or the URL in redis.secretRef's Secret)
    #: may be on, which the operator and the workers then connect to: names (``redis.shared``),
    #: name suffixes (``.redis.example``), networks of IP literals (``10.20.0.0/16``), or ``*``.
    #: Empty: none, every job gets a managed Redis (crawlfleet/tenancy.py says why).
    allowed_redis_hosts: tuple[str, ...] = field(default=(), metadata=_env("ALLOWED_REDIS_HOSTS"))
    #: The namespace of the operator's pod (the chart passes it), so that each managed Redis's
    #: NetworkPolicy admits the operator by namespace as well as labels. None: outside a pod.
    pod_namespace: str | None = field(default=None, metadata=_env("POD_NAMESPACE"))
    #: Give each job's workers an egress NetworkPolicy (operator/children.py says what it
    #: admits); ``cluster_cidrs`` are the cluster's pod, Service and node ranges it keeps them
    #: out of, beyond the private ranges (a cluster on public addresses needs them).
    worker_egress: bool = field(default=True, metadata=_env("WORKER_EGRESS"))
    cluster_cidrs: tuple[str, ...] = field(default=(), metadata=_env("CLUSTER_CIDRS"))
    #: Labels of the operator's own pods, admitted to each managed Redis by NetworkPolicy. The
    #: component is part of it: the chart's object store shares the name label, and must not
    #: reach any job's Redis.
    operator_labels: Mapping[str, str] = field(
        default_factory=lambda: types.MappingProxyType(
            {
                "app.kubernetes.io/name": "crawlfleet-operator",
                "app.kubernetes.io/component": "operator",
            }
        )
    )
    #: ``key=value`` that a ConfigMap named by spec.seedsFrom must carry; empty: any ConfigMap
    #: of the job's namespace. None: crawlfleet.tenancy.SEED_LIST_LABEL.
    seeds_label: str | None = field(default=None, metadata=_env("SEEDS_LABEL"))


@dataclass(frozen=True, slots=True)
class Config:
    """Every process knob, by the process it belongs to."""

    log_level: str | None = field(default=None, metadata=_env("LOG_LEVEL"))
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    run: RunConfig = field(default_factory=RunConfig)
    steering: SteeringConfig = field(default_factory=SteeringConfig)
    operator: OperatorConfig = field(default_factory=OperatorConfig)
    seed_list: SeedListConfig = field(default_factory=SeedListConfig)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """The defaults, overridden by ``CRAWLFLEET_*`` variables; call once, at start-up.

        A variable that does not parse is a :class:`ConfigError` naming it.
        """
        loaded: Config = _load(cls, os.environ if environ is None else environ)
        return loaded


def environment_variables() -> list[tuple[str, str, object]]:
    """Every variable :meth:`Config.from_env` reads: (name, field path, default), for docs."""
    found: list[tuple[str, str, object]] = []

    def walk(cls: type[Any], path: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{path}{f.name}.")
            elif "env" in f.metadata:
                default = f.default if f.default is not dataclasses.MISSING else None
                found.append((f.metadata["env"], path + f.name, default))

    walk(Config, "")
    return found


def _load(cls: type[Any], environ: Mapping[str, str]) -> Any:
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            values[f.name] = _load(typing.cast(type[Any], kind), environ)
            continue
        name = f.metadata.get("env")
        raw = environ.get(name) if name else None
        if name is None or raw is None:
            continue
        values[f.name] = _parse(name, raw, kind)
    return cls(**values)


def _parse(name: str, raw: str, kind: Any) -> object:
    """One variable's text as its field's type; the variable is named when it does not fit."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    base = args[0] if typing.get_origin(kind) in (typing.Union, types.UnionType) else kind
    text = raw.strip()
    try:
        if base is bool:
            lowered = text.lower()
            if lowered not in ("", "0", "1", "true", "false", "yes", "no"):
                raise ValueError("not a boolean (use true or false)")
            return lowered in ("1", "true", "yes")
        if base is int:
            return int(text)
        if base is float:
            value = float(text)
            if not math.isfinite(value) or value < 0:
                raise ValueError("not a finite number of at least 0")
            return value
        if base is Path:
            return Path(text)
        if typing.get_origin(base) is tuple:
            return tuple(item.strip() for item in text.split(",") if item.strip())
    except ValueError as error:
        raise ConfigError(f"{name}={raw!r}: {error}") from None
    return raw
