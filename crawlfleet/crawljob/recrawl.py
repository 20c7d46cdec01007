"""``spec.recrawl``: which URLs are fetched again, how often, and how the interval adapts.

A URL that matches a rule is tracked: fetched again when its interval has passed since the last
fetch, conditionally when the last 200 left validators (DESIGN §10). One that matches none is
fetched once, as ever. Rules are tried in order; a rule names URLs by an RE2 pattern (``match``,
searched in the canonical URL like ``scope.include``) or documents by what they are (``kind``:
feeds and sitemaps, however they were found). A job with rules and no rule of a kind still
revisits that kind, by :data:`KIND_DEFAULTS`: feeds and sitemaps are what a fresh crawl reads
first.

The interval adapts as Nutch's AdaptiveFetchSchedule does it: times ``whenUnchanged`` (1.4)
after an unchanged fetch (a 304 counts, as StormCrawler's AdaptiveScheduler counts it), times
``whenChanged`` (0.8) after a changed one, kept within ``[minInterval, maxInterval]``. Both
factors 1 give a fixed interval. Nutch's bounds (1 minute to a year, its
``db.fetch.schedule.adaptive.min_interval``/``max_interval``) are the absolute ones here too,
less a floor of 10 seconds: revisiting a page more often is polling, not crawling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import Field

from crawlfleet.crawljob.base import MaxLength, Range, Rule, Section
from crawlfleet.crawljob.durations import DurationRange, duration_cel, format_duration
from crawlfleet.crawljob.fields import DAY_SECONDS, LIST_FROM_YAML, RULE_PATTERNS, URLPattern
from crawlfleet.patterns import URLPatterns, compile_patterns

__all__ = [
    "DEFAULT_INTERVAL_SECONDS",
    "DEFAULT_MAX_INTERVAL_SECONDS",
    "DEFAULT_MIN_INTERVAL_SECONDS",
    "DEFAULT_WHEN_CHANGED",
    "DEFAULT_WHEN_UNCHANGED",
    "FILE_AGE_SHARE_OF_INTERVAL",
    "KIND_DEFAULTS",
    "MAX_RECRAWL_RULES",
    "Adaptive",
    "Change",
    "DocumentKind",
    "RecrawlRule",
    "RecrawlRules",
    "next_interval",
    "output_file_age_seconds",
    "rule_for",
]

#: What one fetch of a tracked URL found, against the last one: ``new`` (first fetch),
#: ``changed``/``unchanged`` (by the body's digest), ``not_modified`` (a 304), ``gone`` (404/410).
Change = Literal["new", "changed", "unchanged", "not_modified", "gone"]
#: Documents a rule may name by what they are rather than by URL.
DocumentKind = Literal["feed", "sitemap"]

_MINUTE: Final = 60.0
_HOUR: Final = 3600.0

#: A rule's interval, and its bounds, when the rule does not say.
DEFAULT_INTERVAL_SECONDS: Final = _HOUR
DEFAULT_MIN_INTERVAL_SECONDS: Final = _MINUTE
DEFAULT_MAX_INTERVAL_SECONDS: Final = 30.0 * DAY_SECONDS
#: Nutch's factors (1 - dec_rate, 1 + inc_rate of db.fetch.schedule.adaptive).
DEFAULT_WHEN_CHANGED: Final = 0.8
DEFAULT_WHEN_UNCHANGED: Final = 1.4
#: No interval or bound may leave this range: below it is polling a site, above it a URL is
#: in effect never fetched again (and timers and Redis scores stay far from overflowing).
_FLOOR_SECONDS: Final = 10.0
_CEILING_SECONDS: Final = 365.0 * DAY_SECONDS
_WHEN_UNCHANGED_MAX: Final = 10.0
#: Rules per job: each is tried in order on every tracked URL's completion.
MAX_RECRAWL_RULES: Final = 64

_Interval = Annotated[float, DurationRange(ge=_FLOOR_SECONDS, le=_CEILING_SECONDS)]


def _default(seconds: float) -> Any:
    """A duration field's default, written as the YAML would write it (the CRD's default and
    ``kubectl explain`` show it so) and validated into seconds like any value."""
    return Field(default=format_duration(seconds), validate_default=True)


class Adaptive(Section):
    """How a URL's interval changes after each fetch; both factors 1 keep it fixed."""

    when_changed: Annotated[float, Range(gt=0, le=1)] = DEFAULT_WHEN_CHANGED
    """The interval is multiplied by this after a fetch that found the page changed (or new
    again): below 1, so a page that changes is fetched more often. Nutch's 0.8."""
    when_unchanged: Annotated[float, Range(ge=1, le=_WHEN_UNCHANGED_MAX)] = DEFAULT_WHEN_UNCHANGED
    """The interval is multiplied by this after a fetch that found the page unchanged (a 304 Not
    Modified, or the same body): above 1, so a page that does not change is fetched less
    often. Nutch's 1.4."""


