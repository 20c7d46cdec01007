"""``spec.crawler.scrapy``: a spider of a Scrapy project, run over the job's frontier.

The runtime owns the scheduler and the dupefilter, so a job cannot point them elsewhere; the
settings of scrapy-redis, which a project moving over often keeps, are refused with what takes
their place (docs/scrapy.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Final, TypeVar

from pydantic import AfterValidator, Field, JsonValue

from crawlfleet.crawljob.base import Section
from crawlfleet.crawljob.fields import PYTHON_MODULE, SPIDER_NAME
from crawlfleet.crawljob.validation import Where, problem, problems, show

__all__ = ["RUNTIME_OWNED_SCRAPY_SETTINGS", "CrawlerSpec", "ScrapySpec"]

_EntryT = TypeVar("_EntryT")

_SCRAPY_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_SCRAPY_ENTRIES: Final = 256
#: Settings the crawlfleet runtime sets itself (crawlfleet/scrapy/): a job cannot point them
#: elsewhere, or requests would be dequeued without a lease (scrapy-redis) or taken for seen
#: before they are queued.
RUNTIME_OWNED_SCRAPY_SETTINGS: Final = frozenset({"SCHEDULER", "DUPEFILTER_CLASS"})


def _scrapy_names(values: dict[str, _EntryT]) -> dict[str, _EntryT]:
    """Setting and argument names: Python identifiers, as settings.py and ``-a`` take them."""
    for name in values:
        if not _SCRAPY_NAME.fullmatch(name):
            raise problem(
                f"names must be Python identifiers (letters, digits and _) (got {show(name)})"
            )
    return values


def _scrapy_settings(settings: dict[str, JsonValue]) -> dict[str, JsonValue]:
    owned = sorted(RUNTIME_OWNED_SCRAPY_SETTINGS.intersection(settings))
    if owned:
        raise problem(
            f"must not set {', '.join(owned)}: crawlfleet's runtime points SCHEDULER and"
            " DUPEFILTER_CLASS at its frontier (leased, deduplicated, acked once the items are"
            " durable)"
        )
    return settings


# --- scrapy-redis settings in a Scrapy job: what replaces each ---------------------------------
# A project moving from scrapy-redis (docs/scrapy.md) often keeps its settings. Each of these
# would be ignored by crawlfleet's scheduler, or would point part of the crawl at a Redis of its
# own beside the frontier; refused with what does the job instead. CEL cannot read the keys of
# a free-form map, so in a cluster the operator refuses them (InvalidSpec), not the API server.

_FRONTIER_REDIS: Final = (
    "the frontier's Redis is spec.redis (url, secretRef or managed), and a password here would"
    " sit in the workers' ConfigMap"
)
_FRONTIER_DEDUP: Final = "the job's Bloom filter (spec.dedup) dedups every request"
_FRONTIER_START_URLS: Final = (
    "start URLs are spec.seeds, spec.seedsFrom or the spider's start requests, and crawlfleet"
    " enqueue adds URLs to a running job"
)
_FRONTIER_DONE: Final = "the frontier says when the job is complete, and every process closes then"
#: scrapy-redis' settings (its defaults.py, connection.py, scheduler, spiders, pipelines and
#: stats) and what takes their place in a crawlfleet job.
_SCRAPY_REDIS_SETTINGS: Final[Mapping[str, str]] = {
    "DUPEFILTER_KEY": _FRONTIER_DEDUP,
    "MAX_IDLE_TIME_BEFORE_CLOSE": _FRONTIER_DONE,
    "REDIS_DB": _FRONTIER_REDIS,
    "REDIS_DECODE_RESPONSES": _FRONTIER_REDIS,
    "REDIS_ENCODING": _FRONTIER_REDIS,
    "REDIS_HOST": _FRONTIER_REDIS,
    "REDIS_ITEMS_KEY": "items go to the job's destination (spec.output)",
    "REDIS_ITEMS_SERIALIZER": "items go to the job's destination (spec.output)",
    "REDIS_PARAMS": _FRONTIER_REDIS,
    "REDIS_PORT": _FRONTIER_REDIS,
    "REDIS_START_URLS_AS_SET": _FRONTIER_START_URLS,
    "REDIS_START_URLS_AS_ZSET": _FRONTIER_START_URLS,
    "REDIS_START_URLS_KEY": _FRONTIER_START_URLS,
    "REDIS_URL": _FRONTIER_REDIS,
    "SCHEDULER_DUPEFILTER_CLASS": _FRONTIER_DEDUP,
    "SCHEDULER_DUPEFILTER_KEY": _FRONTIER_DEDUP,
    "SCHEDULER_FLUSH_ON_START": "a new job starts with an empty frontier of its own",
    "SCHEDULER_IDLE_BEFORE_CLOSE": _FRONTIER_DONE,
    "SCHEDULER_PERSIST": "the frontier always persists, for as long as the job exists",
    "SCHEDULER_QUEUE_CLASS": "the frontier's per-host queues hold the requests",
    "SCHEDULER_QUEUE_KEY": "the frontier's per-host queues hold the requests",
    "SCHEDULER_SERIALIZER": "the frontier stores each request itself",
    "STATS_KEY": "the frontier keeps the job's counters (its status)",
}
_SCRAPY_REDIS_MODULE: Final = "scrapy_redis."


def _named_classes(value: JsonValue) -> Iterator[str]:
    """The dotted paths a setting names: its string value, or its keys (ITEM_PIPELINES)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        yield from value
    elif isinstance(value, list):
        yield from (entry for entry in value if isinstance(entry, str))


