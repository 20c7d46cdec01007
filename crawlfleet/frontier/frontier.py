"""The frontier: the one Redis protocol that workers, the operator and the local runner share.

Every state change is one Lua script (``lua/``), so a crash between two commands cannot
leave a URL half-leased, and every batch is one round trip. Counters are kept by the scripts,
so progress and completion are O(1) reads. See docs/frontier.md for the model.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from operator import methodcaller
from typing import Any, cast

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError, ResponseError

from crawlfleet.errors import FrontierUnavailable, InvalidURL
from crawlfleet.frontier.bloom import BloomBackend, BloomParams, digests
from crawlfleet.frontier.connection import call, close_quietly, connect
from crawlfleet.frontier.keys import JobKeys
from crawlfleet.frontier.models import (
    Admission,
    DeadLetter,
    FailOutcome,
    Failure,
    FrontierSettings,
    FrontierStats,
    Lease,
    Link,
    Outcomes,
    Requeued,
    WorkerHeartbeat,
)
from crawlfleet.frontier.robots_cache import RobotsCache
from crawlfleet.frontier.scripts import Scripts
from crawlfleet.frontier.urls import CanonicalURL, canonicalize

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
)
_MAX_BATCH = 10_000


_URL_PREFIXES = ("http://", "https://")
_is_http = methodcaller("startswith", _URL_PREFIXES)


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


class Frontier:
    """One job's frontier on one Redis. Build it with :meth:`open`."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: JobKeys,
        settings: FrontierSettings,
        bloom: BloomParams,
        backend: BloomBackend,
    ) -> None:
        self.client = client
        self.keys = keys
        self.settings = settings
        self.bloom = bloom
        self.backend = backend
        self._scripts = Scripts.register(client)
        #: The fleet-wide robots.txt answers of this job (the crawler's robots policy reads them).
        self.robots = RobotsCache(client, keys, self._scripts.robots_store)
        self._keys = keys.script_keys(bloom.segments if backend == "bitmap" else 0)
        self._prefix = keys.prefix
        self._bloom_args = [
            backend,
            bloom.hashes,
            bloom.segment_bits,
            bloom.segments,
        ]

    async def _run(self, script: AsyncScript, *args: str | int | bytes) -> Any:
        """Run one script with the job's keys and prefix; the one round trip of a change."""
        return await call(script(keys=self._keys, args=[self._prefix, *args]))

    # -- construction -------------------------------------------------------------------

    @classmethod
    async def connect(
        cls, url: str, settings: FrontierSettings, *, timeout_seconds: float = 10.0
    ) -> Frontier:
        """Open the job's frontier on the Redis at ``url``, with a client of its own.

        The frontier then owns the client: :meth:`aclose` closes it, and it is closed at once
        when the open fails, so a caller that retries later leaks no connections.
        """
        client = connect(url, timeout_seconds=timeout_seconds)
        try:
            await call(client.ping())
            return await cls.open(client, settings)
        except BaseException:
            await close_quietly(client)
            raise

    @classmethod
    async def open(cls, client: aioredis.Redis, settings: FrontierSettings) -> Frontier:
        """Create the job's frontier, or join it with the shape its first writer chose."""
        keys = JobKeys(settings.job_id)
        wanted = BloomParams.for_capacity(settings.capacity, settings.error_rate)
        backend = settings.bloom_backend or await cls._detect_backend(client, keys)
        meta_args: dict[str, str] = {
            "per_host": str(settings.per_host),
            "host_delay_ms": str(round(settings.host_delay_seconds * 1000)),
            "task_attempts": str(settings.task_attempts),
            "lease_ttl_ms": str(round(settings.lease_ttl_seconds * 1000)),
            "max_pages": str(settings.max_pages),
            "bloom_backend": backend,
            **wanted.to_meta(),
        }
        flat = [item for pair in meta_args.items() for item in pair]
        scripts = Scripts.register(client)
        raw = await call(scripts.init(keys=keys.script_keys(), args=[keys.prefix, *flat]))
        meta = dict(zip(raw[::2], raw[1::2], strict=True))
        stored = BloomParams.from_meta(meta)
        stored_backend: BloomBackend = "native" if meta["bloom_backend"] == "native" else "bitmap"
        if stored != wanted or stored_backend != backend:
            log.warning(
                "job %s keeps the Bloom filter it was created with (%s, %s); "
                "dedup settings cannot change after creation",
                settings.job_id,
                stored_backend,
                stored,
            )
        if stored_backend == "native":
            await cls._reserve_native(client, keys, stored)
        return cls(client, keys, settings, stored, stored_backend)

    @staticmethod
    async def _detect_backend(client: aioredis.Redis, keys: JobKeys) -> BloomBackend:
        """Native BF.* when the server has it (Redis 8, RedisBloom, valkey-bloom).

        A read-only BF.EXISTS probe, since COMMAND INFO may be renamed on managed Redis.
        """
        try:
            await client.execute_command("BF.EXISTS", keys.native_bloom, "probe")  # type: ignore[no-untyped-call]
        except ResponseError:
            return "bitmap"
        except (RedisError, OSError) as exc:
            raise FrontierUnavailable(f"Redis unavailable: {exc}") from exc
        return "native"

    @staticmethod
    async def _reserve_native(client: aioredis.Redis, keys: JobKeys, bloom: BloomParams) -> None:
        try:
            await client.execute_command(  # type: ignore[no-untyped-call]
                "BF.RESERVE", keys.native_bloom, bloom.error_rate, bloom.capacity
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
        The native backend is one plain BF.MADD (``seen`` is then read with BF.CARD).
        """
        if not urls:
            return []
        _check_urls(urls)
        if self.backend == "native":
            codes = await call(
                self.client.execute_command("BF.MADD", self.keys.native_bloom, *urls)  # type: ignore[no-untyped-call]
            )
        else:
            codes = await self._run(self._scripts.add_if_new, *self._bloom_args, "", *digests(urls))
        return [code == 1 for code in codes]

    async def contains(self, urls: Sequence[str]) -> list[bool]:
        """Read-only membership: True for each URL the filter has probably seen."""
        if not urls:
            return []
        _check_urls(urls)
        items: Sequence[str | bytes] = urls if self.backend == "native" else digests(urls)
        codes = await self._run(
            self._scripts.contains, *self._bloom_args, self.keys.native_bloom, *items
        )
        return [code == 1 for code in codes]

    async def enqueue(self, links: Sequence[Link], *, seeding: bool = False) -> list[Admission]:
        """Dedup and queue links in one round trip; returns what happened to each."""
        if not links:
            return []
        results: list[Admission] = []
        for start in range(0, len(links), _MAX_BATCH):
            results.extend(await self._enqueue_batch(links[start : start + _MAX_BATCH], seeding))
        return results

    async def _enqueue_batch(self, links: Sequence[Link], seeding: bool) -> list[Admission]:
        _check_urls([link.url for link in links])
        for link in links:
            if link.depth < 0 or "\t" in link.parent:
                raise InvalidURL(f"bad link depth or parent: {link!r}")
        hashes: Sequence[bytes | str] = (
            digests(link.url for link in links) if self.backend == "bitmap" else [""] * len(links)
        )
        args: list[str | int | bytes] = [
            *self._bloom_args,
            "1" if seeding else "0",
            self.keys.native_bloom,
        ]
        for link, digest in zip(links, hashes, strict=True):
            args += (link.url, link.depth, link.parent, digest)
        codes = await self._run(self._scripts.enqueue, *args)
        return [Admission(code) for code in codes]

    async def seed(self, urls: Sequence[str]) -> int:
        """Queue the seeds at depth 0 and mark the job seeded; returns how many were new.

        Seeding twice is harmless: the Bloom filter refuses what was seeded before.
        """
        links = [Link(canonicalize(url), 0, "") for url in urls]
        if not links:
            raise InvalidURL("a job needs at least one seed URL")
        outcome = await self.enqueue(links, seeding=True)
        return sum(1 for code in outcome if code is Admission.NEW)

    # -- leases ---------------------------------------------------------------------------

    async def claim(self, worker: str, count: int, fetched: Sequence[str] = ()) -> list[Lease]:
        """Lease up to ``count`` URLs from hosts that may be fetched now.

        ``fetched`` names leases of this worker whose responses have arrived: their host
        slots are freed in the same round trip, before the new leases are chosen, while the
        leases themselves stay the worker's until ack or fail. perHost thus bounds requests
        in progress, not pages waiting to be parsed and flushed.
        """
        if count <= 0 and not fetched:
            return []
        raw = await self._run(self._scripts.claim, _worker_id(worker), max(0, count), *fetched)
        claimed_at, expires_at = int(raw[0]) / 1000.0, int(raw[1]) / 1000.0
        leases = []
        for token in raw[2:]:
            _, _, attempts, depth, url, parent = token.split("\t", 5)
            leases.append(
                Lease(
                    token,
                    CanonicalURL(url),  # it was canonical when it was queued
                    int(depth),
                    int(attempts),
                    parent,
                    claimed_at,
                    expires_at,
                )
            )
        return leases

    async def ack(self, worker: str, lease_ids: Sequence[str]) -> Outcomes[bool]:
        """Complete leases; False for each the worker no longer owns (fenced out)."""
        if not lease_ids:
            return Outcomes()
        raw = await self._run(self._scripts.ack, _worker_id(worker), *lease_ids)
        return Outcomes.of(raw[0], (code == 1 for code in raw[1:]))

    async def fail(self, worker: str, failures: Sequence[Failure]) -> Outcomes[FailOutcome]:
        """Report failed attempts: retried later, or dead-lettered with their class."""
        if not failures:
            return Outcomes()
        args: list[str | int] = [_worker_id(worker)]
        for f in failures:
            args += (
                f.lease_id,
                "1" if f.retryable else "0",
                max(0, round(f.delay_seconds * 1000)),
                f.failure_class,
                f.message[:2000],
            )
        raw = await self._run(self._scripts.fail, *args)
        return Outcomes.of(raw[0], (FailOutcome(code) for code in raw[1:]))

    async def extend(
        self, worker: str, lease_ids: Sequence[str], ttl_seconds: float | None = None
    ) -> list[bool]:
        """Push the expiry of leases still being worked on (a long fetch's heartbeat)."""
        if not lease_ids:
            return []
        ttl_ms = 0 if ttl_seconds is None else max(1, round(ttl_seconds * 1000))
        raw = await self._run(self._scripts.extend, _worker_id(worker), ttl_ms, *lease_ids)
        return [code == 1 for code in raw[1:]]

    async def release(self, worker: str, lease_ids: Sequence[str]) -> Outcomes[bool]:
        """Give leases back without counting an attempt (graceful shutdown)."""
        if not lease_ids:
            return Outcomes()
        raw = await self._run(self._scripts.release, _worker_id(worker), *lease_ids)
        return Outcomes.of(raw[0], (code == 1 for code in raw[1:]))

    async def requeue_expired(self, limit: int = 10_000) -> Requeued:
        """Return expired leases to their queues (attempt counted).

        URLs past ``taskAttempts`` go to the dead-letter set instead, counted apart.
        """
        requeued, dead, at_ms = await self._run(self._scripts.requeue, "expired", limit)
        return Requeued(int(requeued), int(dead), int(at_ms) / 1000.0)

    async def requeue_owner(self, worker: str) -> Requeued:
        """Return every lease of a worker known to be gone (attempt counted)."""
        requeued, dead, at_ms = await self._run(self._scripts.requeue, "owner", _worker_id(worker))
        return Requeued(int(requeued), int(dead), int(at_ms) / 1000.0)

    async def set_host_delay(self, host: str, delay_seconds: float | None) -> None:
        """A host's own delay between fetches (robots Crawl-delay); None forgets it."""
        delay_ms = -1 if delay_seconds is None else max(0, round(delay_seconds * 1000))
        await self._run(self._scripts.set_host_delay, host, delay_ms)

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

    async def heartbeat(self, worker: str, counters: Mapping[str, float]) -> float:
        """Record that a worker is alive; returns the server time (seconds)."""
        payload = json.dumps(dict(counters), separators=(",", ":"))
        now_ms = await self._run(self._scripts.heartbeat, _worker_id(worker), payload)
        return int(now_ms) / 1000.0

    async def forget_worker(self, worker: str) -> None:
        """Remove a worker that left cleanly from the heartbeat table."""
        await self._run(self._scripts.heartbeat, _worker_id(worker), "")

    async def workers(self) -> list[WorkerHeartbeat]:
        """Every worker's last heartbeat, aged on the server's clock."""
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        pipe.zrange(self.keys.key("heartbeats"), 0, -1, withscores=True)
        pipe.hgetall(self.keys.key("workers"))
        (seconds, micros), beats, payloads = await call(pipe.execute())
        now = seconds + micros / 1e6
        result = []
        for worker, score in beats:
            last = score / 1000.0
            counters = json.loads(payloads.get(worker) or "{}")
            result.append(WorkerHeartbeat(worker, last, max(0.0, now - last), counters))
        return result

    async def stats(self) -> FrontierStats:
        """The job's counters in one round trip (one pipeline of O(1) reads)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self.keys.key("stats"), _STAT_FIELDS)
        pipe.hget(self.keys.key("meta"), "seeded_ms")
        # The earliest retry's due time (ms) against the server's clock: the fleet brain
        # wakes a worker for it (a claim is what promotes a due retry).
        pipe.zrange(self.keys.key("delayed"), 0, 0, withscores=True)
        pipe.time()
        if self.backend == "native":
            pipe.execute_command("BF.CARD", self.keys.native_bloom)
        values, seeded, earliest, (seconds, micros), *card = await call(pipe.execute())
        counts = {name: int(v or 0) for name, v in zip(_STAT_FIELDS, values, strict=True)}
        if card:  # the native filter counts what BF.MADD added outside our scripts too
            counts["seen"] = int(card[0])
        return FrontierStats(
            **counts,
            seeded=seeded is not None,
            bloom_backend=self.backend,
            bloom_fill_ratio=self.bloom.fill_ratio(counts["seen"]),
            bloom_false_positive_rate=self.bloom.false_positive_rate(counts["seen"]),
            next_retry_in_seconds=earliest[0][1] / 1000.0 - (seconds + micros / 1e6)
            if earliest
            else None,
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
            reply = await call(self.client.hscan(key, cursor, count=batch))
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
        await call(self.client.hset(self.keys.key("output"), mapping=entries))  # type: ignore[arg-type]

    async def claim_output_finish(self, worker: str, ttl_seconds: float) -> bool:
        """Become the one writer of the job's closing files (manifest, dead letters) for
        ``ttl_seconds``: True for the worker that holds the claim, False for the others."""
        key = self.keys.key("output-finisher")
        ttl_ms = max(1, round(ttl_seconds * 1000))
        if await call(self.client.set(key, _worker_id(worker), nx=True, px=ttl_ms)):
            return True
        return bool(await call(self.client.get(key)) == worker)

    async def output_finished(self) -> str | None:
        """What :meth:`mark_output_finished` recorded (the manifest's summary), or None."""
        value = await call(self.client.get(self.keys.key("output-finished")))
        return None if value is None else str(value)

    async def mark_output_finished(self, summary: str) -> None:
        """The closing files are written: no other worker writes them again."""
        await call(self.client.set(self.keys.key("output-finished"), summary))

    async def output_files(self, batch: int = 1000) -> list[dict[str, Any]]:
        """Every file :meth:`record_output_files` was told of, sorted by path."""
        key = self.keys.key("output")
        found: list[dict[str, Any]] = []
        cursor = 0
        while True:
            reply = await call(self.client.hscan(key, cursor, count=batch))
            cursor, page = cast("tuple[int, dict[str, str]]", reply)
            found.extend(json.loads(raw) for raw in page.values())
            if cursor == 0:
                return sorted(found, key=lambda entry: str(entry["path"]))

    async def delete(self) -> int:
        """Remove every key of the job (used when a job with an external Redis is deleted)."""
        deleted = 0
        cursor = 0
        while True:
            cursor, found = await call(
                self.client.scan(cursor, match=self.keys.pattern, count=1000)
            )
            if found:
                deleted += int(await call(self.client.unlink(*found)))
            if cursor == 0:
                return deleted

    # -- the connection ---------------------------------------------------------------------

    async def ping(self) -> None:
        """Check that Redis answers; :class:`FrontierUnavailable` when it does not."""
        await call(self.client.ping())

    async def aclose(self) -> None:
        """Close the Redis client (and its pool); the frontier cannot be used afterwards."""
        await close_quietly(self.client)


def _worker_id(worker: str) -> str:
    if not worker or "\t" in worker or len(worker) > 253:
        raise ValueError(f"bad worker id {worker!r}")
    return worker
