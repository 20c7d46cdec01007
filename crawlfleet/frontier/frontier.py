"""The frontier: the one Redis protocol that workers, the operator and the local runner share.

Every state change is one Lua script (``lua/``), so a crash between two commands cannot
leave a URL half-leased, and every batch is one round trip. Counters are kept by the scripts,
so progress and completion are O(1) reads. See docs/frontier.md for the model.

A frontier handle belongs to one *epoch*: the random id ``init`` wrote when the job's
frontier was created. Every script and every read checks it in the same round trip, so a
frontier that vanished (Redis restarted empty, the meta key deleted) or was re-created under
another epoch answers :class:`~crawlfleet.errors.FrontierLost` instead of running on
settings made up on the spot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from operator import methodcaller
from typing import Any, Final, Protocol, Self, cast

from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline
from redis.client import NEVER_DECODE
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError, ResponseError

from crawlfleet.crawljob.dedup import memory_problem
from crawlfleet.errors import (
    ConfigError,
    FrontierFull,
    FrontierLayoutMismatch,
    FrontierLost,
    FrontierUnavailable,
    InvalidURL,
    RedisTooSmall,
    UnsafeRedis,
)
from crawlfleet.frontier.bloom import (
    GROWTH,
    BloomBackend,
    BloomParams,
    digests,
    native_estimate,
    native_reserve_capacity,
)
from crawlfleet.frontier.connection import (
    RedisClient,
    call,
    check_epoch,
    close_quietly,
    connect,
    execute_keeping_refusals,
    job_node,
    retry_window_seconds,
    translate,
)
from crawlfleet.frontier.keys import FILE_KEYS, JobKeys
from crawlfleet.frontier.models import (
    LIMIT_FIELDS,
    Admission,
    Backpressure,
    DeadLetter,
    FailOutcome,
    Failure,
    FileStats,
    FrontierLimits,
    FrontierSettings,
    FrontierStats,
    FrontierWaits,
    HeartbeatValue,
    LagHistogram,
    Lease,
    LimitChange,
    Link,
    MemoryState,
    Outcomes,
    PressureLevel,
    Requeued,
    Revisit,
    RevisitState,
    RunStart,
    ScopeRules,
    WorkerHeartbeat,
)
from crawlfleet.frontier.parents import sitemap_roots
from crawlfleet.frontier.replicas import wait_for_replicas
from crawlfleet.frontier.revisits import pack_validators, read_state
from crawlfleet.frontier.robots_cache import RobotsCache
from crawlfleet.frontier.scripts import Scripts
from crawlfleet.hosts import registrable_domain
from crawlfleet.urls import CanonicalURL, canonicalize

__all__ = ["Frontier"]

log = logging.getLogger(__name__)

_STAT_FIELDS = (
    "queued",
    "delayed",
    "leased",
    "fetched",
    "crawled",
    "failed",
    "dead",
    "seen",
    "duplicates",
    "requeued",
    "released",
    "over_limit",
    "over_budget",
    "host_budget",
    "tracked",
    "revisits_due",
    "changed",
    "unchanged",
    "not_modified",
    "gone",
    "new_tracked",
    "revisit_failures",
    "untracked",
)
#: The revisit-lag histogram's counters in K.stats (lib.lua's LAG_BOUNDS).
_LAG_FIELDS = tuple(f"lag_{i}" for i in range(len(LagHistogram().counts)))
#: What a worker may report of a tracked URL (crawljob.recrawl.Change).
_CHANGES = frozenset({"new", "changed", "unchanged", "not_modified", "gone"})
_MAX_BATCH = 10_000
#: The file counters workers add to (count_files.lua), as FileStats names them.
FILE_COUNTERS: Final = ("stored", "duplicates", "bytes", "resumed", "restarts", "resumed_bytes")

#: The key layout this code reads and writes, kept in the job's meta. A frontier written by
#: another layout is refused at open (FrontierLayoutMismatch), never misread. 1: before
#: epochs; 2: epochs, loss detection and backpressure; 3: a Bloom filter that grows in
#: layers (bloom:<layer>:<segment>, the schedule in the meta); 4: compact queues (a list
#: per host and depth, q:<depth>:<host>, parents once per run); 5: triple hashing over
#: prime-sized Bloom segments (16-byte digests); 6: revisit state (rv:<k>:<host> chunks, rv-index,
#: rv-open, rv-states, the committed run:... copy) and three more fixed script keys.
LAYOUT_VERSION: Final = "6"

#: How long an enqueue waits for its links to reach ``frontier.waitReplicas`` replicas before
#: it fails as unavailable (retried): below the client's socket timeout, which would cut it.
WAIT_TIMEOUT_MS: Final = 5_000

#: The one maxmemory-policy under which Redis never drops a key to make room.
_SAFE_POLICY = "noeviction"


_URL_PREFIXES = ("http://", "https://")
_is_http = methodcaller("startswith", _URL_PREFIXES)


def _check_link_fields(links: Sequence[Link]) -> None:
    """Refuse the whole batch before anything is written if a link's depth or parent would
    break its queue entry (what :func:`_check_urls` does not look at)."""
    for link in links:
        if link.depth < 0 or "\t" in link.parent:
            raise InvalidURL(f"bad link depth or parent: {link!r}")


def _check_urls(urls: Sequence[str]) -> None:
    """Refuse the whole batch before anything is written if one URL is not canonical-shaped.

    Per batch, in C loops (map, join, ``in``): this runs before every dedup call.
    """
    try:
        joined = "\x00".join(urls)
        ok = all(map(_is_http, urls)) and not any(c in joined for c in "\t\n\r ")
    except (TypeError, AttributeError):
        ok = False
    if ok:
        return
    for url in urls:
        if not isinstance(url, str) or not url.startswith(_URL_PREFIXES):
            raise InvalidURL(f"not a canonical http(s) URL (use canonicalize()): {url!r}")
        if any(c in url for c in "\t\n\r "):
            raise InvalidURL(f"URL contains whitespace (use canonicalize()): {url!r}")


class OpenPartitioned(Protocol):
    """partitions.open_partitioned's shape (:func:`open_partitioned_by`)."""

    def __call__(
        self,
        client: RedisClient,
        settings: FrontierSettings,
        *,
        expect_epoch: str | None,
        reseed: bool,
    ) -> Awaitable[Frontier]: ...


async def _no_partitions(
    client: RedisClient, settings: FrontierSettings, *, expect_epoch: str | None, reseed: bool
) -> Frontier:
    raise ConfigError(f"job {settings.job_id}: frontier partitions are not loaded")


#: What opens a job of several partitions: partitions.py, which builds on this module, names
#: itself here when the package is imported (an import back would be a circle).
_PARTITIONED: list[OpenPartitioned] = [_no_partitions]


def open_partitioned_by(opener: OpenPartitioned) -> None:
    """Let :meth:`Frontier.open` open jobs of ``shards`` > 1 with ``opener``."""
    _PARTITIONED[0] = opener


