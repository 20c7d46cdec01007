"""robots.txt per origin: what a fetched file means, and the parsed rules each worker keeps.

The raw answers are shared by the whole fleet through the frontier
(:class:`~crawlfleet.frontier.RobotsCache`: one Redis hash, one fetch lock per origin, so each
site's robots.txt is fetched once per job). Every worker keeps the *parsed* rules (Protego
objects) in a small local LRU, because parsing is the costly part and the same hosts come back
on every claim; within one worker, concurrent callers of the same origin share one fetch.

Semantics follow RFC 9309 (and Google's reading of it):

* 2xx: the body is parsed; only its first 500 KiB count (the rest is cut at the last line
  break before the cap, so a rule is never read half-way). Its ``Sitemap:`` lines are kept in
  the shared entry;
* 3xx: redirects are followed, up to :data:`ROBOTS_MAX_REDIRECTS` hops, each through the address
  guard, across hosts too (the rules then apply to the first authority); more hops, a loop or a
  hop we refuse leave no robots.txt: everything is allowed, as for 4xx except 429;
* 5xx, 429, a network failure, a timeout or an unreadable body: the file is *unreachable*, and
  until it is read the host is deferred (:attr:`RobotsAccess.DEFERRED`: its URLs go back to the
  frontier without an attempt counted). It is asked again when :func:`recheck_seconds` says:
  after the server's ``Retry-After`` on a 429 or 503 (RFC 9110 §10.2.3: how long the service
  is expected to be away, or how long to wait), kept between :data:`MIN_RECHECK_SECONDS` and
  ``robots.errorTtlSeconds``; without one after ``robots.errorTtlSeconds``, doubling after each
  further failure up to :data:`MAX_RECHECK_SECONDS` (or the TTL if longer). The time is stored
  in the shared entry (``next_try_at``), so every worker, and whoever shows the fleet's
  waits, reads the same one. When a good answer was seen before, that copy is obeyed meanwhile
  instead; when none ever was, the host is given up after ``robots.giveUpAfterSeconds``
  (:attr:`RobotsAccess.UNAVAILABLE`: its URLs are dead-lettered as ``robots_unavailable``);
* a good (2xx/3xx/4xx) answer is kept for ``robots.ttlSeconds``;
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
from typing import TYPE_CHECKING, Final

from protego import Protego

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.errors import ConfigError, FetchError
from crawlfleet.frontier.robots_cache import RobotsCache, RobotsCacheState, RobotsEntry
from crawlfleet.urls import origin_of

if TYPE_CHECKING:
    from crawlfleet.crawler.fetching.fetch import Fetcher, FetchResult

__all__ = [
    "LOCAL_CACHE_BYTES",
    "LOCAL_CACHE_ORIGINS",
    "MAX_RECHECK_SECONDS",
    "MAX_ROBOTS_BYTES",
    "MIN_RECHECK_SECONDS",
    "RETRY_AFTER_STATUSES",
    "ROBOTS_MAX_REDIRECTS",
    "RobotsAccess",
    "RobotsAnswer",
    "RobotsFetch",
    "RobotsPolicy",
    "RobotsVerdict",
    "product_token",
    "recheck_seconds",
    "robots_answer",
    "robots_fetch",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RobotsAnswer:
    """What one fetch of a robots.txt came to: the HTTP status (None when no answer came), the
    body, and the server's ``Retry-After`` in seconds from the answer (None when it sent none
    or one that does not parse)."""

    status: int | None
    body: bytes = b""
    retry_after_seconds: float | None = None


#: ``robots URL -> its answer``. The fetcher follows redirects itself and applies the usual
#: safety checks (see :func:`robots_fetch`).
RobotsFetch = Callable[[str], Awaitable[RobotsAnswer]]

#: Google (and RFC 9309's minimum) read the first 500 KiB of a robots.txt.
MAX_ROBOTS_BYTES: Final = 500 * 1024
#: RFC 9309 §2.3.1.2: follow at least five consecutive redirects.
ROBOTS_MAX_REDIRECTS: Final = 5
#: The longest wait between two tries of an unreachable robots.txt (unless errorTtlSeconds is
#: longer): the doubling stops here, so a site that comes back is noticed within the hour.
MAX_RECHECK_SECONDS: Final = 3600.0
#: The shortest wait a server's Retry-After buys: "0" or a date gone by must not make the fleet
#: ask again in a tight loop.
MIN_RECHECK_SECONDS: Final = 1.0
#: The answers whose Retry-After says when to ask again (RFC 9110 §10.2.3, RFC 6585 §4).
RETRY_AFTER_STATUSES: Final = frozenset({429, 503})
#: Origins whose parsed rules one worker keeps (an LRU): the hosts of its recent claims.
LOCAL_CACHE_ORIGINS: Final = 4096
#: ... and the most characters of robots.txt bodies behind them: 4,096 files of 500 KiB would be
#: gigabytes of parsed rules in a worker whose memory is budgeted for pages.
LOCAL_CACHE_BYTES: Final = 16 * 1024 * 1024

# Bodies above this are parsed in a thread so a huge robots.txt does not stall the event loop.
_PARSE_IN_THREAD_BYTES: Final = 64 * 1024
_UTF8_BOM: Final = "\ufeff"
# Refusals of a redirect hop (not of a request): the chain ends with no robots.txt in it.
_REDIRECT_REFUSALS: Final = frozenset(
    {
        FailureClass.TOO_MANY_REDIRECTS,
        FailureClass.REDIRECT_LOOP,
        FailureClass.BAD_SCHEME,
        FailureClass.INVALID_URL,
    }
)


class _Verdict(StrEnum):
    RULES = "rules"  # 2xx: obey the parsed body
    ALLOW_ALL = "allow_all"  # 3xx/4xx: no robots.txt
    UNREACHABLE = "unreachable"  # 5xx, 429, network failure: the file could not be read


def _verdict(status: int | None) -> _Verdict:
    if status is None or status == 429:
        return _Verdict.UNREACHABLE
    if 200 <= status < 300:
        return _Verdict.RULES
    if 300 <= status < 500:
        return _Verdict.ALLOW_ALL
    return _Verdict.UNREACHABLE  # 5xx, and anything outside HTTP's range


class RobotsAccess(StrEnum):
    """What robots.txt says about one URL now."""

    ALLOWED = "allowed"
    #: A rule of the file forbids it: dead-letter it as ``robots_disallowed``.
    DISALLOWED = "disallowed"
    #: The file cannot be read yet: the URL waits (``RobotsVerdict.retry_in_seconds``).
    DEFERRED = "deferred"
    #: The file stayed unreachable past ``robots.giveUpAfterSeconds``: ``robots_unavailable``.
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class RobotsVerdict:
    """The answer for one URL, and what the worker needs to act on it.

    ``stamp`` identifies the shared entry the answer came from (it changes whenever the file
    is fetched again), so a worker applies a host's delay once per entry, not once per URL.
    ``crawl_delay_seconds`` is the file's delay for our agent (clamped), None when it sets
    none. ``retry_in_seconds`` is, for a deferred URL, the time until the file is asked again.
    ``recovered`` marks the first good answer after failures (a deferral to undo). For a
    deferred or unavailable URL, ``status`` is the file's last answer (None: no answer came)
    and ``detail`` says it in words, with the next try for a deferred one.
    """

    access: RobotsAccess
    stamp: float = 0.0
    crawl_delay_seconds: float | None = None
    retry_in_seconds: float = 0.0
    recovered: bool = False
    detail: str = ""
    status: int | None = None


_ALLOWED_WITHOUT_ROBOTS: Final = RobotsVerdict(RobotsAccess.ALLOWED)


@dataclass(frozen=True, slots=True)
class _Rules:
    """One origin's rules as a worker keeps them, valid until ``expires_at`` (policy clock).

    ``verdict`` is what the rules come from: RULES/ALLOW_ALL for a good answer (possibly the
    last good copy of an unreachable file, ``stale``), UNREACHABLE when there is none.
    """

    verdict: _Verdict
    parser: Protego | None
    expires_at: float
    stamp: float
    failing_since: float | None = None
    recovered: bool = False
    stale: bool = False
    status: int | None = None
    #: Characters of the body parsed: what the rules cost this worker's memory, about.
    size: int = 0

    def allows(self, url: str, agent: str) -> bool:
        if self.verdict is _Verdict.RULES and self.parser is not None:
            return bool(self.parser.can_fetch(url, agent))
        return self.verdict is _Verdict.ALLOW_ALL

    def sitemaps(self) -> tuple[str, ...]:
        """The file's ``Sitemap:`` URLs (those of the last good copy while it is unreachable)."""
        return tuple(dict.fromkeys(self.parser.sitemaps)) if self.parser is not None else ()

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


