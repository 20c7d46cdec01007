"""``spec.recrawl``'s pure policy (``rule_for``, ``next_interval``) and its durations.

The bad inputs (each refused with its field by ``crawlfleet validate``, the API server or the
operator) are cases of the bad-spec corpus: tests/bad_specs/recrawl-*.yaml.
"""

from __future__ import annotations

import pytest

from crawlfleet.crawljob import CrawlJobSpec, RecrawlRule, next_interval, rule_for
from crawlfleet.crawljob.durations import format_duration, parse_duration
from crawlfleet.crawljob.recrawl import (
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_MAX_INTERVAL_SECONDS,
    DEFAULT_MIN_INTERVAL_SECONDS,
    FILE_AGE_SHARE_OF_INTERVAL,
    KIND_DEFAULTS,
    Adaptive,
    output_file_age_seconds,
)
from crawlfleet.errors import ConfigError

SEED = "https://news.example/"


def rule(**fields: object) -> RecrawlRule:
    return RecrawlRule.model_validate(fields)


# --- durations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("1h30m", 5400),
        ("720h", 720 * 3600),
        ("1.5h", 5400),
        ("2h45m30.5s", 2 * 3600 + 45 * 60 + 30.5),
        ("500ms", 0.5),
        ("1h1h", 7200),  # Go adds repeated units too
        (".5m", 30),
        ("0", 0),
    ],
)
def test_go_durations_parse_to_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1d", "1 h", "-1h", "h", "1", "1.h.5", "1H", "+5m", "0s1"])
def test_what_go_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(3600, "1h"), (5400, "1h30m"), (90, "1m30s"), (720 * 3600, "720h"), (0.25, "250ms"),
     (10.5, "10.5s"), (0, "0s")],
)  # fmt: skip
def test_seconds_format_as_the_shortest_go_duration_and_read_back(
    seconds: float, text: str
) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


def test_a_rule_reads_durations_and_writes_them_back_in_the_users_units() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": [SEED],
            "recrawl": [{"match": "/news/", "interval": "1h30m", "minInterval": "90s"}],
        }
    )
    (only,) = spec.recrawl
    assert (only.interval, only.min_interval, only.max_interval) == (5400, 90, 720 * 3600)
    written = spec.to_mapping()["recrawl"]
    assert written == [
        {
            "match": "/news/",
            "interval": "1h30m",
            "minInterval": "1m30s",
            "maxInterval": "720h",
            "adaptive": {"whenChanged": 0.8, "whenUnchanged": 1.4},
        }
    ]
    # what the workers' ConfigMap carries reads back to the same rules
    assert CrawlJobSpec.from_mapping(spec.to_mapping()) == spec


def test_python_may_give_seconds_where_a_document_must_give_a_duration() -> None:
    assert RecrawlRule(match="/news/", interval=120).interval == 120.0
    with pytest.raises(ConfigError, match=r"spec\.recrawl\[0\]\.interval: must be a duration"):
        CrawlJobSpec.from_mapping({"seeds": [SEED], "recrawl": [{"match": "/", "interval": 120}]})


def test_defaults_are_named_once() -> None:
    default = RecrawlRule(match="/")
    assert default.interval == DEFAULT_INTERVAL_SECONDS == 3600
    assert default.min_interval == DEFAULT_MIN_INTERVAL_SECONDS == 60
    assert default.max_interval == DEFAULT_MAX_INTERVAL_SECONDS == 30 * 86_400
    assert default.adaptive == Adaptive(when_changed=0.8, when_unchanged=1.4)


# --- rule_for ---------------------------------------------------------------------------------


def test_no_rules_track_nothing_not_even_feeds() -> None:
    assert rule_for((), "https://news.example/feed.xml", "feed") is None
    assert rule_for((), "https://news.example/", None) is None


def test_the_first_rule_in_order_that_matches_decides() -> None:
    listing = rule(match=r"^https://news\.example/$", interval="5m", minInterval="1m")
    section = rule(match="/section/", interval="15m")
    anything = rule(match="news", interval="24h")
    rules = (listing, section, anything)

    assert rule_for(rules, "https://news.example/", None) is listing
    assert rule_for(rules, "https://news.example/section/world", None) is section
    assert rule_for(rules, "https://news.example/2026/article", None) is anything
    assert rule_for(rules, "https://other.example/", None) is None  # fetched once


def test_a_kind_rule_applies_to_its_documents_in_its_place_in_the_order() -> None:
    feeds = rule(kind="feed", interval="10m")
    everything = rule(match=".", interval="2h")

    assert rule_for((feeds, everything), "https://news.example/rss", "feed") is feeds
    assert rule_for((everything, feeds), "https://news.example/rss", "feed") is everything
    assert rule_for((feeds, everything), "https://news.example/a", None) is everything
    assert rule_for((feeds,), "https://news.example/a", None) is None
    # a sitemap is no feed: with rules and none of its kind, the sitemap default
    assert (
        rule_for((feeds,), "https://news.example/sitemap.xml", "sitemap")
        is KIND_DEFAULTS["sitemap"]
    )


