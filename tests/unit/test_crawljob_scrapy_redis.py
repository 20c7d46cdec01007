"""A Scrapy job's settings keep nothing of scrapy-redis: each leftover is named with what
replaces it (crawlfleet/crawljob/scrapy.py, the scrapy-redis section; docs/scrapy.md's table)."""

from __future__ import annotations

from typing import Any

import pytest

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.errors import ConfigError


def scrapy_job(settings: dict[str, Any]) -> CrawlJobSpec:
    return CrawlJobSpec.from_mapping(
        {"crawler": {"scrapy": {"spider": "books", "settings": settings}}}
    )


def problems(settings: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        scrapy_job(settings)
    first, *lines = str(refused.value).split("\n")
    assert first.startswith("invalid CrawlJob spec")
    return [line.strip() for line in lines]


def test_every_scrapy_redis_setting_is_named_with_what_replaces_it_at_once() -> None:
    found = problems(
        {
            "REDIS_URL": "redis://:hunter2@redis.shop:6379/0",
            "SCHEDULER_PERSIST": True,
            "REDIS_START_URLS_KEY": "books:start_urls",
            "SCHEDULER_IDLE_BEFORE_CLOSE": 10,
            "DOWNLOAD_TIMEOUT": 20,
        }
    )

    assert found == [
        "spec.crawler.scrapy.settings.REDIS_URL: must not be set: the frontier's Redis is"
        " spec.redis (url, secretRef or managed), and a password here would sit in the workers'"
        " ConfigMap",
        "spec.crawler.scrapy.settings.SCHEDULER_PERSIST: must not be set: the frontier always"
        " persists, for as long as the job exists",
        "spec.crawler.scrapy.settings.REDIS_START_URLS_KEY: must not be set: start URLs are"
        " spec.seeds, spec.seedsFrom or the spider's start requests, and crawlfleet enqueue"
        " adds URLs to a running job",
        "spec.crawler.scrapy.settings.SCHEDULER_IDLE_BEFORE_CLOSE: must not be set: the frontier"
        " says when the job is complete, and every process closes then",
    ]
    assert not any("hunter2" in line for line in found)  # the value is never echoed


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (
            "ITEM_PIPELINES",
            {"shop.pipelines.Price": 300, "scrapy_redis.pipelines.RedisPipeline": 400},
        ),
        ("STATS_CLASS", "scrapy_redis.stats.RedisStatsCollector"),
        ("SPIDER_MIDDLEWARES", ["scrapy_redis.x.Y"]),
    ],
)
def test_a_setting_naming_a_scrapy_redis_class_is_refused(name: str, value: Any) -> None:
    (line,) = problems({name: value})

    assert line.startswith(f"spec.crawler.scrapy.settings.{name}: must not name scrapy-redis")
    assert "scrapy_redis." in line


def test_the_projects_own_settings_pass_untouched() -> None:
    settings = {
        "DOWNLOAD_TIMEOUT": 20,
        "ITEM_PIPELINES": {"shop.pipelines.Price": 300},
        "FEEDS": {"s3://bucket/%(name)s.jsonl": {"format": "jsonlines"}},
        "USER_AGENT": "shop-bot (scrapy_redis. mentioned in passing)",
        "REDIRECT_ENABLED": True,
    }

    spec = scrapy_job(settings)

    assert spec.scrapy is not None
    assert spec.scrapy.settings == settings
