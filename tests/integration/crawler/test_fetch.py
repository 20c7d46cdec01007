"""The request layer against the real test site (and a raw hostile server) over loopback.

Outcomes are checked from both ends: the ``FetchResult`` and the site's own request log, which
is how "retried exactly twice", "waited for Retry-After" and "never contacted that host" are
proven rather than assumed.

No test may send traffic outside loopback, not even by mistake: ``connections`` (autouse)
wraps the event loop's connect calls, records every destination and fails any that is not a
loopback address, and every guard here resolves names through ``FakeDNS`` instead of the
system resolver.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import ipaddress
import itertools
import json
import random
import socket
import subprocess
import sys
import time
import zlib
from asyncio.base_events import BaseEventLoop
from asyncio.selector_events import BaseSelectorEventLoop
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import brotli
import pytest

from crawlfleet.crawler.fetching.bodies import ACCEPT_ENCODING, ERROR_BODY_MAX_BYTES
from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.fetch import ACCEPT, Fetcher, FetchResult, FetchSettings
from crawlfleet.crawler.fetching.safety import AddressGuard
from crawlfleet.crawljob import CrawlJobSpec, FetchSpec, RetrySpec
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.specs import job_spec, merged

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

USER_AGENT = "crawlfleet-test/1.0 (+fetch)"
#: A fast job: tiny backoff, but room for the site's Retry-After of 1 s.
FAST_JOB: dict[str, Any] = {
    "userAgent": USER_AGENT,
    "fetch": {"connectTimeoutSeconds": 2.0, "readTimeoutSeconds": 2.0, "totalTimeoutSeconds": 15.0},
    "retry": {"backoffBaseSeconds": 0.01, "backoffFactor": 2.0, "backoffMaxSeconds": 2.0},
    "scope": {"allowPrivateNetworks": True},
}
FAST = FetchSettings.from_spec(job_spec(FAST_JOB))


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def connections(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every (address, port) the test's code connected to; non-loopback fails the test."""
    seen: list[tuple[str, int]] = []

    def check(host: str, port: int) -> None:
        seen.append((host, port))
        if not ipaddress.ip_address(host).is_loopback:
            raise AssertionError(f"a test tried to connect outside loopback: {host}:{port}")

    sock_connect = BaseSelectorEventLoop.sock_connect
    create_connection = BaseEventLoop.create_connection

    async def checked_sock_connect(self: Any, sock: socket.socket, address: Any) -> None:
        check(address[0], address[1])
        await sock_connect(self, sock, address)

    async def checked_create_connection(
        self: Any, protocol_factory: Any, host: Any = None, port: Any = None, **kwargs: Any
    ) -> Any:
        if host is not None:
            check(host, port)
        return await create_connection(self, protocol_factory, host, port, **kwargs)

    monkeypatch.setattr(BaseSelectorEventLoop, "sock_connect", checked_sock_connect)
    monkeypatch.setattr(BaseEventLoop, "create_connection", checked_create_connection)
    return seen


class FakeDNS:
    """A resolver for ``AddressGuard`` that knows a few names and never asks real DNS.

    ``answers[name]`` is a list of answers handed out in turn (the last one repeats), so a
    test can make a name change its address between two lookups (DNS rebinding).
    """

    def __init__(self) -> None:
        self.answers: dict[str, list[list[str]]] = {}
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        answers = self.answers.get(host)
        if not answers:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is unknown to the test resolver")
        return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
def dns() -> FakeDNS:
    return FakeDNS()


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    with TestSite(SiteConfig(hosts=2)) as test_site:
        yield test_site


@pytest.fixture
def fresh_site(site: TestSite) -> TestSite:
    """The module's site with an empty log and fresh flaky/ratelimit counters."""
    site.reset()
    return site


MakeFetcher = Callable[..., Fetcher]


@pytest.fixture
async def make_fetcher(dns: FakeDNS) -> AsyncIterator[MakeFetcher]:
    """Build Fetchers from FAST_JOB with spec sections changed; every guard resolves through
    ``dns``."""
    made: list[Fetcher] = []

    def make(*, guard: AddressGuard | None = None, **changes: Any) -> Fetcher:
        settings = FetchSettings.from_spec(job_spec(merged(FAST_JOB, changes)))
        if guard is None:
            guard = AddressGuard(allow_private=settings.allow_private_networks, resolver=dns)
        fetcher = Fetcher(settings, guard=guard, rng=random.Random(7))
        made.append(fetcher)
        return fetcher

    yield make
    for fetcher in made:
        await fetcher.aclose()


