"""``spec``: what the user asks for, every section together, and the rules across sections.

Two defaults depend on other fields and so cannot be CRD defaults: ``scope.allowedDomains`` (the
seed hosts, filled here, or by :meth:`CrawlJobSpec.with_listed_seeds` once a seedsFrom list is
read) and ``redis.managed`` (``RedisSpec``). The workers receive :meth:`CrawlJobSpec.to_mapping`,
so the whole spec must fit the ConfigMap that carries it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, ClassVar, Final, Self

from pydantic import JsonValue, model_validator

from crawlfleet.crawljob.base import Range, Rule, Section
from crawlfleet.crawljob.concurrency import ConcurrencySpec, WorkersSpec
from crawlfleet.crawljob.dedup import (
    BLOOM_MEMORY_SHARE,
    DedupSpec,
    first_layer_bytes,
    memory_problem,
)
from crawlfleet.crawljob.extract import ExtractRules, extract_characters
from crawlfleet.crawljob.faults import LeaseSpec, RetrySpec
from crawlfleet.crawljob.fetch import DEFAULT_USER_AGENT, FetchSpec, UserAgent
from crawlfleet.crawljob.fields import DAY_SECONDS, MIB, PARSER_REFERENCE
from crawlfleet.crawljob.files import FilesSpec, files_characters
from crawlfleet.crawljob.frontier import FrontierSpec
from crawlfleet.crawljob.output import OutputSpec
from crawlfleet.crawljob.proxy import ProxySpec
from crawlfleet.crawljob.recrawl import RecrawlRules
from crawlfleet.crawljob.redis import REDIS_MAXMEMORY_SHARE, RedisSpec
from crawlfleet.crawljob.robots import RobotsSpec
from crawlfleet.crawljob.schedule import ScheduleSpec
from crawlfleet.crawljob.scope import MAX_DOMAINS, ScopeSpec
from crawlfleet.crawljob.scrapy import CrawlerSpec, ScrapySpec
from crawlfleet.crawljob.seeds import Seeds, SeedsFrom, seed_hosts
from crawlfleet.crawljob.suspension import AutoPauseSpec, SuspendExpirySpec
from crawlfleet.crawljob.validation import problem, problems, validate
from crawlfleet.errors import ConfigError

__all__ = ["CrawlJobSpec"]

_MAX_SPEC_JSON_BYTES: Final = 880_000  # see CrawlJobSpec._fits_the_workers_config_map


def _one_shard_with(
    field: str, cel: str, reason: str, holds: Callable[[CrawlJobSpec], bool]
) -> Rule[CrawlJobSpec]:
    """``frontier.shards`` refused above 1 beside ``field``, which is not yet partitioned
    (``cel`` and ``holds``: the field is unset), for ``reason``."""
    return Rule(
        field="frontier.shards",
        message=f"must be 1 with {field}: {reason}",
        cel=f"self.frontier.shards == 1 || ({cel})",
        holds=lambda spec: spec.frontier.shards == 1 or holds(spec),
        shows=("frontier.shards",),
    )


def _unset_with_scrapy(section: str, reason: str) -> Rule[CrawlJobSpec]:
    """An optional section a Scrapy spider cannot honour (its name one word, the same in YAML
    and Python), refused beside ``crawler.scrapy`` for ``reason``."""
    return Rule(
        field=section,
        message=f"must not be set with crawler.scrapy: {reason}",
        cel=f"!has(self.crawler) || !has(self.crawler.scrapy) || !has(self.{section})",
        holds=lambda spec: spec.scrapy is None or getattr(spec, section) is None,
    )


class CrawlJobSpec(Section):
    """What the user asks for; every default of a crawl lives here."""

    seeds: Seeds = ()
    """The URLs the crawl starts from: absolute http or https URLs. Their hosts (and those of
    seedsFrom) are the default scope.allowedDomains. Give seeds, seedsFrom or both."""
    seeds_from: SeedsFrom | None = None
    """More seeds, from a list kept outside the CrawlJob (a ConfigMap key, or a file for
    crawlfleet run): for lists past the 10,000 a CrawlJob holds."""
    scope: ScopeSpec = ScopeSpec()
    """Which discovered links the crawl follows: domains, depth, page budget, URL patterns."""
    dedup: DedupSpec = DedupSpec()
    """The Bloom filter that makes every URL crawled once. Sized at creation and fixed after."""
    concurrency: ConcurrencySpec = ConcurrencySpec()
    """How many fetches run at once, per worker and per host, and how often a host is asked."""
    workers: WorkersSpec = WorkersSpec()
    """The worker pods: how many, sized by whom, with which image and resources."""
    retry: RetrySpec = RetrySpec()
    """How failed fetches are retried: within one fetch, and across fetches of a URL."""
    lease: LeaseSpec = LeaseSpec()
    """How a URL claimed by a worker comes back if that worker hangs or dies."""
    redis: RedisSpec = RedisSpec()
    """Where the frontier (queues, leases, Bloom filter, counters) lives. Set at most one of url,
    secretRef and managed; none means managed."""
    frontier: FrontierSpec = FrontierSpec()
    """How the frontier is laid out in Redis: partitions by host, to spread one job over the
    nodes of a Redis Cluster, and how durable a page's links must be before it counts."""
    output: OutputSpec = OutputSpec()
    """What the workers write about the pages they fetch, and where."""
    robots: RobotsSpec = RobotsSpec()
    """Whether the crawl obeys robots.txt."""
    extract: ExtractRules = ()
    """Declarative extraction: rules that turn matching pages into items (one JSON line each,
    in items/ beside pages/), evaluated in order; a page may match several. Try them on one
    page with crawlfleet extract --job job.yaml URL."""
    parser: Annotated[str, PARSER_REFERENCE] | None = None
    """A function of your own, package.module:function, that each HTML page is given to (a
    crawlfleet.parsing.Page: url, status, headers, text, a parsel selector, depth); it returns
    or yields items (dicts, into items/) and links to follow (strs, through scope, robots and
    dedup). It runs in a process beside the worker: install your package in the worker image
    (FROM the crawlfleet worker image), or in the environment of crawlfleet run."""
    parser_timeout_seconds: Annotated[float, Range(gt=0, le=600)] = 5.0
    """Longest time, in seconds, a page's extraction may take, for the extract rules'
    selectors and for the parser each: past it the page fails as parser_error (and the
    parser process is restarted)."""
    user_agent: UserAgent = DEFAULT_USER_AGENT
    """The User-Agent header of every request, and the name robots.txt rules are matched
    against. Say who you are and how site owners can reach you."""
    fetch: FetchSpec = FetchSpec()
    """Limits of one fetch: timeouts, body sizes and redirects."""
    proxy: ProxySpec | None = None
    """Send requests through proxies (HTTP(S) or SOCKS5), from a Secret when they carry
    credentials: a host keeps its proxy while that proxy works, a proxy that keeps failing is
    taken out for a while, and noProxy hosts go direct. Unset: requests go direct. See
    docs/operations.md."""
    crawler: CrawlerSpec | None = None
    """Which crawler the workers run: unset, crawlfleet's own; scrapy, a spider of your
    Scrapy project over the job's frontier."""
    recrawl: RecrawlRules = ()
    """Which URLs are fetched again, and how often: rules tried in order, each naming URLs by
    match or documents by kind, with an interval that adapts to how often a page changes. A URL
    no rule names is fetched once. With rules and no schedule the job keeps going: it never
    completes by itself, and waits for the next URL that is due. See docs/recrawl.md."""
    files: FilesSpec | None = None
    """Which URLs are downloaded as files into files/ of the destination (streamed, resumed
    after an interruption, verified, stored once by content) rather than read as pages: rules
    by URL pattern, by the element a page links them from, or by the response's content type,
    with a size cap per file and a byte budget per job. Unset: every URL is a page, read whole
    up to fetch.maxBodyBytes. See docs/files.md."""
    schedule: ScheduleSpec | None = None
    """Run the job again at the times of a cron schedule: each run starts from the seeds and
    from what the last successful run kept (revisited URLs, seen URLs), and writes under its own
    prefix (runs/<run-id>/). Unset: the job runs once."""
    suspend: bool = False
    """Pause the crawl: workers scale to 0 while Redis and the frontier are kept, so setting it
    back to false resumes where the crawl stopped."""
    suspend_expiry: SuspendExpirySpec | None = None
    """How long a suspension may last, and what then (resume, or fail the job). Unset: a
    suspended job waits until it is resumed."""
    auto_pause: AutoPauseSpec | None = None
    """Pause the job by itself when its sites have pushed back every fetch for a while (429,
    403, empty pages) rather than keep asking: its workers go to 0, the frontier is kept, and
    the job says why (phase Suspended, reason RateLimited). Unset: the job keeps retrying with
    back-off."""
    ttl_seconds_after_finished: Annotated[int, Range(ge=0, le=365 * DAY_SECONDS)] | None = None
    """Seconds after the job succeeds or fails before it is deleted, with everything it created.
    Unset: kept until you delete it."""

    cross_field_rules: ClassVar[tuple[Rule[CrawlJobSpec], ...]] = (
        Rule(
            field="seeds",
            message="must not be empty: a job needs seeds, seedsFrom or"
            " a crawler.scrapy spider (its start requests)",
            cel="[has(self.seedsFrom), has(self.seeds) && size(self.seeds) > 0,"
            " has(self.crawler) && has(self.crawler.scrapy)].exists(x, x)",
            holds=lambda spec: (
                bool(spec.seeds) or spec.seeds_from is not None or spec.scrapy is not None
            ),
        ),
        Rule(
            field="scope.maxPages",
            message="must not be greater than dedup.capacity: the Bloom filter is sized for"
            " capacity URLs, and past it new URLs are taken for seen and never crawled",
            cel="self.scope.maxPages == 0 || self.scope.maxPages <= self.dedup.capacity",
            holds=lambda spec: (
                spec.scope.max_pages == 0 or spec.scope.max_pages <= spec.dedup.capacity
            ),
            shows=("scope.maxPages", "dedup.capacity"),
        ),
        Rule(
            field="output.format",
            message="must not be none when extract rules, a parser or output.content ask for"
            " output: their items and content would go nowhere",
            cel="self.output.format != 'none' || (size(self.extract) == 0"
            " && !has(self.parser) && self.output.content == 'none')",
            holds=lambda spec: (
                spec.output.format != "none"
                or (not spec.extract and spec.parser is None and spec.output.content == "none")
            ),
        ),
        Rule(
            field="crawler.scrapy",
            message="must not be set with extract, parser or output.content: the spider's"
            " callbacks extract, and its items go to items/",
            cel="!has(self.crawler) || !has(self.crawler.scrapy) || (size(self.extract) == 0"
            " && !has(self.parser) && self.output.content == 'none')",
            holds=lambda spec: (
                spec.scrapy is None
                or (not spec.extract and spec.parser is None and spec.output.content == "none")
            ),
        ),
        Rule(
            field="output.format",
            message="must not be none with crawler.scrapy: the spider's items would go nowhere",
            cel="!has(self.crawler) || !has(self.crawler.scrapy) || self.output.format != 'none'",
            holds=lambda spec: spec.scrapy is None or spec.output.format != "none",
        ),
        Rule(
            field="recrawl",
            message="must be empty with crawler.scrapy: a Scrapy spider fetches each URL once"
            " (its scheduler has no way back to a URL yet), so revisit rules would be ignored",
            cel="!has(self.crawler) || !has(self.crawler.scrapy) || size(self.recrawl) == 0",
            holds=lambda spec: spec.scrapy is None or not spec.recrawl,
        ),
        _unset_with_scrapy(
            "files",
            "a Scrapy spider downloads through its own pipelines (FilesPipeline), and its"
            " workers have no streamed file downloads",
        ),
        Rule(
            field="output.format",
            message="must not be none with files: the downloaded files' records would go nowhere",
            cel="self.output.format != 'none' || !has(self.files)",
            holds=lambda spec: spec.output.format != "none" or spec.files is None,
        ),
        _unset_with_scrapy(
            "proxy",
            "a Scrapy spider's requests go through Scrapy's downloader, whose proxies the"
            " address guard refuses (request.meta['proxy'])",
        ),
        _unset_with_scrapy(
            "schedule",
            "runs of a Scrapy spider cannot yet carry their state to the next run, so each"
            " would crawl everything again",
        ),
        _one_shard_with(
            "schedule",
            "!has(self.schedule)",
            "a run's state (its id, what it revisits, its commit) is kept in one partition,"
            " not yet across partitions",
            lambda spec: spec.schedule is None,
        ),
        _one_shard_with(
            "recrawl",
            "size(self.recrawl) == 0",
            "revisits are kept by job, not yet by partition",
            lambda spec: not spec.recrawl,
        ),
        _one_shard_with(
            "scope.maxPages",
            "self.scope.maxPages == 0",
            "each partition counts its own pages, and a budget for the whole job across"
            " partitions is not built yet (leave maxPages at 0)",
            lambda spec: spec.scope.max_pages == 0,
        ),
        _one_shard_with(
            "scope.maxPagesPerDomain or scope.maxQueuedPerDomain",
            "self.scope.maxPagesPerDomain == 0 && self.scope.maxQueuedPerDomain == 0",
            "a domain's hosts spread over partitions, which count each its own (budget by host"
            " with maxPagesPerHost and maxQueuedPerHost instead)",
            lambda spec: (
                spec.scope.max_pages_per_domain == 0 and spec.scope.max_queued_per_domain == 0
            ),
        ),
        _one_shard_with(
            "crawler.scrapy",
            "!has(self.crawler) || !has(self.crawler.scrapy)",
            "the Scrapy scheduler claims from one partition (not yet partitioned)",
            lambda spec: spec.scrapy is None,
        ),
    )

    @property
    def keeps_going(self) -> bool:
        """A continuous crawl: revisit rules and no schedule, so it never completes by itself
        (a scheduled run completes when its queue drains, and the next run revisits)."""
        return bool(self.recrawl) and self.schedule is None

    @property
    def scrapy(self) -> ScrapySpec | None:
        """``crawler.scrapy``: the job runs a Scrapy spider; None: crawlfleet's own crawler."""
        return self.crawler.scrapy if self.crawler is not None else None

    @model_validator(mode="after")
    def _default_allowed_domains_to_seed_hosts(self) -> Self:
        # Filled here rather than left to a helper: a consumer that read an empty list as
        # "anything goes" would crawl the whole web. With seedsFrom the list's hosts are part of
        # the default, known only once it is read: with_listed_seeds() fills it then, and
        # scope_unresolved says it is still to do.
        if not self.scope.allowed_domains and self.seeds_from is None:
            scope = self.scope.model_copy(update={"allowed_domains": seed_hosts(self.seeds)})
            object.__setattr__(self, "scope", scope)  # still inside validation
        return self

    @property
    def scope_unresolved(self) -> bool:
        """True while scope.allowedDomains waits for the hosts of seedsFrom's list."""
        return self.seeds_from is not None and not self.scope.allowed_domains

    def with_listed_seeds(self, listed: Sequence[str]) -> CrawlJobSpec:
        """This spec once its seedsFrom list is read: scope.allowedDomains defaults to the hosts
        of every seed, inline and listed. The list itself stays out of the spec (the workers'
        ConfigMap could not hold it); ``listed`` comes from :func:`parse_seed_list`."""
        if not self.scope_unresolved:
            return self
        hosts = seed_hosts((*self.seeds, *listed))
        if len(hosts) > MAX_DOMAINS:
            raise ConfigError(
                f"spec.scope.allowedDomains: must be set when the seeds span more than"
                f" {MAX_DOMAINS} hosts (got {len(hosts)} in seeds and seedsFrom): the default,"
                " every seed host, would not fit the workers' ConfigMap"
            )
        scope = self.scope.model_copy(update={"allowed_domains": hosts})
        return self.model_copy(update={"scope": scope})

    @model_validator(mode="after")
    def _bloom_fits_the_managed_redis(self) -> Self:
        # Refused here, before any child exists: the filter's first layer is written whole
        # within the first few hundred URLs, and one past the container's limit gets the Redis
        # killed, again after each restart. An external Redis is measured when the frontier
        # opens (frontier.py), where its maxmemory and use can be read.
        managed = self.redis.managed
        if managed is None:
            return self
        found = memory_problem(
            self.dedup.capacity,
            self.dedup.error_rate,
            managed.max_memory_bytes,
            0,
            f"the managed Redis of memoryLimit {managed.memory_limit}",
        )
        if found is None:
            return self
        need = first_layer_bytes(self.dedup.capacity, self.dedup.error_rate)
        limit = math.ceil(need / BLOOM_MEMORY_SHARE / REDIS_MAXMEMORY_SHARE / MIB)
        raise problems(
            [("dedup.capacity", f"{found} (redis.managed.memoryLimit: {limit}Mi or more)")]
        )

    @model_validator(mode="after")
    def _fits_the_workers_config_map(self) -> Self:
        # The operator hands the whole spec to the workers in a ConfigMap, which Kubernetes caps
        # at 1 MiB, while the API server stores a CrawlJob of up to ~1.5 MB: a job in between
        # would be admitted and then fail on every reconcile. Measured as JSON (the YAML the
        # ConfigMap holds is at most ~15 % larger: a list item's "- " and indent against '",').
        lists = (self.seeds, self.scope.include, self.scope.exclude, self.scope.allowed_domains)
        listed = sum(len(item) for values in lists for item in values)
        strings = listed + extract_characters(self.extract) + files_characters(self.files)
        if strings < _MAX_SPEC_JSON_BYTES // 2:
            return self  # far below: spare the serialisation
        size = len(json.dumps(self.model_dump(mode="json", by_alias=True, exclude_none=True)))
        if size > _MAX_SPEC_JSON_BYTES:
            raise problem(
                f"must be at most {_MAX_SPEC_JSON_BYTES} bytes as JSON to fit in the ConfigMap the"
                " workers read it from (Kubernetes caps one at 1 MiB): use fewer or shorter"
                f" seeds (got {size})"
            )
        return self

    def with_shards_at_least(self, shards: int) -> CrawlJobSpec:
        """This spec with at least ``shards`` frontier partitions (``crawlfleet run --shards``
        on a local cluster of that many nodes), checked again as a document: a job that cannot
        be partitioned yet is refused with the field named, as if its file had said so."""
        if self.frontier.shards >= shards:
            return self
        mapping = self.to_mapping()
        frontier = mapping["frontier"]
        assert isinstance(frontier, dict)
        mapping["frontier"] = {**frontier, "shards": shards}
        return CrawlJobSpec.from_mapping(mapping)

    @classmethod
    def from_mapping(cls, spec: Mapping[str, object]) -> CrawlJobSpec:
        """Validate a camelCase spec (as kopf or a ConfigMap hands it over); paths start at spec."""
        return validate(cls, spec, prefix=("spec",), what="CrawlJob spec")

    def to_mapping(self) -> dict[str, JsonValue]:
        """The camelCase spec with every default filled, for workers (ConfigMap/JSON)."""
        mapping = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not self.seeds:  # all from seedsFrom: an empty list would read as a mistake
            del mapping["seeds"]
        return mapping
