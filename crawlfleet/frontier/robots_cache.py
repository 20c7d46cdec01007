"""robots.txt answers shared by a job's whole fleet: one Redis hash, one fetch lock per origin.

A fleet of N workers that each fetched every host's robots.txt would hit each site N times
before its first page, and again on every worker restart. So the raw answer (status and body)
lives in one hash of the job (``JobKeys.robots``; field ``scheme://host[:port]``, value JSON
``{"status", "body", "fetched_at"}`` and, when they are not empty, ``"sitemaps"``, the failure
streak ``"failures"``/``"failing_since"``, the time the file is asked again ``"next_try_at"``,
the last good answer ``"good"`` (an entry of the same shape) and ``"recovered"``), written by
whichever worker fetched it first. A host's last status and next try are thus one HGET (or one
HMGET for many), which is what the fleet reads to say what a host waits for.

Only one worker of the fleet fetches an origin at a time: it takes a short ``SET NX PX`` lock
(``JobKeys.robots_lock(origin)``, a random token), and workers that lose the race poll the hash
until the holder has stored its answer, or until the lock is gone without one (the holder died),
when they compete for it again; after a few rounds a worker fetches without the lock, so a dead
holder never stalls the fleet for long. Storing the answer and releasing the lock is one script
(``robots_store.lua``), so no worker can see the lock gone and the answer not yet there.

The hash is bounded, in origins and in bytes (:data:`ROBOTS_CACHE_MAX_ORIGINS`,
:data:`ROBOTS_CACHE_MAX_BYTES`): a crawl of wildcard subdomains meets origins without end, each
with a robots.txt of up to 500 KiB, and a cache that kept every one would grow Redis until the
frontier stopped. Each origin's last use (its store, and every read that found it) is its score
in a sorted set (``robots-used``); the store script drops the least recently used origins past
either bound in the same step, so the bound holds whatever the workers do at once. A dropped
origin is fetched again when next needed. :meth:`RobotsCache.state` says what it holds and how
many it dropped, for the worker's metrics.

What an answer *means* (RFC 9309's verdicts, how long each kind stays fresh) is the crawler's
business (``crawler/politeness/robots.py``): this module stores, shares and coordinates, and asks
its caller whether an entry is still fresh.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final
from uuid import uuid4

from crawlfleet.errors import FrontierUnavailable
from crawlfleet.frontier.connection import (
    RedisClient,
    call,
    check_epoch,
    execute_keeping_refusals,
    translate,
)
from crawlfleet.frontier.keys import JobKeys
from crawlfleet.frontier.scripts import Scripts

__all__ = [
    "ROBOTS_CACHE_MAX_BYTES",
    "ROBOTS_CACHE_MAX_ORIGINS",
    "FetchEntry",
    "IsFresh",
    "RobotsCache",
    "RobotsCacheState",
    "RobotsEntry",
]

log = logging.getLogger(__name__)

# How often a worker that lost the fetch lock looks for the holder's answer.
_POLL_SECONDS: Final = (0.05, 0.1, 0.2, 0.25)
# Times a worker competes for the fetch lock before it fetches without one.
_LOCK_ROUNDS: Final = 3
#: The most origins a job's shared robots.txt cache keeps: the hosts of a large crawl's recent
#: work. Past it the least recently used are dropped (and fetched again if met again).
ROBOTS_CACHE_MAX_ORIGINS: Final = 100_000
#: The most bytes of entries it keeps: a small share of a managed Redis (1 Gi by default),
#: and room for a hundred of the largest robots.txt files read (500 KiB) beside the small ones.
ROBOTS_CACHE_MAX_BYTES: Final = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RobotsCacheState:
    """The shared cache as a worker last saw it: origins and bytes held fleet-wide, and the
    origins this worker's stores dropped (a counter)."""

    origins: int = 0
    bytes: int = 0
    evictions: int = 0