@pytest.fixture
def fetcher(make_fetcher: MakeFetcher) -> Fetcher:
    return make_fetcher()


class RawServer:
    """A loopback TCP server answering each path with fixed bytes: hostile responses on demand.

    The test site speaks correct HTTP; this one can send anything (garbage, truncated bodies,
    odd encodings, redirects anywhere). Each answer is written and the connection closed.
    """

    def __init__(self) -> None:
        self.routes: dict[str, bytes] = {}
        self.paths: list[str] = []
        self.heads: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            self.paths.append(path)
            self.heads.append(head)
            writer.write(self.routes.get(path, response(404, body=b"not here")))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()


def response(status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    """One HTTP/1.1 response with Content-Length and Connection: close unless overridden."""
    fields = {"Content-Length": str(len(body)), "Connection": "close", **(headers or {})}
    head = f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    return head.encode("latin-1") + b"\r\n" + body


@pytest.fixture
async def raw() -> AsyncIterator[RawServer]:
    server = RawServer()
    await server.start()
    yield server
    await server.stop()


PAGE = b"<!DOCTYPE html><html><head><title>ok</title></head><body>" + b"x" * 200 + b"</body></html>"
HTML = {"Content-Type": "text/html; charset=utf-8"}


def requests_to(site: TestSite, path: str) -> list[float]:
    """Arrival times (monotonic) of the site's requests for ``path`` on host 0."""
    return [r.start for r in site.requests_for(0) if r.path == path]


# -- the normal cases -------------------------------------------------------------------------


async def test_normal_page(fetcher: Fetcher, fresh_site: TestSite) -> None:
    url = fresh_site.url(0, "/")
    before, started = time.time(), time.perf_counter()
    result = await fetcher.fetch(url)
    took = time.perf_counter() - started

    assert result.failure is None, result.message
    assert (result.status, result.url, result.final_url) == (200, url, url)
    assert result.content_type is not None
    assert result.content_type.startswith("text/html")
    assert result.body.startswith(b"<!DOCTYPE html>")
    assert len(result.body) > 512
    assert result.headers["content-type"] == result.content_type  # lower-case names
    assert (result.attempts, result.redirects, result.retry_after_seconds) == (1, [], None)
    assert result.wire_bytes == len(result.body)
    assert before <= result.fetched_at <= time.time()
    assert 0 < result.elapsed_seconds <= took  # the exchange's own time, within the call's
    [record] = fresh_site.requests_for(0)
    assert (record.method, record.path, record.user_agent) == ("GET", "/", USER_AGENT)


async def test_the_request_is_a_bodiless_get_with_our_headers(
    fetcher: Fetcher, raw: RawServer
) -> None:
    raw.routes["/p?q=1"] = response(200, HTML, PAGE)
    result = await fetcher.fetch(raw.url("/p?q=1"))
    assert result.failure is None, result.message
    request_line, *lines = raw.heads[0].decode("latin-1").strip().split("\r\n")
    fields = {name.lower(): value for name, _, value in (x.partition(": ") for x in lines)}
    assert request_line == "GET /p?q=1 HTTP/1.1"
    assert fields["host"] == f"127.0.0.1:{raw.port}"
    assert fields["user-agent"] == fetcher.settings.user_agent
    assert fields["accept"] == ACCEPT
    assert fields["accept-encoding"] == ACCEPT_ENCODING
    assert "content-length" not in fields
    assert "transfer-encoding" not in fields


async def test_response_headers_are_lower_case_with_repeats_joined(
    fetcher: Fetcher, raw: RawServer
) -> None:
    head = response(200, {**HTML, "X-Repeated": "one"}, PAGE)
    raw.routes["/h"] = head.replace(
        b"X-Repeated: one\r\n", b"X-Repeated: one\r\nx-repeated: two\r\n"
    )
    result = await fetcher.fetch(raw.url("/h"))
    assert result.failure is None, result.message
    assert result.headers["x-repeated"] == "one, two"
    assert result.headers["content-type"] == HTML["Content-Type"]
    assert all(name == name.lower() for name in result.headers)


async def test_gzip_body_is_decoded(fetcher: Fetcher, raw: RawServer) -> None:
    raw.routes["/gz"] = response(200, {**HTML, "Content-Encoding": "gzip"}, gzip.compress(PAGE))
    result = await fetcher.fetch(raw.url("/gz"))
    assert result.failure is None, result.message
    assert result.body == PAGE
    assert result.wire_bytes == len(gzip.compress(PAGE))
    assert ACCEPT_ENCODING == "gzip, deflate, br, zstd"  # each one decoded with a bound


@pytest.mark.parametrize(
    ("coding", "encoded"),
    [
        ("deflate", zlib.compress(PAGE)),
        ("deflate", zlib.compress(PAGE, wbits=-15)),  # raw deflate, as some servers send
        ("gzip", gzip.compress(PAGE[:100]) + gzip.compress(PAGE[100:])),  # two members
        ("gzip, gzip", gzip.compress(gzip.compress(PAGE))),
        ("identity", PAGE),
        ("br", brotli.compress(PAGE)),
        ("zstd", zstd.compress(PAGE)),
        ("zstd", zstd.compress(PAGE[:100]) + zstd.compress(PAGE[100:])),  # two frames
        ("br, gzip", gzip.compress(brotli.compress(PAGE))),
    ],
    ids=[
        "zlib",
        "raw-deflate",
        "gzip-members",
        "gzip-twice",
        "identity",
        "br",
        "zstd",
        "zstd-frames",
        "br-then-gzip",
    ],
)
async def test_other_encodings(
    fetcher: Fetcher, raw: RawServer, coding: str, encoded: bytes
) -> None:
    raw.routes["/enc"] = response(200, {**HTML, "Content-Encoding": coding}, encoded)
    result = await fetcher.fetch(raw.url("/enc"))
    assert result.failure is None, result.message
    assert result.body == PAGE


async def test_pdf_is_a_success_with_its_content_type(
    fetcher: Fetcher, fresh_site: TestSite
) -> None:
    result = await fetcher.fetch(fresh_site.url(0, "/file.pdf"))
    assert result.failure is None, result.message
    assert result.content_type == "application/pdf"
    assert result.body.startswith(b"%PDF-")


async def test_a_type_wanted_as_a_file_stops_after_the_headers(
    fetcher: Fetcher, fresh_site: TestSite
) -> None:
    seen: list[str | None] = []

    def wants(content_type: str | None) -> bool:
        seen.append(content_type)
        return content_type == "application/pdf"

    result = await fetcher.fetch(fresh_site.url(0, "/file.pdf"), stop_for_type=wants)
    assert (result.failure, result.status, result.body) == (None, 200, b"")
    assert result.file_type == "application/pdf" == result.content_type
    assert result.wire_bytes == 0  # not a byte of the body was read
    page = await fetcher.fetch(fresh_site.url(0, "/"), stop_for_type=wants)
    assert page.failure is None, page.message
    assert page.file_type is None
    assert page.body.startswith(b"<!DOCTYPE html>")
    assert seen == ["application/pdf", page.content_type]


async def test_only_a_2xx_is_offered_as_a_file(fetcher: Fetcher, fresh_site: TestSite) -> None:
    result = await fetcher.fetch(fresh_site.url(0, "/missing"), stop_for_type=lambda _: True)
    assert (result.status, result.failure, result.file_type) == (404, FailureClass.HTTP_404, None)


async def test_empty_html_is_a_soft_block(fetcher: Fetcher, fresh_site: TestSite) -> None:
    result = await fetcher.fetch(fresh_site.url(0, "/empty"))
    assert (result.status, result.failure, result.body, result.attempts) == (
        200,
        FailureClass.SOFT_BLOCK,
        b"",
        1,  # a soft block is the task layer's call (slow retry), not retried here
    )


# -- permanent failures and retries -----------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "failure"), [(404, FailureClass.HTTP_404), (410, FailureClass.HTTP_410)]
)
async def test_permanent_status_is_not_retried(
    fetcher: Fetcher, fresh_site: TestSite, code: int, failure: FailureClass
) -> None:
    url = fresh_site.url(0, f"/status/{code}")
    result = await fetcher.fetch(url)
    assert (result.status, result.failure, result.attempts, result.body) == (
        code,
        failure,
        1,
        b"",
    )
    assert str(code) in result.message
    assert fresh_site.count(url) == 1


