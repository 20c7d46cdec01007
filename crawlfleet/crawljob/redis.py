"""``spec.redis``: where the frontier lives (a URL, a Secret holding one, or a managed Redis).

A URL is refused here for what redis-py's ``from_url`` would refuse when the frontier connects,
without ever echoing its password. ``redis+cluster://`` (``rediss+cluster://``) names a Redis
Cluster by any one of its nodes: the frontier then uses redis-py's cluster client, which finds
the other nodes itself (docs/scale.md). A managed Redis's memory bounds and its ``maxmemory`` share
are here too: the operator sizes the Redis container from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, ClassVar, Final, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, model_validator

from crawlfleet.crawljob.base import Cel, MaxLength, Rule, Section
from crawlfleet.crawljob.fields import OBJECT_NAME, QUANTITY, SECRET_KEY, Image, parse_quantity
from crawlfleet.crawljob.validation import problem, show

__all__ = [
    "CLUSTER_SCHEMES",
    "REDIS_MAXMEMORY_SHARE",
    "ManagedRedis",
    "Persistence",
    "RedisSpec",
    "SecretRef",
]

_MAX_REDIS_URL_LENGTH: Final = 2048

#: URL schemes naming a Redis Cluster, and the one-node scheme each stands for: the
#: ``+``-composition Celery's and kombu's ``redis+socket://`` made familiar. A cluster has
#: only database 0, so its URL names no other.
CLUSTER_SCHEMES: Final[dict[str, str]] = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

_REDIS_URL: Final = (
    "must be a redis://host[:port][/db], rediss://host[:port][/db], unix:///path,"
    " redis+cluster://host[:port] or rediss+cluster://host[:port] URL"
    " (connection options are the operator's)"
)


def _redis_url(url: str) -> str:
    """Refuse what redis-py's ``from_url`` would refuse when the frontier connects.

    The URL may carry a password: the message never echoes it.
    """
    try:
        parts = urlsplit(url)
        scheme, port = parts.scheme, parts.port  # .port raises ValueError on a bad port
        valid = (
            scheme in ("redis", "rediss", "unix", *CLUSTER_SCHEMES)
            and not parts.query
            and not parts.fragment
            and not any(char.isspace() or ord(char) < 32 for char in url)
            and port != 0
        )
        if scheme == "unix":
            valid = valid and bool(parts.path) and not parts.netloc
        else:
            db = parts.path.removeprefix("/")
            dbs_allowed = ("", "0") if scheme in CLUSTER_SCHEMES else None
            valid = (
                valid
                and bool(parts.hostname)
                and (db == "" or db.isdecimal())
                and (dbs_allowed is None or db in dbs_allowed)
            )
    except ValueError:
        valid = False
    if not valid:
        raise problem(_REDIS_URL)
    return url


# The same shape for the API server, but for the port's range (the operator's InvalidSpec).
_REDIS_URL_CEL: Final = Cel(
    r"self.matches(r'^rediss?://([^/?#\s@]*@)?(\[[0-9a-fA-F:.]+\]|[^/?#\s@:\[\]]+)"
    r"(:[0-9]+)?(/[0-9]*)?$')"
    r" || self.matches(r'^rediss?\+cluster://([^/?#\s@]*@)?(\[[0-9a-fA-F:.]+\]|[^/?#\s@:\[\]]+)"
    r"(:[0-9]+)?(/0?)?$')"
    r" || self.matches(r'^unix:///[^?#\s]*$')",
    _REDIS_URL,
)


class SecretRef(Section):
    """A key of a Secret in the job's namespace."""

    name: Annotated[str, OBJECT_NAME]
    """Name of the Secret, in the CrawlJob's namespace. The operator uses only a Secret labelled
    for CrawlJobs (crawlfleet.io/crawljob-secret=true by default; docs/security.md)."""
    key: Annotated[str, SECRET_KEY] = "url"
    """Key in the Secret whose value is the Redis URL (password included)."""


class Persistence(Section):
    """Whether the managed Redis keeps its data on a PersistentVolumeClaim."""

    enabled: bool = True
    """Keep the managed Redis's data (append-only file, fsynced every second) on a
    PersistentVolumeClaim, so the frontier survives the Redis pod being deleted, evicted or
    rescheduled. Off: the data lives as long as the pod, and a restarted Redis comes back
    empty (the job then fails with FrontierLost unless redis.onLoss is Reseed)."""
    size: Annotated[str, QUANTITY] = "1Gi"
    """Size of the claim, as a Kubernetes quantity. Room for the append-only file: about twice
    the Redis memory in use (an AOF rewrite writes a new file beside the old)."""
    storage_class_name: Annotated[str, OBJECT_NAME] | None = None
    """StorageClass of the claim. Unset: the cluster's default StorageClass."""


def _memory_bytes(value: str) -> int:
    """A memory quantity in bytes (the pattern has already refused what is none)."""
    amount = parse_quantity(value)
    assert amount is not None, "checked by QUANTITY first"
    return int(amount)