def recheck_seconds(
    status: int | None,
    retry_after_seconds: float | None,
    *,
    failures: int,
    error_ttl_seconds: float,
) -> float:
    """How long after an unreachable answer its robots.txt is asked again.

    A 429 or 503 with a Retry-After is asked again when the server said, but no sooner than
    :data:`MIN_RECHECK_SECONDS` (a zero, or a date gone by, would have the fleet ask in a tight
    loop) and no later than ``error_ttl_seconds`` (a server may ask for days; without the
    header it would have been asked again then). Anything else (no Retry-After or one that did
    not parse, another status, no answer at all) waits ``error_ttl_seconds`` after the first
    failure in a row, doubling after each further one, up to the larger of
    :data:`MAX_RECHECK_SECONDS` and ``error_ttl_seconds``.
    """
    if (
        status in RETRY_AFTER_STATUSES
        and retry_after_seconds is not None
        and not math.isnan(retry_after_seconds)
    ):
        return min(error_ttl_seconds, max(MIN_RECHECK_SECONDS, retry_after_seconds))
    ceiling = max(MAX_RECHECK_SECONDS, error_ttl_seconds)
    exponent = min(max(failures, 1) - 1, 32)
    return min(ceiling, error_ttl_seconds * 2.0**exponent)


def _decode_body(body: bytes) -> str:
    """The first 500 KiB as text, cut at the last line break so no rule is read half-way."""
    if len(body) > MAX_ROBOTS_BYTES:
        cut = body.rfind(b"\n", 0, MAX_ROBOTS_BYTES)
        body = body[: cut + 1 if cut != -1 else MAX_ROBOTS_BYTES]
    # RFC 9309: UTF-8; undecodable bytes are replaced, as every real parser tolerates them.
    return body.decode("utf-8", errors="replace").removeprefix(_UTF8_BOM)


