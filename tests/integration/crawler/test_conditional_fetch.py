"""Conditional GET in the request layer, against the real test site over loopback (issue 23).

Host 0 of the site sends ETags, host 1 Last-Modified dates, host 2 neither
(crawlfleet/testsite/revisions.py); the site's own request log proves what was asked and what
it answered. A small aiohttp app serves the 304s the site would never send (unasked, with a
Location).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web

from crawlfleet.crawler.fetching.conditional import Conditional
from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.fetch import Fetcher, FetchSettings
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.specs import job_spec

SETTINGS = FetchSettings.from_spec(
    job_spec(
        {
            "fetch": {"connectTimeoutSeconds": 2, "readTimeoutSeconds": 2},
            "retry": {"backoffBaseSeconds": 0.01},
            "scope": {"allowPrivateNetworks": True},
        }
    )
)


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    config = SiteConfig(hosts=3, etag_hosts=(0,), last_modified_hosts=(1,), hostile=False)
    with TestSite(config) as running:
        yield running


@pytest.fixture
async def fetcher() -> AsyncIterator[Fetcher]:
    fetcher = Fetcher(SETTINGS, rng=random.Random(3))
    yield fetcher
    await fetcher.aclose()


@pytest.mark.parametrize(("host", "header"), [(0, "etag"), (1, "last-modified")])
async def test_a_conditional_revisit_of_an_unchanged_page_is_a_304_without_a_body(
    fetcher: Fetcher, site: TestSite, host: int, header: str
) -> None:
    url = site.url(host, "/d1/p1.html")
    first = await fetcher.fetch(url)
    assert (first.status, first.failure, first.not_modified) == (200, None, False)
    validators = Conditional.from_response(first.headers)
    assert validators
    assert (validators.etag or validators.last_modified) == first.headers[header]

    site.reset()
    again = await fetcher.fetch(url, conditional=validators)
    assert again.not_modified, again.message
    assert (again.status, again.failure, again.body, again.wire_bytes) == (304, None, b"", 0)
    assert (again.attempts, again.redirects) == (1, [])
    [record] = site.requests_for(host)
    assert record.status == 304


async def test_a_changed_page_answers_a_conditional_request_with_its_new_body(
    fetcher: Fetcher, site: TestSite
) -> None:
    url = site.url(0, "/d2/p2.html")
    first = await fetcher.fetch(url)
    validators = Conditional.from_response(first.headers)
    assert site.edit_page(url) == 1
    changed = await fetcher.fetch(url, conditional=validators)
    assert (changed.status, changed.failure, changed.not_modified) == (200, None, False)
    assert changed.body != first.body
    assert b"Revision 1" in changed.body
    assert Conditional.from_response(changed.headers).etag != validators.etag


async def test_a_host_without_validators_offers_none(fetcher: Fetcher, site: TestSite) -> None:
    result = await fetcher.fetch(site.url(2, "/d3/p3.html"))
    assert result.status == 200
    assert not Conditional.from_response(result.headers)


@pytest.fixture
async def raw_304() -> AsyncIterator[str]:
    """An origin answering every request 304 with a Location; the base URL."""

    async def handle(request: web.Request) -> web.Response:
        return web.Response(status=304, headers={"Location": "/elsewhere", "ETag": '"v2"'})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_a_304_is_never_followed_and_is_a_failure_only_when_nothing_was_asked(
    fetcher: Fetcher, raw_304: str
) -> None:
    asked = await fetcher.fetch(raw_304 + "/page", conditional=Conditional(etag='"v1"'))
    assert asked.not_modified
    assert asked.redirects == []
    assert asked.final_url == raw_304 + "/page"
    assert Conditional(etag='"v1"').updated_by(asked.headers) == Conditional(etag='"v2"')

    unasked = await fetcher.fetch(raw_304 + "/page")
    assert unasked.failure is FailureClass.PROTOCOL_ERROR
    assert not unasked.not_modified
    assert unasked.redirects == []