_REDIS_MEMORY_LOW: Final = "64Mi"  # Redis itself wants a few MiB
_REDIS_MEMORY_HIGH: Final = "1Ti"  # past it, no node holds it
_REDIS_MEMORY_RANGE: Final = f"must be between {_REDIS_MEMORY_LOW} and {_REDIS_MEMORY_HIGH}"


def _redis_memory(value: str) -> str:
    """Within the bounds; ``_REDIS_MEMORY_CEL`` says the same with the quantity library."""
    if (
        not _memory_bytes(_REDIS_MEMORY_LOW)
        <= _memory_bytes(value)
        <= _memory_bytes(_REDIS_MEMORY_HIGH)
    ):
        raise problem(f"{_REDIS_MEMORY_RANGE} (got {show(value)})")
    return value


_REDIS_MEMORY_CEL: Final = Cel(
    f"!isQuantity(self) || (quantity(self).compareTo(quantity('{_REDIS_MEMORY_LOW}')) >= 0"
    f" && quantity(self).compareTo(quantity('{_REDIS_MEMORY_HIGH}')) <= 0)",
    _REDIS_MEMORY_RANGE,
)
_RedisMemory = Annotated[str, QUANTITY, AfterValidator(_redis_memory), _REDIS_MEMORY_CEL]
#: The share of the container's memory limit that Redis may use for data (its maxmemory): the
#: rest is for the allocator's fragmentation, client buffers, Lua and the copy-on-write pages
#: of the child that rewrites the append-only file (docs/operations.md has the arithmetic).
REDIS_MAXMEMORY_SHARE: Final = 0.8


class ManagedRedis(Section):
    """A Redis the operator runs for one job."""

    image: Image = "redis:7.4-alpine"
    """Redis container image; any Redis 6 or newer works (the Bloom filter needs no module)."""
    persistence: Persistence = Persistence()
    """Whether the managed Redis keeps its data on a volume."""
    memory_request: _RedisMemory = "256Mi"
    """Memory the Redis container asks the scheduler for, as a Kubernetes quantity."""
    memory_limit: _RedisMemory = "1Gi"
    """The Redis container's memory limit, as a Kubernetes quantity. Redis's maxmemory is set
    to 80% of it (the rest covers fragmentation, client buffers and the append-only file's
    rewrite), with no eviction: near maxmemory the fleet slows down instead of losing URLs.
    About 1.2 MB per million URLs of dedup.capacity, plus the queued URLs."""

    cross_field_rules: ClassVar[tuple[Rule[ManagedRedis], ...]] = (
        Rule(
            field="memoryRequest",
            message="must not be greater than memoryLimit",
            cel="!isQuantity(self.memoryRequest) || !isQuantity(self.memoryLimit)"
            " || quantity(self.memoryRequest).compareTo(quantity(self.memoryLimit)) <= 0",
            holds=lambda managed: (
                _memory_bytes(managed.memory_request) <= _memory_bytes(managed.memory_limit)
            ),
            shows=("memoryRequest", "memoryLimit"),
        ),
    )

    @property
    def max_memory_bytes(self) -> int:
        """Redis's maxmemory: a share of the container's limit, in bytes."""
        return int(_memory_bytes(self.memory_limit) * REDIS_MAXMEMORY_SHARE)


class RedisSpec(Section):
    """Where the frontier lives: a URL, a Secret holding one, or a Redis the operator runs."""

    url: (
        Annotated[str, MaxLength(_MAX_REDIS_URL_LENGTH), AfterValidator(_redis_url), _REDIS_URL_CEL]
        | None
    ) = Field(default=None, repr=False)
    """URL of an existing Redis (redis://, rediss:// or unix://), or of a Redis Cluster by any
    one of its nodes (redis+cluster://, rediss+cluster://; docs/scale.md). It may carry a
    password, which anyone who can read the CrawlJob then sees: prefer secretRef."""
    secret_ref: SecretRef | None = None
    """A Secret holding the URL of an existing Redis, password included."""
    managed: ManagedRedis | None = None
    """A Redis the operator runs for this job alone, with a generated password and a network
    policy that admits only the job's pods. The default when neither url nor secretRef is set."""
    on_loss: Literal["Fail", "Reseed"] = "Fail"
    """What to do when the frontier comes back empty or without this job's data (a Redis
    restarted without its volume, flushed, or replaced). Fail: the job fails with the
    FrontierLost condition, so nothing is crawled twice or skipped without anyone knowing.
    Reseed: the seeds are queued again on the empty frontier, recorded as an Event; pages
    crawled before the loss are crawled again."""

    cross_field_rules: ClassVar[tuple[Rule[RedisSpec], ...]] = (
        Rule(
            field=None,
            message="url, secretRef and managed are alternatives: set at most one",
            cel="[has(self.url), has(self.secretRef), has(self.managed)].filter(x, x).size() <= 1",
            holds=lambda redis: (
                sum(part is not None for part in (redis.url, redis.secret_ref, redis.managed)) <= 1
            ),
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _default_to_managed(cls, data: object) -> object:
        # A CRD default cannot depend on sibling fields, so "managed unless told otherwise" is here.
        if isinstance(data, Mapping) and all(
            data.get(key) is None for key in ("url", "secretRef", "secret_ref", "managed")
        ):
            return {**data, "managed": {}}
        return data
