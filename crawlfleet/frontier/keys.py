"""Every Redis key of a job, built in one place.

All keys of one job share the hash tag ``{<namespace>.<name>}`` so that the whole job lives in
one Redis Cluster slot and every Lua script may touch any of them. A job split into
``frontier.shards`` partitions (DESIGN §7) has one tag per partition: partition 0, the job's
*home*, keeps ``{<namespace>.<name>}`` (so ``shards: 1`` is the layout it always was), and
partition k ≥ 1 is ``{<namespace>.<name>#k}`` (``#`` cannot appear in a Kubernetes name, so
no job's keys collide with another job's partitions). Which partition a host's URLs live in
is :func:`partition_of`; every key a script derives from the prefix carries the partition's
tag, so a script still touches one slot.

Scripts receive the fixed keys in :data:`SCRIPT_KEYS` order (``KEYS[1..n]``) and the prefix as
``ARGV[1]``; the keys whose names depend on data are derived from the prefix in the script:
the per-host queues (``q:<depth>:<host>``), the robots.txt fetch locks
(``robots-lock:<origin>``) and the Bloom segments (``bloom:<layer>:<segment>``, as many as
the filter has grown to), the chunks of tracked URLs at rest per host (``rv:<k>:<host>``)
and the committed copy a recurring run restores (``run:…``: ``run:meta``, ``run:rv-index``,
``run:rv-open``, ``run:rv:<k>:<host>``, ``run:bloom:<layer>:<segment>``, ``run:bf``), and
the file downloads' keys (``files:slots:<host>`` and :data:`FILE_KEYS`), and the per-host
counters the readers of a running frontier sort by (``host-queued``, ``host-crawled``,
``host-dead``: sorted sets of host -> count, kept by lib.lua's ``count_host``;
frontier/introspection.py reads them), with a domain budget the same by registrable domain
(``domain-queued``, ``domain-admitted``) and each host's domain (``host-domain``).
``lib.lua`` spells them as :meth:`JobKeys.queue`, :meth:`JobKeys.robots_lock`,
:meth:`JobKeys.bloom_segment`, :meth:`JobKeys.revisits`, :meth:`JobKeys.committed` and
:meth:`JobKeys.file_slots` do; they carry the job's hash tag, so they share its slot.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Final

from crawlfleet.errors import ConfigError

__all__ = [
    "FILE_KEYS",
    "MAX_PARTITIONS",
    "REPLICA_MARK",
    "SCRIPT_KEYS",
    "JobKeys",
    "partition_of",
    "sibling_key",
    "validate_job_id",
]

# The order scripts read them in (lib.lua maps KEYS[i] to these names).
SCRIPT_KEYS: tuple[str, ...] = (
    "meta",
    "stats",
    "ready",
    "hosts",
    "delayed",
    "leases",
    "dead",
    "workers",
    "heartbeats",
    "robots",
    "held",
    "robots-waits",
    "robots-wait-status",
    "robots-used",
    "rv-index",
    "rv-open",
    "rv-states",
)

#: The file downloads' fixed keys, by short name (``key(FILE_KEYS["content"])``); lib.lua's
#: ``FILES`` table names the same. Not script keys: only the file scripts touch them, and
#: adding to :data:`SCRIPT_KEYS` would renumber every script's ``KEYS``.
FILE_KEYS: Final[dict[str, str]] = {
    # sha256 -> the stored copy's key (HSETNX: the first stored copy wins); kept across runs
    "content": "files:content",
    # reserved (downloads in flight) and settled (stored) bytes against files.maxTotalBytes
    "budget": "files:budget",
    # this run's counters (Frontier.count_files), reset by begin_run as stats is
    "counts": "files:counts",
    # the reservations in flight: holder (lease id) -> expiry (ms), and holder -> bytes
    "reservations": "files:reservations",
    "reserved-by": "files:reserved-by",
}

#: The short name of the key replicas.py writes before a WAIT (its value means nothing: the
#: write only makes the WAIT's connection cover every earlier write of the node).
REPLICA_MARK: Final = "replica-mark"

_JOB_ID = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def validate_job_id(job_id: str) -> str:
    """Refuse ids that would break the hash tag (``{``/``}``) or are not Kubernetes names."""
    if not job_id or len(job_id) > 317 or not _JOB_ID.match(job_id):
        raise ConfigError(
            f"job id {job_id!r} must be '<namespace>.<name>' of lower-case letters, digits, "
            "'-' and '.'"
        )
    return job_id


#: The most partitions a job's frontier may have (``frontier.shards``' bound).
MAX_PARTITIONS: Final = 256


def partition_of(host: str, shards: int) -> int:
    """The partition that holds ``host``'s URLs (``host[:port]``, :func:`crawlfleet.urls.host_of`).

    CRC-32 of the host, mixed by MurmurHash3's 32-bit finalizer, modulo ``shards``: stable
    across processes, machines and Python versions (``hash()`` is salted per process), so
    every worker routes a host alike. The mixing is not decoration: CRC-32 is linear, its low
    bits follow a few bits of the input, and ``crc32 % 8`` put 24 hosts ``h0.test`` …
    ``h23.test`` into 4 partitions of 8 (a crawl of similar subdomains would use half its
    partitions)."""
    if shards <= 1:
        return 0
    mixed = zlib.crc32(host.encode())
    mixed ^= mixed >> 16
    mixed = (mixed * 0x85EBCA6B) & 0xFFFFFFFF
    mixed ^= mixed >> 13
    mixed = (mixed * 0xC2B2AE35) & 0xFFFFFFFF
    mixed ^= mixed >> 16
    return mixed % shards


def sibling_key(key: str, name: str) -> str:
    """The fixed key ``name`` of the frontier (job, or a job's partition) that ``key`` belongs
    to: the same ``cf:{<tag>}:`` prefix, so the same hash slot. For code that is handed one
    key of a frontier and no :class:`JobKeys` (replicas.py)."""
    end = key.find("}:")
    if not key.startswith("cf:{") or end < 0:
        raise ValueError(f"{key!r} is not a key of a crawlfleet frontier (cf:{{<tag>}}:<name>)")
    return key[: end + 2] + name


@dataclass(frozen=True, slots=True)
class JobKeys:
    """Key names of one partition of one job's frontier (partition 0: the job's home)."""

    job_id: str
    partition: int = 0

    def __post_init__(self) -> None:
        validate_job_id(self.job_id)
        if not 0 <= self.partition < MAX_PARTITIONS:
            raise ConfigError(
                f"job {self.job_id}: partition {self.partition!r} is outside "
                f"0..{MAX_PARTITIONS - 1}"
            )

    @property
    def tag(self) -> str:
        """The hash tag's content: ``<ns>.<name>``, or ``<ns>.<name>#k`` for partition k ≥ 1."""
        return self.job_id if self.partition == 0 else f"{self.job_id}#{self.partition}"

    @property
    def prefix(self) -> str:
        return f"cf:{{{self.tag}}}:"

    def key(self, name: str) -> str:
        """A fixed key by its short name, e.g. ``key("stats")``."""
        return self.prefix + name

    def script_keys(self) -> list[str]:
        """KEYS for every script: the fixed keys."""
        return [self.prefix + name for name in SCRIPT_KEYS]

    def bloom_segment(self, layer: int, index: int) -> str:
        """One segment of one layer of the bitmap Bloom filter."""
        return f"{self.prefix}bloom:{layer}:{index}"

    @property
    def native_bloom(self) -> str:
        return self.prefix + "bf"

    def queue(self, host: str, depth: int) -> str:
        """One host's queued tasks of one depth (a list; see lib.lua for its entries)."""
        return f"{self.prefix}q:{depth}:{host}"

    def revisits(self, chunk: str) -> str:
        """One chunk (``<k>:<host>``, a member of ``rv-index``) of a host's tracked URLs at
        rest (a list; see revisits.py)."""
        return f"{self.prefix}rv:{chunk}"

    def committed(self, name: str) -> str:
        """A key of the committed copy of the last successful run (``committed("rv-index")``)."""
        return f"{self.prefix}run:{name}"

    def file_slots(self, host: str) -> str:
        """One host's file download slots: a sorted set of lease ids scored by expiry (ms)."""
        return f"{self.prefix}files:slots:{host}"

    @property
    def robots(self) -> str:
        return self.prefix + "robots"

    def robots_lock(self, origin: str) -> str:
        """Fleet-wide "fetching now" lock of one origin's robots.txt (``scheme://host[:port]``)."""
        return f"{self.prefix}robots-lock:{origin}"

    @property
    def pattern(self) -> str:
        """A SCAN pattern matching every key of the job (for deletion)."""
        return self.prefix.replace("{", "\\{").replace("}", "\\}") + "*"
