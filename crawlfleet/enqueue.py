"""URLs into a running crawl: ``crawlfleet enqueue <job.yaml | namespace/name> URL...``.

Two places, two paths, one admission rule:

- **A local run** (``crawlfleet run job.yaml``): the run records its private Redis in
  ``<out>/state.json`` (``redisUrl``, beside the frontier's epoch) and holds ``<out>/run.lock``
  while it runs. :func:`find_local_run` finds both, and :func:`enqueue_urls` puts the URLs
  into that frontier through the Bloom filter at depth 0, as seeds are: new ones are queued
  (and, depth 0 being the lowest depth a host's queue is claimed from, ahead of every
  discovered link of their host: docs/frontier.md), seen ones are not crawled again.
- **A CrawlJob in a cluster**: the job's Redis is the operator's to reach, not the user's, so
  :func:`append_seeds` adds the URLs to the CrawlJob's ``spec.seeds`` (a JSON merge patch
  fenced by the object's resourceVersion); the operator's tick sees the seed list change and
  enqueues it through the same filter once (``SeedsAdded``: "N of M seeds new").

Either way each URL is canonicalised and passed through the job's scope exactly as a link
of a seed page would be (:class:`crawlfleet.crawler.links.scope.Scope`, depth 0); what it refuses is
reported with its reason, never dropped in silence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, urlsplit

from crawlfleet.crawler.links.scope import Scope
from crawlfleet.crawljob import CrawlJob, CrawlJobSpec, parse_seed_list
from crawlfleet.errors import ConfigError, InvalidURL, KubeError
from crawlfleet.frontier import Admission, CanonicalURL, Frontier, Link, canonicalize
from crawlfleet.local.lifetime import RunLock

if TYPE_CHECKING:
    from crawlfleet.operator.kube import Kube

__all__ = [
    "MAX_SEEDS_PER_ENQUEUE",
    "EnqueueReport",
    "LocalRun",
    "admit",
    "append_seeds",
    "enqueue_urls",
    "find_local_run",
    "is_job_reference",
    "stdin_urls",
]

#: The most URLs one ``crawlfleet enqueue namespace/name`` appends to ``spec.seeds``: the
#: CrawlJob object holds them all (10,000 at most, ~1.5 MB); longer lists belong in a
#: ``seedsFrom`` ConfigMap, which the operator reads instead of the API server storing it.
MAX_SEEDS_PER_ENQUEUE: Final = 1000

#: ``namespace/name``, as Kubernetes spells both (RFC 1123 labels; a name may hold dots).
_JOB_REFERENCE: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?")
#: Refusal reasons of our own, beside the scope's verdicts.
_MAX_PAGES = "max_pages_reached"
_PRESSURE = "held_back_by_memory_pressure"
_HOST_BUDGET = "host_budget"


def _host_budget_words(spec: CrawlJobSpec) -> str:
    scope = spec.scope
    budgets = [
        f"spec.scope.{name} ({value})"
        for name, value in (
            ("maxQueuedPerHost", scope.max_queued_per_host),
            ("maxPagesPerHost", scope.max_pages_per_host),
        )
        if value
    ]
    return "its host's budget is spent: " + ", ".join(budgets)


_INVALID = "invalid_url"
#: How often an append races another writer of the CrawlJob before it gives up.
_CONFLICT_RETRIES: Final = 5


def is_job_reference(target: str) -> bool:
    """True for ``namespace/name`` that is not a file on this machine nor named like one."""
    return (
        _JOB_REFERENCE.fullmatch(target) is not None
        and not target.endswith((".yaml", ".yml"))
        and not Path(target).exists()
    )


@dataclass(slots=True)
class EnqueueReport:
    """What happened to each URL given: new, already seen, or refused and why."""

    new: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    #: reason -> (URL as given, the sentence or verdict): a scope verdict's value,
    #: ``invalid_url``, ``max_pages_reached``, ``held_back_by_memory_pressure``,
    #: ``host_budget``.
    refused: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def refuse(self, reason: str, url: str, why: str = "") -> None:
        self.refused.setdefault(reason, []).append((url, why))

    @property
    def refused_count(self) -> int:
        return sum(len(urls) for urls in self.refused.values())

    def lines(self, *, new: str = "new", seen: str = "already seen") -> list[str]:
        """The report for people: the counts, then each refused URL with its reason."""
        out = [f"{len(self.new)} {new}, {len(self.seen)} {seen}, {self.refused_count} refused"]
        for reason, urls in sorted(self.refused.items()):
            for url, why in urls:
                out.append(f"  refused ({reason}): {url}" + (f": {why}" if why else ""))
        return out


def admit(urls: Iterable[str], scope: Scope, report: EnqueueReport) -> list[CanonicalURL]:
    """The URLs canonicalised and in scope at depth 0 (as seeds are), each once, in order;
    the others go to ``report.refused`` with their reason."""
    kept: dict[CanonicalURL, None] = {}
    for raw in urls:
        try:
            url = canonicalize(raw)
        except InvalidURL as error:
            report.refuse(_INVALID, raw, str(error))
            continue
        verdict = scope.check(url, 0)
        if verdict is not None:
            report.refuse(verdict.value, raw, _SCOPE_WHY.get(verdict.value, ""))
            continue
        kept[url] = None
    return list(kept)


_SCOPE_WHY: Final[Mapping[str, str]] = {
    "out_of_domain": "not in spec.scope.allowedDomains",
    "excluded": "matches spec.scope.exclude",
    "not_included": "matches no pattern of spec.scope.include",
    "bad_scheme": "only http and https are crawled",
    "too_many_path_segments": "more path segments than spec.scope.maxPathSegments",
    "repeated_path_segments": "a path segment repeated past spec.scope.maxRepeatedSegments",
}


async def enqueue_urls(
    frontier: Frontier, spec: CrawlJobSpec, urls: Sequence[str]
) -> EnqueueReport:
    """Admit ``urls`` (:func:`admit`) and queue them at depth 0 in one round trip per batch."""
    report = EnqueueReport()
    admitted = admit(urls, Scope.from_spec(spec.scope), report)
    outcome = await frontier.enqueue([Link(url, 0, "") for url in admitted])
    for url, code in zip(admitted, outcome, strict=True):
        if code is Admission.NEW:
            report.new.append(url)
        elif code is Admission.SEEN:
            report.seen.append(url)
        elif code is Admission.OVER_LIMIT:
            report.refuse(_MAX_PAGES, url, f"spec.scope.maxPages ({spec.scope.max_pages})")
        elif code is Admission.OVER_HOST_BUDGET:
            report.refuse(_HOST_BUDGET, url, _host_budget_words(spec))
        else:
            report.refuse(_PRESSURE, url, "Redis is near maxmemory; try again later")
    return report


# -- a local run ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LocalRun:
    """A ``crawlfleet run`` in progress: its folder, its Redis and its frontier's epoch."""

    output_dir: Path
    redis_url: str
    epoch: str | None
    pid: int
    #: The partitions of its frontier (its state's frontierShards: ``--shards`` may have
    #: raised the job's).
    shards: int = 1


