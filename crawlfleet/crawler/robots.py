"""robots.txt per origin: what a fetched file means, and the parsed rules each worker keeps.

The raw answers are shared by the whole fleet through the frontier
(:class:`~crawlfleet.frontier.RobotsCache`: one Redis hash, one fetch lock per origin, so each
site's robots.txt is fetched once per job). Every worker keeps the *parsed* rules (Protego
objects) in a small local LRU, because parsing is the costly part and the same hosts come back
on every claim; within one worker, concurrent callers of the same origin share one fetch.

Semantics follow RFC 9309 as Google reads it:

* 2xx: the body is parsed; only its first 500 KiB count (the rest is cut at the last line
  break before the cap, so a rule is never read half-way);
* 3xx left over after the fetcher's own redirect handling, and 4xx except 429: no robots.txt,
  everything is allowed;
* 5xx, 429, a network failure, a timeout, or any other status: the site is unreachable and
  *everything* is disallowed, but only for ``robots.errorTtlSeconds``, after which it is asked
  again; a 2xx/4xx answer is kept for ``robots.ttlSeconds``;
* ``obey=False``: every URL is allowed and robots.txt is never fetched.

Rules are matched with the *product token* of the user agent: the part of ``user_agent`` before
its first ``/`` (``crawlfleet/0.1 (+https://...)`` → ``crawlfleet``). Redis errors reach callers
as :class:`~crawlfleet.errors.FrontierUnavailable`, translated by the frontier.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from protego import Protego

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.errors import ConfigError, FetchError
from crawlfleet.frontier.robots_cache import RobotsCache, RobotsEntry
from crawlfleet.frontier.urls import origin_of

__all__ = [
    "LOCAL_CACHE_ORIGINS",
    "MAX_ROBOTS_BYTES",
    "RobotsFetch",
    "RobotsPolicy",
    "product_token",
]

log = logging.getLogger(__name__)

#: ``robots URL -> (HTTP status, or None on a network failure; body)``. The fetcher follows
#: redirects itself (RFC 9309 asks for at least five) and applies the usual safety checks.
RobotsFetch = Callable[[str], Awaitable[tuple[int | None, bytes]]]

#: Google (and RFC 9309's minimum) read the first 500 KiB of a robots.txt.
MAX_ROBOTS_BYTES: Final = 500 * 1024
#: Origins whose parsed rules one worker keeps (an LRU): the hosts of its recent claims.
LOCAL_CACHE_ORIGINS: Final = 4096

# Bodies above this are parsed in a thread so a huge robots.txt does not stall the event loop.
_PARSE_IN_THREAD_BYTES: Final = 64 * 1024
_UTF8_BOM: Final = "\ufeff"


class _Verdict(StrEnum):
    RULES = "rules"  # 2xx: obey the parsed body
    ALLOW_ALL = "allow_all"  # 3xx/4xx: no robots.txt
    DISALLOW_ALL = "disallow_all"  # 5xx, 429, network failure: site unreachable


def _verdict(status: int | None) -> _Verdict:
    if status is None or status == 429:
        return _Verdict.DISALLOW_ALL
    if 200 <= status < 300:
        return _Verdict.RULES
    if 300 <= status < 500:
        return _Verdict.ALLOW_ALL
    return _Verdict.DISALLOW_ALL  # 5xx, and anything outside HTTP's range


@dataclass(frozen=True, slots=True)
class _Rules:
    """Parsed rules of one origin, valid until ``expires_at`` (the policy's clock)."""

    verdict: _Verdict
    parser: Protego | None
    expires_at: float

    def allows(self, url: str, agent: str) -> bool:
        if self.verdict is _Verdict.RULES and self.parser is not None:
            return bool(self.parser.can_fetch(url, agent))
        return self.verdict is _Verdict.ALLOW_ALL

    def delay_seconds(self, agent: str) -> float | None:
        if self.parser is None:
            return None
        delay = self.parser.crawl_delay(agent)
        if delay is None:
            rate = self.parser.request_rate(agent)
            if rate is not None and rate.requests > 0:
                delay = rate.seconds / rate.requests
        if delay is None or math.isnan(delay):
            return None
        return float(delay)


def product_token(user_agent: str) -> str:
    """The token robots.txt groups are matched against: ``user_agent`` up to its first ``/``."""
    token = user_agent.split("/", 1)[0].strip().lower()
    if not token or any(c.isspace() for c in token):
        raise ConfigError(f"userAgent {user_agent!r} must start with a product token ('name/…')")
    return token


def _decode_body(body: bytes) -> str:
    """The first 500 KiB as text, cut at the last line break so no rule is read half-way."""
    if len(body) > MAX_ROBOTS_BYTES:
        cut = body.rfind(b"\n", 0, MAX_ROBOTS_BYTES)
        body = body[: cut + 1 if cut != -1 else MAX_ROBOTS_BYTES]
    # RFC 9309: UTF-8; undecodable bytes are replaced, as every real parser tolerates them.
    return body.decode("utf-8", errors="replace").removeprefix(_UTF8_BOM)


class RobotsPolicy:
    """Answers "may this URL be fetched?" and "how slowly?" for one job, fleet-wide cached.

    Build it with :meth:`from_spec`: its knobs have no defaults and no checks here, the
    CrawlJob model holds both. ``clock`` (seconds since the epoch) stamps and ages entries; it
    is shared with other workers through Redis, so it is wall-clock time but for tests.
    """

    def __init__(
        self,
        cache: RobotsCache,
        fetch_robots: RobotsFetch,
        *,
        user_agent: str,
        obey: bool,
        ttl_seconds: float,
        error_ttl_seconds: float,
        max_crawl_delay_seconds: float,
        fetch_timeout_seconds: float,
        local_cache_size: int,
        clock: Callable[[], float],
    ) -> None:
        self._cache = cache
        self._fetch_robots = fetch_robots
        self._agent = product_token(user_agent)
        self._obey = obey
        self._ttl_seconds = ttl_seconds
        self._error_ttl_seconds = error_ttl_seconds
        self._max_crawl_delay_seconds = max_crawl_delay_seconds
        self._fetch_timeout_seconds = fetch_timeout_seconds
        # The lock outlives a fetch that hits its timeout, plus the Redis writes after it.
        self._lock_seconds = fetch_timeout_seconds + 10.0
        self._cache_size = local_cache_size
        self._clock = clock
        self._local: OrderedDict[str, _Rules] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[_Rules]] = {}

    @classmethod
    def from_spec(
        cls,
        cache: RobotsCache,
        fetch_robots: RobotsFetch,
        spec: CrawlJobSpec,
        *,
        clock: Callable[[], float] = time.time,
        local_cache_size: int = LOCAL_CACHE_ORIGINS,
    ) -> RobotsPolicy:
        """The policy a CrawlJob asks for (``robots``, ``userAgent``).

        A robots.txt fetch gets the deadline of any fetch (``fetch.totalTimeoutSeconds``);
        ``clock`` and ``local_cache_size`` are not the job's to choose (tests change them).
        """
        return cls(
            cache,
            fetch_robots,
            user_agent=spec.user_agent,
            obey=spec.robots.obey,
            ttl_seconds=spec.robots.ttl_seconds,
            error_ttl_seconds=spec.robots.error_ttl_seconds,
            max_crawl_delay_seconds=spec.robots.max_crawl_delay_seconds,
            fetch_timeout_seconds=spec.fetch.total_timeout_seconds,
            local_cache_size=local_cache_size,
            clock=clock,
        )

    @property
    def agent(self) -> str:
        """The product token matched against ``User-agent`` lines."""
        return self._agent

    # -- public API -----------------------------------------------------------------------

    async def allowed(self, url: str) -> bool:
        """May ``url`` (absolute http(s), canonical) be fetched? Fetches robots.txt if needed."""
        if not self._obey:
            return True
        origin = origin_of(url)
        rules = self._local_get(origin, self._clock())
        if rules is None:
            rules = (await self._rules_for([origin]))[origin]
        return rules.allows(url, self._agent)

    async def crawl_delay(self, host: str) -> float | None:
        """Crawl-delay (or Request-rate as seconds per request) for our agent, at most the max.

        ``host`` is an origin (``https://example.com``), fetched if not yet known, or a bare
        frontier host key (``example.com[:port]``), which is only looked up (https first): call
        :meth:`allowed` for one of its URLs first. None when robots sets no delay, when it is
        unknown, or when robots is not obeyed.
        """
        if not self._obey:
            return None
        now = self._clock()
        rules: _Rules | None
        if "://" in host:
            origin = origin_of(host)
            rules = self._local_get(origin, now) or (await self._rules_for([origin]))[origin]
        else:
            rules = await self._known_rules((f"https://{host}", f"http://{host}"), now)
        if rules is None:
            return None
        delay = rules.delay_seconds(self._agent)
        if delay is None:
            return None
        return min(self._max_crawl_delay_seconds, max(0.0, delay))

    # -- cache layers ---------------------------------------------------------------------

    def _local_get(self, origin: str, now: float) -> _Rules | None:
        rules = self._local.get(origin)
        if rules is None:
            return None
        if rules.expires_at <= now:
            del self._local[origin]
            return None
        self._local.move_to_end(origin)
        return rules

    def _local_put(self, origin: str, rules: _Rules) -> None:
        self._local[origin] = rules
        self._local.move_to_end(origin)
        while len(self._local) > self._cache_size:
            self._local.popitem(last=False)

    async def _known_rules(self, origins: Iterable[str], now: float) -> _Rules | None:
        """The first origin with fresh rules, locally or in Redis; never fetches."""
        origins = list(origins)
        for origin in origins:
            rules = self._local_get(origin, now)
            if rules is not None:
                return rules
        for origin, entry in zip(origins, await self._cache.read(origins), strict=True):
            rules = await self._from_entry(origin, entry, now)
            if rules is not None:
                return rules
        return None

    async def _rules_for(self, origins: Sequence[str]) -> dict[str, _Rules]:
        """Fresh rules for every origin: local cache, then one HMGET, then fetches."""
        now = self._clock()
        found: dict[str, _Rules] = {}
        missing: list[str] = []
        for origin in dict.fromkeys(origins):
            rules = self._local_get(origin, now)
            if rules is None:
                missing.append(origin)
            else:
                found[origin] = rules
        if not missing:
            return found
        stale: list[str] = []
        for origin, entry in zip(missing, await self._cache.read(missing), strict=True):
            rules = await self._from_entry(origin, entry, now)
            if rules is None:
                stale.append(origin)
            else:
                found[origin] = rules
        if stale:
            # gather, not a TaskGroup: callers want the first FrontierUnavailable itself, not an
            # ExceptionGroup, and the other fetches are shared tasks that should finish anyway.
            fetched = await asyncio.gather(*(self._fetch_once(origin) for origin in stale))
            found.update(zip(stale, fetched, strict=True))
        return found

    async def _from_entry(
        self, origin: str, entry: RobotsEntry | None, now: float
    ) -> _Rules | None:
        """Rules from a shared entry if it is present and fresh (and cached locally)."""
        if entry is None or self._expires_at(entry) <= now:
            return None  # checked before parsing: a stale 500 KiB body is not worth parsing
        rules = await self._parse(entry)
        self._local_put(origin, rules)
        return rules

    def _expires_at(self, entry: RobotsEntry) -> float:
        if _verdict(entry.status) is _Verdict.DISALLOW_ALL:
            return entry.fetched_at + self._error_ttl_seconds
        return entry.fetched_at + self._ttl_seconds

    def _fresh(self, entry: RobotsEntry) -> bool:
        return self._expires_at(entry) > self._clock()

    async def _parse(self, entry: RobotsEntry) -> _Rules:
        verdict = _verdict(entry.status)
        expires_at = self._expires_at(entry)
        if verdict is not _Verdict.RULES:
            return _Rules(verdict, None, expires_at)
        if len(entry.body) > _PARSE_IN_THREAD_BYTES:
            parser = await asyncio.to_thread(Protego.parse, entry.body)
        else:
            parser = Protego.parse(entry.body)
        return _Rules(verdict, parser, expires_at)

    # -- fetching -------------------------------------------------------------------------

    async def _fetch_once(self, origin: str) -> _Rules:
        """Join this worker's fetch of ``origin`` if one is running, else start one.

        The shared task is shielded: a caller that is cancelled must not cancel the fetch
        other callers wait for.
        """
        task = self._inflight.get(origin)
        if task is None:
            task = asyncio.create_task(self._refresh(origin), name=f"robots {origin}")
            self._inflight[origin] = task
            task.add_done_callback(lambda done: self._fetch_done(origin, done))
        return await asyncio.shield(task)

    def _fetch_done(self, origin: str, task: asyncio.Task[_Rules]) -> None:
        if self._inflight.get(origin) is task:
            del self._inflight[origin]
        if not task.cancelled() and task.exception() is not None:
            # Also raised to every caller still waiting; logged in case all were cancelled.
            log.debug("robots: fetch of %s failed", origin, exc_info=task.exception())

    async def _refresh(self, origin: str) -> _Rules:
        """Fresh rules for ``origin``, fetched here only when no other worker is fetching it."""
        entry = await self._cache.fetch_once(
            origin,
            lambda: self._fetch_entry(origin),
            fresh=self._fresh,
            lock_seconds=self._lock_seconds,
        )
        rules = await self._parse(entry)
        self._local_put(origin, rules)
        return rules

    async def _fetch_entry(self, origin: str) -> RobotsEntry:
        status, body = await self._fetch(origin)
        verdict = _verdict(status)
        text = _decode_body(body) if verdict is _Verdict.RULES else ""
        if verdict is _Verdict.DISALLOW_ALL:
            log.info(
                "robots: %s/robots.txt unreachable (status %s); host disallowed for %.0f s",
                origin,
                status,
                self._error_ttl_seconds,
            )
        return RobotsEntry(status, text, self._clock())

    async def _fetch(self, origin: str) -> tuple[int | None, bytes]:
        """The fetcher's answer; a timeout or a failed fetch is "unreachable" (status None)."""
        url = origin + "/robots.txt"
        try:
            async with asyncio.timeout(self._fetch_timeout_seconds):
                return await self._fetch_robots(url)
        except (TimeoutError, OSError, FetchError) as exc:
            log.info("robots: fetching %s failed: %s", url, exc)
            return None, b""