@dataclass(frozen=True, slots=True)
class RobotsEntry:
    """One origin's raw robots.txt answer as the fleet shares it.

    ``status`` is None when the fetch failed without an HTTP answer (network error, timeout);
    ``fetched_at`` is the fetching worker's wall clock, in seconds since the epoch. What the
    crawler needs to defer a host whose robots.txt cannot be read (RFC 9309 §2.3.1.4) rides
    along: ``failures`` failed fetches in a row since ``failing_since``, ``next_try_at`` (same
    clock) when the fleet asks for the file again (the crawler's rules decide it: its TTLs, the
    server's Retry-After), the last good answer (``good``) to fall back on, and ``recovered`` on
    the first good answer after failures. While ``next_try_at`` is set and ``good`` is None the
    host's URLs wait for robots.txt. ``sitemaps`` are the file's ``Sitemap:`` URLs, for
    whoever reads sitemaps.
    """

    status: int | None
    body: str
    fetched_at: float
    sitemaps: tuple[str, ...] = ()
    failures: int = 0
    failing_since: float | None = None
    good: RobotsEntry | None = None
    recovered: bool = False
    next_try_at: float | None = None

    def to_json(self) -> str:
        return json.dumps(self._to_mapping(), separators=(",", ":"))

    def _to_mapping(self) -> dict[str, object]:
        data: dict[str, object] = {
            "status": self.status,
            "body": self.body,
            "fetched_at": self.fetched_at,
        }
        # Only what is set: the common entry stays as small as it always was.
        if self.sitemaps:
            data["sitemaps"] = list(self.sitemaps)
        if self.failures:
            data["failures"] = self.failures
            data["failing_since"] = self.failing_since
        if self.next_try_at is not None:
            data["next_try_at"] = self.next_try_at
        if self.good is not None:
            data["good"] = self.good._to_mapping()
        if self.recovered:
            data["recovered"] = True
        return data

    @classmethod
    def from_json(cls, origin: str, value: str | bytes) -> RobotsEntry | None:
        """None (and a warning) for a value this version cannot read: it is fetched again."""
        try:
            return cls._from_mapping(json.loads(value), nested=False)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("robots: unreadable cache entry for %s (%s); fetching again", origin, exc)
            return None

    @classmethod
    def _from_mapping(cls, data: dict[str, object], *, nested: bool) -> RobotsEntry:
        status, body, fetched_at = data["status"], data["body"], data["fetched_at"]
        if status is not None and not isinstance(status, int):
            raise TypeError("status")
        if not isinstance(body, str) or not isinstance(fetched_at, int | float):
            raise TypeError("body or fetched_at")
        sitemaps = data.get("sitemaps", [])
        failures = data.get("failures", 0)
        failing_since = data.get("failing_since")
        next_try_at = data.get("next_try_at")
        good = data.get("good")
        if not isinstance(sitemaps, list) or not all(isinstance(s, str) for s in sitemaps):
            raise TypeError("sitemaps")
        if not isinstance(failures, int) or (
            failing_since is not None and not isinstance(failing_since, int | float)
        ):
            raise TypeError("failures or failing_since")
        if next_try_at is not None and not isinstance(next_try_at, int | float):
            raise TypeError("next_try_at")
        if good is not None and (nested or not isinstance(good, dict)):
            raise TypeError("good")
        return cls(
            status,
            body,
            float(fetched_at),
            tuple(sitemaps),
            failures,
            None if failing_since is None else float(failing_since),
            None if good is None else cls._from_mapping(good, nested=True),
            data.get("recovered") is True,
            None if next_try_at is None else float(next_try_at),
        )


#: Fetches one origin's robots.txt now (the caller's HTTP stack, its timeouts and checks),
#: given the entry stored before (None if none): a failure streak or a last good answer
#: carries over into the new entry.
FetchEntry = Callable[[RobotsEntry | None], Awaitable[RobotsEntry]]
#: Whether a stored entry may still be used (the caller's TTLs and clock).
IsFresh = Callable[[RobotsEntry], bool]


