"""Loading the test project: the settings' precedence, the components the runtime installs,
and the refusals, each in one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.errors import ConfigError
from crawlfleet.scrapy.project import load_project

PROJECT = Path(__file__).resolve().parents[2] / "scrapy_project"


@pytest.fixture(autouse=True)
def in_the_project(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a worker runs: in the folder of scrapy.cfg, the project importable from it."""
    monkeypatch.chdir(PROJECT)
    monkeypatch.syspath_prepend(str(PROJECT))
    monkeypatch.delenv("SCRAPY_SETTINGS_MODULE", raising=False)
    monkeypatch.delenv("SCRAPY_PROJECT", raising=False)


def spec(**scrapy: object) -> CrawlJobSpec:
    return CrawlJobSpec.from_mapping(
        {"crawler": {"scrapy": {"spider": "shop", **scrapy}}, "fetch": {"totalTimeoutSeconds": 42}}
    )


def test_the_project_then_the_job_then_the_spec_settings_then_the_runtimes() -> None:
    settings, spider = load_project(
        spec(settings={"ROBOTSTXT_OBEY": True, "CONCURRENT_REQUESTS": 3, "SCHEDULER_X": 1})
    )
    assert spider.name == "shop"
    assert settings["SCHEDULER"] == "crawlfleet.scrapy.scheduler.FrontierScheduler"
    assert settings["DUPEFILTER_CLASS"] == "crawlfleet.scrapy.scheduler.InertDupeFilter"
    assert settings.getfloat("DOWNLOAD_TIMEOUT") == 42  # fetch.totalTimeoutSeconds
    # robots.obey is the runtime's to apply (crawlfleet.crawler.worker.gate): Scrapy's own is off.
    assert settings.getbool("ROBOTSTXT_OBEY") is False
    assert settings.getint("CONCURRENT_REQUESTS") == 3  # over the project's 16
    assert settings.getint("RETRY_TIMES") == 1  # the project's own
    assert "siteshop.pipelines.PricePipeline" in settings.getdict("ITEM_PIPELINES")
    assert "crawlfleet.scrapy.middlewares.LeaseSpiderMiddleware" in settings.getdict(
        "SPIDER_MIDDLEWARES"
    )
    assert settings.getbool("REMOTE_CONTROL_ENABLED") is False


def test_a_named_settings_module_is_used_and_one_that_bypasses_the_frontier_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        load_project(spec(settingsModule="siteshop.redis_settings"))
    message = str(refused.value)
    assert message.startswith("spec.crawler.scrapy: the project's settings set SCHEDULER")
    assert "scrapy_redis.scheduler.Scheduler" in message
    assert "\n" not in message


def test_a_spider_it_lacks_is_refused_with_the_ones_it_has() -> None:
    with pytest.raises(ConfigError, match=r"no spider 'books'; its spiders: graph, listing, shop$"):
        load_project(spec(spider="books"))


def test_a_download_handler_that_would_resolve_names_past_the_guard_is_refused() -> None:
    # Scrapy 2.19's own httpx handler resolves names itself: DNS rebinding would get through.
    handler = "scrapy.core.downloader.handlers._httpx.HttpxDownloadHandler"
    with pytest.raises(ConfigError) as refused:
        load_project(spec(settings={"DOWNLOAD_HANDLERS": {"https": handler}}))
    message = str(refused.value)
    assert message.startswith("spec.crawler.scrapy: DOWNLOAD_HANDLERS['https'] = ")
    assert "would connect without the address guard" in message
    assert "\n" not in message


class TimedHandler(HTTP11DownloadHandler):
    """A project's own handler over Twisted's: it connects through the reactor all the same."""


def test_twisteds_handler_a_subclass_and_a_switched_off_scheme_are_accepted() -> None:
    own = f"{__name__}.TimedHandler"
    settings, _ = load_project(spec(settings={"DOWNLOAD_HANDLERS": {"https": own, "http": None}}))
    assert settings.getwithbase("DOWNLOAD_HANDLERS")["https"] == own
    # Environment proxies are off: a proxy resolves names past the guard.
    assert settings.getbool("HTTPPROXY_ENABLED") is False


def test_a_download_handler_that_does_not_import_is_refused_in_one_sentence() -> None:
    with pytest.raises(ConfigError, match=r"DOWNLOAD_HANDLERS\['http'\] = 'nowhere.Handler' does"):
        load_project(spec(settings={"DOWNLOAD_HANDLERS": {"http": "nowhere.Handler"}}))


def test_a_spiders_custom_settings_cannot_bring_an_unguarded_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from siteshop.spiders.graph import GraphSpider  # the project is importable (fixture)

    handler = "scrapy.core.downloader.handlers._httpx.HttpxDownloadHandler"
    monkeypatch.setattr(GraphSpider, "custom_settings", {"DOWNLOAD_HANDLERS": {"http": handler}})
    with pytest.raises(ConfigError, match=r"DOWNLOAD_HANDLERS\['http'\] = .*HttpxDownloadHandler"):
        load_project(spec(spider="graph"))