def find_local_run(job: CrawlJob, job_file: Path, output_dir: Path, state_file: str) -> LocalRun:
    """The run of ``job`` in ``output_dir``, or a ConfigError that says why there is none."""
    again = f"crawlfleet run {job_file} --out {output_dir}"
    pid = RunLock.holder(output_dir)
    if pid is None:
        raise ConfigError(
            f"no running crawl of {job.job_id} in {output_dir} (no crawlfleet run holds it):"
            f" start it with `{again}` (add --resume to continue an earlier one), or name"
            " its folder with --out"
        )
    try:
        state = json.loads((output_dir / state_file).read_text())
    except FileNotFoundError:
        state = {}
    except (OSError, ValueError) as error:
        raise ConfigError(f"{output_dir / state_file}: unreadable ({error})") from None
    redis_url = state.get("redisUrl") if isinstance(state, dict) else None
    if not isinstance(redis_url, str):
        raise ConfigError(
            f"the crawl in {output_dir} (pid {pid}) has not recorded its Redis yet (it is"
            " starting, or it runs on an external Redis whose URL holds a password, which is"
            " never written to disk): try again in a moment, or pass --redis-url"
        )
    password_file = state.get("redisPasswordFile")
    if isinstance(password_file, str):  # the run's private Redis: its password, kept 0600
        try:
            password = Path(password_file).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise ConfigError(f"the crawl's Redis password: {error}") from None
        parts = urlsplit(redis_url)
        redis_url = parts._replace(netloc=f":{quote(password, safe='')}@{parts.netloc}").geturl()
    epoch = state.get("frontierEpoch")
    shards = state.get("frontierShards")
    return LocalRun(
        output_dir,
        redis_url,
        epoch if isinstance(epoch, str) else None,
        pid,
        shards if isinstance(shards, int) and shards >= 1 else 1,
    )


