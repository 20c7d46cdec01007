"""``crawlfleet frontier <job.yaml | namespace/name> hosts|url|count|dead-letters``.

Looking inside a running crawl's frontier, read-only. Where the frontier is:

- **A local run** (``crawlfleet run job.yaml``): its private Redis, from ``<out>/state.json``
  (:func:`crawlfleet.enqueue.find_local_run`), as ``crawlfleet enqueue`` finds it.
- **A CrawlJob in a cluster**: the job's Redis reached through a port-forward to the
  operator's Service (``kubectl port-forward svc/<name>-redis 6379``) or any route the user
  has, named by ``CRAWLFLEET_REDIS_URL`` (an environment variable, so a password in it never
  sits in an argv); the CrawlJob itself (its spec, and the epoch and partitions in its
  status) is read from the API server.

The frontier is opened with the epoch its owner remembers, so a Redis that lost it is said
to have, never re-created by a reader. The reads are frontier/introspection.py's (bounded);
what this module adds is the words and the columns, pure functions of what was read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from crawlfleet.errors import ConfigError, FrontierLost
from crawlfleet.frontier import DeadLetter, Frontier, FrontierSettings, FrontierStats
from crawlfleet.frontier.introspection import (
    SCAN_LIMIT,
    DomainCounts,
    HostCounts,
    HostRow,
    UrlStory,
    domain_counts,
    host_counts,
    server_ms,
    top_hosts,
    url_story,
)

if TYPE_CHECKING:
    from crawlfleet.output.stores import OutputStore

__all__ = [
    "COUNT_FIELDS",
    "dead_letter_lines",
    "domain_count_lines",
    "host_count_lines",
    "host_lines",
    "open_frontier_of",
    "report",
    "stats_lines",
    "story_lines",
]

#: The job-wide counters ``frontier count`` prints, in order.
COUNT_FIELDS: Final = (
    "queued", "delayed", "leased", "crawled", "dead", "failed", "seen", "host_budget",
)  # fmt: skip
_HOST_COLUMNS: Final = (
    "HOST", "PART", "QUEUED", "IN-FLIGHT", "CRAWLED", "DEAD", "ADMITTED", "DELAY", "NEXT",
    "ROBOTS",
)  # fmt: skip


def _seconds(ms: int) -> str:
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _next(row: HostRow, now_ms: int) -> str:
    """When a claim may take the host: now, in how long, or why not."""
    if row.next_allowed_ms is not None:
        wait = row.next_allowed_ms - now_ms
        return "now" if wait <= 0 else f"in {_seconds(wait)}"
    if row.robots_wait is not None:
        return "robots.txt"
    if row.counts.queued == 0:
        return "-"  # nothing queued
    return "slots full"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    table = [list(header), *(list(r) for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in table
    ]


def host_lines(rows: Sequence[HostRow], now_ms: int) -> list[str]:
    """The hosts as a table, in the order given."""
    if not rows:
        return ["no host has any (nothing counted yet)"]
    return _table(
        _HOST_COLUMNS,
        (
            (
                r.host,
                str(r.partition),
                str(r.counts.queued),
                str(r.in_flight),
                str(r.counts.crawled),
                str(r.counts.dead),
                str(r.counts.admitted),
                _seconds(r.delay_ms),
                _next(r, now_ms),
                "ok" if r.robots_wait is None else f"waiting ({r.robots_wait})",
            )
            for r in rows
        ),
    )


def domain_count_lines(found: DomainCounts) -> list[str]:
    """A registrable domain's counters, and how many hosts they add up."""
    c = found.counts
    lines = [
        f"{found.domain}: {len(found.hosts)} host(s), queued {c.queued}, crawled {c.crawled},"
        f" dead {c.dead}, admitted {c.admitted}"
    ]
    if found.cut:
        lines.append(f"(the scan of hosts stopped at {SCAN_LIMIT:,} entries: figures are a floor)")
    return lines


def host_count_lines(counts: dict[str, HostCounts]) -> list[str]:
    """Named hosts' counters as a table."""
    return _table(
        ("HOST", "QUEUED", "CRAWLED", "DEAD", "ADMITTED"),
        (
            (h, str(c.queued), str(c.crawled), str(c.dead), str(c.admitted))
            for h, c in sorted(counts.items())
        ),
    )


def stats_lines(stats: FrontierStats) -> list[str]:
    """The job-wide counters, one ``name value`` a line."""
    width = max(len(name) for name in COUNT_FIELDS)
    return [f"{name.ljust(width)}  {getattr(stats, name)}" for name in COUNT_FIELDS]


def _when(ms: int, now_ms: int) -> str:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
    delta = ms - now_ms
    return f"{at} ({'in ' + _seconds(delta) if delta >= 0 else _seconds(-delta) + ' ago'})"


#: What a URL that is seen and nowhere in the frontier became.
_DONE: Final = "done: not queued, leased, delayed or dead (crawled, or dropped by the worker)"
_NO_RECORD: Final = (
    "no page record of it (dropped before output: robots.txt, a redirect, a non-HTML answer;"
    " the run's counters say which)"
)