def robots_answer(result: FetchResult) -> RobotsAnswer:
    """What a fetch of robots.txt means, as a :class:`RobotsAnswer` for :class:`RobotsPolicy`.

    A good 2xx gives its body; a redirect chain that ends in a refusal (too many hops, a loop,
    another scheme) gives its last 3xx, "no robots.txt"; any other status is passed on for
    the policy to judge (4xx allow, 5xx and 429 unreachable), with its Retry-After. Everything
    else is unreachable (None): no response, a timeout, or a 2xx whose body could not be read
    (too large, a bomb, an unknown coding): a file we could not read is not a file that allows
    everything.
    """
    status = result.status
    if result.failure is None:
        return RobotsAnswer(status, result.body)
    if status is not None and 300 <= status < 400:
        return RobotsAnswer(status if result.failure in _REDIRECT_REFUSALS else None)
    if status is not None and status >= 400:
        return RobotsAnswer(status, retry_after_seconds=result.retry_after_seconds)
    return RobotsAnswer(None)


def robots_fetch(fetcher: Fetcher) -> RobotsFetch:
    """The robots.txt fetcher over the worker's own
    :class:`~crawlfleet.crawler.fetching.fetch.Fetcher`: its guard, timeouts and caps,
    :data:`ROBOTS_MAX_REDIRECTS` hops whatever ``fetch.maxRedirects`` says, and no soft-block
    test (a tiny robots.txt is a real one)."""

    async def fetch(url: str) -> RobotsAnswer:
        result = await fetcher.fetch(url, max_redirects=ROBOTS_MAX_REDIRECTS, min_html_bytes=0)
        return robots_answer(result)

    return fetch


