"""Reading a running frontier from outside: what ``crawlfleet frontier hosts|url|count`` show.

Every read here is bounded, never a ``KEYS`` and never a walk of a whole queue:

* :func:`top_hosts` reads the per-host counters the scripts keep (lib.lua ``HOST_COUNTS``:
  sorted sets of queued tasks, crawled pages, dead letters and admitted URLs per host), so
  "the hosts with most queued" is one ``ZREVRANGE`` per partition, then one pipelined round trip per
  partition for those hosts' state (in flight, last fetch, delay, next allowed time, robots
  wait). O(partitions × top).
* :func:`url_story` tells where one URL is: in the Bloom filter, dead-lettered (one
  ``HGET``), leased (a ``ZSCAN`` of the leases, which are as many as the fleet holds in
  flight), waiting to be retried (a ``ZSCAN`` of the delayed set, at most
  :data:`SCAN_LIMIT` entries looked at) or queued (``LPOS`` in its host's lists, at most
  :data:`SCAN_LIMIT` entries compared per list), each answer saying whether its scan was cut.
* :func:`host_counts` is the same per-host counters for named hosts: O(hosts asked).

These are reads; nothing here changes the frontier. A frontier made before the counters were
kept (a crawl started by an older crawlfleet) shows them from the moment it was upgraded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

from crawlfleet.frontier.connection import call, job_node
from crawlfleet.frontier.frontier import Frontier
from crawlfleet.frontier.partitions import PartitionedFrontier
from crawlfleet.hosts import registrable_domain
from crawlfleet.urls import CanonicalURL, canonicalize, host_of

__all__ = [
    "HOST_ORDERS",
    "SCAN_LIMIT",
    "DomainCounts",
    "HostCounts",
    "HostOrder",
    "HostRow",
    "UrlStory",
    "domain_counts",
    "host_counts",
    "server_ms",
    "top_hosts",
    "url_story",
]

#: What :func:`top_hosts` may sort by: each is one of the scripts' per-host sorted sets.
HostOrder = Literal["queued", "crawled", "dead", "admitted"]
HOST_ORDERS: Final[tuple[HostOrder, ...]] = ("queued", "crawled", "dead", "admitted")
#: The per-host counters' keys, by name (lib.lua ``HOST_COUNTS``).
_COUNT_KEYS: Final[dict[HostOrder, str]] = {
    "queued": "host-queued",
    "crawled": "host-crawled",
    "dead": "host-dead",
    "admitted": "host-admitted",
}
#: The most entries one scan of :func:`url_story` looks at (per list, or of the delayed set).
SCAN_LIMIT: Final = 100_000
_SCAN_PAGE: Final = 1000


@dataclass(frozen=True, slots=True)
class HostCounts:
    """One host's counters: queued tasks, acked pages, dead letters, URLs ever admitted
    (what ``scope.maxPagesPerHost`` counts)."""

    queued: int = 0
    crawled: int = 0
    dead: int = 0
    admitted: int = 0


@dataclass(frozen=True, slots=True)
class HostRow:
    """One host as the frontier holds it now."""

    host: str
    partition: int
    counts: HostCounts
    #: Requests in progress (leases holding one of the host's ``perHost`` slots).
    in_flight: int
    #: The host's delay between requests (ms): its own (robots Crawl-delay, a Retry-After)
    #: or the job's ``hostDelaySeconds``.
    delay_ms: int
    #: When the host was last fetched (server ms), None if never.
    last_fetch_ms: int | None
    #: When a claim may take the host next (server ms): None when it is not in the ready
    #: index (nothing queued, all its slots in use, or held for its robots.txt).
    next_allowed_ms: int | None
    #: The robots.txt answer the host is held for ("503", "timeout", ...), None if not held.
    robots_wait: str | None


@dataclass(frozen=True, slots=True)
class UrlStory:
    """Where one URL is in the frontier. ``scans_cut`` names the scans that stopped at
    :data:`SCAN_LIMIT` before they ended (a "no" there means "not in the part looked at")."""

    url: str
    host: str
    partition: int
    seen: bool
    queued_depth: int | None
    queued_position: int | None
    leased_by: str | None
    lease_expires_ms: int | None
    lease_fetched: bool
    retry_at_ms: int | None
    attempts: int | None
    dead: dict[str, Any] | None
    scans_cut: tuple[str, ...]
    now_ms: int

    @property
    def state(self) -> str:
        """One word: dead, leased, delayed, queued, done (seen and nowhere else: crawled,
        or refused by the worker, which the output or its counters say), or unseen."""
        if self.dead is not None:
            return "dead"
        if self.leased_by is not None:
            return "leased"
        if self.retry_at_ms is not None:
            return "delayed"
        if self.queued_depth is not None:
            return "queued"
        return "done" if self.seen else "unseen"


def _parts(frontier: Frontier) -> tuple[Frontier, ...]:
    return frontier.partitions if isinstance(frontier, PartitionedFrontier) else (frontier,)


def _part_of(frontier: Frontier, host: str) -> tuple[int, Frontier]:
    if isinstance(frontier, PartitionedFrontier):
        index = frontier.index_of(f"http://{host}/")
        return index, frontier.partitions[index]
    return 0, frontier


def _count(value: Any) -> int:
    return max(0, round(float(value))) if value is not None else 0


def _host_state(raw: str | None) -> tuple[int, int, int]:
    """(in flight, last fetch ms or -1, own delay ms or -1) of one ``hosts`` field."""
    if not raw:
        return 0, -1, -1
    inflight, last, delay, _dmin, _dmax = (int(x) for x in raw.split(":"))
    return inflight, last, delay


async def top_hosts(
    frontier: Frontier, *, by: HostOrder = "queued", top: int = 20
) -> list[HostRow]:
    """The ``top`` hosts with the most ``by``, across every partition, most first."""
    if by not in _COUNT_KEYS:
        raise ValueError(f"hosts sort by one of {', '.join(HOST_ORDERS)}, not {by!r}")
    rows: list[HostRow] = []
    for index, part in enumerate(_parts(frontier)):
        ranked = await call(
            part.client.zrevrange(part.keys.key(_COUNT_KEYS[by]), 0, top - 1, withscores=True)
        )
        hosts = [str(pair[0]) for pair in cast("list[tuple[str, float]]", ranked)]
        rows += await _rows(part, index, hosts)
    rows.sort(key=lambda row: (-getattr(row.counts, by), row.host))
    return rows[:top]


async def _rows(part: Frontier, index: int, hosts: Sequence[str]) -> list[HostRow]:
    """Each host's row, in one pipelined round trip to its partition."""
    if not hosts:
        return []
    keys = part.keys
    pipe = part.client.pipeline(transaction=False)
    pipe.hget(keys.key("meta"), "host_delay_ms")
    pipe.hmget(keys.key("hosts"), list(hosts))
    pipe.zmscore(keys.key("ready"), list(hosts))
    pipe.hmget(keys.key("robots-wait-status"), list(hosts))
    for name in _COUNT_KEYS.values():
        pipe.zmscore(keys.key(name), list(hosts))
    job_delay, states, ready, robots, *counts = await call(pipe.execute())
    rows = []
    for i, host in enumerate(hosts):
        inflight, last, delay = _host_state(states[i])
        next_allowed = ready[i]
        rows.append(
            HostRow(
                host=host,
                partition=index,
                counts=HostCounts(*(_count(column[i]) for column in counts)),
                in_flight=max(0, inflight),
                delay_ms=delay if delay >= 0 else int(job_delay or 0),
                last_fetch_ms=last if last >= 0 else None,
                next_allowed_ms=None if next_allowed is None else int(next_allowed),
                robots_wait=robots[i],
            )
        )
    return rows