def _state_line(story: UrlStory) -> str:
    """What the frontier does with the URL now, in a sentence."""
    state = story.state
    if state == "queued":
        return (
            f"queued at depth {story.queued_depth},"
            f" {story.queued_position} entries from the head of its host's list"
        )
    if state == "leased":
        assert story.lease_expires_ms is not None
        doing = "response in, output not durable yet" if story.lease_fetched else "fetching"
        expires = _when(story.lease_expires_ms, story.now_ms)
        return f"leased by {story.leased_by} ({doing}); the lease expires {expires}"
    if state == "delayed":
        assert story.retry_at_ms is not None
        return f"waiting to be retried at {_when(story.retry_at_ms, story.now_ms)}"
    if state == "dead":
        dead = story.dead or {}
        return f"dead-lettered: {dead.get('failure_class', '?')}: {dead.get('message', '')}"
    return _DONE if state == "done" else "unknown to the frontier"


def story_lines(story: UrlStory, fetches: Sequence[tuple[str, dict[str, Any]]] | None) -> list[str]:
    """One URL's story, most telling first; ``fetches`` are its output records (None: the
    output was not read)."""
    seen = "yes" if story.seen else "no (never admitted: not linked, or out of scope)"
    lines = [
        story.url,
        f"  host       {story.host} (partition {story.partition})",
        f"  seen       {seen}",
        f"  state      {_state_line(story)}",
    ]
    dead = story.dead
    if dead is not None:
        if isinstance(dead.get("at_ms"), int):
            lines.append(f"  since      {_when(dead['at_ms'], story.now_ms)}")
        if dead.get("parent"):
            lines.append(f"  linked by  {dead['parent']}")
        lines.append(f"  attempts   {dead.get('attempts', '?')}")
    elif story.attempts is not None:
        lines.append(f"  attempts   {story.attempts}")
    if story.scans_cut:
        lines.append(
            f"  note       bounded scans stopped early ({', '.join(story.scans_cut)}):"
            " a 'no' there means 'not in the part looked at'"
        )
    if fetches is not None:
        if not fetches:
            lines.append("  output     " + (_NO_RECORD if story.state == "done" else "none yet"))
        for key, record in fetches:
            at = record.get("fetched_at")
            when = _when(round(at * 1000), story.now_ms) if isinstance(at, int | float) else "?"
            lines.append(f"  output     {key}: status {record.get('status', '?')}, {when}")
    return lines


def dead_letter_lines(letters: Sequence[DeadLetter], *, total: int) -> list[str]:
    """Dead letters: a count per failure class, then one line each."""
    by_class: dict[str, int] = {}
    for letter in letters:
        by_class[letter.failure_class] = by_class.get(letter.failure_class, 0) + 1
    head = f"{total} dead letter(s)" + (f", {len(letters)} shown" if len(letters) < total else "")
    lines = [
        head
        + (
            ": "
            + ", ".join(
                f"{k} {v}" for k, v in sorted(by_class.items(), key=lambda kv: (-kv[1], kv[0]))
            )
            if by_class
            else ""
        )
    ]
    lines += [
        f"{d.url}  {d.failure_class}  attempts {d.attempts}  {d.message}".rstrip() for d in letters
    ]
    return lines


# -- where the frontier is ---------------------------------------------------------------


async def open_frontier_of(
    target: str, *, out: Path | None, redis_url: str | None
) -> tuple[Frontier, OutputStore | None]:
    """The frontier of ``target`` (a job file of a local run, or namespace/name), opened
    with the epoch its owner remembers, and the local run's output store (None in a
    cluster: ``crawlfleet output`` reads a bucket)."""
    from crawlfleet.enqueue import is_job_reference

    if is_job_reference(target):
        return await _cluster_frontier(target, redis_url), None
    return await _local_frontier(Path(target), out, redis_url)


async def _local_frontier(
    job_file: Path, out: Path | None, redis_url: str | None
) -> tuple[Frontier, OutputStore]:
    from crawlfleet.crawljob import load_crawljob
    from crawlfleet.destinations import destination_flag
    from crawlfleet.enqueue import find_local_run
    from crawlfleet.local.runner import STATE_FILE
    from crawlfleet.output.stores import open_store

    if not job_file.is_file():  # noqa: ASYNC240 (one stat before any I/O of the loop's)
        raise ConfigError(f"{job_file}: neither a CrawlJob YAML file nor namespace/name")
    job = load_crawljob(job_file)
    folder = out or Path("crawl-output") / job.metadata.name
    run = find_local_run(job, job_file, folder, STATE_FILE)
    settings = FrontierSettings.from_spec(job.job_id, job.with_shards_at_least(run.shards).spec)
    frontier = await _open(
        redis_url or run.redis_url, settings, run.epoch, f"the crawl in {folder}"
    )
    destination = destination_flag(
        job.spec.output.destination or str(folder), f"{job_file}: spec.output.destination"
    )
    return frontier, open_store(destination, job.spec.output.s3)