class RobotsPolicy:
    """Answers "may this URL be fetched now?" and "how slowly?" for one job, fleet-wide cached.

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
        give_up_after_seconds: float,
        max_crawl_delay_seconds: float,
        fetch_timeout_seconds: float,
        local_cache_size: int,
        clock: Callable[[], float],
        local_cache_bytes: int = LOCAL_CACHE_BYTES,
    ) -> None:
        self._cache = cache
        self._fetch_robots = fetch_robots
        self._agent = product_token(user_agent)
        self._obey = obey
        self._ttl_seconds = ttl_seconds
        self._error_ttl_seconds = error_ttl_seconds
        self._give_up_after_seconds = give_up_after_seconds
        self._max_crawl_delay_seconds = max_crawl_delay_seconds
        self._fetch_timeout_seconds = fetch_timeout_seconds
        # The lock outlives a fetch that hits its timeout, plus the Redis writes after it.
        self._lock_seconds = fetch_timeout_seconds + 10.0
        self._cache_size = local_cache_size
        self._cache_bytes = local_cache_bytes
        self._clock = clock
        self._local: OrderedDict[str, _Rules] = OrderedDict()
        self._local_bytes = 0
        self._local_evictions = 0
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
        local_cache_bytes: int = LOCAL_CACHE_BYTES,
    ) -> RobotsPolicy:
        """The policy a CrawlJob asks for (``robots``, ``userAgent``).

        A robots.txt fetch gets the deadline of any fetch (``fetch.totalTimeoutSeconds``);
        ``clock`` and the local cache's bounds are not the job's to choose (tests change them).
        """
        return cls(
            cache,
            fetch_robots,
            user_agent=spec.user_agent,
            obey=spec.robots.obey,
            ttl_seconds=spec.robots.ttl_seconds,
            error_ttl_seconds=spec.robots.error_ttl_seconds,
            give_up_after_seconds=spec.robots.give_up_after_seconds,
            max_crawl_delay_seconds=spec.robots.max_crawl_delay_seconds,
            fetch_timeout_seconds=spec.fetch.total_timeout_seconds,
            local_cache_size=local_cache_size,
            clock=clock,
            local_cache_bytes=local_cache_bytes,
        )

    @property
    def agent(self) -> str:
        """The product token matched against ``User-agent`` lines."""
        return self._agent

    # -- public API -----------------------------------------------------------------------

    async def check(self, url: str) -> RobotsVerdict:
        """What robots.txt says about ``url`` (absolute http(s), canonical) now.

        Fetches the origin's robots.txt if no worker of the job has a fresh answer.
        """
        if not self._obey:
            return _ALLOWED_WITHOUT_ROBOTS
        origin = origin_of(url)
        now = self._clock()
        rules = self._local_get(origin, now)
        if rules is None:
            rules = (await self._rules_for([origin]))[origin]
            now = self._clock()
        delay = self._clamped_delay(rules)
        if rules.verdict is not _Verdict.UNREACHABLE:
            access = (
                RobotsAccess.ALLOWED
                if rules.allows(url, self._agent)
                else (RobotsAccess.DISALLOWED)
            )
            return RobotsVerdict(access, rules.stamp, delay, recovered=rules.recovered)
        failing_for = now - (rules.failing_since if rules.failing_since is not None else now)
        if failing_for >= self._give_up_after_seconds:
            detail = _unreachable_detail(origin, rules.status, failing_for)
            return RobotsVerdict(
                RobotsAccess.UNAVAILABLE, rules.stamp, detail=detail, status=rules.status
            )
        retry_in = max(0.0, rules.expires_at - now)
        return RobotsVerdict(
            RobotsAccess.DEFERRED,
            rules.stamp,
            retry_in_seconds=retry_in,
            detail=_unreachable_detail(origin, rules.status, failing_for, retry_in),
            status=rules.status,
        )

    async def allowed(self, url: str) -> bool:
        """May ``url`` be fetched now? False while its robots.txt is unreachable (RFC 9309:
        "assume complete disallow"); :meth:`check` tells that apart from a Disallow."""
        return (await self.check(url)).access is RobotsAccess.ALLOWED

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
        return None if rules is None else self._clamped_delay(rules)

    async def sitemaps(self, origin: str) -> tuple[str, ...]:
        """The ``Sitemap:`` URLs of ``origin``'s robots.txt, as written (maybe relative).

        Read from the rules the policy keeps (fetched if no worker has a fresh copy); when
        robots.txt is not obeyed it is fetched here for its sitemaps alone, which a caller does
        once per seed host (``scope.sitemaps``). Empty when the file is missing or unreadable.
        """
        if self._obey:
            now = self._clock()
            rules = self._local_get(origin, now) or (await self._rules_for([origin]))[origin]
            return rules.sitemaps()
        answer = await self._fetch(origin)
        if _verdict(answer.status) is not _Verdict.RULES:
            return ()
        return _sitemaps(_decode_body(answer.body))

    def _clamped_delay(self, rules: _Rules) -> float | None:
        delay = rules.delay_seconds(self._agent)
        if delay is None:
            return None
        return min(self._max_crawl_delay_seconds, max(0.0, delay))

    # -- cache layers ---------------------------------------------------------------------

    def cache_states(self) -> tuple[RobotsCacheState, RobotsCacheState]:
        """The fleet's shared cache (as this worker last saw it) and this worker's own: what
        each holds and how many origins it dropped, for the worker's metrics."""
        local = RobotsCacheState(len(self._local), self._local_bytes, self._local_evictions)
        return self._cache.state(), local

    def _local_get(self, origin: str, now: float) -> _Rules | None:
        rules = self._local.get(origin)
        if rules is None:
            return None
        if rules.expires_at <= now:
            del self._local[origin]
            self._local_bytes -= rules.size
            return None
        self._local.move_to_end(origin)
        return rules

    def _local_put(self, origin: str, rules: _Rules) -> None:
        """Keep ``rules``, least recently used out past the count or the bytes (never the
        rules just put: a file past the bytes alone is kept until the next one)."""
        replaced = self._local.pop(origin, None)
        self._local_bytes += rules.size - (replaced.size if replaced is not None else 0)
        self._local[origin] = rules
        while len(self._local) > 1 and (
            len(self._local) > self._cache_size or self._local_bytes > self._cache_bytes
        ):
            _, dropped = self._local.popitem(last=False)
            self._local_bytes -= dropped.size
            self._local_evictions += 1

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
        if _verdict(entry.status) is not _Verdict.UNREACHABLE:
            return entry.fetched_at + self._ttl_seconds
        if entry.next_try_at is not None:
            return entry.next_try_at
        # An entry stored without its next try (by an older worker): the wait without header.
        wait = recheck_seconds(
            entry.status, None, failures=entry.failures, error_ttl_seconds=self._error_ttl_seconds
        )
        return entry.fetched_at + wait

    def _fresh(self, entry: RobotsEntry) -> bool:
        return self._expires_at(entry) > self._clock()

    async def _parse(self, entry: RobotsEntry) -> _Rules:
        """The rules an entry stands for: its own, or, while the file is unreachable, those of
        its last good copy (RFC 9309 §2.3.1.4), valid until the file is asked again."""
        expires_at = self._expires_at(entry)
        source = entry
        if _verdict(entry.status) is _Verdict.UNREACHABLE:
            if entry.good is None:
                return _Rules(
                    _Verdict.UNREACHABLE,
                    None,
                    expires_at,
                    entry.fetched_at,
                    failing_since=entry.failing_since
                    if entry.failing_since is not None
                    else entry.fetched_at,
                    status=entry.status,
                )
            source = entry.good
        verdict = _verdict(source.status)
        parser = None
        if verdict is _Verdict.RULES:
            if len(source.body) > _PARSE_IN_THREAD_BYTES:
                parser = await asyncio.to_thread(Protego.parse, source.body)
            else:
                parser = Protego.parse(source.body)
        return _Rules(
            verdict,
            parser,
            expires_at,
            entry.fetched_at,
            recovered=entry.recovered,
            stale=source is not entry,
            status=source.status,
            size=len(source.body) if parser is not None else 0,
        )

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
            lambda stored: self._fetch_entry(origin, stored),
            fresh=self._fresh,
            lock_seconds=self._lock_seconds,
        )
        rules = await self._parse(entry)
        self._local_put(origin, rules)
        return rules

    async def _fetch_entry(self, origin: str, stored: RobotsEntry | None) -> RobotsEntry:
        """Fetch the file and build the entry to share, carrying a failure streak and the last
        good answer over from ``stored``."""
        answer = await self._fetch(origin)
        status = answer.status
        now = self._clock()
        failing = stored is not None and _verdict(stored.status) is _Verdict.UNREACHABLE
        verdict = _verdict(status)
        if verdict is not _Verdict.UNREACHABLE:
            text = _decode_body(answer.body) if verdict is _Verdict.RULES else ""
            sitemaps = _sitemaps(text) if "itemap" in text else ()
            if failing:
                log.info("robots: %s/robots.txt is readable again (status %s)", origin, status)
            return RobotsEntry(status, text, now, sitemaps=sitemaps, recovered=failing)
        previous_good: RobotsEntry | None = None
        failures, failing_since = 1, now
        if stored is not None and failing:
            previous_good = stored.good
            failures = stored.failures + 1
            failing_since = stored.failing_since if stored.failing_since is not None else now
        elif stored is not None:
            previous_good = stored
        wait = recheck_seconds(
            status,
            answer.retry_after_seconds,
            failures=failures,
            error_ttl_seconds=self._error_ttl_seconds,
        )
        entry = RobotsEntry(
            status,
            "",
            now,
            failures=failures,
            failing_since=failing_since,
            next_try_at=now + wait,
            good=None
            if previous_good is None
            else RobotsEntry(
                previous_good.status,
                previous_good.body,
                previous_good.fetched_at,
                sitemaps=previous_good.sitemaps,
            ),
        )
        log.info(
            "robots: %s/robots.txt unreachable (status %s, Retry-After %s, %d time(s) in a row);"
            " %s; next try in %.0f s",
            origin,
            status,
            "none" if answer.retry_after_seconds is None else f"{answer.retry_after_seconds:g} s",
            failures,
            "its last good copy is obeyed" if previous_good is not None else "the host waits",
            wait,
        )
        return entry

    async def _fetch(self, origin: str) -> RobotsAnswer:
        """The fetcher's answer; a timeout or a failed fetch is "unreachable" (status None)."""
        url = origin + "/robots.txt"
        try:
            async with asyncio.timeout(self._fetch_timeout_seconds):
                return await self._fetch_robots(url)
        except (TimeoutError, OSError, FetchError) as exc:
            log.info("robots: fetching %s failed: %s", url, exc)
            return RobotsAnswer(None)


def _sitemaps(text: str) -> tuple[str, ...]:
    """The ``Sitemap:`` URLs of a robots.txt, as Protego reads them (for the sitemap reader)."""
    return tuple(dict.fromkeys(Protego.parse(text).sitemaps))


def _unreachable_detail(
    origin: str, status: int | None, failing_for: float, retry_in: float | None = None
) -> str:
    answer = f"HTTP {status}" if status is not None else "no response"
    text = f"{origin}/robots.txt unreachable for {failing_for:.0f} s (last answer: {answer})"
    # Whole seconds, rounded up: "next try in 0 s" would read as "now" while the host waits.
    return text if retry_in is None else f"{text}; next try in {math.ceil(retry_in)} s"