async def test_flaky_page_heals_within_request_attempts(
    fetcher: Fetcher, fresh_site: TestSite
) -> None:
    url = fresh_site.url(0, "/flaky/0")
    result = await fetcher.fetch(url)
    assert result.failure is None, result.message
    assert (result.status, result.attempts) == (200, 3)
    assert fresh_site.count(url) == 3  # two 500s, then the page
    assert all(r.user_agent == USER_AGENT for r in fresh_site.requests_for(0))


async def test_retries_stop_at_request_attempts(
    make_fetcher: MakeFetcher, fresh_site: TestSite
) -> None:
    url = fresh_site.url(0, "/flaky/1")
    result = await make_fetcher(retry={"requestAttempts": 2}).fetch(url)
    assert (result.status, result.failure, result.attempts) == (500, FailureClass.HTTP_5XX, 2)
    assert fresh_site.count(url) == 2


async def test_ratelimited_waits_for_retry_after(fetcher: Fetcher, fresh_site: TestSite) -> None:
    result = await fetcher.fetch(fresh_site.url(0, "/ratelimited"))
    assert result.failure is None, result.message
    assert (result.status, result.attempts) == (200, 3)
    arrivals = requests_to(fresh_site, "/ratelimited")
    assert len(arrivals) == 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert min(gaps) >= 1.0, gaps  # Retry-After: 1 beats the 10 ms backoff