async def _cluster_frontier(target: str, redis_url: str | None) -> Frontier:
    from crawlfleet.crawljob import CrawlJobSpec

    namespace, name = target.split("/", 1)
    if not redis_url:
        raise ConfigError(
            f"{target}: set CRAWLFLEET_REDIS_URL to the job's Redis, e.g. after `kubectl -n"
            f" {namespace} port-forward svc/{name}-redis 6379`: redis://:PASSWORD@localhost:6379"
            f" with the password of Secret {name}-redis-auth (an environment variable, so it"
            " is in no argv)"
        )
    body = await _crawljob_object(namespace, name)
    status = body.get("status") or {}
    epoch, shards = status.get("frontierEpoch"), status.get("frontierShards")
    if not isinstance(epoch, str):
        raise ConfigError(f"CrawlJob {target} has no frontier yet (status.frontierEpoch unset)")
    spec = CrawlJobSpec.from_mapping(dict(body.get("spec") or {}))
    spec = spec.with_shards_at_least(shards if isinstance(shards, int) else 1)
    return await _open(
        redis_url,
        FrontierSettings.from_spec(f"{namespace}.{name}", spec),
        epoch,
        f"CrawlJob {target}",
    )


async def _crawljob_object(namespace: str, name: str) -> dict[str, Any]:
    """The CrawlJob as the API server holds it (kubeconfig login, as kubectl's)."""
    sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]  # see cli._operator
    try:
        from crawlfleet.operator.kube import Kube
    except ImportError as error:  # kopf is the `operator` extra
        raise ConfigError(
            "reading a CrawlJob needs the operator extra (pip install"
            f" 'crawlfleet[operator]'): {error}"
        ) from error
    import kopf

    kube = Kube(retry_budget_seconds=10.0)
    try:
        body = await kube.request(
            "GET",
            f"/apis/crawlfleet.io/v1alpha1/namespaces/{namespace}/crawljobs/{name}",
            missing_ok=True,
        )
    except (kopf.LoginError, OSError) as error:
        raise ConfigError(f"{namespace}/{name}: cannot log in to the cluster ({error})") from None
    finally:
        await kube.close()
    if body is None:
        raise ConfigError(f"CrawlJob {namespace}/{name} not found")
    return dict(body)


async def _open(url: str, settings: FrontierSettings, epoch: str | None, whose: str) -> Frontier:
    try:
        return await Frontier.connect(url, settings, expect_epoch=epoch)
    except FrontierLost as error:
        raise ConfigError(f"{whose} lost its frontier: {error}") from None


# -- what is asked ---------------------------------------------------------------------


def _print(lines: Iterable[str]) -> None:
    for line in lines:
        print(line)


def _as_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


async def report(frontier: Frontier, output: OutputStore | None, args: argparse.Namespace) -> int:
    """Print what ``args.what`` asks; the exit code."""
    if args.what == "hosts":
        if args.args:
            raise ConfigError("frontier hosts takes no arguments (--by, --top)")
        rows = await top_hosts(frontier, by=args.by, top=max(1, args.top))
        now_ms = await server_ms(frontier)
        if args.json:
            _as_json({"now_ms": now_ms, "hosts": [dataclasses.asdict(r) for r in rows]})
        else:
            _print(host_lines(rows, now_ms))
        return 0
    if args.what == "url":
        if len(args.args) != 1:
            raise ConfigError("frontier url takes one URL")
        story = await url_story(frontier, args.args[0])
        fetches = None
        if output is not None and story.seen:
            from crawlfleet.output.reader import fetches_of

            fetches = await fetches_of(output, story.url)
        if args.json:
            _as_json({**dataclasses.asdict(story), "state": story.state, "output": fetches})
        else:
            _print(story_lines(story, fetches))
        return 0 if story.seen else 1
    if args.what == "count":
        if args.domain:
            found = await domain_counts(frontier, args.domain)
            if args.json:
                _as_json(dataclasses.asdict(found))
            else:
                _print(domain_count_lines(found))
            return 0
        if args.args:
            counts = await host_counts(frontier, args.args)
            if args.json:
                _as_json({h: dataclasses.asdict(c) for h, c in counts.items()})
            else:
                _print(host_count_lines(counts))
            return 0
        stats = await frontier.stats()
        if args.json:
            _as_json({name: getattr(stats, name) for name in COUNT_FIELDS})
        else:
            _print(stats_lines(stats))
        return 0
    letters: list[DeadLetter] = []
    total = 0
    async for letter in frontier.dead_letters():
        if args.reason and letter.failure_class != args.reason:
            continue
        total += 1
        if len(letters) < args.limit:
            letters.append(letter)
    if args.json:
        _as_json({"total": total, "dead_letters": [dataclasses.asdict(d) for d in letters]})
    else:
        _print(dead_letter_lines(letters, total=total))
    sys.stdout.flush()
    return 0