_ONE_SELECTOR: Final[Rule[Any]] = Rule(
    field=None,
    message="must set exactly one of match and kind",
    cel="has(self.match) != has(self.kind)",
    holds=lambda rule: (rule.match is None) != (rule.kind is None),
)
_MIN_NOT_OVER_MAX: Final[Rule[Any]] = Rule(
    field="minInterval",
    message="must not be greater than maxInterval",
    cel=duration_cel(
        "duration(self.minInterval) <= duration(self.maxInterval)", ("minInterval", "maxInterval")
    ),
    holds=lambda rule: rule.min_interval <= rule.max_interval,
    shows=("minInterval", "maxInterval"),
)
_INTERVAL_WITHIN_BOUNDS: Final[Rule[Any]] = Rule(
    field="interval",
    message="must be between minInterval and maxInterval",
    cel=duration_cel(
        "duration(self.minInterval) <= duration(self.interval)"
        " && duration(self.interval) <= duration(self.maxInterval)",
        ("interval", "minInterval", "maxInterval"),
    ),
    holds=lambda rule: rule.min_interval <= rule.interval <= rule.max_interval,
    shows=("interval", "minInterval", "maxInterval"),
)


class RecrawlRule(Section):
    """URLs fetched again: those matching ``match``, or documents of ``kind`` (exactly one)."""

    match: URLPattern | None = None
    """A regular expression (RE2 syntax) searched in the canonical URL: the rule applies to the
    URLs it matches, such as /news/ or ^https://www\\.example\\.com/$."""
    kind: DocumentKind | None = None
    """feed (RSS or Atom) or sitemap: the rule applies to documents read as that kind, whatever
    their URL."""
    interval: _Interval = _default(DEFAULT_INTERVAL_SECONDS)
    """Time from one fetch of a URL to the next, at first; it then adapts within minInterval and
    maxInterval. A duration: 90s, 15m, 1h30m, 720h (no days: 24h is one)."""
    min_interval: _Interval = _default(DEFAULT_MIN_INTERVAL_SECONDS)
    """The shortest interval adapting may reach."""
    max_interval: _Interval = _default(DEFAULT_MAX_INTERVAL_SECONDS)
    """The longest interval adapting may reach."""
    adaptive: Adaptive = Adaptive()
    """How the interval changes after each fetch."""

    cross_field_rules: ClassVar[tuple[Rule[Any], ...]] = (
        _ONE_SELECTOR,
        _MIN_NOT_OVER_MAX,
        _INTERVAL_WITHIN_BOUNDS,
    )


RecrawlRules = Annotated[
    tuple[RecrawlRule, ...],
    LIST_FROM_YAML,
    MaxLength(MAX_RECRAWL_RULES),
    RULE_PATTERNS,
]