async def host_counts(frontier: Frontier, hosts: Sequence[str]) -> dict[str, HostCounts]:
    """The counters of the named hosts (``host[:port]``): one round trip per partition."""
    found: dict[str, HostCounts] = {}
    by_part: dict[int, list[str]] = {}
    for host in hosts:
        by_part.setdefault(_part_of(frontier, host)[0], []).append(host)
    parts = _parts(frontier)
    for index, names in by_part.items():
        part = parts[index]
        pipe = part.client.pipeline(transaction=False)
        for key in _COUNT_KEYS.values():
            pipe.zmscore(part.keys.key(key), names)
        counts = await call(pipe.execute())
        for i, host in enumerate(names):
            found[host] = HostCounts(*(_count(column[i]) for column in counts))
    return found


@dataclass(frozen=True, slots=True)
class DomainCounts:
    """A registrable domain's counters: its hosts' summed, and which hosts they are."""

    domain: str
    counts: HostCounts
    hosts: tuple[str, ...]
    #: The scan of hosts stopped at :data:`SCAN_LIMIT` entries: the figures are a floor.
    cut: bool = False


async def domain_counts(frontier: Frontier, domain: str) -> DomainCounts:
    """The counters of every host of ``domain`` (its registrable domain, by the Public
    Suffix List): a bounded ZSCAN of each partition's admitted hosts for names that end in it,
    then one pipelined read of their counters. Never a KEYS."""
    domain = domain.lower().rstrip(".")
    hosts: list[str] = []
    cut = False
    for part in _parts(frontier):
        pattern = "*" + _glob_escaped(domain) + "*"
        found, stopped = await _scan_zset(part, part.keys.key(_COUNT_KEYS["admitted"]), pattern)
        cut = cut or stopped
        hosts += [host for host, _ in found if registrable_domain(_without_port(host)) == domain]
    counts = await host_counts(frontier, hosts) if hosts else {}
    total = HostCounts(
        *(sum(getattr(c, name) for c in counts.values()) for name in HostCounts.__slots__)
    )
    return DomainCounts(domain, total, tuple(sorted(hosts)), cut)


def _without_port(netloc: str) -> str:
    if netloc.startswith("["):
        return netloc[1:].split("]", 1)[0]
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