async def test_min_retry_delay_paces_retries(
    make_fetcher: MakeFetcher, fresh_site: TestSite
) -> None:
    result = await make_fetcher().fetch(fresh_site.url(0, "/flaky/0"), min_retry_delay_seconds=0.3)
    assert result.failure is None, result.message
    arrivals = requests_to(fresh_site, "/flaky/0")
    assert min(b - a for a, b in itertools.pairwise(arrivals)) >= 0.3


async def test_429_asking_for_a_long_pause_goes_back_at_once(
    make_fetcher: MakeFetcher, fresh_site: TestSite
) -> None:
    # Retry-After: 1 is longer than backoff_max_seconds here: the frontier must decide.
    result = await make_fetcher(retry={"backoffMaxSeconds": 0.5}).fetch(
        fresh_site.url(0, "/ratelimited")
    )
    assert (result.status, result.failure, result.attempts) == (429, FailureClass.HTTP_429, 1)
    assert result.retry_after_seconds == 1.0
    assert len(requests_to(fresh_site, "/ratelimited")) == 1


async def test_429_without_retry_after_goes_back_at_once(fetcher: Fetcher, raw: RawServer) -> None:
    raw.routes["/busy"] = response(429, HTML, b"slow down")
    result = await fetcher.fetch(raw.url("/busy"))
    assert (result.failure, result.attempts, result.retry_after_seconds) == (
        FailureClass.HTTP_429,
        1,
        None,
    )


async def test_503_with_a_long_retry_after_goes_back_at_once(
    fetcher: Fetcher, raw: RawServer
) -> None:
    raw.routes["/down"] = response(503, {**HTML, "Retry-After": "3600"}, b"maintenance")
    result = await fetcher.fetch(raw.url("/down"))
    assert (result.failure, result.attempts, result.retry_after_seconds) == (
        FailureClass.HTTP_5XX,
        1,
        3600.0,
    )
    assert raw.paths == ["/down"]


async def test_a_retry_that_would_overrun_the_deadline_is_not_made(
    make_fetcher: MakeFetcher, fresh_site: TestSite
) -> None:
    started = time.monotonic()
    quick = {"connectTimeoutSeconds": 0.5, "readTimeoutSeconds": 0.5, "totalTimeoutSeconds": 0.5}
    result = await make_fetcher(fetch=quick).fetch(fresh_site.url(0, "/ratelimited"))
    assert (result.failure, result.attempts) == (FailureClass.HTTP_429, 1)
    assert "deadline" in result.message
    assert time.monotonic() - started < 0.4


# -- redirects --------------------------------------------------------------------------------


async def test_redirect_chain_is_followed(fetcher: Fetcher, fresh_site: TestSite) -> None:
    result = await fetcher.fetch(fresh_site.url(0, "/redirect/chain/3"))
    assert result.failure is None, result.message
    assert result.status == 200
    assert result.redirects == [fresh_site.url(0, f"/redirect/chain/{n}") for n in (2, 1, 0)]
    assert result.final_url == fresh_site.url(0, "/redirect/chain/0")
    assert result.attempts == 4  # every request counts, redirect hops included