# -- a CrawlJob in a cluster ------------------------------------------------------------


def _crawljob_path(namespace: str, name: str) -> str:
    return f"/apis/crawlfleet.io/v1alpha1/namespaces/{namespace}/crawljobs/{name}"


async def append_seeds(
    kube: Kube,
    namespace: str,
    name: str,
    urls: Sequence[str],
    *,
    limit: int = MAX_SEEDS_PER_ENQUEUE,
) -> EnqueueReport:
    """Append the admitted ``urls`` to the CrawlJob's ``spec.seeds``; ``seen`` are those it
    holds already. Refuses a finished job and more than ``limit`` new seeds, with the fix."""
    path = _crawljob_path(namespace, name)
    for _ in range(_CONFLICT_RETRIES):
        body = await kube.request("GET", path, missing_ok=True)
        if body is None:
            raise ConfigError(f"CrawlJob {namespace}/{name} not found")
        phase = (body.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            raise ConfigError(
                f"CrawlJob {namespace}/{name} is {phase}: a finished job is not started again"
                " (its phase is terminal, as a Kubernetes Job's is); create a new CrawlJob"
                " with these URLs as its seeds"
            )
        raw_spec: dict[str, Any] = dict(body.get("spec") or {})
        spec = CrawlJobSpec.from_mapping(raw_spec)
        if spec.scope_unresolved:
            spec = spec.with_listed_seeds(await _listed(kube, namespace, spec))
        report = EnqueueReport()
        admitted = admit(urls, Scope.from_spec(spec.scope), report)
        held = set(spec.seeds)
        for url in admitted:
            (report.seen if url in held else report.new).append(url)
        if len(report.new) > limit:
            raise ConfigError(
                f"{len(report.new)} new seeds: more than the {limit} that crawlfleet enqueue"
                " appends to a CrawlJob's spec.seeds at once; put a long list in a ConfigMap"
                " and name it in spec.seedsFrom.configMapKeyRef (docs/operations.md)"
            )
        if not report.new:
            return report
        seeds = [*spec.seeds, *report.new]
        CrawlJobSpec.from_mapping({**raw_spec, "seeds": seeds})  # the CRD's bounds, first
        patch = {
            "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
            "spec": {"seeds": seeds},
        }
        try:
            await kube.request("PATCH", path, patch, content_type="application/merge-patch+json")
        except KubeError as error:
            if error.status == 409:  # written by someone else meanwhile: read it again
                continue
            raise
        return report
    raise ConfigError(
        f"CrawlJob {namespace}/{name} kept changing under {_CONFLICT_RETRIES} tries to add"
        " the seeds; try again"
    )


async def _listed(kube: Kube, namespace: str, spec: CrawlJobSpec) -> tuple[str, ...]:
    """The seedsFrom list, whose hosts are the job's default scope (as the operator reads it)."""
    ref = spec.seeds_from.config_map_key_ref if spec.seeds_from else None
    if ref is None:
        return ()
    where = f"spec.seedsFrom.configMapKeyRef (ConfigMap {ref.name}, key {ref.key})"
    data = await kube.config_map_value(namespace, ref.name, ref.key)
    if data is None:
        raise ConfigError(f"{where}: not found, so the job's scope is not known yet")
    return parse_seed_list(data, where)


def stdin_urls(lines: Iterable[str]) -> list[str]:
    """URLs one a line; blank lines and ``#`` comments skipped, as seed lists have them."""
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]