async def server_ms(frontier: Frontier) -> int:
    """The frontier's clock (Redis TIME on the job's node, ms): what its times are in."""
    seconds, micros = await call(
        frontier.client.time(**await job_node(frontier.client, frontier.keys.key("meta")))
    )
    return int(seconds) * 1000 + int(micros) // 1000


def _glob_escaped(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


async def _scan_zset(
    part: Frontier, key: str, pattern: str
) -> tuple[list[tuple[str, float]], bool]:
    """Members of a sorted set matching ``pattern`` with their scores, and whether the scan
    stopped at :data:`SCAN_LIMIT` before it ended."""
    cursor, looked, found = 0, 0, []
    while True:
        cursor, page = await call(part.client.zscan(key, cursor, match=pattern, count=_SCAN_PAGE))
        found += [(str(member), float(score)) for member, score in page]
        looked += _SCAN_PAGE
        if cursor == 0:
            return found, False
        if looked >= SCAN_LIMIT:
            return found, True


def _entry_rest(url: str, host: str) -> tuple[str, str]:
    """(scheme letter, the URL after its authority): how a queued entry spells it (lib.lua
    ``task_entry``)."""
    https = url.startswith("https://")
    return ("s" if https else "h"), url[len("https://" if https else "http://") + len(host) :]


async def url_story(frontier: Frontier, url: str) -> UrlStory:
    """Where ``url`` (canonicalised first, as links are) is in ``frontier``."""
    canonical: CanonicalURL = canonicalize(url)
    host = host_of(canonical)
    index, part = _part_of(frontier, host)
    keys = part.keys
    pipe = part.client.pipeline(transaction=False)
    pipe.hget(keys.key("dead"), canonical)
    pipe.hget(keys.key("hosts"), host)
    pipe.hget(keys.key("meta"), "task_attempts")
    pipe.time()
    dead_raw, state, attempts_raw, (seconds, micros) = await call(pipe.execute())
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    (seen,) = await frontier.contains([canonical])
    cut: list[str] = []
    # in flight: the lease token is "[f]<number>\t<owner>\t@<deadline>\t<task>", the task
    # "<attempts>\t<depth>\t<url>\t<parent>"
    needle = "*\t" + _glob_escaped(canonical) + "\t*"
    leases, leases_cut = await _scan_zset(part, keys.key("leases"), needle)
    if leases_cut:
        cut.append("leases")
    leased_by = lease_expires = attempts = None
    fetched = False
    for token, expiry in leases:
        fields = token.split("\t")
        if len(fields) >= 5 and canonical in fields:
            leased_by, lease_expires, fetched = fields[1], int(expiry), token.startswith("f")
            attempts = int(fields[fields.index(canonical) - 2])
            break
    delayed, delayed_cut = await _scan_zset(part, keys.key("delayed"), needle)
    if delayed_cut:
        cut.append("delayed")
    retry_at = None
    for task, due in delayed:
        fields = task.split("\t")
        if len(fields) >= 4 and fields[2] == canonical:
            retry_at, attempts = int(due), int(fields[0])
            break
    depth = position = None
    if state:
        dmin, dmax = (int(x) for x in cast("str", state).split(":")[3:5])
        if dmax >= 0:
            depth, position, cut_lists = await _queued_at(
                part, host, canonical, range(dmin, dmax + 1), int(attempts_raw or 1)
            )
            if cut_lists:
                cut.append("queue")
            if depth is not None and attempts is None:
                attempts = 0
    return UrlStory(
        url=canonical,
        host=host,
        partition=index,
        seen=bool(seen),
        queued_depth=depth,
        queued_position=position,
        leased_by=leased_by,
        lease_expires_ms=lease_expires,
        lease_fetched=fetched,
        retry_at_ms=retry_at,
        attempts=attempts,
        dead=None if dead_raw is None else cast("dict[str, Any]", json.loads(dead_raw)),
        scans_cut=tuple(cut),
        now_ms=now_ms,
    )


async def _queued_at(
    part: Frontier, host: str, url: str, depths: range, max_attempts: int
) -> tuple[int | None, int | None, bool]:
    """(depth, position among the list's entries) of ``url`` in its host's queues, and
    whether a list was longer than the :data:`SCAN_LIMIT` entries compared."""
    scheme, rest = _entry_rest(url, host)
    entries = [scheme + rest, *(f"{scheme}{n}{rest}" for n in range(1, max_attempts))]
    pipe = part.client.pipeline(transaction=False)
    for depth in depths:
        key = part.keys.queue(host, depth)
        pipe.llen(key)
        for entry in entries:
            pipe.lpos(key, entry, maxlen=SCAN_LIMIT)
    replies = await call(pipe.execute())
    per_depth = 1 + len(entries)
    cut = False
    for k, depth in enumerate(depths):
        length, *positions = replies[k * per_depth : (k + 1) * per_depth]
        cut = cut or int(length) > SCAN_LIMIT
        found = [p for p in positions if p is not None]
        if found:
            return depth, int(min(found)), cut
    return None, None, cut