async def test_redirect_loop_is_detected(fetcher: Fetcher, fresh_site: TestSite) -> None:
    result = await fetcher.fetch(fresh_site.url(0, "/redirect/loop/a"))
    assert result.failure is FailureClass.REDIRECT_LOOP  # seen at the second hop already
    assert result.redirects == [fresh_site.url(0, "/redirect/loop/b")]
    assert len(fresh_site.requests_for(0)) == 2


async def test_too_many_redirects(make_fetcher: MakeFetcher, fresh_site: TestSite) -> None:
    result = await make_fetcher(fetch={"maxRedirects": 2}).fetch(
        fresh_site.url(0, "/redirect/chain/3")
    )
    assert (result.failure, result.status, len(result.redirects)) == (
        FailureClass.TOO_MANY_REDIRECTS,
        302,
        2,
    )
    assert [r.path for r in fresh_site.requests_for(0)] == [
        "/redirect/chain/3",
        "/redirect/chain/2",
        "/redirect/chain/1",
    ]


async def test_redirect_out_of_scope_is_refused(
    fetcher: Fetcher, fresh_site: TestSite, raw: RawServer
) -> None:
    away = fresh_site.out_of_scope_url("/")
    raw.routes["/away"] = response(302, {"Location": away})

    def in_scope(url: str) -> bool:
        return urlsplit(url).netloc != fresh_site.out_of_scope_host

    result = await fetcher.fetch(raw.url("/away"), allow_url=in_scope)
    assert (result.failure, result.status, result.redirects) == (
        FailureClass.OUT_OF_SCOPE,
        302,
        [],
    )
    assert away in result.message
    assert fresh_site.requests_for(fresh_site.config.hosts) == []

    # The control: without the scope check the same redirect is followed to that host.
    followed = await fetcher.fetch(raw.url("/away"))
    assert (followed.failure, followed.final_url) == (None, away)
    assert len(fresh_site.requests_for(fresh_site.config.hosts)) == 1


@pytest.mark.parametrize(
    ("location", "failure"),
    [
        ("ftp://127.0.0.1/file", FailureClass.BAD_SCHEME),
        ("javascript:alert(1)", FailureClass.BAD_SCHEME),
        ("http://[::1/", FailureClass.INVALID_URL),
        ("http://127.0.0.1:99999/", FailureClass.INVALID_URL),
        ("http://no-such-host.test/", FailureClass.DNS_ERROR),
        ("http://exa mple.test/", FailureClass.DNS_ERROR),
    ],
)
async def test_unusable_redirect_targets_fail_cleanly(
    fetcher: Fetcher, raw: RawServer, location: str, failure: FailureClass
) -> None:
    raw.routes["/odd"] = response(301, {"Location": location})
    result = await fetcher.fetch(raw.url("/odd"))
    assert result.failure is failure, result.message
    assert raw.paths == ["/odd"]


async def test_redirect_without_location_is_a_protocol_error(
    fetcher: Fetcher, raw: RawServer
) -> None:
    raw.routes["/nowhere"] = response(302)
    result = await fetcher.fetch(raw.url("/nowhere"))
    assert (result.failure, result.status) == (FailureClass.PROTOCOL_ERROR, 302)


# -- hostile bodies and servers ---------------------------------------------------------------


async def test_big_body_is_cut_off(fetcher: Fetcher, fresh_site: TestSite) -> None:
    result = await fetcher.fetch(fresh_site.url(0, "/big"))
    assert (result.status, result.failure, result.body) == (
        200,
        FailureClass.BODY_TOO_LARGE,
        b"",
    )
    assert FAST.max_body_bytes < result.wire_bytes <= FAST.max_body_bytes + 64 * 1024
    assert result.elapsed_seconds < 2


async def test_declared_content_length_is_refused_before_reading(
    make_fetcher: MakeFetcher, fresh_site: TestSite
) -> None:
    result = await make_fetcher(fetch={"maxBodyBytes": 100}).fetch(fresh_site.url(0, "/file.pdf"))
    assert (result.failure, result.wire_bytes) == (FailureClass.BODY_TOO_LARGE, 0)
    assert "Content-Length" in result.message


async def test_error_bodies_are_read_only_a_little(fetcher: Fetcher, raw: RawServer) -> None:
    raw.routes["/huge-404"] = response(404, HTML, b"x" * (1024 * 1024))
    result = await fetcher.fetch(raw.url("/huge-404"))
    assert (result.failure, result.body) == (FailureClass.HTTP_404, b"")
    assert ERROR_BODY_MAX_BYTES <= result.wire_bytes < ERROR_BODY_MAX_BYTES + 64 * 1024


