"""Requests through real proxies (spec.proxy, crawler/fetching/proxying.py): tinyproxy with Basic
authentication and microsocks with a SOCKS5 user and password, both on loopback, in front of
the test site. What the site saw is compared with what each proxy logged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.fetch import Fetcher, FetchSettings
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.crawljob.proxy import proxy_plan
from crawlfleet.proxies import PROXY_ENV
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.proxies import HttpProxy, SocksProxy, free_port

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    with TestSite(SiteConfig(hosts=3, pages_per_host=6, hostile=False)) as running:
        yield running


def fetcher_of(listed: str, observed: list[tuple[str, str]], **proxy: object) -> Fetcher:
    spec = CrawlJobSpec.model_validate(
        {
            "seeds": ["http://127.0.0.2/"],
            "scope": {"allowPrivateNetworks": True},
            "retry": {"requestAttempts": 3, "backoffBaseSeconds": 0.01},
            "proxy": {"secretRef": {"name": "proxies"}, "allowPrivate": True, **proxy},
        }
    )
    assert spec.proxy is not None
    plan = proxy_plan(spec.proxy, {PROXY_ENV: listed})
    return Fetcher(
        FetchSettings.from_spec(spec),
        proxies=plan,
        observe_proxies=lambda label, event: observed.append((label, event)),
    )


def page_urls(site: TestSite) -> list[str]:
    return sorted(site.expected_pages())


async def test_every_request_goes_through_the_authenticated_http_proxy(
    site: TestSite, tmp_path: Path
) -> None:
    observed: list[tuple[str, str]] = []
    with HttpProxy(tmp_path) as proxy:
        fetcher = fetcher_of(proxy.url, observed)
        before = len(site.log.all_requests())
        try:
            results = [await fetcher.fetch(url) for url in page_urls(site)]
        finally:
            await fetcher.aclose()
        assert [r.failure for r in results] == [None] * len(results)
        seen = site.log.all_requests()[before:]
        assert len(seen) == len(results)
        assert all(HttpProxy.via_name in (r.via or "") for r in seen)  # each one came through it
        assert sorted(proxy.requests()) == sorted(r.url for r in seen)  # and logged each
    assert observed == [(proxy.label, "ok")] * len(results)


async def test_socks5_with_a_password_carries_the_requests(site: TestSite, tmp_path: Path) -> None:
    observed: list[tuple[str, str]] = []
    with SocksProxy(tmp_path) as proxy:
        fetcher = fetcher_of(proxy.url, observed)
        try:
            results = [await fetcher.fetch(url) for url in page_urls(site)[:5]]
        finally:
            await fetcher.aclose()
        assert [r.failure for r in results] == [None] * 5
        hosts = {url.split("/")[2] for url in page_urls(site)[:5]}
        assert set(proxy.connections()) == hosts  # every host reached through it
    assert observed == [(proxy.label, "ok")] * 5


async def test_a_proxy_asking_for_credentials_it_was_not_given_is_a_proxy_error(
    site: TestSite, tmp_path: Path
) -> None:
    observed: list[tuple[str, str]] = []
    with HttpProxy(tmp_path) as proxy:
        fetcher = fetcher_of(proxy.label, observed, maxFailures=10)  # no user, no password
        before = len(site.log.all_requests())
        try:
            result = await fetcher.fetch(site.seeds[0])
        finally:
            await fetcher.aclose()
        assert len(site.log.all_requests()) == before  # nothing got past the proxy
    assert result.failure == FailureClass.PROXY_ERROR
    assert "407" in result.message
    assert observed == [(proxy.label, "failed")] * 3  # each attempt


async def test_a_dead_proxy_is_taken_out_and_its_hosts_move_to_a_live_one(
    site: TestSite, tmp_path: Path
) -> None:
    observed: list[tuple[str, str]] = []
    dead = f"http://crawler:x@127.0.0.1:{free_port()}"
    with HttpProxy(tmp_path) as live:
        fetcher = fetcher_of(f"{dead}\n{live.url}", observed, maxFailures=1, ejectFor="10m")
        before = len(site.log.all_requests())
        try:
            results = [await fetcher.fetch(url) for url in page_urls(site)]
        finally:
            await fetcher.aclose()
        assert [r.failure for r in results] == [None] * len(results)
        dead_label = dead.replace("crawler:x@", "")
        # Whichever hosts chose the dead proxy first failed over once, then it was out.
        assert observed.count((dead_label, "failed")) <= 1
        assert observed.count((dead_label, "ejected")) == observed.count((dead_label, "failed"))
        seen = site.log.all_requests()[before:]
        assert len(seen) == len(results)
        assert all(HttpProxy.via_name in (r.via or "") for r in seen)


async def test_a_proxy_on_a_private_address_needs_allow_private(
    site: TestSite, tmp_path: Path
) -> None:
    observed: list[tuple[str, str]] = []
    with HttpProxy(tmp_path) as proxy:
        fetcher = fetcher_of(proxy.url, observed, allowPrivate=False, maxFailures=10)
        before = len(site.log.all_requests())
        try:
            result = await fetcher.fetch(site.seeds[0])
        finally:
            await fetcher.aclose()
        assert result.failure == FailureClass.PROXY_ERROR
        assert "proxy.allowPrivate" in result.message
        assert proxy.requests() == []
        assert len(site.log.all_requests()) == before