#: The rule a document of a kind gets when the job has rules but none of that kind: a feed is
#: where news shows first, so it is read often; a sitemap changes more slowly.
KIND_DEFAULTS: Final[Mapping[DocumentKind, RecrawlRule]] = MappingProxyType(
    {
        "feed": RecrawlRule(
            kind="feed", interval=15 * _MINUTE, min_interval=5 * _MINUTE, max_interval=24 * _HOUR
        ),
        "sitemap": RecrawlRule(
            kind="sitemap", interval=_HOUR, min_interval=15 * _MINUTE, max_interval=7 * 24 * _HOUR
        ),
    }
)


#: The share of a job's shortest revisit interval an output file may stay open: a page is
#: acked, and only then scheduled again, once the file holding its record is durable, so a
#: file open for ``maxFileAgeSeconds`` (30 s by default) would put off a 10 s rule's revisits.
FILE_AGE_SHARE_OF_INTERVAL: Final = 0.5


def output_file_age_seconds(rules: Sequence[RecrawlRule], configured: float) -> float:
    """How long a worker keeps an output file open: ``output.maxFileAgeSeconds``, shortened
    for a job whose rules revisit more often than that allows (never under one second, the
    field's own floor). Rules only tighten it: a one-shot job keeps what it asked for."""
    if not rules:
        return configured
    shortest = min(rule.min_interval for rule in rules)
    return max(1.0, min(configured, shortest * FILE_AGE_SHARE_OF_INTERVAL))


def rule_for(
    rules: Sequence[RecrawlRule], url: str, kind: DocumentKind | None
) -> RecrawlRule | None:
    """The rule that decides when ``url`` is fetched again; None: it is fetched once.

    The first rule, in order, whose ``match`` occurs in ``url`` or whose ``kind`` is ``kind``;
    else, for a feed or sitemap of a job with rules, that kind's default. A job without rules
    tracks nothing.
    """
    if not rules:
        return None
    index = _index(tuple(rules))
    matched = index.patterns.matching(url) if index.patterns is not None else []
    by_match = index.match_positions[matched[0]] if matched else len(rules)
    by_kind = index.kind_positions.get(kind, len(rules)) if kind is not None else len(rules)
    first = min(by_match, by_kind)
    if first < len(rules):
        return rules[first]
    return KIND_DEFAULTS[kind] if kind is not None else None


class _Index:
    """A rule list's patterns compiled into one RE2 set, and where each rule sits."""

    def __init__(self, rules: tuple[RecrawlRule, ...]) -> None:
        self.match_positions = [
            position for position, rule in enumerate(rules) if rule.match is not None
        ]
        self.patterns: URLPatterns | None = compile_patterns(
            [rules[position].match or "" for position in self.match_positions]
        )
        self.kind_positions: dict[DocumentKind, int] = {}
        for position, rule in enumerate(rules):
            if rule.kind is not None:
                self.kind_positions.setdefault(rule.kind, position)


@lru_cache(maxsize=64)
def _index(rules: tuple[RecrawlRule, ...]) -> _Index:
    # A worker asks for every tracked URL it completes, always with its job's one rule list.
    return _Index(rules)


def next_interval(rule: RecrawlRule, current_seconds: float | None, change: Change) -> float:
    """Seconds until the next fetch of a URL that ``rule`` governs, after one that found
    ``change``; ``current_seconds`` is the interval it was fetched at (None: its first fetch).

    The first fetch starts at the rule's interval. Then new or changed shrinks it by
    ``whenChanged``; unchanged, not modified and gone grow it by ``whenUnchanged`` (a page that
    is gone is not expected back soon: the frontier forgets it anyway). Kept within the rule's
    bounds, so an interval stored under an older rule is brought into the current one.
    """
    if current_seconds is None:
        interval = rule.interval
    elif change in ("new", "changed"):
        interval = current_seconds * rule.adaptive.when_changed
    else:
        interval = current_seconds * rule.adaptive.when_unchanged
    return min(max(interval, rule.min_interval), rule.max_interval)