_BOMB_PROBE = """
import asyncio, json, sys
from crawlfleet.crawler.fetching.fetch import Fetcher, FetchSettings
from crawlfleet.crawljob import CrawlJobSpec

def high_water_kib() -> int:
    # VmHWM, not ru_maxrss: exec folds the forking pytest's RSS into ru_maxrss, which would
    # hide any growth below it.
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))

async def main(bomb: str, page: str) -> None:
    spec = CrawlJobSpec.from_mapping(
        {"seeds": [page], "userAgent": "bomb-probe", "scope": {"allowPrivateNetworks": True}}
    )
    fetcher = Fetcher(FetchSettings.from_spec(spec))
    warm = await fetcher.fetch(page)  # imports, pool and buffers settle before measuring
    before = high_water_kib()
    result = await fetcher.fetch(bomb)
    after = high_water_kib()
    await fetcher.aclose()
    print(json.dumps({"warm": warm.failure, "failure": result.failure,
                      "growth_kib": after - before, "elapsed": result.elapsed_seconds,
                      "wire_bytes": result.wire_bytes, "attempts": result.attempts}))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.parametrize("path", ["/bomb", "/bomb/deflate", "/bomb/br", "/bomb/zstd"])
def test_bombs_fail_fast_with_bounded_memory(fresh_site: TestSite, path: str) -> None:
    # In a child process: VmHWM is a high-water mark, only meaningful in a fresh process.
    probe = subprocess.run(
        [sys.executable, "-c", _BOMB_PROBE, fresh_site.url(0, path), fresh_site.url(0, "/")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    outcome = json.loads(probe.stdout.strip().splitlines()[-1])
    assert outcome["warm"] is None
    assert outcome["failure"] == FailureClass.DECOMPRESSION_BOMB
    assert outcome["attempts"] == 1
    assert outcome["growth_kib"] < 200 * 1024, outcome  # default cap: 50 MiB decoded
    assert outcome["wire_bytes"] < 2 * 1024 * 1024  # stopped long before a deflate body ends
    assert outcome["elapsed"] < 5


async def test_unsupported_encoding_is_a_protocol_error(fetcher: Fetcher, raw: RawServer) -> None:
    raw.routes["/lzw"] = response(200, {**HTML, "Content-Encoding": "compress"}, b"\x1f\x9d")
    result = await fetcher.fetch(raw.url("/lzw"))
    assert (result.failure, result.body) == (FailureClass.PROTOCOL_ERROR, b"")
    assert "compress" in result.message


@pytest.mark.parametrize(
    "answer",
    [
        response(200, {"X-Long": "a" * 20_000}, PAGE),  # one field past 16 KiB
        response(302, {"Location": "/" + "a" * 100_000}, b""),  # a 100k-character Location
        response(200, {f"X-Many-{i}": "a" * 8192 for i in range(128)}, PAGE),  # 128 of 8 KiB
    ],
    ids=["long-field", "long-location", "128-headers-of-8-kib"],
)
async def test_oversized_response_heads_are_refused_once(
    fetcher: Fetcher, raw: RawServer, answer: bytes
) -> None:
    raw.routes["/head"] = answer
    result = await fetcher.fetch(raw.url("/head"))
    assert result.failure is FailureClass.HEADERS_TOO_LARGE, result.message
    assert result.attempts == 1 == len(raw.paths)  # the same head again would not help


@pytest.mark.parametrize(
    "answer",
    [
        b"",  # hang up without a word
        b"HELLO WORLD\r\n\r\n",  # not HTTP
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",  # truncated body
        response(200, {**HTML, "Content-Encoding": "gzip"}, b"\x1f\x8b\x08\x00broken" * 20),
        response(200, {**HTML, "Content-Encoding": "br"}, b"\xff\xff\xff broken" * 20),
        response(200, {**HTML, "Content-Encoding": "zstd"}, b"\x28\xb5\x2f\xfd broken" * 20),
    ],
    ids=["hang-up", "garbage", "truncated", "corrupt-gzip", "corrupt-br", "corrupt-zstd"],
)
async def test_broken_responses_are_protocol_errors_and_retried(
    fetcher: Fetcher, raw: RawServer, answer: bytes
) -> None:
    raw.routes["/broken"] = answer
    result = await fetcher.fetch(raw.url("/broken"))
    assert result.failure is FailureClass.PROTOCOL_ERROR, result.message
    assert result.body == b""
    assert result.attempts == FAST.request_attempts == len(raw.paths)


async def test_connection_refused_is_a_connect_error(make_fetcher: MakeFetcher) -> None:
    with socket.socket() as placeholder:  # a port that nobody listens on
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    result = await make_fetcher().fetch(f"http://127.0.0.1:{port}/")
    assert (result.failure, result.status, result.attempts) == (
        FailureClass.CONNECT_ERROR,
        None,
        FAST.request_attempts,
    )


async def test_hanging_server_times_out(make_fetcher: MakeFetcher, fresh_site: TestSite) -> None:
    started = time.monotonic()
    result = await make_fetcher(
        fetch={"readTimeoutSeconds": 0.5}, retry={"requestAttempts": 1}
    ).fetch(fresh_site.url(0, "/hang"))
    assert (result.failure, result.status, result.attempts) == (FailureClass.TIMEOUT, None, 1)
    assert 0.4 < time.monotonic() - started < 2


async def test_total_deadline_covers_everything(
    make_fetcher: MakeFetcher, fresh_site: TestSite
) -> None:
    # The first request's read timeout (0.5 s) is retried at once; the deadline cuts the retry.
    started = time.monotonic()
    result = await make_fetcher(
        fetch={"connectTimeoutSeconds": 0.5, "readTimeoutSeconds": 0.5, "totalTimeoutSeconds": 0.6}
    ).fetch(fresh_site.url(0, "/hang"))
    assert result.failure is FailureClass.TIMEOUT
    assert result.attempts == 2
    assert "total deadline" in result.message
    assert 0.5 < time.monotonic() - started < 1.5


async def test_a_leases_deadline_ends_the_fetch_before_the_total_timeout(
    make_fetcher: MakeFetcher, fresh_site: TestSite
) -> None:
    # The lease's fetch deadline (counted from its claim) binds when it comes first; one that
    # has passed sends nothing at all: the frontier no longer counts the host slot.
    fetcher = make_fetcher()
    now = asyncio.get_running_loop().time()
    result = await fetcher.fetch(fresh_site.url(0, "/hang"), deadline=now + 0.3)
    assert result.failure is FailureClass.TIMEOUT
    assert "counted from the lease's claim" in result.message
    assert result.elapsed_seconds < 1.0
    late = await fetcher.fetch(fresh_site.url(0, "/"), deadline=now)
    assert late.failure is FailureClass.TIMEOUT
    assert [r.path for r in fresh_site.all_requests()] == ["/hang"]


# -- SSRF -------------------------------------------------------------------------------------


async def test_loopback_is_refused_without_allow_private_networks(
    make_fetcher: MakeFetcher, fresh_site: TestSite, connections: list[tuple[str, int]]
) -> None:
    fetcher = make_fetcher(scope={"allowPrivateNetworks": False})
    for url in (fresh_site.url(0, "/"), fresh_site.url(0, "/redirect/chain/3")):
        result = await fetcher.fetch(url)
        assert (result.failure, result.status, result.attempts) == (
            FailureClass.FORBIDDEN_ADDRESS,
            None,
            0,
        )
    assert fresh_site.all_requests() == []
    assert connections == []


@pytest.mark.parametrize(
    ("url", "allow_private"),
    [
        ("http://10.255.255.1:9/", False),  # private (and not routable anyway)
        ("http://169.254.169.254/latest/meta-data/", False),
        # allowPrivateNetworks opens private ranges, never the metadata endpoints:
        ("http://169.254.169.254/latest/meta-data/", True),
        ("http://[::ffff:169.254.169.254]/", True),
        ("http://100.100.100.200/", True),
    ],
)
async def test_private_and_metadata_addresses_are_refused_before_connecting(
    make_fetcher: MakeFetcher,
    connections: list[tuple[str, int]],
    dns: FakeDNS,
    url: str,
    allow_private: bool,
) -> None:
    started = time.monotonic()
    result = await make_fetcher(scope={"allowPrivateNetworks": allow_private}).fetch(url)
    assert (result.failure, result.attempts) == (FailureClass.FORBIDDEN_ADDRESS, 0)
    assert time.monotonic() - started < 0.5
    assert connections == []
    assert dns.lookups == []


async def test_redirect_to_metadata_is_refused(
    fetcher: Fetcher, raw: RawServer, connections: list[tuple[str, int]]
) -> None:
    raw.routes["/meta"] = response(302, {"Location": "http://169.254.169.254/latest/meta-data/"})
    result = await fetcher.fetch(raw.url("/meta"))
    assert (result.failure, result.status, result.attempts) == (
        FailureClass.FORBIDDEN_ADDRESS,
        302,
        1,
    )
    assert result.redirects == ["http://169.254.169.254/latest/meta-data/"]
    assert {host for host, _ in connections} == {"127.0.0.1"}


async def test_bad_scheme_is_refused(fetcher: Fetcher, connections: list[tuple[str, int]]) -> None:
    result = await fetcher.fetch("ftp://127.0.0.2/x")
    assert (result.failure, result.attempts) == (FailureClass.BAD_SCHEME, 0)
    assert connections == []


async def test_connections_go_to_the_addresses_the_guard_approved(
    make_fetcher: MakeFetcher, fresh_site: TestSite, dns: FakeDNS
) -> None:
    # Only the guard's resolver knows this name: a connection proves aiohttp asked the guard.
    host, port = fresh_site.hosts[0].split(":")
    dns.answers["site.test"] = [[host]]
    result = await make_fetcher().fetch(f"http://site.test:{port}/")
    assert result.failure is None, result.message
    assert [r.path for r in fresh_site.requests_for(0)] == ["/"]
    assert dns.lookups == ["site.test"]  # the check and the connect shared one cached answer


async def test_dns_rebinding_between_check_and_connect_is_refused(
    make_fetcher: MakeFetcher,
    fresh_site: TestSite,
    dns: FakeDNS,
    connections: list[tuple[str, int]],
) -> None:
    host, port = fresh_site.hosts[0].split(":")
    # Public for the check, the site's loopback address for the connect; no caching between.
    dns.answers["rebind.test"] = [["93.184.216.34"], [host]]
    guard = AddressGuard(allow_private=False, resolver=dns, cache_ttl_seconds=0)
    fetcher = make_fetcher(
        guard=guard, scope={"allowPrivateNetworks": False}, retry={"requestAttempts": 1}
    )
    result = await fetcher.fetch(f"http://rebind.test:{port}/")
    assert result.failure is FailureClass.FORBIDDEN_ADDRESS, result.message
    assert dns.lookups == ["rebind.test", "rebind.test"]
    assert connections == []
    assert fresh_site.all_requests() == []


# -- construction -----------------------------------------------------------------------------


def test_settings_from_spec() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": ["https://example.com/"],
            "userAgent": "ua/1",
            "fetch": {"readTimeoutSeconds": 7, "maxRedirects": 2, "maxBodyBytes": 1000},
            "retry": {"requestAttempts": 4, "backoffBaseSeconds": 0.5},
            "scope": {"allowPrivateNetworks": True},
        }
    )
    settings = FetchSettings.from_spec(spec)
    fetch, retry = FetchSpec(), RetrySpec()  # the model's defaults, for what the job leaves
    assert dataclasses.asdict(settings) == {
        "user_agent": "ua/1",
        "connect_timeout_seconds": fetch.connect_timeout_seconds,
        "read_timeout_seconds": 7.0,
        "total_timeout_seconds": fetch.total_timeout_seconds,
        "max_body_bytes": 1000,
        "max_decompressed_bytes": fetch.max_decompressed_bytes,
        "max_redirects": 2,
        "request_attempts": 4,
        "backoff_base_seconds": 0.5,
        "backoff_factor": retry.backoff_factor,
        "backoff_max_seconds": retry.backoff_max_seconds,
        "allow_private_networks": True,
    }


def test_a_guard_contradicting_the_settings_is_refused() -> None:
    with pytest.raises(ValueError, match="allow_private"):
        Fetcher(FAST, guard=AddressGuard(allow_private=False))


def test_result_type_is_what_the_worker_reads() -> None:
    names = [f.name for f in dataclasses.fields(FetchResult)]
    assert names == [
        "url",
        "final_url",
        "status",
        "content_type",
        "body",
        "headers",
        "redirects",
        "attempts",
        "elapsed_seconds",
        "fetched_at",
        "failure",
        "message",
        "retry_after_seconds",
        "wire_bytes",
        "file_type",
    ]