def _without_scrapy_redis(settings: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Every scrapy-redis setting or class in ``settings``, each with what replaces it."""
    found: list[tuple[Where, str]] = []
    for name, value in settings.items():
        if name in _SCRAPY_REDIS_SETTINGS:
            found.append(((name,), f"must not be set: {_SCRAPY_REDIS_SETTINGS[name]}"))
            continue
        named = [path for path in _named_classes(value) if path.startswith(_SCRAPY_REDIS_MODULE)]
        if named:
            found.append(
                (
                    (name,),
                    f"must not name scrapy-redis (got {show(named[0])}): its classes use a"
                    " Redis of their own beside the frontier, which schedules, dedups and counts"
                    " the job (items go to spec.output)",
                )
            )
    if found:
        raise problems(found)
    return settings


_ScrapyEntries = Field(json_schema_extra={"maxProperties": _MAX_SCRAPY_ENTRIES})


class ScrapySpec(Section):
    """A spider of a Scrapy project, run by crawlfleet's runtime over the job's frontier."""

    spider: Annotated[str, SPIDER_NAME]
    """The name of a spider of the project (as scrapy crawl NAME takes it; scrapy list shows
    them)."""
    settings_module: Annotated[str, PYTHON_MODULE] | None = None
    """The project's settings module, such as shop.settings. Unset: found as scrapy crawl finds
    it, from SCRAPY_SETTINGS_MODULE, else the scrapy.cfg of the working directory."""
    # RUF012 below: pydantic copies a default per instance; ruff sees a model's base only in its
    # own file, and Section is in base.py.
    settings: Annotated[
        dict[str, JsonValue],
        AfterValidator(_scrapy_names),
        AfterValidator(_scrapy_settings),
        AfterValidator(_without_scrapy_redis),
        _ScrapyEntries,
    ] = {}  # noqa: RUF012
    """Scrapy settings over the project's (as scrapy crawl -s gives them), by name, each a JSON
    value, such as DOWNLOAD_TIMEOUT: 20. SCHEDULER and DUPEFILTER_CLASS are the runtime's."""
    args: Annotated[dict[str, str], AfterValidator(_scrapy_names), _ScrapyEntries] = {}  # noqa: RUF012
    """Arguments of the spider (as scrapy crawl -a name=value gives them), strings by name."""


class CrawlerSpec(Section):
    """Which crawler the workers run. Unset: crawlfleet's own."""

    scrapy: ScrapySpec | None = None
    """Run a spider of a Scrapy project instead of crawlfleet's crawler: its callbacks, items
    and pipelines, with the frontier as its scheduler (docs/scrapy.md). Needs crawlfleet[scrapy]
    and the project installed in the worker image."""