class Frontier:
    """One job's frontier on one Redis, of one epoch. Build it with :meth:`open`."""

    def __init__(
        self,
        client: RedisClient,
        keys: JobKeys,
        settings: FrontierSettings,
        bloom: BloomParams,
        backend: BloomBackend,
        *,
        epoch: str,
        scripts: Scripts,
    ) -> None:
        self.client = client
        self.keys = keys
        self.settings = settings
        self.bloom = bloom
        self.backend = backend
        #: The id ``init`` gave the job's frontier when it was created; remember it (status,
        #: state file) and pass it back as ``expect_epoch`` to detect a lost frontier.
        self.epoch = epoch
        #: Why this open re-created the frontier (``reseed=True`` found it lost); else None.
        self.reseeded: str | None = None
        self.opened_meta: dict[str, str] = {}
        self._scripts = scripts
        #: The fleet-wide robots.txt answers of this job (the crawler's robots policy reads them).
        self.robots = RobotsCache(client, keys, scripts, epoch=epoch)
        self._keys = keys.script_keys()
        self._prefix = keys.prefix
        self._reply_keep_ms = round(retry_window_seconds(client) * 1000)
        #: Links Redis refused past maxmemory whose count it refused too (Redis 6).
        self._held_back_uncounted = 0
        #: Call ids whose replies arrived: the next state change tells Redis to drop them.
        self._received: list[str] = []
        #: When a script of this frontier last got its reply (monotonic): a partitioned
        #: frontier tells an outage of some nodes from one of Redis by it (partitions.py).
        self.answered_at = -math.inf

    async def _run(self, script: AsyncScript, *args: str | int | bytes) -> Any:
        """Run one script with the job's keys, prefix and epoch; one round trip per change."""
        reply = await call(script(keys=self._keys, args=[self._prefix, self.epoch, *args]))
        self.answered_at = time.monotonic()
        return reply

    async def _run_once(
        self, script: AsyncScript, *args: str | int | bytes, call_id: str | None = None
    ) -> Any:
        """Run a state change that must not apply twice (scripts.ONCE_SCRIPTS) under a call
        id: redis-py re-sends the same id after a lost connection, and the script answers a
        call it has applied with its first reply. A caller that retries a failed call itself
        passes the same ``call_id`` (:meth:`new_call_id`) to get the same guarantee.

        Each call also names the calls before it whose replies arrived (at most
        :data:`_RECEIVED_PER_CALL`), whose kept replies Redis then drops: a kept reply lives
        for about one call, not for the whole retry window."""
        call_id = call_id or self.new_call_id()
        received = [x for x in self._received[:_RECEIVED_PER_CALL] if x != call_id]
        del self._received[:_RECEIVED_PER_CALL]
        tagged = f"{self.epoch}/{call_id}/{self._reply_keep_ms}/{','.join(received)}"
        try:
            reply = await call(script(keys=self._keys, args=[self._prefix, tagged, *args]))
        except BaseException:
            self._received[:0] = received  # dropping a reply twice is harmless
            raise
        self._received.append(call_id)
        self.answered_at = time.monotonic()
        return reply

    @staticmethod
    def new_call_id() -> str:
        """An id for one state change, to send again with its retries (see :meth:`claim`)."""
        return secrets.token_hex(8)

    async def _at_node(self) -> dict[str, Any]:
        """Where a keyless command (TIME, INFO, PING) goes: the job's node (connection.py)."""
        return await job_node(self.client, self.keys.key("meta"))

    async def _check_epoch(self, found: str | None) -> None:
        """FrontierLost unless ``found``, read in the caller's round trip, is our epoch."""
        await check_epoch(self.client, self.keys, self.epoch, found)

    async def _checked(self, *command: str | int) -> Any:
        """One read command, the epoch read beside it in one round trip: its reply, or
        FrontierLost (an emptied Redis would answer every read with nothing)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command(*command)
        pipe.hget(self.keys.key("meta"), "epoch")
        reply, epoch = await call(pipe.execute())
        await self._check_epoch(epoch)
        return reply

    # -- construction -------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        url: str,
        settings: FrontierSettings,
        *,
        timeout_seconds: float = 10.0,
        expect_epoch: str | None = None,
        reseed: bool = False,
    ) -> Frontier:
        """Open the job's frontier on the Redis at ``url``, with a client of its own.

        The frontier then owns the client: :meth:`aclose` closes it, and it is closed at once
        when the open fails, so a caller that retries later leaks no connections.
        ``expect_epoch`` and ``reseed`` are :meth:`open`'s.
        """
        client = connect(url, timeout_seconds=timeout_seconds)
        try:
            await call(client.ping(**await job_node(client, JobKeys(settings.job_id).key("meta"))))
            return await cls.open(client, settings, expect_epoch=expect_epoch, reseed=reseed)
        except BaseException:
            await close_quietly(client)
            raise

    @classmethod
    async def open(
        cls,
        client: RedisClient,
        settings: FrontierSettings,
        *,
        expect_epoch: str | None = None,
        reseed: bool = False,
    ) -> Frontier:
        """Create the job's frontier, or join it with the shape its first writer chose.

        ``expect_epoch`` is the epoch the caller remembers (operator status, local state
        file): when Redis holds none or another, the frontier was lost, and this raises
        :class:`FrontierLost` saying what was found, unless ``reseed``: then the job's
        leftover keys are deleted, a new frontier is created (a new :attr:`epoch`), and
        :attr:`reseeded` says why; the caller seeds it again. Without ``expect_epoch`` a
        missing frontier is simply created (the job's first open).

        Refuses a Redis whose ``maxmemory-policy`` evicts (:class:`UnsafeRedis`), a
        frontier written by another key layout (:class:`FrontierLayoutMismatch`) and one
        created with another number of partitions (``ConfigError``).

        With ``settings.shards`` past 1 the answer is a
        :class:`~crawlfleet.frontier.partitions.PartitionedFrontier` (the same face).
        """
        if settings.shards > 1:
            return await _PARTITIONED[0](client, settings, expect_epoch=expect_epoch, reseed=reseed)
        return await cls.open_partition(
            client, settings, JobKeys(settings.job_id), expect_epoch=expect_epoch, reseed=reseed
        )

    @classmethod
    async def open_partition(
        cls,
        client: RedisClient,
        settings: FrontierSettings,
        keys: JobKeys,
        *,
        expect_epoch: str | None = None,
        reseed: bool = False,
        fresh_epoch: str | None = None,
    ) -> Self:
        """:meth:`open` for one partition's keys (partition 0, the home, is :meth:`open`'s).

        ``fresh_epoch`` is the epoch a partition created now is given (a partition k ≥ 1
        takes its home's); None draws one. The home's meta records ``settings.shards`` at
        creation, and an opener with another count is refused with a sentence."""
        flagged = await _inspect_server(client, keys)
        await _check_room(client, keys, settings)
        wanted = BloomParams.for_capacity(settings.capacity, settings.error_rate)
        backend = settings.bloom_backend or await cls._detect_backend(client, keys)
        meta_args: dict[str, str] = {
            **settings.limits.to_meta(),
            "task_attempts": str(settings.task_attempts),
            "lease_ttl_ms": str(round(settings.lease_ttl_seconds * 1000)),
            "max_pages": str(settings.max_pages),
            "fetch_budget_ms": str(round(settings.fetch_budget_seconds * 1000)),
            "bloom_backend": backend,
            "shards": str(settings.shards),
            **wanted.to_meta(),
        }
        scripts = Scripts.register(client, flagged=flagged)
        created_epoch = fresh_epoch or secrets.token_hex(8)
        status, found = await _init(scripts, keys, expect_epoch, meta_args, created_epoch)
        reseeded = None
        if status == "lost":
            why = str(found)
            if not reseed:
                raise FrontierLost(f"job {keys.tag}: {why}")
            log.warning("job %s: frontier lost (%s); re-creating it", keys.tag, why)
            await _delete_keys(client, keys)
            reseeded = why
            status, found = await _init(scripts, keys, None, meta_args, created_epoch)
        if status == "layout":
            raise FrontierLayoutMismatch(
                f"job {settings.job_id}: its frontier in Redis was written with key layout "
                f"{found}, and this crawlfleet reads layout {LAYOUT_VERSION} only. Finish the "
                "job with the crawlfleet that created it, or delete its keys (deleting the "
                f"job does; by hand: the keys {keys.prefix}*) and start it again"
            )
        meta = cast("dict[str, str]", found)
        if keys.partition == 0:
            check_shards(settings.job_id, int(meta.get("shards") or 1), settings.shards)
        stored = BloomParams.from_meta(meta)
        stored_backend: BloomBackend = "native" if meta["bloom_backend"] == "native" else "bitmap"
        if stored != wanted or stored_backend != backend:
            log.warning(
                "job %s keeps the Bloom filter it was created with (%s, %s); "
                "dedup settings cannot change after creation",
                keys.tag,
                stored_backend,
                stored,
            )
        if stored_backend == "native":
            created = meta["epoch"] == created_epoch
            await cls._reserve_native(client, keys, stored, created=created)
        frontier = cls(
            client, keys, settings, stored, stored_backend, epoch=meta["epoch"], scripts=scripts
        )
        frontier.reseeded = reseeded
        #: The meta fields the open found (partitions.py reads its ``partitions_ready``).
        frontier.opened_meta = meta
        return frontier

    @staticmethod
    async def _detect_backend(client: RedisClient, keys: JobKeys) -> BloomBackend:
        """Native BF.* when the server has it (Redis 8, RedisBloom, valkey-bloom).

        A read-only BF.EXISTS probe, since COMMAND INFO may be renamed on managed Redis.
        """
        try:
            # sent to the job's node by name on a cluster: its client would first look the
            # keys of a command up in COMMAND's table, which has no BF.* without the module
            node = await job_node(client, keys.native_bloom)
            await client.execute_command("BF.EXISTS", keys.native_bloom, "probe", **node)
        except ResponseError:
            return "bitmap"
        except (RedisError, OSError) as exc:
            raise FrontierUnavailable(f"Redis unavailable: {exc}") from exc
        return "native"

    @staticmethod
    async def _reserve_native(
        client: RedisClient, keys: JobKeys, bloom: BloomParams, *, created: bool
    ) -> None:
        """Reserve RedisBloom's scaling filter: capacity, rate, and growth by GROWTH.

        RedisBloom 2.8 and later reserve the first sub-filter at half the rate asked for
        and halve it again for each one added, so the sub-filters' rates sum to at most the
        rate asked for. An older module gives the first sub-filter the whole rate; asked at
        half of it, its sum stays within the rate too. Which one answers is measured once,
        when the job is created, on a scratch filter. At a tight rate the first sub-filter is
        reserved larger than ``dedup.capacity`` (:func:`native_reserve_capacity`).
        """
        rate = bloom.error_rate
        try:
            if created and not await _native_tightens_first_layer(client, keys, rate):
                rate /= 2
            await client.execute_command(
                "BF.RESERVE",
                keys.native_bloom,
                rate,
                native_reserve_capacity(bloom.capacity, bloom.error_rate),
                "EXPANSION",
                GROWTH,
            )
        except ResponseError as exc:
            if "exists" not in str(exc).lower():
                raise FrontierUnavailable(f"BF.RESERVE failed: {exc}") from exc
        except (RedisError, OSError) as exc:
            raise FrontierUnavailable(f"Redis unavailable: {exc}") from exc

    # -- admitting URLs -----------------------------------------------------------------

    async def add_if_new(self, urls: Sequence[str]) -> list[bool]:
        """Add canonical URLs to the Bloom filter; True for each one not seen before.

        Atomic per batch: of two workers adding the same URL at once, exactly one gets True.
        The native backend is one BF.INSERT (``seen`` is then read from the filter itself).
        """
        if not urls:
            return []
        _check_urls(urls)
        if self.backend == "native":
            # BF.INSERT NOCREATE is BF.MADD that never makes a default filter on an emptied
            # Redis; the epoch is read in the same round trip.
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(self.keys.key("meta"), "epoch")
            pipe.execute_command("BF.INSERT", self.keys.native_bloom, "NOCREATE", "ITEMS", *urls)
            epoch, codes = await execute_keeping_refusals(pipe)
            await self._check_epoch(epoch)
            if isinstance(codes, Exception):
                raise FrontierUnavailable(f"Redis refused BF.INSERT: {codes}") from codes
        else:
            codes = await self._run(self._scripts.add_if_new, *digests(urls))
        return [code == 1 for code in codes]

    async def contains(self, urls: Sequence[str]) -> list[bool]:
        """Read-only membership: True for each URL the filter has probably seen."""
        if not urls:
            return []
        _check_urls(urls)
        items: Sequence[str | bytes] = urls if self.backend == "native" else digests(urls)
        codes = await self._run(
            self._scripts.contains, self.backend, self.keys.native_bloom, *items
        )
        return [code == 1 for code in codes]

    async def enqueue(
        self,
        links: Sequence[Link],
        *,
        seeding: bool = False,
        unfiltered: Sequence[bool] = (),
        mark_seeded: bool = True,
    ) -> list[Admission]:
        """Dedup and queue links in one round trip; returns what happened to each.

        ``seeding`` marks the job seeded with the last batch, even an empty one (a Scrapy
        spider's start requests may all have been queued before), unless ``mark_seeded`` is
        False (the seeds of a partition other than the job's home: the home's marks it).
        ``unfiltered[i]`` queues link ``i`` without the Bloom filter (Scrapy's
        ``dont_filter``): it is always NEW.

        With ``settings.wait_replicas`` the call returns once the links are on that many
        replicas (Redis ``WAIT``; replicas.py), so the pages that offered them may be acked:
        a failover after the ack cannot lose them. This is the one place the wait happens:
        every consumer's enqueue (the worker's flush, Scrapy's scheduler, seeding) comes
        before the acks of the pages whose links it carries.
        """
        if not links and not seeding:
            return []
        results: list[Admission] = []
        for start in range(0, max(1, len(links)), _MAX_BATCH):
            batch = links[start : start + _MAX_BATCH]
            # Seeds: only the last batch marks the job seeded, so a seeding cut short (the
            # operator restarted mid-list) is done again, whole, by the next tick.
            last = mark_seeded and start + _MAX_BATCH >= len(links)
            mode = "0" if not seeding else "1" if last else "2"
            forced = unfiltered[start : start + _MAX_BATCH]
            results.extend(await self._enqueue_batch(batch, mode, forced))
        if self.settings.wait_replicas > 0 and links:
            # Even when every link was a duplicate: a retry of a batch whose wait failed
            # finds its links seen, and its pages must still not be acked before they are
            # on the replicas (a wait covers every write the node made before it).
            await self._wait_for_replicas()
        return results

    async def _wait_for_replicas(self) -> None:
        """Wait until this partition's writes so far are on ``settings.wait_replicas``
        replicas: NotReplicated (a FrontierUnavailable) when they are not within
        :data:`WAIT_TIMEOUT_MS`, so the caller does not ack the pages that offered the
        links, and sends them again (a duplicate for the filter) before it does."""
        await wait_for_replicas(
            self.client, self.keys.key("meta"), self.settings.wait_replicas, WAIT_TIMEOUT_MS
        )

    async def _enqueue_batch(
        self, links: Sequence[Link], mode: str, unfiltered: Sequence[bool] = ()
    ) -> list[Admission]:
        seeding = mode != "0"
        try:
            admitted = await self._enqueue_script(links, mode, unfiltered)
            if self._held_back_uncounted:
                await self._count_held_back(0)
            return admitted
        except FrontierFull:
            if seeding:
                raise
            # Redis refused the whole script before its first write: nothing was admitted.
            # Answering "over budget" lets the worker finish (ack) its pages, which is what
            # frees memory; a worker that retried the batch instead would hold its leases and
            # stall the crawl. The links are not in the filter, so they can come back later.
            await self._count_held_back(len(links))
            log.warning(
                "job %s: Redis is past maxmemory; %d links held back (not admitted)",
                self.keys.job_id,
                len(links),
            )
            return [Admission.OVER_BUDGET] * len(links)

    async def _count_held_back(self, refused: int) -> None:
        """Count links Redis refused past maxmemory where the scripts count the links that
        pressure holds back (``over_budget``), so the summary and status say how many. The
        counter is written allow-oom; Redis 6, which refuses even that, gets it with the
        next write it takes."""
        self._held_back_uncounted += refused
        try:
            await self._run(
                self._scripts.guarded, "HINCRBY", "stats", "over_budget",
                self._held_back_uncounted,
            )  # fmt: skip
        except FrontierFull:
            return
        self._held_back_uncounted = 0

    async def _enqueue_script(
        self, links: Sequence[Link], mode: str, unfiltered: Sequence[bool] = ()
    ) -> list[Admission]:
        _check_urls([link.url for link in links])
        _check_link_fields(links)
        hashes: Sequence[bytes | str] = (
            digests(link.url for link in links) if self.backend == "bitmap" else [""] * len(links)
        )
        if any(unfiltered):
            forced = len(unfiltered)
            hashes = ["!" if i < forced and unfiltered[i] else h for i, h in enumerate(hashes)]
        args: list[str | int | bytes] = [
            self.backend,
            mode,
            self.keys.native_bloom,
            _domains_of(links) if self.settings.limits.by_domain else "",
        ]
        for link, digest in zip(links, hashes, strict=True):
            args += (link.url, link.depth, link.parent, digest)
        codes = await self._run(self._scripts.enqueue, *args)
        return [Admission(code) for code in codes]

    async def seed(self, urls: Sequence[str], *, every_run: bool = False) -> int:
        """Queue the seeds at depth 0 and mark the job seeded; returns how many were new.

        ``every_run`` (a recurring run's start, after :meth:`begin_run`): the seeds are queued
        whatever the Bloom filter restored from the last run says, and a seed that is tracked
        is made due now instead (fetched once, conditionally, with its validators).

        With ``scope.sitemaps`` each seed origin's ``/sitemap.xml`` is queued with them, marked
        as that host's sitemap root (``parents.py``); it is not counted as a seed.
        Seeding twice is harmless: the Bloom filter refuses what was seeded before.
        Returns how many were queued with ``every_run``.
        """
        links = [Link(canonicalize(url), 0, "") for url in urls]
        if not links:
            raise InvalidURL("a job needs at least one seed URL")
        seeds = len(links)
        if self.settings.sitemaps:
            links += sitemap_roots([link.url for link in links])
        if every_run:
            outcome = []
            for start in range(0, len(links), _MAX_BATCH):
                mode = "3" if start + _MAX_BATCH >= len(links) else "4"
                outcome += await self._enqueue_script(links[start : start + _MAX_BATCH], mode)
        else:
            outcome = await self.enqueue(links, seeding=True)
        return sum(1 for code in outcome[:seeds] if code is Admission.NEW)

    # -- leases ---------------------------------------------------------------------------

    async def claim(
        self,
        worker: str,
        count: int,
        fetched: Sequence[str] = (),
        *,
        call_id: str | None = None,
    ) -> list[Lease]:
        """Lease up to ``count`` URLs from hosts that may be fetched now.

        A claim applies once per ``call_id``: a caller that retries a claim that failed with
        :class:`FrontierUnavailable` passes the failed call's id, and gets the leases it was
        given if the first claim reached Redis (otherwise they would wait out their ttl).

        ``fetched`` names leases of this worker whose responses have arrived: their host
        slots are freed in the same round trip, before the new leases are chosen, while the
        leases themselves stay the worker's until ack or fail. perHost thus bounds requests
        in progress, not pages waiting to be parsed and flushed.
        """
        if count <= 0 and not fetched:
            return []
        raw = await self._run_once(
            self._scripts.claim, _worker_id(worker), max(0, count), *fetched, call_id=call_id
        )
        claimed_at, expires_at = int(raw[0]) / 1000.0, int(raw[1]) / 1000.0
        leases = []
        for token in raw[2:]:
            _, _, deadline, attempts, depth, url, parent = token.split("\t", 6)
            leases.append(
                Lease(
                    token,
                    CanonicalURL(url),  # it was canonical when it was queued
                    int(depth),
                    int(attempts),
                    parent,
                    claimed_at,
                    expires_at,
                    int(deadline[1:]) / 1000.0,  # "@<ms>"
                )
            )
        return leases

    async def ack(
        self,
        worker: str,
        lease_ids: Sequence[str],
        *,
        revisits: Mapping[str, Revisit] | None = None,
        call_id: str | None = None,
    ) -> Outcomes[bool]:
        """Complete leases; False for each the worker no longer owns (fenced out).

        ``revisits`` (by lease token): the URL is tracked, scheduled again at now + its
        interval with its validators in the same script; a tracked URL acked without one is
        forgotten (no rule matches it any more).

        ``call_id`` (as for :meth:`claim`): a caller that sends a failed ack again passes the
        failed call's id, and gets the first reply if it had applied, not "not yours"."""
        if not lease_ids:
            return Outcomes()
        raw = await self._run_once(
            self._scripts.ack,
            _worker_id(worker),
            *_revisit_args(lease_ids, revisits),
            *lease_ids,
            call_id=call_id,
        )
        return Outcomes.of(raw[0], (code == 1 for code in raw[1:]))

    async def fail(
        self,
        worker: str,
        failures: Sequence[Failure],
        *,
        revisits: Mapping[str, Revisit] | None = None,
        call_id: str | None = None,
    ) -> Outcomes[FailOutcome]:
        """Report failed attempts: retried later, or dead-lettered with their class
        (``call_id`` as for :meth:`ack`).

        A tracked URL whose failure is final is scheduled again (with the Revisit given for
        its lease, else with its kept state) and counted in ``revisit_failures``, not
        dead-lettered; a Revisit whose change is "gone" dead-letters it and forgets it."""
        if not failures:
            return Outcomes()
        args: list[str | int | bytes] = [
            _worker_id(worker),
            *_revisit_args([f.lease_id for f in failures], revisits),
        ]
        for f in failures:
            args += (
                f.lease_id,
                "1" if f.retryable else "0",
                max(0, round(f.delay_seconds * 1000)),
                f.failure_class,
                f.message[:2000],
            )
        raw = await self._run_once(self._scripts.fail, *args, call_id=call_id)
        return Outcomes.of(raw[0], (FailOutcome(code) for code in raw[1:]))

    # -- revisits and recurring runs ---------------------------------------------------------

    async def revisit_states(
        self, urls: Sequence[CanonicalURL]
    ) -> dict[CanonicalURL, RevisitState]:
        """The revisit state of claimed (or queued) tracked URLs, in one round trip; URLs
        without one (not tracked) are left out."""
        if not urls:
            return {}
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("HMGET", self.keys.key("rv-states"), *urls, **{NEVER_DECODE: True})
        pipe.hget(self.keys.key("meta"), "epoch")
        values, epoch = await call(pipe.execute())
        await self._check_epoch(epoch)
        return {
            url: read_state(url, value)
            for url, value in zip(urls, values, strict=True)
            if value is not None
        }

    async def promote_due(self, limit: int = 1000) -> int:
        """Move up to ``limit`` due tracked URLs into their host queues (claims do it too);
        returns how many."""
        return int(await self._run(self._scripts.promote, max(1, limit)))

    async def tracked_bytes(self) -> int:
        """Redis memory (``MEMORY USAGE``) of the tracked URLs at rest: every chunk of them,
        their index and the hosts' open chunks; divided by ``stats().tracked`` it is the
        figure docs/frontier.md gives. One pipeline of one read per chunk (128 URLs)."""
        chunks = await self._checked("ZRANGE", self.keys.key("rv-index"), 0, -1)
        pipe = self.client.pipeline(transaction=False)
        for name in ("rv-index", "rv-open"):
            pipe.memory_usage(self.keys.key(name), samples=0)
        for chunk in chunks:
            pipe.memory_usage(self.keys.revisits(chunk), samples=0)
        return sum(int(size or 0) for size in await call(pipe.execute()))

    async def begin_run(self, run_id: str) -> RunStart:
        """Start a recurring run: drop the transient state (queues, leases, retries, dead
        letters, counters, output ledger) and restore the dedup filter and revisit schedule
        the last :meth:`commit_run` kept, or start empty. Seed it with ``seed(...,
        every_run=True)`` next."""
        restored, tracked = await self._run(self._scripts.begin_run, _run_id(run_id))
        if self.backend == "native" and not restored:
            await self._reserve_native(self.client, self.keys, self.bloom, created=True)
        return RunStart(run_id, str(restored) or None, int(tracked))

    async def commit_run(self, run_id: str) -> None:
        """Keep this run's dedup filter and revisit schedule as the committed state the next
        :meth:`begin_run` restores (a run that fails never calls it: it commits nothing).

        Refused (``ValueError``) unless ``run_id`` is the run begun last: a run that was
        replaced must not commit over its successor."""
        status, found = await self._run(self._scripts.commit_run, _run_id(run_id))
        if status != "ok":
            raise ValueError(
                f"job {self.keys.job_id}: run {run_id!r} cannot commit: the run in progress "
                f"is {found!r}"
            )

    async def extend(
        self, worker: str, lease_ids: Sequence[str], ttl_seconds: float | None = None
    ) -> list[bool]:
        """Push the expiry of leases still being worked on (a long fetch's heartbeat)."""
        if not lease_ids:
            return []
        ttl_ms = 0 if ttl_seconds is None else max(1, round(ttl_seconds * 1000))
        raw = await self._run(self._scripts.extend, _worker_id(worker), ttl_ms, *lease_ids)
        return [code == 1 for code in raw[1:]]

    async def release(
        self, worker: str, lease_ids: Sequence[str], *, call_id: str | None = None
    ) -> Outcomes[bool]:
        """Give leases back without counting an attempt (graceful shutdown; ``call_id`` as
        for :meth:`ack`)."""
        if not lease_ids:
            return Outcomes()
        raw = await self._run_once(
            self._scripts.release, _worker_id(worker), *lease_ids, call_id=call_id
        )
        return Outcomes.of(raw[0], (code == 1 for code in raw[1:]))

    async def requeue_expired(self, limit: int = 10_000) -> Requeued:
        """Return expired leases to their queues (attempt counted).

        URLs past ``taskAttempts`` go to the dead-letter set instead, counted apart.
        """
        requeued, dead, at_ms, kept = await self._run_once(self._scripts.requeue, "expired", limit)
        return Requeued(int(requeued), int(dead), int(at_ms) / 1000.0, int(kept))

    async def requeue_owner(self, worker: str, *, ended: bool = False) -> Requeued:
        """Return every lease of a worker found dead or gone (attempt counted).

        ``ended``: its process is known to have ended (exited, its pod gone), so none of its
        requests is still on the wire and its host slots come back at once. Otherwise (it
        stopped heartbeating, and may be hung rather than dead) the slots of its unfinished
        fetches stay counted until their fetch deadline, so a host never sees more than
        ``perHost`` requests from the fleet."""
        requeued, dead, at_ms, kept = await self._run_once(
            self._scripts.requeue, "owner", _worker_id(worker), "1" if ended else "0"
        )
        return Requeued(int(requeued), int(dead), int(at_ms) / 1000.0, int(kept))

    async def set_host_delay(self, host: str, delay_seconds: float | None) -> None:
        """A host's own delay between fetches (robots Crawl-delay); None forgets it. Its
        robots.txt was read (or given up): a wait :meth:`defer_host` recorded is over."""
        delay_ms = -1 if delay_seconds is None else max(0, round(delay_seconds * 1000))
        await self._run(self._scripts.set_host_delay, host, delay_ms)

    async def defer_host(self, host: str, wait_seconds: float, *, status: int | None) -> float:
        """Hold a host for ``wait_seconds`` (its robots.txt could not be read; ``status`` is
        the file's last HTTP status, None when no answer came): every worker's claims skip it
        meanwhile, and the wait is recorded for the fleet to report (:attr:`FrontierStats.waits`)
        until :meth:`set_host_delay` ends it. Returns the next try (server time, seconds)."""
        wait_ms = max(0, round(wait_seconds * 1000))
        status_text = "" if status is None else str(int(status))
        next_try_ms = await self._run(self._scripts.defer_host, host, wait_ms, status_text)
        return int(next_try_ms) / 1000.0

    async def pace(self, host: str, *, max_wait_seconds: float = 3600.0) -> None:
        """Wait for, and take, a host's next fetch slot (for redirect hops and retries).

        Claims space the first request to a host; any further request a fetch makes to a
        host goes through here, so the server sees every request ``hostDelaySeconds`` apart.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_seconds
        while True:
            wait_ms = int(await self._run(self._scripts.pace, host))
            if wait_ms <= 0 or loop.time() >= deadline:
                return
            await asyncio.sleep(min(wait_ms / 1000.0, max(0.0, deadline - loop.time())))

    # -- workers and progress -------------------------------------------------------------

    async def heartbeat(self, worker: str, counters: Mapping[str, HeartbeatValue]) -> float:
        """Record that a worker is alive, with its counters and a few short strings (why its
        output is blocked, say); returns the server time (seconds)."""
        payload = json.dumps(dict(counters), separators=(",", ":"))
        now_ms = await self._run(self._scripts.heartbeat, _worker_id(worker), payload)
        return int(now_ms) / 1000.0

    async def forget_worker(self, worker: str) -> None:
        """Remove a worker that left cleanly from the heartbeat table."""
        await self._run(self._scripts.heartbeat, _worker_id(worker), "")

    async def workers(self) -> list[WorkerHeartbeat]:
        """Every worker's last heartbeat, aged on the server's clock."""
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("TIME", **await self._at_node())  # (see _check_room)
        pipe.zrange(self.keys.key("heartbeats"), 0, -1, withscores=True)
        pipe.hgetall(self.keys.key("workers"))
        pipe.hget(self.keys.key("meta"), "epoch")
        (seconds, micros), beats, payloads, epoch = await call(pipe.execute())
        await self._check_epoch(epoch)
        now = seconds + micros / 1e6
        result = []
        for worker, score in beats:
            last = score / 1000.0
            counters = json.loads(payloads.get(worker) or "{}")
            result.append(WorkerHeartbeat(worker, last, max(0.0, now - last), counters))
        return result

    async def stats(self) -> FrontierStats:
        """The job's counters in one round trip (one pipeline of O(1) reads).

        Raises :class:`FrontierLost` when the job's frontier is gone or another epoch's:
        counters read from an emptied Redis would all be zero and look like a finished job.
        """
        pipe = self.client.pipeline(transaction=False)
        await self._queue_stats_reads(pipe)
        return await self._read_stats(await execute_keeping_refusals(pipe))

    async def _queue_stats_reads(self, pipe: Pipeline | ClusterPipeline) -> int:
        """Add :meth:`stats`' reads to ``pipe`` (a partitioned frontier sends every
        partition's in one pipeline); returns how many replies :meth:`_read_stats` takes."""
        queued = len(pipe)
        pipe.hmget(self.keys.key("stats"), _STAT_FIELDS)
        pipe.hmget(
            self.keys.key("meta"),
            "epoch",
            "seeded_ms",
            "pressure_level",
            "pressure_links_per_page",
            "pressure_claims_per_s",
            "bloom_layers",
            "run_cutoff_s",
            "pushback_since_ms",
            "pushback_last_ms",
        )
        pipe.hmget(self.keys.key("stats"), _LAG_FIELDS)
        # The earliest tracked URL at rest (seconds), from the chunks' index: O(log n).
        pipe.zrange(self.keys.key("rv-index"), 0, 0, withscores=True)
        # The earliest retry's due time (ms) against the server's clock: the fleet brain
        # wakes a worker for it (a claim is what promotes a due retry).
        pipe.zrange(self.keys.key("delayed"), 0, 0, withscores=True)
        pipe.execute_command("TIME", **await self._at_node())  # (see _check_room)
        # Whether the closing files are written: the job is complete only then (a reader who
        # sees Succeeded finds manifest.json).
        pipe.exists(self.keys.key("output-finished"))
        # What holds hosts back (FrontierWaits): each a count and its first member.
        for name in ("robots-waits", "ready", "held"):
            pipe.zcard(self.keys.key(name))
            pipe.zrange(self.keys.key(name), 0, 0, withscores=True)
        if self.backend == "native":
            # Every sub-filter's bits, hashes, capacity and items; BF.CARD if BF.DEBUG is
            # refused (a module other than RedisBloom).
            pipe.execute_command("BF.CARD", self.keys.native_bloom)
            pipe.execute_command("BF.DEBUG", self.keys.native_bloom)
        return len(pipe) - queued

    async def _read_stats(self, replies: Sequence[Any]) -> FrontierStats:
        """:meth:`stats` from the replies of :meth:`_queue_stats_reads`' reads, in order."""
        (
            values,
            meta,
            lags,
            first_due,
            earliest,
            (seconds, micros),
            finished,
            *rest,
        ) = replies
        held_back, native = rest[:6], rest[6:]
        replies = (values, meta, lags, first_due, earliest, finished, *held_back)
        for reply in (*replies, native[0] if native else None):
            if isinstance(reply, Exception):
                raise translate(reply) from reply
        epoch, seeded, level, links_per_page, claims_per_s, layers, cutoff, *pushback = meta
        await self._check_epoch(epoch)
        counts = {name: int(v or 0) for name, v in zip(_STAT_FIELDS, values, strict=True)}
        if native:  # the native filter counts what BF.INSERT added outside our scripts too
            counts["seen"] = int(native[0])
            debug = native[1]
            bloom = (
                self.bloom.estimate(counts["seen"])
                if isinstance(debug, Exception)
                else native_estimate(debug)[1]
            )
        else:
            bloom = self.bloom.estimate(counts["seen"], int(layers or 1))
        now = seconds + micros / 1e6
        next_revisit = first_due[0][1] - now if first_due else None
        # A recurring run takes the revisits due by its start only; the rest are the next run's.
        revisits_waiting = (
            next_revisit is not None
            and next_revisit <= 0
            and (cutoff is None or first_due[0][1] <= int(cutoff))
        )
        return FrontierStats(
            **cast("dict[str, Any]", counts),
            next_revisit_in_seconds=next_revisit,
            revisits_waiting=revisits_waiting,
            revisit_lag=LagHistogram(tuple(int(v or 0) for v in lags)),
            seeded=seeded is not None,
            bloom_backend=self.backend,
            bloom_fill_ratio=bloom.fill_ratio,
            bloom_false_positive_rate=bloom.false_positive_rate,
            bloom_layers=bloom.layers,
            bloom_capacity=bloom.capacity,
            pressure=_pressure(level, links_per_page, claims_per_s),
            output_finished=bool(finished),
            next_retry_in_seconds=earliest[0][1] / 1000.0 - (seconds + micros / 1e6)
            if earliest
            else None,
            waits=_waits(held_back, seconds + micros / 1e6),
            pushed_back_since=_ms_to_seconds(pushback[0]),
            last_pushed_back=_ms_to_seconds(pushback[1]),
        )

    async def is_complete(self) -> bool:
        """Seeded, and nothing queued, delayed or leased."""
        return (await self.stats()).complete

    async def dead_letters(self, batch: int = 500) -> AsyncIterator[DeadLetter]:
        """Every dead-lettered URL with its last failure class and message.

        One HSCAN page per ``batch``, each awaited through the error translation (redis-py's
        ``hscan_iter`` would let its errors out untranslated mid-iteration).
        """
        key = self.keys.key("dead")
        cursor = 0
        while True:
            pipe = self.client.pipeline(transaction=False)
            pipe.hscan(key, cursor, count=batch)
            pipe.hget(self.keys.key("meta"), "epoch")
            reply, epoch = await call(pipe.execute())
            await self._check_epoch(epoch)  # an emptied Redis would list no dead letters
            cursor, page = cast("tuple[int, dict[str, str]]", reply)  # decoded replies
            for url, raw in page.items():
                record = json.loads(raw)
                yield DeadLetter(
                    url=url,
                    failure_class=str(record.get("failure_class", "")),
                    message=str(record.get("message", "")),
                    attempts=int(record.get("attempts", 0)),
                    depth=int(record.get("depth", 0)),
                    parent=str(record.get("parent", "")),
                    at=int(record.get("at_ms", 0)) / 1000.0,
                )
            if cursor == 0:
                return

    # -- output files (the manifest's ledger) ------------------------------------------------

    async def record_output_files(self, files: Sequence[Mapping[str, str | int]]) -> None:
        """Remember output files that are durable, by path (``{"path", "size", "sha256",
        "records"}``), before their pages are acked: whoever writes the manifest at completion
        lists every file that holds an acked record without reading the destination back."""
        if not files:
            return
        entries = {str(f["path"]): json.dumps(dict(f), separators=(",", ":")) for f in files}
        await self._run(
            self._scripts.guarded, "HSET", "output", *(x for kv in entries.items() for x in kv)
        )

    async def claim_output_finish(self, worker: str, ttl_seconds: float) -> bool:
        """Become the one writer of the job's closing files (manifest, dead letters) for
        ``ttl_seconds``: True for the worker that holds the claim, False for the others."""
        ttl_ms = max(1, round(ttl_seconds * 1000))
        taken = await self._run(
            self._scripts.guarded, "SET", "output-finisher", _worker_id(worker), "NX", "PX", ttl_ms
        )
        if taken:
            return True
        return bool(await self._checked("GET", self.keys.key("output-finisher")) == worker)

    async def output_finished(self) -> str | None:
        """What :meth:`mark_output_finished` recorded (the manifest's summary), or None."""
        value = await self._checked("GET", self.keys.key("output-finished"))
        return None if value is None else str(value)

    async def mark_output_finished(self, summary: str) -> None:
        """The closing files are written: no other worker writes them again."""
        await self._run(self._scripts.guarded, "SET", "output-finished", summary)

    async def current_run(self) -> str | None:
        """The recurring run begun last (:meth:`begin_run`), whose output goes under
        ``runs/<run-id>/``; None for a job that never began one."""
        value = await self._checked("HGET", self.keys.key("meta"), "run_id")
        return None if value is None else str(value)

    async def output_files(self, batch: int = 1000) -> list[dict[str, Any]]:
        """Every file :meth:`record_output_files` was told of, sorted by path."""
        key = self.keys.key("output")
        found: list[dict[str, Any]] = []
        cursor = 0
        while True:
            reply = await self._checked("HSCAN", key, cursor, "COUNT", batch)
            cursor, page = cast("tuple[int, dict[str, str]]", reply)
            found.extend(json.loads(raw) for raw in page.values())
            if cursor == 0:
                return sorted(found, key=lambda entry: str(entry["path"]))

    # -- file downloads (spec.files) ---------------------------------------------------------

    async def acquire_file_slot(
        self, host: str, lease_id: str, limit: int, ttl_seconds: float
    ) -> bool:
        """Take one of ``host``'s ``limit`` file download slots (``files.perHost``) for a
        lease, for ``ttl_seconds``; True when the lease holds one now (again: a holder asking
        once more keeps its slot with the new expiry). Slots of holders past their expiry (a
        dead worker's download) are freed first: nobody has to give them back."""
        if limit < 1 or ttl_seconds <= 0:
            raise ValueError(f"bad file slot limit {limit!r} or ttl {ttl_seconds!r}")
        ttl_ms = max(1, round(ttl_seconds * 1000))
        held = await self._run(
            self._scripts.file_slot, _host(host), _lease_id(lease_id), limit, ttl_ms
        )
        return bool(held == 1)

    async def extend_file_slots(
        self, lease_ids_by_host: Mapping[str, Sequence[str]], ttl_seconds: float
    ) -> None:
        """Push the expiry of the file slots a worker still holds, and of the byte
        reservations of the same leases (:meth:`reserve_file_bytes`), to ``ttl_seconds`` from
        now, in one round trip (the worker's heartbeat). A slot or reservation that was
        dropped meanwhile (its holder was late past its expiry) is not taken back."""
        pairs = [
            item
            for host, lease_ids in lease_ids_by_host.items()
            for lease_id in lease_ids
            for item in (_host(host), _lease_id(lease_id))
        ]
        if not pairs:
            return
        if ttl_seconds <= 0:
            raise ValueError(f"bad file slot ttl {ttl_seconds!r}")
        ttl_ms = max(1, round(ttl_seconds * 1000))
        await self._run(self._scripts.file_slots_extend, ttl_ms, *pairs)

    async def release_file_slot(self, host: str, lease_id: str) -> None:
        """Give a host's file slot back (the download ended, however it ended)."""
        await self._run(
            self._scripts.guarded,
            "ZREM",
            self.keys.file_slots(_host(host)).removeprefix(self._prefix),
            _lease_id(lease_id),
        )

    async def reserve_file_bytes(
        self, holder: str, n: int, budget: int, *, ttl_seconds: float
    ) -> bool:
        """Reserve ``n`` bytes of a download against the job's budget (``files.maxTotalBytes``)
        for ``holder`` (its lease id): True while bytes reserved + bytes settled + ``n`` stay
        within ``budget``, in one script, so concurrent downloads never overshoot it together.
        ``budget`` 0 is no limit (always True, and the bytes are reserved all the same).

        The reservation lives ``ttl_seconds`` unless settled, or extended with the holder's
        file slot (:meth:`extend_file_slots`): a worker killed before it settles costs the
        budget nothing for longer. A holder reserving again replaces its reservation. Applied
        once per call."""
        if n < 0 or budget < 0 or ttl_seconds <= 0:
            raise ValueError(
                f"bad file byte reservation {n!r}, budget {budget!r} or ttl {ttl_seconds!r}"
            )
        ttl_ms = max(1, round(ttl_seconds * 1000))
        reply = await self._run_once(
            self._scripts.file_bytes, "reserve", _lease_id(holder), n, budget, ttl_ms
        )
        return bool(reply == 1)

    async def settle_file_bytes(self, holder: str, stored: int) -> None:
        """``holder``'s download ended: its reservation goes, and the ``stored`` bytes (0 for
        a duplicate or a failure) count against the budget from now on, every run. Applied
        once per call."""
        if stored < 0:
            raise ValueError(f"bad file bytes to settle: {stored!r} stored")
        await self._run_once(self._scripts.file_bytes, "settle", _lease_id(holder), stored)

    async def claim_content(self, sha256: str, key: str) -> str | None:
        """Record ``key`` as the stored copy of the bytes ``sha256`` in the content index:
        None when it is now (the first copy stored), else the key of the copy stored before
        (a duplicate: point the record at it). The index outlives runs, so a file a later run
        fetches again is a duplicate of the first run's copy. Applied once per call: a retry
        of a call that made ``key`` the copy answers None again."""
        if not sha256 or not key or any(c.isspace() for c in sha256):
            raise ValueError(f"bad content claim: sha256 {sha256!r}, key {key!r}")
        found = await self._run_once(self._scripts.claim_content, sha256, key)
        return str(found) or None

    async def count_files(self, **counts: int) -> None:
        """Add to this run's file counters (:data:`FILE_COUNTERS`: ``stored``,
        ``duplicates``, ``bytes``, ``resumed``, ``restarts``, ``resumed_bytes``) in one round
        trip; zeros are left out, and nothing to add sends nothing. Applied once per call."""
        unknown = sorted(set(counts) - set(FILE_COUNTERS))
        if unknown:
            raise ValueError(f"unknown file counters {unknown}; one of {list(FILE_COUNTERS)}")
        args: list[str | int | bytes] = []
        for name, value in counts.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"file counter {name} must grow by a whole number, not {value!r}")
            if value:
                args += (name, value)
        if args:
            await self._run_once(self._scripts.count_files, *args)

    async def file_stats(self) -> FileStats:
        """The file counters and the byte budget, in one round trip of two O(1) reads (and
        the epoch: an emptied Redis would answer zeros)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self.keys.key(FILE_KEYS["counts"]), FILE_COUNTERS)
        pipe.hmget(self.keys.key(FILE_KEYS["budget"]), "reserved", "settled")
        pipe.hget(self.keys.key("meta"), "epoch")
        counts, (reserved, settled), epoch = await call(pipe.execute())
        await self._check_epoch(epoch)
        return FileStats(
            **{name: int(v or 0) for name, v in zip(FILE_COUNTERS, counts, strict=True)},
            reserved=int(reserved or 0),
            settled=int(settled or 0),
        )

    async def delete(self) -> int:
        """Remove every key of the job (used when a job with an external Redis is deleted).

        Works on a lost frontier too (it removes whatever is left); it checks no epoch.
        """
        return await _delete_keys(self.client, self.keys)

    # -- memory and backpressure ----------------------------------------------------------

    async def memory(self) -> MemoryState:
        """Redis's used memory, ``maxmemory`` and policy, in one round trip (INFO memory)."""
        info = await call(self.client.info("memory", **await self._at_node()))
        return _memory_state(info)

    async def set_pressure(self, pressure: Backpressure) -> None:
        """Hold the crawl back while Redis's memory fills; the scripts enforce it.

        ``claim`` then hands out at most ``claims_per_second`` URLs a second for the whole
        job, and ``enqueue`` admits at most ``links_per_page`` new links per page (per
        parent URL; seeds are never held back), answering ``OVER_BUDGET`` for the rest. Acks,
        fails, releases and requeues always get through. ``Backpressure()`` lifts it.
        """
        links = -1 if pressure.links_per_page is None else max(0, pressure.links_per_page)
        rate = pressure.claims_per_second or 0.0
        await self._run(
            self._scripts.set_pressure, int(pressure.level), links, repr(max(0.0, rate))
        )

    async def retune(self, limits: FrontierLimits) -> list[LimitChange]:
        """Write the limits a running job changed into its meta (what every claim and
        enqueue reads), and say which changed: one HMGET, and one guarded HSET when any did
        (a lost frontier gets no stray meta). Nothing re-queued or re-placed here: a host at
        a lowered perHost takes no new lease until its in-flight count is under it, a host
        capped at the old perHost is placed again at its next settled lease, a host's next
        allowed time follows the new delay from its next fetch on."""
        wanted = limits.to_meta()
        found = await self._checked("HMGET", self.keys.key("meta"), *wanted)
        changes = [
            LimitChange(LIMIT_FIELDS[name], _spec_value(name, old), _spec_value(name, new))
            for (name, new), old in zip(wanted.items(), found, strict=True)
            if old != new
        ]
        if changes:
            changed = [x for name, new in wanted.items() for x in (name, new)]
            await self._run(self._scripts.guarded, "HSET", "meta", *changed)
        return changes

    async def scope_rules(self) -> tuple[ScopeRules, bool] | None:
        """The scope's URL patterns in force (``scope.include``, ``scope.exclude``) as the
        steering tick last wrote them, and whether a running job ever changed them (then
        URLs queued before may be out of them: workers check what they claim); None before
        any tick wrote them."""
        raw = await self._checked("HGET", self.keys.key("meta"), "scope_rules")
        if raw is None:
            return None
        value = json.loads(raw)
        rules = tuple(value.get("include", ())), tuple(value.get("exclude", ()))
        return rules, bool(value.get("changed"))

    async def set_scope_rules(self, rules: ScopeRules) -> tuple[bool, ScopeRules | None]:
        """Write the scope's URL patterns when they differ: (changed, the ones before). The
        first ones a frontier gets are its baseline, not a change."""
        found = await self.scope_rules()
        before, changed_before = found if found is not None else (None, False)
        if before == rules:
            return False, before
        value = {
            "include": list(rules[0]),
            "exclude": list(rules[1]),
            "changed": changed_before or before is not None,
        }
        await self._run(self._scripts.guarded, "HSET", "meta", "scope_rules", json.dumps(value))
        return True, before

    # -- the connection ---------------------------------------------------------------------

    async def ping(self) -> None:
        """Check that Redis answers; :class:`FrontierUnavailable` when it does not."""
        await call(self.client.ping(**await self._at_node()))

    async def aclose(self) -> None:
        """Close the Redis client (and its pool); the frontier cannot be used afterwards."""
        await close_quietly(self.client)


def _spec_value(name: str, meta: str | None) -> str:
    """A meta field's value as the spec spells it (milliseconds as seconds)."""
    if meta is None:
        return "unset"
    if name == "host_delay_ms":
        return f"{int(meta) / 1000:g}"
    return meta


def check_shards(job_id: str, created: int, wanted: int) -> None:
    """Refuse to open a job's frontier with another partition count than it was created with:
    its hosts' URLs, leases and dedup bits live where the first count put them, and another
    count would look for them elsewhere (a lost page, a page crawled twice)."""
    if created != wanted:
        raise ConfigError(
            f"job {job_id} was created with {created} frontier partitions; shards cannot "
            "change on a running job (delete the job's frontier to start over)"
        )


#: Received call ids one state change names for Redis to drop (a call id is 16 characters).
_RECEIVED_PER_CALL: Final = 32


def _run_id(run_id: str) -> str:
    if not run_id or any(c.isspace() for c in run_id) or len(run_id) > 253:
        raise ValueError(f"bad run id {run_id!r}")
    return run_id


def _revisit_args(
    lease_ids: Sequence[str], revisits: Mapping[str, Revisit] | None
) -> list[str | int | bytes]:
    """ack.lua's and fail.lua's revisit arguments (lib.lua's read_revisits): a count, then
    per revisit the lease's index (1-based) among ``lease_ids``, interval ms, change, lag ms
    ('' for none), the packed validators and ms since the visit was fetched (read on this
    machine's clock, as ``fetched_at`` was: a difference, so no clock skew enters)."""
    if not revisits:
        return [0]
    now = time.time()
    index = {lease_id: i for i, lease_id in enumerate(lease_ids, 1)}
    args: list[str | int | bytes] = [len(revisits)]
    for lease_id, revisit in revisits.items():
        if lease_id not in index:
            raise ValueError(f"a revisit for a lease not in this call: {lease_id!r}")
        if revisit.change not in _CHANGES:
            raise ValueError(f"unknown change {revisit.change!r}; one of {sorted(_CHANGES)}")
        if not 0 < revisit.interval_seconds < 2**32 / 1000:
            raise ValueError(f"revisit interval out of range: {revisit.interval_seconds!r}")
        lag = "" if revisit.lag_seconds is None else max(0, round(revisit.lag_seconds * 1000))
        args += (
            index[lease_id],
            round(revisit.interval_seconds * 1000),
            revisit.change,
            lag,
            pack_validators(revisit.validators),
            0 if revisit.fetched_at is None else max(0, round((now - revisit.fetched_at) * 1000)),
        )
    return args


def _host(host: str) -> str:
    if not host or any(c.isspace() for c in host) or len(host) > 1024:
        raise ValueError(f"bad host {host!r}")
    return host


def _lease_id(lease_id: str) -> str:
    if not lease_id or len(lease_id) > 16384:
        raise ValueError(f"bad lease id {lease_id!r}")
    return lease_id


def _worker_id(worker: str) -> str:
    if not worker or "\t" in worker or len(worker) > 253:
        raise ValueError(f"bad worker id {worker!r}")
    return worker


def _waits(replies: Sequence[Any], now: float) -> FrontierWaits:
    """FrontierWaits from the stats pipeline's three (ZCARD, first member) pairs: the robots.txt
    waits ("<host>\t<status>"), the ready index and the held slots, scored in ms."""
    (robots, robots_first), (ready, ready_first), (held, held_first) = (
        (replies[i], replies[i + 1]) for i in range(0, 6, 2)
    )

    def due_in(first: list[tuple[Any, float]]) -> float | None:
        return first[0][1] / 1000.0 - now if first else None

    status = None
    if robots_first:
        text = str(robots_first[0][0]).rpartition("\t")[2]  # decoded: the client decodes
        status = int(text) if text.isdigit() else None
    return FrontierWaits(
        robots_hosts=int(robots),
        robots_next_try_in_seconds=due_in(robots_first),
        robots_status=status,
        ready_hosts=int(ready),
        next_ready_in_seconds=due_in(ready_first),
        held_slots=int(held),
        next_held_release_in_seconds=due_in(held_first),
    )


def _domains_of(links: Sequence[Link]) -> str:
    """The batch's hosts (``host[:port]``, as the scripts key them) and their registrable
    domains, one ``host<TAB>domain`` line each: one Public Suffix lookup per host, cached."""
    netlocs = {link.url.split("/", 3)[2] for link in links}
    lines = []
    for netloc in netlocs:
        host = netloc[1:].split("]", 1)[0] if netloc.startswith("[") else netloc.split(":")[0]
        lines.append(f"{netloc}\t{registrable_domain(host)}")
    return "\n".join(lines)


def _ms_to_seconds(value: str | bytes | None) -> float | None:
    return None if value is None else int(value) / 1000.0


def _pressure(
    level: str | None, links_per_page: str | None, claims_per_s: str | None
) -> Backpressure:
    """The Backpressure stored by set_pressure.lua (no fields: none)."""
    links = int(links_per_page) if links_per_page is not None else -1
    rate = float(claims_per_s) if claims_per_s is not None else 0.0
    return Backpressure(
        PressureLevel(int(level or 0)),
        links if links >= 0 else None,
        rate if rate > 0 else None,
    )


def _memory_state(info: Mapping[str, Any]) -> MemoryState:
    # What Redis itself holds against maxmemory before it refuses a write: its replication
    # and AOF buffers are not counted (a rewrite's buffer would read as pressure otherwise).
    used = int(info.get("used_memory", 0)) - int(info.get("mem_not_counted_for_evict", 0))
    return MemoryState(
        used_bytes=max(0, used),
        max_bytes=int(info.get("maxmemory", 0)),
        policy=str(info.get("maxmemory_policy", "")),
    )


async def _check_room(client: RedisClient, keys: JobKeys, settings: FrontierSettings) -> None:
    """Refuse to create a frontier whose Bloom filter would not fit the Redis's free memory.

    The filter's first layer is written whole within the first few hundred URLs: past
    ``maxmemory`` Redis would refuse every write after it (and past a container's limit be
    killed), so the job is refused here with both figures (:class:`RedisTooSmall`) instead.
    Only a frontier about to be created is measured (the meta key absent), against its data
    (``used_memory_dataset``: Redis's own overhead is in the margin); a Redis without
    ``maxmemory`` says nothing to check against.
    """
    pipe = client.pipeline(transaction=False)
    pipe.exists(keys.key("meta"))
    # execute_command: a cluster pipeline refuses its info() and time() methods, yet sends
    # the command itself to the node named (plain pipelines parse the reply the same)
    pipe.execute_command("INFO", "memory", **await job_node(client, keys.key("meta")))
    exists, info = await execute_keeping_refusals(pipe)
    if exists == 1 or isinstance(info, Exception):
        return
    max_memory = int(info.get("maxmemory", 0))
    used = int(info.get("used_memory_dataset", info.get("used_memory", 0)))
    if max_memory <= 0:
        return
    found = memory_problem(settings.capacity, settings.error_rate, max_memory, used, "this Redis")
    if found is not None:
        raise RedisTooSmall(f"job {settings.job_id}: {found}")


#: A script with a Redis 7 shebang: runs on Redis 7+, fails to compile on Redis 6.
_FLAGS_PROBE = "#!lua flags=no-writes\nreturn 1"


async def _inspect_server(client: RedisClient, keys: JobKeys) -> bool:
    """Refuse an evicting Redis; answer whether it knows script flags (Redis 7+).

    The policy comes from INFO memory (managed Redis offerings often refuse CONFIG), then
    CONFIG GET; when neither says, a warning, not a failure: the operator may know better.
    On a cluster both ask the node that holds the job's slot, the only one whose eviction
    could drop its keys (a replica promoted later is checked at the next open).
    """
    node = await job_node(client, keys.key("meta"))
    pipe = client.pipeline(transaction=False)
    pipe.execute_command("INFO", "memory", **node)  # (as in _check_room)
    pipe.execute_command("EVAL", _FLAGS_PROBE, 0, **node)
    info, probe = await execute_keeping_refusals(pipe)
    policy = "" if isinstance(info, Exception) else str(info.get("maxmemory_policy", ""))
    if not policy:
        try:
            reply = await client.config_get("maxmemory-policy", **node)
            policy = str(reply.get("maxmemory-policy", ""))
        except ResponseError:
            policy = ""
        except (RedisError, OSError) as exc:
            raise FrontierUnavailable(f"Redis unavailable: {exc}") from exc
    if not policy:
        log.warning(
            "Redis does not say its maxmemory-policy (INFO and CONFIG refused); make sure it "
            "is noeviction, or the frontier may lose keys silently"
        )
    elif policy != _SAFE_POLICY:
        raise UnsafeRedis(
            f"Redis's maxmemory-policy is {policy}: Redis may delete keys to make room, and "
            "a frontier losing a queue, a lease or a counter loses URLs silently or never "
            "completes. volatile-* policies are refused too: they evict any key with an "
            "expiry (the frontier's robots.txt locks have one), and once none is left Redis "
            "refuses writes exactly as noeviction does, so they only add silent loss. Fix: "
            "CONFIG SET maxmemory-policy noeviction (and maxmemory-policy noeviction in "
            "redis.conf); the fleet slows the crawl down as memory fills instead"
        )
    return bool(probe == 1)


async def _native_tightens_first_layer(client: RedisClient, keys: JobKeys, rate: float) -> bool:
    """Whether this RedisBloom reserves a scaling filter's first layer below the rate asked."""
    probe = keys.key("bf-probe")
    pipe = client.pipeline(transaction=True)
    pipe.delete(probe)
    pipe.execute_command("BF.RESERVE", probe, rate, 100)
    pipe.execute_command("BF.DEBUG", probe)
    pipe.delete(probe)
    _, _, debug, _ = await execute_keeping_refusals(pipe)
    if isinstance(debug, Exception):
        return False  # not RedisBloom's BF.DEBUG: assume the older rule, ask for half
    first = dict(part.split(":", 1) for part in str(debug[1]).split() if ":" in part)
    return float(first.get("ratio", rate)) < rate * 0.75


async def _init(
    scripts: Scripts,
    keys: JobKeys,
    expect_epoch: str | None,
    meta_args: Mapping[str, str],
    fresh_epoch: str,
) -> tuple[str, str | dict[str, str]]:
    """Run init.lua: ('ok', meta), ('lost', why) or ('layout', the layout found)."""
    flat = [item for pair in meta_args.items() for item in pair]
    args = [keys.prefix, expect_epoch or "", fresh_epoch, LAYOUT_VERSION, *flat]
    raw = await call(scripts.init(keys=keys.script_keys(), args=args))
    if raw[0] != "ok":
        return str(raw[0]), str(raw[1])
    return "ok", dict(zip(raw[1::2], raw[2::2], strict=True))


async def _delete_keys(client: RedisClient, keys: JobKeys) -> int:
    """Unlink every key of the job, a SCAN page at a time; returns how many.

    On a cluster the SCAN runs on the node that holds the job's slot: every key of the job
    is there (one hash tag), and a cluster-wide SCAN would page through every node."""
    deleted = 0
    cursor = 0
    node = await job_node(client, keys.key("meta"))
    while True:
        reply, found = await call(client.scan(cursor, match=keys.pattern, count=1000, **node))
        # a cluster client answers the cursor of each node asked ({name: cursor}): one here
        cursor = int(next(iter(reply.values())) if isinstance(reply, dict) else reply)
        if found:
            deleted += int(await call(client.unlink(*found)))
        if cursor == 0:
            return deleted