def test_feeds_and_sitemaps_get_their_defaults_when_a_job_has_rules_but_none_of_their_kind() -> (
    None
):
    articles = (rule(match="/never-matches/"),)
    feed = rule_for(articles, "https://news.example/atom.xml", "feed")
    sitemap = rule_for(articles, "https://news.example/sitemap.xml", "sitemap")

    assert feed is not None
    assert feed.kind == "feed"
    assert (feed.interval, feed.min_interval, feed.max_interval) == (900, 300, 86_400)
    assert sitemap is not None
    assert sitemap.kind == "sitemap"
    assert (sitemap.interval, sitemap.min_interval, sitemap.max_interval) == (3600, 900, 604_800)


def test_match_is_searched_anywhere_as_scope_patterns_are() -> None:
    rules = (rule(match="(?i)/NEWS/"),)
    assert rule_for(rules, "https://a.example/news/1", None) is rules[0]
    assert rule_for(rules, "https://a.example/newsletter", None) is None


# --- next_interval ----------------------------------------------------------------------------

RULE = RecrawlRule(match="/", interval=600, min_interval=60, max_interval=3600)


def test_the_first_visit_starts_at_the_rules_interval() -> None:
    assert next_interval(RULE, None, "new") == 600
    assert next_interval(RULE, None, "unchanged") == 600


@pytest.mark.parametrize("change", ["unchanged", "not_modified"])
def test_the_interval_grows_by_when_unchanged(change: str) -> None:
    assert next_interval(RULE, 600, change) == pytest.approx(840)  # type: ignore[arg-type]


@pytest.mark.parametrize("change", ["changed", "new"])
def test_the_interval_shrinks_by_when_changed(change: str) -> None:
    assert next_interval(RULE, 600, change) == pytest.approx(480)  # type: ignore[arg-type]


def test_a_gone_page_is_asked_for_less_often() -> None:
    assert next_interval(RULE, 600, "gone") == pytest.approx(840)


def test_the_interval_stays_within_the_rules_bounds() -> None:
    interval: float | None = None
    for _ in range(50):
        interval = next_interval(RULE, interval, "unchanged")
    assert interval == 3600
    for _ in range(50):
        interval = next_interval(RULE, interval, "changed")
    assert interval == 60
    # an interval stored under an older, wider rule is brought within this one
    assert next_interval(RULE, 10, "unchanged") == 60
    assert next_interval(RULE, 100_000, "changed") == 3600


def test_factors_of_one_keep_a_fixed_interval() -> None:
    fixed = RULE.model_copy(update={"adaptive": Adaptive(when_changed=1, when_unchanged=1)})
    assert next_interval(fixed, 600, "changed") == 600
    assert next_interval(fixed, 600, "not_modified") == 600


def test_keeps_going_only_with_rules_and_no_schedule() -> None:
    once = CrawlJobSpec.from_mapping({"seeds": [SEED]})
    continuous = CrawlJobSpec.from_mapping({"seeds": [SEED], "recrawl": [{"kind": "feed"}]})
    scheduled = CrawlJobSpec.from_mapping(
        {"seeds": [SEED], "recrawl": [{"kind": "feed"}], "schedule": {"cron": "@hourly"}}
    )
    assert (once.keeps_going, continuous.keeps_going, scheduled.keeps_going) == (
        False,
        True,
        False,
    )


def test_match_patterns_too_large_together_are_refused_for_the_list() -> None:
    # Each alone compiles; in one RE2 set, as rule_for compiles them, they exceed its budget.
    rules = [{"match": f"[a-z]{{1,1000}}x{index}"} for index in range(64)]
    with pytest.raises(ConfigError, match=r"spec\.recrawl: have match patterns that are too large"):
        CrawlJobSpec.from_mapping({"seeds": [SEED], "recrawl": rules})


def test_output_files_of_a_job_with_rules_close_within_half_its_shortest_interval() -> None:
    fast = RecrawlRule(match="/news/", interval=20, min_interval=10, max_interval=60)
    slow = RecrawlRule(match="/about", interval=3600, min_interval=600, max_interval=7200)
    assert output_file_age_seconds((), 30.0) == 30.0  # a one-shot job keeps what it asked
    assert output_file_age_seconds((slow,), 30.0) == 30.0  # rules only tighten it
    assert output_file_age_seconds((slow, fast), 30.0) == 10 * FILE_AGE_SHARE_OF_INTERVAL
    assert output_file_age_seconds((fast,), 2.0) == 2.0
