"""A job's frontier split into partitions by host, behind the one Frontier face (DESIGN §7).

Past one Redis core a job sets ``frontier.shards``: each host's URLs, queue, politeness state,
leases and dedup bits live in the partition :func:`~crawlfleet.frontier.keys.partition_of`
names, under that partition's own hash tag (keys.py), so every script still touches one slot
and a Redis Cluster spreads the partitions over its masters. A host is never split: perHost,
its delay and robots waits hold as they do in one partition.

:class:`PartitionedFrontier` *is* the job's home partition (partition 0, whose keys are the
job's keys of ``shards: 1``): whatever is job-wide (heartbeats, the output ledger and
finisher, the file content index, budget and counters, memory backpressure's reading) it does
as a :class:`Frontier` does. What is per host it routes: links and URLs by their host, leases
by the URL their token carries, robots.txt answers by origin host, pacing and file slots by
host. A claim is split over the partitions (:func:`split_claim`) and sent to them at once;
counters are the partitions' summed, their reads in one pipeline (a round trip per node).

One client serves every partition (a cluster client sends each partition's keys to its node)
and every partition holds the home's epoch: the home's ``init`` draws it, the others are
created with it, and each script checks its own partition's meta, so a partition that lost
its data answers FrontierLost like the home does. The home's meta records the partition count
at creation (``shards``; the frontier refuses another) and ``partitions_ready`` once every
partition exists: before that an open creates the missing ones (a first open that stopped
midway), after it a missing partition is a lost one.

A partition whose node does not answer costs only its hosts (docs/scale.md, "A partition that
is down"): a call that some partitions answer raises :class:`~crawlfleet.errors.
PartitionsUnavailable` naming the others and carrying the answers (the worker spools the
links it could not write, ``crawler/worker/spool.py``); extends count the silent partition's
leases as held, requeues and claims go on without it, a settlement sent again asks only the
partitions that owed their reply, and calls skip a silent partition for
:data:`SKIP_SILENT_SECONDS` before asking it again.

Not partitioned (spec validation refuses them with ``shards`` past 1, and these methods raise
ConfigError): recurring runs and revisits (``schedule``, ``recrawl``). ``scope.maxPages`` is
refused too (:func:`open_partitioned`): each partition counts its own admissions, and an exact
job-wide budget needs a reservation in the home before a batch (which links are new is known
only after it) and a refund of what duplicates left unused after it, right away: a refund
carried to a worker's next batch strands budget with idle workers, and links refused
meanwhile are never offered again. That is two round trips more per batch, not built yet.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any, Final, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from crawlfleet.errors import (
    ConfigError,
    FrontierLost,
    FrontierUnavailable,
    NotReplicated,
    PartitionsUnavailable,
)
from crawlfleet.frontier.connection import (
    RedisClient,
    call,
    execute_keeping_refusals,
    job_node,
    translate,
)
from crawlfleet.frontier.frontier import (
    Frontier,
    _check_link_fields,
    _check_room,
    _check_urls,
    _delete_keys,
    open_partitioned_by,
)
from crawlfleet.frontier.keys import JobKeys, partition_of
from crawlfleet.frontier.models import (
    Admission,
    Backpressure,
    DeadLetter,
    FailOutcome,
    Failure,
    FrontierLimits,
    FrontierSettings,
    FrontierStats,
    FrontierWaits,
    Lease,
    LimitChange,
    Link,
    MemoryState,
    Outcomes,
    Requeued,
    Revisit,
    RevisitState,
    RunStart,
)
from crawlfleet.frontier.robots_cache import (
    FetchEntry,
    IsFresh,
    RobotsCache,
    RobotsCacheState,
    RobotsEntry,
)
from crawlfleet.urls import CanonicalURL, host_of

__all__ = [
    "PartitionedFrontier",
    "PartitionedRobotsCache",
    "combine_stats",
    "lease_host",
    "open_partitioned",
    "split_claim",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: The home meta's mark that every partition of the job exists (written once, after them).
READY_FIELD: Final = "partitions_ready"
#: At most this share of a claim probes partitions whose last claim came back short.
_PROBE_SHARE: Final = 4
#: After a partition did not answer a call the others answered, calls skip it this long
#: (then one asks again): a node that is down is not asked by every call, each waiting for its
#: connection to fail, and redis-py's cluster client, which re-reads the slots after every
#: connection error, is not sent into that many times (a command sent meanwhile may fail on
#: any node, when the client's default node is the one down).
SKIP_SILENT_SECONDS: Final = 2.0
#: At most this many finished fetches are kept for a partition that did not answer (the
#: newest): past it a host's slot comes back when its lease is settled, as it does anyway.
_OWED_FREES_KEPT: Final = 10_000
#: Settlements (ack, fail, release) some partitions answered and others not, kept by call id
#: so that a retry asks only the others: at most this many (the oldest forgotten first).
_PARTIAL_CALLS_KEPT: Final = 1024

_NOT_PARTITIONED = (
    "job {job}: {what} is not available with frontier.shards > 1 (recurring runs and "
    "revisits keep their state in one partition); use shards: 1 for a job with schedule "
    "or recrawl"
)


# -- pure routing ----------------------------------------------------------------------------


def lease_host(token: str) -> str:
    """The host of the URL a lease token carries (lib.lua: ``<number>\\t<owner>\\t@<fetch
    deadline>\\t<attempts>\\t<depth>\\t<url>\\t<parent>``; a token of layout 4 has no
    deadline). '' for a token that is none: the home answers it (not the caller's)."""
    parts = token.split("\t", 6)
    index = 5 if len(parts) > 2 and parts[2].startswith("@") else 4
    if len(parts) <= index or "://" not in parts[index]:
        return ""
    return host_of(CanonicalURL(parts[index]))


def split_claim(
    count: int, start: int, hungry: Sequence[bool], silent: Collection[int] = ()
) -> list[int]:
    """How many leases to ask each partition for, of a claim of ``count``.

    ``hungry[p]``: partition p filled its share last time (it may have more ready). The
    hungry partitions share the count evenly, starting at ``start`` (rotated per claim, so a
    remainder and a count smaller than the partitions go round); the others are probed with
    one lease each, a few per claim (at most a quarter of it), in the same rotation, so a
    partition whose hosts become ready again is found without halving every claim. When no
    partition is hungry (an idle crawl, or the first claim) the count is spread over all
    but the ``silent`` ones (their node down: a claim of one lease must not go to them alone).
    """
    n = len(hungry)
    shares = [0] * n
    if count <= 0 or n == 0:
        return shares
    order = [(start + i) % n for i in range(n)]
    wanting = [p for p in order if hungry[p]]
    dry = [p for p in order if not hungry[p]]
    if not wanting:
        wanting = [p for p in order if p not in silent] or order
        dry = [p for p in order if p not in wanting]
    probes = dry[: max(1, count // _PROBE_SHARE)] if count >= 2 else []
    for p in probes:
        shares[p] = 1
    rest = count - len(probes)
    base, extra = divmod(rest, len(wanting))
    for i, p in enumerate(wanting):
        shares[p] += base + (1 if i < extra else 0)
    return shares


def _min(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _combine_waits(parts: Sequence[FrontierWaits]) -> FrontierWaits:
    """Counts summed; the earliest next change, with the status of the robots wait that
    comes first."""
    robots_first = _min([w.robots_next_try_in_seconds for w in parts])
    status = next(
        (w.robots_status for w in parts if w.robots_next_try_in_seconds == robots_first), None
    )
    return FrontierWaits(
        robots_hosts=sum(w.robots_hosts for w in parts),
        robots_next_try_in_seconds=robots_first,
        robots_status=status if robots_first is not None else None,
        ready_hosts=sum(w.ready_hosts for w in parts),
        next_ready_in_seconds=_min([w.next_ready_in_seconds for w in parts]),
        held_slots=sum(w.held_slots for w in parts),
        next_held_release_in_seconds=_min([w.next_held_release_in_seconds for w in parts]),
    )


#: FrontierStats' counters that the partitions keep each for their own hosts.
_SUMMED: Final = tuple(
    f.name for f in fields(FrontierStats) if f.type in ("int", int) and f.name != "bloom_layers"
)


def combine_stats(parts: Sequence[FrontierStats]) -> FrontierStats:
    """The job's stats from its partitions' (``parts[0]`` the home's): counters summed, the
    Bloom filters' estimates averaged (a new URL meets the filter of its host's partition,
    and hosts spread evenly), capacities summed, the earliest waits; what only the home keeps
    (seeded, output finished, revisits) is the home's. Claims per second under memory
    pressure are the partitions' shares summed (set_pressure splits the job's rate)."""
    home = parts[0]
    sums = {name: sum(getattr(p, name) for p in parts) for name in _SUMMED}
    rates = [p.pressure.claims_per_second for p in parts]
    pressure = replace(
        home.pressure,
        claims_per_second=sum(r for r in rates if r is not None) if any(rates) else None,
    )
    return replace(
        home,
        **sums,
        bloom_fill_ratio=sum(p.bloom_fill_ratio for p in parts) / len(parts),
        bloom_false_positive_rate=sum(p.bloom_false_positive_rate for p in parts) / len(parts),
        bloom_layers=max(p.bloom_layers for p in parts),
        pressure=pressure,
        next_retry_in_seconds=_min([p.next_retry_in_seconds for p in parts]),
        waits=_combine_waits([p.waits for p in parts]),
        pushed_back_since=_pushed_back_since(parts),
        last_pushed_back=_max([p.last_pushed_back for p in parts]),
    )


def _pushed_back_since(parts: Sequence[FrontierStats]) -> float | None:
    """Since when every partition with work left has been pushed back (the latest of their
    starts); None if any of them has pages coming through, or none has work."""
    working = [p for p in parts if p.pending]
    if not working or any(p.pushed_back_since is None for p in working):
        return None
    return max(p.pushed_back_since for p in working if p.pushed_back_since is not None)


def _max(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


async def _each(calls: Sequence[Awaitable[_T]]) -> list[_T]:
    """Await every call at once; every one runs to its end, and then the first error is
    raised (a FrontierLost before any other: it is the one that decides a job's fate)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise next((e for e in errors if isinstance(e, FrontierLost)), errors[0])
    return results  # type: ignore[return-value]  # no exceptions left


def _outage_only(errors: Sequence[BaseException]) -> bool:
    """Whether ``errors`` say only that partitions did not answer (no lost frontier, no
    refusal, no unconfirmed replication): a caller may go on with the others' replies."""
    return all(
        isinstance(e, FrontierUnavailable) and not isinstance(e, NotReplicated) for e in errors
    )


def _partitions_unavailable(
    failed: Mapping[int, BaseException], answered: Sequence[object | None] = ()
) -> PartitionsUnavailable:
    first = failed[min(failed)]
    names = ", ".join(str(p) for p in sorted(failed))
    return PartitionsUnavailable(
        f"frontier partition(s) {names} unavailable: {first}",
        partitions=tuple(sorted(failed)),
        answered=tuple(answered),
    )


# -- opening ---------------------------------------------------------------------------------


def partition_settings(settings: FrontierSettings) -> FrontierSettings:
    """One partition's share of the job's settings: the Bloom filter's capacity divided
    (a partition's filter grows in layers past it, as a job's does)."""
    return replace(settings, capacity=max(1, math.ceil(settings.capacity / settings.shards)))


async def open_partitioned(
    client: RedisClient,
    settings: FrontierSettings,
    *,
    expect_epoch: str | None = None,
    reseed: bool = False,
) -> PartitionedFrontier:
    """Open (or create) every partition of a job: :meth:`Frontier.open` with ``shards`` > 1.

    The home first: its ``init`` decides the epoch (of two first opens at once, one wins),
    and refuses another partition count. Then the others, all at once, with that epoch:
    before the home is marked ready a partition missing is created and one of another epoch
    (a leftover of a frontier deleted midway) is replaced; after it, either is lost. With
    ``reseed`` a lost partition re-creates the whole job's frontier (the caller seeds again).
    """
    if settings.max_pages > 0:
        raise ConfigError(
            f"job {settings.job_id}: scope.maxPages is not available with frontier.shards > 1 "
            "yet (each partition would count its own pages); leave maxPages at 0 or use "
            "shards: 1"
        )
    if not isinstance(client, RedisCluster):
        # Every partition's filter on this one Redis: they must fit together (each alone
        # is checked again as it is created, against what the others left).
        await _check_room(client, JobKeys(settings.job_id), settings)
    share = partition_settings(settings)
    try:
        return await _open_all(client, settings, share, expect_epoch, reseed=reseed)
    except FrontierLost as lost:
        if not reseed:
            raise
        log.warning("job %s: a frontier partition is lost (%s); re-creating the job's frontier",
                    settings.job_id, lost)  # fmt: skip
        await _delete_all(client, settings)
        frontier = await _open_all(client, settings, share, None, reseed=False)
        frontier.reseeded = str(lost)
        return frontier


async def _open_all(
    client: RedisClient,
    settings: FrontierSettings,
    share: FrontierSettings,
    expect_epoch: str | None,
    *,
    reseed: bool,
) -> PartitionedFrontier:
    home = await PartitionedFrontier.open_partition(
        client, share, JobKeys(settings.job_id), expect_epoch=expect_epoch, reseed=reseed
    )
    ready = home.opened_meta.get(READY_FIELD) == "1" and home.reseeded is None
    others = await _each(
        [
            _open_other(client, share, JobKeys(settings.job_id, k), home.epoch, ready=ready)
            for k in range(1, settings.shards)
        ]
    )
    if not ready:
        await home._run(home._scripts.guarded, "HSET", "meta", READY_FIELD, "1")
    home.settings = settings
    home.join(others)
    return home


async def _open_other(
    client: RedisClient, share: FrontierSettings, keys: JobKeys, epoch: str, *, ready: bool
) -> Frontier:
    frontier = await Frontier.open_partition(
        client, share, keys, expect_epoch=epoch if ready else None, fresh_epoch=epoch
    )
    if frontier.epoch == epoch:
        return frontier
    # Not ready yet, and a leftover of another epoch holds the partition: nobody uses it.
    log.warning("job %s: replacing a leftover frontier partition of epoch %s", keys.tag,
                frontier.epoch)  # fmt: skip
    await _delete_keys(client, keys)
    return await Frontier.open_partition(client, share, keys, fresh_epoch=epoch)


async def _delete_all(client: RedisClient, settings: FrontierSettings) -> int:
    deleted = await _each(
        [_delete_keys(client, JobKeys(settings.job_id, k)) for k in range(settings.shards)]
    )
    return sum(deleted)


# -- the facade --------------------------------------------------------------------------------


class PartitionedRobotsCache(RobotsCache):
    """The job's robots.txt answers, each origin's in its host's partition (where the claims
    that wait for it, and the defer_host that records the wait, are)."""

    def __init__(self, caches: Sequence[RobotsCache]) -> None:
        self._caches = tuple(caches)

    def _index(self, origin: str) -> int:
        """The partition of an origin (``scheme://host[:port]``): its host's."""
        return partition_of(origin.partition("://")[2], len(self._caches))

    def state(self) -> RobotsCacheState:
        """The partitions' caches summed (each bounded alike)."""
        states = [cache.state() for cache in self._caches]
        return RobotsCacheState(
            sum(s.origins for s in states),
            sum(s.bytes for s in states),
            sum(s.evictions for s in states),
        )

    async def read(self, origins: Sequence[str]) -> list[RobotsEntry | None]:
        """One HMGET per partition asked, all at once."""
        if not origins:
            return []
        groups: dict[int, list[int]] = defaultdict(list)
        for i, origin in enumerate(origins):
            groups[self._index(origin)].append(i)
        replies = await _each(
            [self._caches[p].read([origins[i] for i in indices]) for p, indices in groups.items()]
        )
        found: list[RobotsEntry | None] = [None] * len(origins)
        for indices, entries in zip(groups.values(), replies, strict=True):
            for i, entry in zip(indices, entries, strict=True):
                found[i] = entry
        return found

    async def fetch_once(
        self, origin: str, fetch: FetchEntry, *, fresh: IsFresh, lock_seconds: float
    ) -> RobotsEntry:
        return await self._caches[self._index(origin)].fetch_once(
            origin, fetch, fresh=fresh, lock_seconds=lock_seconds
        )


class PartitionedFrontier(Frontier):
    """A job's frontier of several partitions; it is the home (partition 0) and routes what
    is per host (module docstring). Built by :meth:`Frontier.open` when ``shards`` > 1."""

    #: Every partition, in order; index 0 is this home.
    partitions: tuple[Frontier, ...]

    def join(self, others: Sequence[Frontier]) -> None:
        """Take the partitions k ≥ 1 (in order) beside this home (:func:`open_partitioned`)."""
        self.partitions = (self, *others)
        self._hungry = [True] * len(self.partitions)
        self._claim_start = 0
        #: The shares of the last claim, by call id: a retry asks the same partitions.
        self._last_claim: tuple[str, list[int], list[int] | None] | None = None
        #: Partitions that did not answer while others did: until when calls skip them, and
        #: the error they answer meanwhile (:meth:`_gather`).
        self._silent: dict[int, tuple[float, BaseException]] = {}
        #: Fetched leases whose partition did not answer the claim that carried them: sent
        #: again with the next one (marking a lease fetched twice is a no-op).
        self._owed_frees: dict[str, None] = {}
        #: The replies of settlements some partitions did not answer, by call id (_by_lease).
        self._partial: dict[str, dict[int, Sequence[Any]]] = {}
        self.robots = PartitionedRobotsCache([self.robots, *(p.robots for p in others)])

    @property
    def shards(self) -> int:
        return len(self.partitions)

    # -- routing --------------------------------------------------------------------------

    def partition(self, host: str) -> Frontier:
        """The partition that holds ``host`` (``host[:port]``)."""
        return self.partitions[partition_of(host, len(self.partitions))]

    def _index(self, host: str) -> int:
        return partition_of(host, len(self.partitions))

    def index_of(self, url: str) -> int:
        """The index of the partition that holds ``url``'s host."""
        return self._index(host_of(CanonicalURL(url)))

    def _group_urls(self, urls: Sequence[str]) -> dict[int, list[int]]:
        _check_urls(urls)  # before anything is written, and before host_of slices them
        groups: dict[int, list[int]] = defaultdict(list)
        for i, url in enumerate(urls):
            groups[self._index(host_of(CanonicalURL(url)))].append(i)
        return groups

    def _group_tokens(self, tokens: Sequence[str]) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = defaultdict(list)
        for i, token in enumerate(tokens):
            groups[self._index(lease_host(token))].append(i)
        return groups

    async def _scatter(
        self,
        groups: Mapping[int, list[int]],
        size: int,
        send: Callable[[Frontier, list[int]], Awaitable[Sequence[_T]]],
        empty: _T,
    ) -> tuple[list[_T], float]:
        """Send each partition its items at once; the answers in the items' order, and the
        latest server time among the partitions' (Outcomes.at)."""
        replies = await self._ask(groups, send)
        merged: list[_T] = [empty] * size
        at = 0.0
        for p, reply in replies.items():
            at = max(at, getattr(reply, "at", 0.0))
            for i, value in zip(groups[p], reply, strict=True):
                merged[i] = value
        return merged, at

    async def _ask(
        self,
        groups: Mapping[int, list[int]],
        send: Callable[[Frontier, list[int]], Awaitable[Sequence[_T]]],
    ) -> dict[int, Sequence[_T]]:
        """Each partition's reply to its items, all asked at once. When only some partitions
        did not answer (their nodes are down), :class:`PartitionsUnavailable` names them and
        carries the others' answers by item (None where missing); a lost partition, a
        refusal, or no answer at all raises as :func:`_each` does."""
        replies, skipped = await self._gather(
            {p: send(self.partitions[p], indices) for p, indices in groups.items()}
        )
        failed = {p: r for p, r in replies.items() if isinstance(r, BaseException)}
        if not failed:
            return replies  # type: ignore[return-value]  # no exceptions among them
        errors = list(failed.values())
        answered_some = len(failed) < len(replies)
        partial = answered_some or set(failed) == skipped or self._others_answer(failed)
        if not _outage_only(errors) or not partial:
            # a lost or refusing partition, or none answered: not an outage of some only
            raise next((e for e in errors if isinstance(e, FrontierLost)), errors[0])
        answered: list[object | None] = [None] * (
            max((max(i) for i in groups.values() if i), default=-1) + 1
        )
        for p, reply in replies.items():
            if not isinstance(reply, BaseException):
                for i, value in zip(groups[p], reply, strict=True):
                    answered[i] = value
        raise _partitions_unavailable(failed, answered)

    async def _gather(
        self, calls: Mapping[int, Awaitable[_T]]
    ) -> tuple[dict[int, _T | BaseException], set[int]]:
        """Each partition's call at once, but for the partitions skipped as silent
        (:data:`SKIP_SILENT_SECONDS`), which answer their last error unasked: the replies or
        errors by partition, and which were skipped. A partition that fails while another
        answers, in this call or lately (:meth:`_others_answer`), is skipped from now on for a
        while; one that answers is not any more."""
        now = time.monotonic()
        skipped: dict[int, BaseException] = {}
        for p in calls:
            silent = self._silent.get(p)
            if silent is not None and now < silent[0]:
                skipped[p] = silent[1]
        for p, call_ in calls.items():
            if p in skipped and asyncio.iscoroutine(call_):
                call_.close()  # never sent
        asked = [p for p in calls if p not in skipped]
        results = await asyncio.gather(*(calls[p] for p in asked), return_exceptions=True)
        replies: dict[int, _T | BaseException] = dict(zip(asked, results, strict=True))
        now = time.monotonic()
        down = {p: r for p, r in replies.items() if isinstance(r, BaseException)}
        for p in replies.keys() - down.keys():
            self._silent.pop(p, None)
            self.partitions[p].answered_at = now
        if down and (len(down) < len(replies) or self._others_answer(down)):
            for p, error in down.items():
                if _outage_only([error]):
                    self._silent[p] = (now + SKIP_SILENT_SECONDS, error)
        return {**skipped, **replies}, set(skipped)

    def _others_answer(self, failed: Collection[int]) -> bool:
        """Whether a partition other than ``failed`` and not silent answered a call within
        :data:`SKIP_SILENT_SECONDS`: a call that asked only partitions whose node is down
        (a claim of one lease, the heartbeat's extend of leases all held in them) is an
        outage of those, not of Redis, though nobody answered it. When every node stops,
        calls are taken for a partial outage that long at most."""
        since = time.monotonic() - SKIP_SILENT_SECONDS
        return any(
            partition.answered_at >= since and p not in failed and p not in self._silent
            for p, partition in enumerate(self.partitions)
        )

    async def _each_answering(self, calls: Mapping[int, Awaitable[_T]]) -> dict[int, _T]:
        """Every partition's call at once (:meth:`_gather`); the replies of those that
        answered. Raises when one is lost or refused, or none answered; when only some did
        not answer (an outage of their nodes), the others' replies are returned: for calls
        whose work a partition that comes back does later by itself (requeues)."""
        replies, _ = await self._gather(calls)
        failed = {p: r for p, r in replies.items() if isinstance(r, BaseException)}
        if failed and (len(failed) == len(replies) or not _outage_only(list(failed.values()))):
            errors = list(failed.values())
            raise next((e for e in errors if isinstance(e, FrontierLost)), errors[0])
        if failed:
            log.debug("%s; the others answered", _partitions_unavailable(failed))
        return {p: r for p, r in replies.items() if not isinstance(r, BaseException)}

    async def _by_lease(
        self,
        tokens: Sequence[str],
        send: Callable[[Frontier, list[int]], Awaitable[Outcomes[_T]]],
        empty: _T,
        call_id: str,
    ) -> Outcomes[_T]:
        """Settle leases, each in the partition its token's host names (ack, fail, release:
        one call id for all).

        When some partitions did not answer, the others' replies are kept under the call id
        and :class:`PartitionsUnavailable` raised: the caller's retry (same call id, same
        tokens) asks only the partitions still owing their reply. A partition's own
        ``once()`` keeps a reply only until its next call, and a partition that settled a
        lease, asked again, would answer "not yours" and have it counted lost."""
        groups = self._group_tokens(tokens)
        kept = self._partial.pop(call_id, {})
        owing = {p: indices for p, indices in groups.items() if p not in kept}
        try:
            replies = {**kept, **(await self._ask(owing, send) if owing else {})}
        except PartitionsUnavailable as error:
            answered = dict(kept)
            for p, indices in owing.items():
                if p not in error.partitions:
                    answered[p] = [error.answered[i] for i in indices]
            self._keep_partial(call_id, answered)
            raise
        merged: list[_T] = [empty] * len(tokens)
        at = 0.0
        for p, reply in replies.items():
            at = max(at, getattr(reply, "at", 0.0))
            for i, value in zip(groups[p], reply, strict=True):
                merged[i] = value
        return Outcomes.of(round(at * 1000), merged)

    def _keep_partial(self, call_id: str, replies: dict[int, Sequence[Any]]) -> None:
        self._partial[call_id] = replies
        while len(self._partial) > _PARTIAL_CALLS_KEPT:
            self._partial.pop(next(iter(self._partial)))

    # -- admitting URLs -------------------------------------------------------------------

    async def add_if_new(self, urls: Sequence[str]) -> list[bool]:
        if not urls:
            return []
        merged, _ = await self._scatter(
            self._group_urls(urls),
            len(urls),
            lambda part, idx: Frontier.add_if_new(part, [urls[i] for i in idx]),
            False,
        )
        return merged

    async def contains(self, urls: Sequence[str]) -> list[bool]:
        if not urls:
            return []
        merged, _ = await self._scatter(
            self._group_urls(urls),
            len(urls),
            lambda part, idx: Frontier.contains(part, [urls[i] for i in idx]),
            False,
        )
        return merged

    async def enqueue(
        self,
        links: Sequence[Link],
        *,
        seeding: bool = False,
        unfiltered: Sequence[bool] = (),
        mark_seeded: bool = True,
    ) -> list[Admission]:
        """Each partition's links in one call to it, all at once. Seeds: the other
        partitions' first, then the home's last batch, which marks the job seeded (so a
        seeding cut short anywhere is done again, whole) unless ``mark_seeded`` is False."""
        if not links and not seeding:
            return []
        _check_link_fields(links)
        groups = self._group_urls([link.url for link in links])
        forced = list(unfiltered) + [False] * (len(links) - len(unfiltered))

        def send(part: Frontier, idx: list[int]) -> Awaitable[list[Admission]]:
            batch = [links[i] for i in idx]
            flags = [forced[i] for i in idx]
            if not seeding:
                return Frontier.enqueue(part, batch, unfiltered=flags)
            return Frontier.enqueue(part, batch, seeding=True, unfiltered=flags, mark_seeded=False)

        if not seeding:
            merged, _ = await self._scatter(groups, len(links), send, Admission.NEW)
            return merged
        home = groups.pop(0, [])
        merged, _ = await self._scatter(groups, len(links), send, Admission.NEW)
        codes = await Frontier.enqueue(
            self,
            [links[i] for i in home],
            seeding=True,
            unfiltered=[forced[i] for i in home],
            mark_seeded=mark_seeded,
        )
        for i, code in zip(home, codes, strict=True):
            merged[i] = code
        return merged

    # -- leases ---------------------------------------------------------------------------

    async def claim(
        self,
        worker: str,
        count: int,
        fetched: Sequence[str] = (),
        *,
        call_id: str | None = None,
    ) -> list[Lease]:
        """Up to ``count`` leases, from the partitions at once (:func:`split_claim`), each
        partition's fetched leases given to it in the same call. A claim that comes back
        short asks once more for the rest (:meth:`_second_shares`), with a call id of its own.

        A partition that fails costs only its share: the others' leases are returned (a
        partition that is down stops only its hosts), unless one is lost, or none answered
        and no other partition did lately (Redis is down, not some of its nodes). So a claim
        raises only then, and a retry with the failed call's ``call_id`` asks every partition
        the first call did, each answering its first reply if it had applied it. A claim that
        asked only partitions whose node is down, while others answer, returns nothing
        instead: retried, it would ask them alone until they are back."""
        if count <= 0 and not fetched and not self._owed_frees:
            return []
        n = len(self.partitions)
        call_id = call_id or self.new_call_id()
        if self._last_claim is not None and self._last_claim[0] == call_id:
            _, shares, more = self._last_claim  # a retry: the same partitions, the same ids
        else:
            silent = self._silent.keys()
            shares = split_claim(max(0, count), self._claim_start, self._hungry, silent)
            self._claim_start = (self._claim_start + 1) % n
            more = None
            self._last_claim = (call_id, shares, more)
        by_partition: dict[int, list[str]] = defaultdict(list)
        for token in dict.fromkeys([*self._owed_frees, *fetched]):
            by_partition[self._index(lease_host(token))].append(token)
        leases, failed, asked = await self._claim_shares(worker, shares, by_partition, call_id)
        # Finished fetches whose partition did not hear of them are told by the next claim:
        # the caller forgets them once a claim returns, and a host's slot held by a page
        # whose links wait in the spool would stay taken until that page is acked.
        owed = [token for p in failed for token in by_partition.get(p, ())]
        self._owed_frees = dict.fromkeys(owed[-_OWED_FREES_KEPT:])
        if more is None and not failed and len(leases) < count:
            more = await self._second_shares(count - len(leases), shares, empty=not leases)
            self._last_claim = (call_id, shares, more)
        if more is not None and any(more):
            # its own call id: a partition asked twice must not answer with its first reply
            again, failed_again, asked_again = await self._claim_shares(
                worker, more, {}, f"{call_id}0"
            )
            leases += again
            failed = {**failed, **failed_again}
            asked |= asked_again
        errors = list(failed.values())
        if any(isinstance(e, FrontierLost) for e in errors):
            raise next(e for e in errors if isinstance(e, FrontierLost))
        if errors and failed.keys() >= asked and not self._others_answer(failed):
            raise errors[0]
        for p, error in failed.items():
            log.warning("job %s: frontier partition %d did not answer a claim: %s",
                        self.keys.job_id, p, error)  # fmt: skip
        return leases

    async def _second_shares(
        self, missing: int, shares: Sequence[int], *, empty: bool
    ) -> list[int]:
        """Where the rest of a claim that came back short is asked, once: the partitions that
        filled their share (they may have more ready), else, when nothing came back, those
        the split left out that have work (a worker whose claim comes back empty idles a
        poll, though another partition may have work)."""
        n = len(shares)
        candidates = [p for p in range(n) if shares[p] > 0 and self._hungry[p]]
        if not candidates and empty:
            candidates = await self._with_work([p for p in range(n) if shares[p] == 0])
        second = [0] * n
        for p, share in zip(
            candidates,
            split_claim(missing, self._claim_start, [True] * len(candidates)),
            strict=True,
        ):
            second[p] = share
        return second

    async def _with_work(self, partitions: Sequence[int]) -> list[int]:
        """Those of ``partitions`` with a host in their ready index or a retry waiting (two
        ZCARDs each, one pipeline): where a claim could find something."""
        pipe = self.client.pipeline(transaction=False)
        for p in partitions:
            pipe.zcard(self.partitions[p].keys.key("ready"))
            pipe.zcard(self.partitions[p].keys.key("delayed"))
        try:
            counts = await execute_keeping_refusals(pipe)
        except FrontierUnavailable:
            return []  # a node is down: no second ask (the next claim's probes find them)
        return [p for i, p in enumerate(partitions) if counts[2 * i] or counts[2 * i + 1]]

    async def _claim_shares(
        self,
        worker: str,
        shares: Sequence[int],
        fetched: Mapping[int, Sequence[str]],
        call_id: str,
    ) -> tuple[list[Lease], dict[int, BaseException], set[int]]:
        """One claim per partition with a share or fetched leases, all at once: the leases,
        the errors of the partitions that failed, and which partitions were asked. Notes
        which partitions filled their share (:func:`split_claim`'s ``hungry``)."""
        asked = [p for p in range(len(shares)) if shares[p] > 0 or fetched.get(p)]
        replies, _ = await self._gather(
            {
                p: Frontier.claim(
                    self.partitions[p], worker, shares[p], fetched.get(p, ()), call_id=call_id
                )
                for p in asked
            }
        )
        leases: list[Lease] = []
        failed: dict[int, BaseException] = {}
        for p, reply in replies.items():
            if isinstance(reply, BaseException):
                failed[p] = reply
                self._hungry[p] = False  # its share goes to the others, but for a probe
                continue
            if shares[p] > 0:
                self._hungry[p] = len(reply) >= shares[p]
            leases.extend(reply)
        return leases, failed, set(asked)

    async def ack(
        self,
        worker: str,
        lease_ids: Sequence[str],
        *,
        revisits: Mapping[str, Revisit] | None = None,
        call_id: str | None = None,
    ) -> Outcomes[bool]:
        if revisits:
            raise self._not_partitioned("acking with revisits")
        if not lease_ids:
            return Outcomes()
        call_id = call_id or self.new_call_id()
        return await self._by_lease(
            lease_ids,
            lambda part, idx: Frontier.ack(
                part, worker, [lease_ids[i] for i in idx], call_id=call_id
            ),
            False,
            call_id,
        )

    async def fail(
        self,
        worker: str,
        failures: Sequence[Failure],
        *,
        revisits: Mapping[str, Revisit] | None = None,
        call_id: str | None = None,
    ) -> Outcomes[FailOutcome]:
        if revisits:
            raise self._not_partitioned("failing with revisits")
        if not failures:
            return Outcomes()
        call_id = call_id or self.new_call_id()
        return await self._by_lease(
            [f.lease_id for f in failures],
            lambda part, idx: Frontier.fail(
                part, worker, [failures[i] for i in idx], call_id=call_id
            ),
            FailOutcome.NOT_OWNER,
            call_id,
        )

    async def extend(
        self, worker: str, lease_ids: Sequence[str], ttl_seconds: float | None = None
    ) -> list[bool]:
        """Each partition's leases extended in it. A lease of a partition that does not answer
        counts as held (True): whether it expired is known when the partition is back, and
        answered then by this call or by the lease's ack ("not yours")."""
        if not lease_ids:
            return []
        try:
            merged, _ = await self._scatter(
                self._group_tokens(lease_ids),
                len(lease_ids),
                lambda part, idx: Frontier.extend(
                    part, worker, [lease_ids[i] for i in idx], ttl_seconds
                ),
                False,
            )
        except PartitionsUnavailable as error:
            return [True if ok is None else bool(ok) for ok in error.answered]
        return merged

    async def release(
        self, worker: str, lease_ids: Sequence[str], *, call_id: str | None = None
    ) -> Outcomes[bool]:
        if not lease_ids:
            return Outcomes()
        call_id = call_id or self.new_call_id()
        return await self._by_lease(
            lease_ids,
            lambda part, idx: Frontier.release(
                part, worker, [lease_ids[i] for i in idx], call_id=call_id
            ),
            False,
            call_id,
        )

    async def requeue_expired(self, limit: int = 10_000) -> Requeued:
        """Every partition's expired leases (up to ``limit`` each), summed; a partition that
        does not answer is skipped (its leases are requeued by a call after it is back)."""
        replies = await self._each_answering(
            {k: Frontier.requeue_expired(p, limit) for k, p in enumerate(self.partitions)}
        )
        return _sum_requeued(list(replies.values()))

    async def requeue_owner(self, worker: str, *, ended: bool = False) -> Requeued:
        """A gone worker's leases in every partition, summed; a partition that does not
        answer is skipped (its share of them expires, and is requeued once it is back)."""
        replies = await self._each_answering(
            {
                k: Frontier.requeue_owner(p, worker, ended=ended)
                for k, p in enumerate(self.partitions)
            }
        )
        return _sum_requeued(list(replies.values()))

    # -- politeness, by host --------------------------------------------------------------

    async def set_host_delay(self, host: str, delay_seconds: float | None) -> None:
        await Frontier.set_host_delay(self.partition(host), host, delay_seconds)

    async def defer_host(self, host: str, wait_seconds: float, *, status: int | None) -> float:
        return await Frontier.defer_host(self.partition(host), host, wait_seconds, status=status)

    async def pace(self, host: str, *, max_wait_seconds: float = 3600.0) -> None:
        await Frontier.pace(self.partition(host), host, max_wait_seconds=max_wait_seconds)

    async def acquire_file_slot(
        self, host: str, lease_id: str, limit: int, ttl_seconds: float
    ) -> bool:
        return await Frontier.acquire_file_slot(
            self.partition(host), host, lease_id, limit, ttl_seconds
        )

    async def extend_file_slots(
        self, lease_ids_by_host: Mapping[str, Sequence[str]], ttl_seconds: float
    ) -> None:
        groups: dict[int, dict[str, Sequence[str]]] = defaultdict(dict)
        for host, lease_ids in lease_ids_by_host.items():
            groups[self._index(host)][host] = lease_ids
        await _each(
            [
                Frontier.extend_file_slots(self.partitions[p], group, ttl_seconds)
                for p, group in groups.items()
            ]
        )

    async def release_file_slot(self, host: str, lease_id: str) -> None:
        await Frontier.release_file_slot(self.partition(host), host, lease_id)

    # -- progress -------------------------------------------------------------------------

    async def stats(self) -> FrontierStats:
        """:func:`combine_stats` of every partition's stats: their O(1) reads (each with its
        partition's epoch) in one pipeline, one round trip per node."""
        pipe = self.client.pipeline(transaction=False)
        sizes = [await part._queue_stats_reads(pipe) for part in self.partitions]
        try:
            replies = await execute_keeping_refusals(pipe)
        except PartitionsUnavailable:
            raise
        except FrontierUnavailable as error:
            raise await self.which_unavailable(error) from error
        parts, start = [], 0
        for part, size in zip(self.partitions, sizes, strict=True):
            parts.append(await Frontier._read_stats(part, replies[start : start + size]))
            start += size
        return combine_stats(parts)

    async def unreachable(self) -> dict[int, FrontierUnavailable]:
        """The partitions that do not answer now, with why.

        On a cluster, one PING to each node that holds a partition (by the client's slot
        map), straight on the node's own connections: not through the cluster client's
        routing, which re-reads the slots after a connection error and may fail a command
        to any node meanwhile. On one Redis, one EXISTS of each partition's meta."""
        if isinstance(self.client, RedisCluster):
            return await self._unreachable_nodes(self.client)
        replies = await asyncio.gather(
            *(call(self.client.exists(p.keys.key("meta"))) for p in self.partitions),
            return_exceptions=True,
        )
        found: dict[int, FrontierUnavailable] = {}
        for k, reply in enumerate(replies):
            if isinstance(reply, FrontierUnavailable):
                found[k] = reply
            elif isinstance(reply, BaseException):
                raise reply
        return found

    async def _unreachable_nodes(self, client: RedisCluster) -> dict[int, FrontierUnavailable]:
        try:
            nodes = [client.get_node_from_key(p.keys.key("meta")) for p in self.partitions]
        except (RedisError, RedisClusterException) as exc:  # no slot map to read (yet)
            raise translate(exc) from exc
        distinct = {node.name: node for node in nodes if node is not None}
        replies = await asyncio.gather(
            *(call(node.execute_command("PING")) for node in distinct.values()),
            return_exceptions=True,
        )
        uncovered = FrontierUnavailable("Redis unavailable: no node serves the partition's slot")
        silent: dict[str | None, FrontierUnavailable] = {None: uncovered}
        for name, reply in zip(distinct, replies, strict=True):
            if isinstance(reply, FrontierUnavailable):
                silent[name] = reply
            elif isinstance(reply, BaseException):
                raise reply
        names = [None if node is None else node.name for node in nodes]
        return {k: silent[name] for k, name in enumerate(names) if name in silent}

    async def which_unavailable(self, error: FrontierUnavailable) -> FrontierUnavailable:
        """``error`` (a read across every partition failed) as :class:`PartitionsUnavailable`
        naming the partitions that do not answer, when some do; else as it is."""
        try:
            down = await self.unreachable()
        except FrontierUnavailable:
            return error
        if not down or len(down) == len(self.partitions):
            return error
        return _partitions_unavailable(down)

    async def dead_letters(self, batch: int = 500) -> AsyncIterator[DeadLetter]:
        """Every partition's dead letters, one partition after the other."""
        for part in self.partitions:
            async for letter in Frontier.dead_letters(part, batch):
                yield letter

    async def memory(self) -> MemoryState:
        """The fullest node's memory among those holding a partition (one INFO per node): the
        fleet's backpressure must slow the crawl down for the first node to fill."""
        nodes: dict[str, Frontier] = {}
        for part in self.partitions:
            target = (await job_node(self.client, part.keys.key("meta"))).get("target_nodes")
            nodes.setdefault(getattr(target, "name", ""), part)
        states = await _each([Frontier.memory(p) for p in nodes.values()])
        return max(states, key=lambda s: (s.ratio, s.used_bytes))

    async def set_pressure(self, pressure: Backpressure) -> None:
        """Backpressure on every partition; the job's claims per second are split evenly
        (a claim is split over the partitions too), links per page apply per partition."""
        rate = pressure.claims_per_second
        share = replace(pressure, claims_per_second=rate / self.shards if rate else rate)
        await _each([Frontier.set_pressure(p, share) for p in self.partitions])

    async def retune(self, limits: FrontierLimits) -> list[LimitChange]:
        """The limits into every partition's meta (each partition's scripts read their own);
        the changes the home saw, which every partition shares."""
        changes = await _each([Frontier.retune(p, limits) for p in self.partitions])
        return changes[0]

    async def delete(self) -> int:
        """Every partition's keys (lost ones too)."""
        return sum(await _each([Frontier.delete(p) for p in self.partitions]))

    # -- not partitioned ------------------------------------------------------------------

    def _not_partitioned(self, what: str) -> ConfigError:
        return ConfigError(_NOT_PARTITIONED.format(job=self.keys.job_id, what=what))

    async def seed(self, urls: Sequence[str], *, every_run: bool = False) -> int:
        if every_run:
            raise self._not_partitioned("seeding a recurring run")
        return await super().seed(urls)

    async def revisit_states(
        self, urls: Sequence[CanonicalURL]
    ) -> dict[CanonicalURL, RevisitState]:
        raise self._not_partitioned("revisit state")

    async def promote_due(self, limit: int = 1000) -> int:
        raise self._not_partitioned("promoting due revisits")

    async def tracked_bytes(self) -> int:
        raise self._not_partitioned("tracked URLs")

    async def begin_run(self, run_id: str) -> RunStart:
        raise self._not_partitioned("a recurring run")

    async def commit_run(self, run_id: str) -> None:
        raise self._not_partitioned("a recurring run")


def _sum_requeued(parts: Sequence[Requeued]) -> Requeued:
    return Requeued(
        sum(r.requeued for r in parts),
        sum(r.dead for r in parts),
        max(r.at for r in parts),
        sum(r.rescheduled for r in parts),
    )


open_partitioned_by(open_partitioned)