class RobotsCache:
    """One job's shared robots.txt answers; built by :class:`~crawlfleet.frontier.Frontier`."""

    def __init__(
        self,
        client: RedisClient,
        keys: JobKeys,
        scripts: Scripts,
        *,
        epoch: str,
        max_origins: int = ROBOTS_CACHE_MAX_ORIGINS,
        max_bytes: int = ROBOTS_CACHE_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock`` (seconds since the epoch) scores an origin's last use: the workers' wall
        clock, as the entries' own times are."""
        self._client = client
        self._keys = keys
        self._scripts = scripts
        self._script_keys = keys.script_keys()
        self._epoch = epoch
        self._max_origins = max_origins
        self._max_bytes = max_bytes
        self._clock = clock
        self._state = RobotsCacheState()
        #: Answers this worker fetched holding the lock but could not store (Redis away),
        #: with their lock's token: stored first when the origin is asked for again, which
        #: releases the lock, instead of every worker waiting it out (a page's fetch
        #: deadline could pass meanwhile).
        self._unstored: dict[str, tuple[str, RobotsEntry]] = {}

    def state(self) -> RobotsCacheState:
        """What the cache held at this worker's last store, and what its stores dropped."""
        return self._state

    async def read(self, origins: Sequence[str]) -> list[RobotsEntry | None]:
        """The stored entries of ``origins`` in one HMGET; None where missing or unreadable.

        Raises FrontierLost, like every frontier read, when the job's frontier is gone: an
        emptied Redis would otherwise look like a cache that never fetched anything.
        """
        if not origins:
            return []
        pipe = self._client.pipeline(transaction=False)
        pipe.hmget(self._keys.robots, list(origins))
        pipe.hget(self._keys.key("meta"), "epoch")
        # A use: the origins found move to the recent end of the LRU (XX: never adds one). A
        # Redis past maxmemory refuses it; the read stands, the order is only a little older.
        now_ms = round(self._clock() * 1000)
        pipe.zadd(self._keys.key("robots-used"), dict.fromkeys(origins, now_ms), xx=True)
        values, epoch, _ = await execute_keeping_refusals(pipe)
        for reply in (values, epoch):
            if isinstance(reply, Exception):
                raise translate(reply) from reply
        await check_epoch(self._client, self._keys, self._epoch, epoch)
        return [
            None if value is None else RobotsEntry.from_json(origin, value)
            for origin, value in zip(origins, values, strict=True)
        ]

    async def fetch_once(
        self, origin: str, fetch: FetchEntry, *, fresh: IsFresh, lock_seconds: float
    ) -> RobotsEntry:
        """A fresh entry for ``origin``, fetched by this worker only if no other one is.

        ``lock_seconds`` must outlast ``fetch`` (its timeout plus the writes after it): a
        lock that expires mid-fetch lets a second worker fetch the same file.
        """
        unstored = self._unstored.pop(origin, None)
        if unstored is not None:
            token, fetched = unstored
            await self._storing(origin, token, fetched)
            if fresh(fetched):
                return fetched
        for _ in range(_LOCK_ROUNDS):
            token = uuid4().hex
            if await self._lock(origin, token, lock_seconds):
                return await self._fetch_holding_lock(origin, token, fetch, fresh)
            entry = await self._wait_for_holder(origin, fresh, lock_seconds)
            if entry is not None:
                return entry
        log.info("robots: no answer from the workers fetching %s; fetching it here", origin)
        entry = await fetch(await self._stored(origin))
        await self._store(origin, "", entry)
        return entry

    # -- the lock ---------------------------------------------------------------------------

    async def _lock(self, origin: str, token: str, lock_seconds: float) -> bool:
        ttl_ms = max(1, round(lock_seconds * 1000))
        args: list[str | int] = [self._keys.prefix, self._epoch, origin, token, ttl_ms]
        return bool(await call(self._scripts.robots_lock(keys=self._script_keys, args=args)))

    async def _fetch_holding_lock(
        self, origin: str, token: str, fetch: FetchEntry, fresh: IsFresh
    ) -> RobotsEntry:
        try:
            # Another worker may have stored it between our caller's read and our lock.
            stored = await self._stored(origin)
            if stored is not None and fresh(stored):
                await self._unlock(origin, token)
                return stored
            entry = await fetch(stored)
        except BaseException:
            await self._unlock(origin, token)
            raise
        await self._storing(origin, token, entry)
        return entry

    async def _storing(self, origin: str, token: str, entry: RobotsEntry) -> None:
        """:meth:`_store`, the answer kept for the next ask when Redis does not take it."""
        try:
            await self._store(origin, token, entry)
        except FrontierUnavailable:
            self._unstored[origin] = (token, entry)
            raise

    async def _stored(self, origin: str) -> RobotsEntry | None:
        value = await call(self._client.hget(self._keys.robots, origin))
        return None if value is None else RobotsEntry.from_json(origin, value)

    async def _run_store(self, origin: str, token: str, value: str) -> bool:
        """robots_store.lua: store ``value`` (unless '') within the bounds, and release this
        worker's lock; whether it held it."""
        args: list[str | int] = [
            self._keys.prefix,
            self._epoch,
            origin,
            token,
            value,
            round(self._clock() * 1000),
            self._max_origins,
            self._max_bytes,
        ]
        released, evicted, origins, held = await call(
            self._scripts.robots_store(keys=self._script_keys, args=args)
        )
        self._state = RobotsCacheState(
            int(origins), int(held), self._state.evictions + int(evicted)
        )
        return bool(released)

    async def _store(self, origin: str, token: str, entry: RobotsEntry) -> None:
        released = await self._run_store(origin, token, entry.to_json())
        if token and not released:
            # It expired during a slow fetch; the entry is stored anyway, nothing is lost.
            log.debug("robots: lock of %s expired before release", origin)

    async def _unlock(self, origin: str, token: str) -> None:
        """Give the lock up without an answer; it expires by itself if Redis is away."""
        try:
            await self._run_store(origin, token, "")
        except FrontierUnavailable as exc:
            log.warning("robots: could not release lock of %s: %s", origin, exc)

    async def _wait_for_holder(
        self, origin: str, fresh: IsFresh, lock_seconds: float
    ) -> RobotsEntry | None:
        """Poll for the fresh entry the lock holder is fetching; None if it never comes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + lock_seconds
        attempt = 0
        while loop.time() < deadline:
            await asyncio.sleep(_POLL_SECONDS[min(attempt, len(_POLL_SECONDS) - 1)])
            attempt += 1
            pipe = self._client.pipeline(transaction=False)
            pipe.hget(self._keys.robots, origin)
            pipe.exists(self._keys.robots_lock(origin))
            value, locked = await call(pipe.execute())
            entry = None if value is None else RobotsEntry.from_json(origin, value)
            if entry is not None and fresh(entry):
                return entry
            if not locked:
                break  # the holder gave up or died without storing
        return None
