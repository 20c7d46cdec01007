"""Tests for the loopback test site (crawlfleet/testsite).

The crawler's integration tests trust this site's graph, special paths and request log as
ground truth, so the site itself is checked here with plain stdlib clients (urllib /
http.client, never the crawler's own HTTP stack, so a client bug cannot mask a site bug).
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit
from xml.etree import ElementTree

import pytest

from crawlfleet.crawler.links.sitemaps import MAX_SITEMAP_BYTES
from crawlfleet.testsite import (
    SiteConfig,
    SiteGraph,
    TestSite,
    build_gzip_bomb,
    page_path,
    sitemaps,
)

UA = "crawlfleet-site-test/1.0"
REPO = Path(__file__).resolve().parents[2]
FAKE_NETLOCS = ["127.0.0.2:1001", "127.0.0.3:1002", "127.0.0.4:1003"]
FAKE_OOS = "127.0.0.5:1004"
# Never consult *_proxy environment variables: all traffic must stay on loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ---------------------------------------------------------------------------- helpers


def get(url: str, *, ua: str = UA, timeout: float = 5.0) -> tuple[int, Message, bytes, str]:
    """GET following redirects; returns (status, headers, body, final url) even for 4xx/5xx."""
    req = urllib.request.Request(url, headers={"User-Agent": ua})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read(), resp.url
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers, err.read(), err.url


@contextmanager
def raw(netloc: str, path: str, *, timeout: float = 5.0) -> Iterator[http.client.HTTPResponse]:
    """One request without redirect handling; the connection is closed on exit."""
    host, port = netloc.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path, headers={"User-Agent": UA})
        yield conn.getresponse()
    finally:
        conn.close()


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.base: str | None = None
        self.title = ""
        self.links: list[tuple[str, str]] = []
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        href = a.get("href")
        if tag == "base" and self.base is None and href:
            self.base = href
        elif tag == "a" and href is not None:
            self.links.append((href, a.get("rel") or ""))
        elif tag == "title":
            self._in_title = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data


def parse(url: str, body: bytes) -> tuple[_LinkParser, list[tuple[str, str]]]:
    """Parse a page; links resolved against <base> (if any) with fragments dropped."""
    parser = _LinkParser()
    parser.feed(body.decode("utf-8"))
    base = urljoin(url, parser.base) if parser.base else url
    return parser, [(urldefrag(urljoin(base, href))[0], rel) for href, rel in parser.links]


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite(SiteConfig(crawl_delay_seconds=2.5)) as s:
        yield s


# ---------------------------------------------------------------------------- pages & graph


def test_page_has_title_links_and_real_html(site: TestSite) -> None:
    status, headers, body, _ = get(site.seeds[0])
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert len(body) > 512
    parser, links = parse(site.seeds[0], body)
    assert parser.title == "Site 0 - page 0"
    hrefs = [href for href, _ in parser.links]
    assert len(hrefs) >= site.config.links_per_page
    assert any(h.startswith("mailto:") for h in hrefs)
    assert any(h.startswith("javascript:") for h in hrefs)
    assert len({u for u, _ in links}) < len(links)  # duplicates after resolution
    # Link forms on a <base> page (page 5): absolute, root-relative, relative, fragments.
    _, _, body5, _ = get(site.url(0, page_path(5)))
    parser5, _ = parse(site.url(0, page_path(5)), body5)
    assert parser5.base is not None
    forms = [href for href, _ in parser5.links]
    assert any(h.startswith("http://") for h in forms)
    assert any(h.startswith("/") and not h.startswith("//") for h in forms)
    assert any(h.startswith("../") or h.startswith("./") for h in forms)
    assert any("#" in h and not h.startswith("#") for h in forms)


def test_reference_crawl_matches_expected_pages(site: TestSite) -> None:
    """A stdlib BFS that honours <base> finds exactly expected_pages(), at the same depths."""
    in_scope = set(site.hosts)
    specials = site.specials().all()
    depth = dict.fromkeys(site.seeds, 0)
    queue = deque(site.seeds)
    base_pages = 0
    while queue:
        url = queue.popleft()
        status, _, body, _ = get(url)
        assert status == 200, url
        parser, links = parse(url, body)
        base_pages += parser.base is not None
        for link, rel in links:
            parts = urlsplit(link)
            if parts.scheme != "http" or parts.netloc not in in_scope or "nofollow" in rel:
                continue
            if link not in specials and link not in depth:
                depth[link] = depth[url] + 1
                queue.append(link)
    assert base_pages > 0
    assert depth == site.expected_pages()
    assert len(depth) == site.config.hosts * site.config.pages_per_host


def test_expected_pages_depth_one_contains_seed_links(site: TestSite) -> None:
    expected = site.expected_pages(max_depth=1)
    assert all(expected[s] == 0 for s in site.seeds)
    assert set(expected.values()) <= {0, 1}
    pages = set(site.expected_pages())
    for seed in site.seeds:
        _, _, body, _ = get(seed)
        _, links = parse(seed, body)
        direct = {u for u, rel in links if u in pages and "nofollow" not in rel}
        assert direct, seed
        assert direct <= set(expected)


def test_graph_is_deterministic_per_seed() -> None:
    cfg = SiteConfig(seed=7)
    a = SiteGraph(cfg, FAKE_NETLOCS, FAKE_OOS)
    b = SiteGraph(cfg, FAKE_NETLOCS, FAKE_OOS)
    assert all(a.render_page(*ref) == b.render_page(*ref) for ref in a.iter_refs())
    assert a.expected_pages(2) == b.expected_pages(2)
    assert a.specials() == b.specials()
    c = SiteGraph(SiteConfig(seed=8), FAKE_NETLOCS, FAKE_OOS)
    assert any(a.links(ref) != c.links(ref) for ref in a.iter_refs())


@pytest.mark.parametrize(
    "cfg",
    [
        SiteConfig(),
        SiteConfig(hosts=1, pages_per_host=1, links_per_page=1),
        SiteConfig(hosts=2, pages_per_host=300, links_per_page=1, cross_host_link_ratio=1.0),
        SiteConfig(hosts=4, pages_per_host=500, links_per_page=3, seed=99),
    ],
)
def test_every_page_is_reachable(cfg: SiteConfig) -> None:
    netlocs = [f"127.0.0.{2 + h}:1000" for h in range(cfg.hosts)]
    graph = SiteGraph(cfg, netlocs, "127.0.0.250:1000")
    assert len(graph.expected_pages()) == graph.page_count


def test_no_hostile_pages_link_only_to_normal_pages() -> None:
    cfg = SiteConfig(hostile=False, crawl_delay_seconds=1)
    graph = SiteGraph(cfg, FAKE_NETLOCS, FAKE_OOS)
    pages = set(graph.expected_pages())
    assert graph.specials().all() == frozenset()
    for h in range(cfg.hosts):
        for i in range(cfg.pages_per_host):
            url = graph.url(h, page_path(i))
            _, links = parse(url, graph.render_page(h, i))
            assert {u for u, _ in links} <= pages, url
        robots = graph.robots_txt(h)
        assert robots is not None
        assert b"Disallow:\n" in robots
        assert b"Disallow: /" not in robots
    assert b"Crawl-delay: 1\n" in (graph.robots_txt(1) or b"")


def test_navigation_pages_are_linked_the_same_way_from_every_page() -> None:
    cfg = SiteConfig(hosts=2, pages_per_host=120, hostile=False, navigation_links=50)
    graph = SiteGraph(cfg, FAKE_NETLOCS[:2], FAKE_OOS)
    for h in range(cfg.hosts):
        menu = [page_path(i) for i in range(1, 51)]
        for i in range(cfg.pages_per_host):
            url = graph.url(h, page_path(i))
            parser, links = parse(url, graph.render_page(h, i))
            hrefs = [href for href, _ in parser.links]
            start = hrefs.index(menu[0])  # in the header: the menu, spelled the same everywhere
            assert hrefs[start : start + 50] == menu, url
            content = {graph.page_url(ref) for ref in graph.links((h, i))}
            menu_urls = {graph.url(h, path) for path in menu}
            found = {u for u, _ in links} - {url}  # '#main' is the page itself
            assert found == ({graph.url(h, "/")} | menu_urls | content) - {url}
    # The menu's pages are one click from the seeds.
    depths = graph.expected_pages()
    assert len(depths) == graph.page_count
    assert all(depths[graph.url(h, page_path(i))] <= 1 for h in range(2) for i in range(1, 51))


def test_site_config_validates() -> None:
    with pytest.raises(ValueError, match="links_per_page"):
        SiteConfig(links_per_page=0)
    with pytest.raises(ValueError, match="navigation_links"):
        SiteConfig(pages_per_host=10, navigation_links=10)
    with pytest.raises(ValueError, match="1 MiB"):
        SiteConfig(bomb_inflated_bytes=1000)


# ---------------------------------------------------------------------------- special paths


def test_permanent_failures(site: TestSite) -> None:
    for code in (404, 410):
        url = site.url(0, f"/status/{code}")
        assert get(url)[0] == code
        assert url in site.specials().permanent_failures
    assert get(site.url(0, "/no/such/page"))[0] == 404
    assert get(site.url(1, "/status/410"))[0] == 404  # special paths live on host 0 only


def test_flaky_heals_after_k_tries(site: TestSite) -> None:
    url = site.url(0, "/flaky/9")
    statuses = [get(url)[0] for _ in range(4)]
    assert statuses == [500, 500, 200, 200]
    assert site.count(url) == 4
    assert site.url(0, "/flaky/0") in site.specials().healing


def test_ratelimited_sends_retry_after_then_200(site: TestSite) -> None:
    url = site.url(0, "/ratelimited")
    for _ in range(2):
        status, headers, _, _ = get(url)
        assert (status, headers["Retry-After"]) == (429, "1")
    status, headers, body, _ = get(url)
    assert status == 200
    assert headers["Retry-After"] is None
    assert len(body) > 512


def test_redirect_chain_ends_at_a_page(site: TestSite) -> None:
    status, _, body, final = get(site.url(0, "/redirect/chain/3"))
    assert (status, final) == (200, site.url(0, "/redirect/chain/0"))
    assert b"<title>" in body
    log = [(r.path, r.status) for r in site.requests_for(0)]
    assert log == [(f"/redirect/chain/{n}", 302 if n else 200) for n in (3, 2, 1, 0)]
    # Location forms: root-relative for odd n, absolute for even n.
    with raw(site.hosts[0], "/redirect/chain/3") as resp:
        assert resp.getheader("Location") == "/redirect/chain/2"
    with raw(site.hosts[0], "/redirect/chain/2") as resp:
        assert resp.getheader("Location") == site.url(0, "/redirect/chain/1")


def test_redirect_loop(site: TestSite) -> None:
    with raw(site.hosts[0], "/redirect/loop/a") as resp:
        assert (resp.status, resp.getheader("Location")) == (302, "/redirect/loop/b")
    with raw(site.hosts[0], "/redirect/loop/b") as resp:
        assert resp.getheader("Location") == site.url(0, "/redirect/loop/a")
    assert site.url(0, "/redirect/loop/a") in site.trap_urls()


def test_robots(site: TestSite) -> None:
    status, headers, body, _ = get(site.url(0, "/robots.txt"))
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    sitemap_line = f"Sitemap: {site.url(0, sitemaps.INDEX_PATH)}\n"
    assert body == b"User-agent: *\nDisallow: /private/\n" + sitemap_line.encode()
    assert get(site.url(1, "/robots.txt"))[2] == b"User-agent: *\nCrawl-delay: 2.5\nDisallow:\n"
    assert get(site.url(2, "/robots.txt"))[0] == 404
    assert get(site.out_of_scope_url("/robots.txt"))[0] == 200
    assert site.url(0, "/private/secret") in site.specials().robots_disallowed
    assert get(site.url(0, "/private/secret"))[0] == 200  # served: violations show in the log


def test_robots_unavailable_with_retry_after_then_200() -> None:
    config = SiteConfig(hosts=2, hostile=False, robots_failures=3, robots_retry_after_seconds=1)
    with TestSite(config) as site:
        for host in (0, 1):  # counted per host
            answers = [get(site.url(host, "/robots.txt"))[:2] for _ in range(4)]
            assert [(s, h["Retry-After"]) for s, h in answers] == [(503, "1")] * 3 + [(200, None)]
        assert [r.status for r in site.requests_for(0)] == [503, 503, 503, 200]
    with TestSite(SiteConfig(hosts=1, hostile=False, robots_failures=1)) as site:
        status, headers, _, _ = get(site.url(0, "/robots.txt"))
        assert (status, headers["Retry-After"]) == (503, None)  # no header unless asked for


def test_calendar_trap_links_forever(site: TestSite) -> None:
    url = site.url(0, "/calendar/2024/12")
    _, _, body, _ = get(url)
    _, links = parse(url, body)
    urls = {u for u, _ in links}
    assert {site.url(0, "/calendar/2024/11"), site.url(0, "/calendar/2025/1")} <= urls
    assert get(site.url(0, "/calendar/2024/13"))[0] == 404
    assert site.url(0, "/calendar/2024/1") in site.trap_urls()


def test_empty_pdf_and_unsafe_links(site: TestSite) -> None:
    status, headers, body, _ = get(site.url(0, "/empty"))
    assert (status, headers["Content-Type"], body) == (200, "text/html; charset=utf-8", b"")
    status, headers, body, _ = get(site.url(0, "/file.pdf"))
    assert (status, headers["Content-Type"]) == (200, "application/pdf")
    assert body.startswith(b"%PDF")
    unsafe = site.specials().unsafe
    assert "http://169.254.169.254/latest/meta-data/" in unsafe
    assert "http://10.0.0.1/" in unsafe
    assert "ftp://127.0.0.2/x" in unsafe


def test_big_streams_32_mib_and_bomb_is_small(site: TestSite) -> None:
    with raw(site.hosts[0], "/big") as resp:
        assert resp.getheader("Transfer-Encoding") == "chunked"
        total = 0
        while chunk := resp.read(1 << 20):
            total += len(chunk)
    assert total == 32 * 1024 * 1024
    with raw(site.hosts[0], "/bomb") as resp:
        assert resp.getheader("Content-Encoding") == "gzip"
        assert resp.getheader("Content-Type") == "text/html; charset=utf-8"
        body = resp.read()
    assert len(body) < 2 * 1024 * 1024
    assert int.from_bytes(body[-4:], "little") == 1 << 30  # gzip ISIZE: 1 GiB
    head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body, 1 << 20)
    assert head == bytes(1 << 20)


def test_gzip_bomb_is_one_valid_member() -> None:
    inflated = 64 << 20
    body = build_gzip_bomb(inflated)
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    total, pending = 0, body
    while pending:
        out = d.decompress(pending, 8 << 20)
        assert out.count(0) == len(out)
        total += len(out)
        pending = d.unconsumed_tail
    assert d.eof  # zlib verified CRC32 and ISIZE of the trailer
    assert (total, d.unused_data) == (inflated, b"")
    assert build_gzip_bomb(inflated) is body  # cached


# ---------------------------------------------------------------------------- request log


def test_request_log_records_each_request_with_its_host(site: TestSite) -> None:
    get(site.seeds[0])
    site.reset()
    url = site.url(1, page_path(3))
    before = time.monotonic()
    assert get(url, ua="probe/2")[0] == 200
    assert get(site.out_of_scope_url(page_path(1)))[0] == 200
    [rec] = site.requests_for(1)
    assert (rec.host, rec.path, rec.method, rec.user_agent) == (
        site.hosts[1],
        page_path(3),
        "GET",
        "probe/2",
    )
    assert rec.status == 200
    assert rec.end is not None
    assert before <= rec.start <= rec.end <= time.monotonic()
    assert rec.url == url
    assert site.requests_for(0) == []
    assert site.count(url) == 1
    assert site.count(url + "#frag") == 1
    assert site.count(url + "?q=1") == 0
    [oos] = site.requests_for(site.out_of_scope_host)
    assert oos.host == site.out_of_scope_host
    assert [r.host for r in site.all_requests()] == [site.hosts[1], site.out_of_scope_host]
    assert site.specials().out_of_scope  # the out-of-scope host is linked


def test_max_concurrency_counts_overlapping_requests(site: TestSite) -> None:
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(get(site.url(0, "/slow"))[0]))
        for _ in range(3)
    ]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200, 200, 200]
    assert time.monotonic() - start < 2 * site.config.slow_seconds  # they overlapped
    assert site.max_concurrency(0) == 3
    assert site.max_concurrency(site.hosts[0]) == 3
    assert site.max_concurrency(1) == 0
    assert site.log.in_flight(site.hosts[0]) == 0


def test_hang_until_client_gives_up_and_stop_is_clean() -> None:
    site = TestSite().start()
    try:
        with pytest.raises(TimeoutError), raw(site.hosts[0], "/hang", timeout=0.3) as resp:
            resp.read()
        deadline = time.monotonic() + 5
        while site.all_requests()[0].end is None and time.monotonic() < deadline:
            time.sleep(0.01)
        [rec] = site.all_requests()
        assert rec.status is None  # the client gave up; no response was ever sent
        assert rec.end is not None
        assert rec.end - rec.start >= 0.25
        # A request still hanging when the site stops must not block stop().
        outcome: list[BaseException | int] = []

        def hang() -> None:
            try:
                outcome.append(get(site.url(0, "/hang"), timeout=10)[0])
            except OSError as exc:  # the site aborts the connection on stop
                outcome.append(exc)

        hanging = threading.Thread(target=hang)
        hanging.start()
        while site.log.in_flight(site.hosts[0]) == 0:
            time.sleep(0.01)
    finally:
        started = time.monotonic()
        site.stop()
    assert time.monotonic() - started < 2
    hanging.join(timeout=5)
    assert not hanging.is_alive()
    assert len(outcome) == 1  # the client was released (503 or aborted), not left hanging
    assert not [t for t in threading.enumerate() if t.name == "crawlfleet-test-site"]
    site.stop()  # idempotent


# ---------------------------------------------------------------------------- CLI


def test_cli_prints_one_ready_line_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "crawlfleet.testsite",
            "--hosts",
            "2",
            "--pages-per-host",
            "10",
            "--no-hostile",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert len(ready["hosts"]) == 2
        assert ready["seeds"] == [f"http://{h}/" for h in ready["hosts"]]
        assert ready["pages"] == 20
        status, _, body, _ = get(ready["seeds"][1])
        assert status == 200
        assert b"mailto:" not in body  # --no-hostile
        assert get(f"http://{ready['hosts'][0]}/robots.txt")[2] == b"User-agent: *\nDisallow:\n"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert out == b""  # exactly one stdout line, already consumed
    assert json.loads(err.decode().strip().splitlines()[-1])["requests"] == 2


def _sitemap_entries(xml: bytes) -> tuple[str, list[tuple[str, str | None]]]:
    """A sitemap's root name and its (loc, lastmod) entries, read with the standard library."""
    root = ElementTree.fromstring(xml)
    ns = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
    entries = [(entry.findtext(f"{ns}loc") or "", entry.findtext(f"{ns}lastmod")) for entry in root]
    return root.tag.removeprefix(ns), entries


def test_sitemaps_index_lists_a_good_and_an_oversized_gzip_sitemap(site: TestSite) -> None:
    status, _, body, _ = get(site.url(0, sitemaps.INDEX_PATH))
    assert status == 200
    assert _sitemap_entries(body) == (
        "sitemapindex",
        [
            (site.url(0, sitemaps.PAGES_PATH), None),
            (site.url(0, sitemaps.OVERSIZED_PATH), None),
            (site.url(0, sitemaps.nested_path(1)), None),
        ],
    )
    for level in (1, 7):  # an endless chain of indexes
        nested = get(site.url(0, sitemaps.nested_path(level)))[2]
        assert _sitemap_entries(nested) == (
            "sitemapindex",
            [(site.url(0, sitemaps.nested_path(level + 1)), None)],
        )

    kind, entries = _sitemap_entries(gzip.decompress(get(site.url(0, sitemaps.PAGES_PATH))[2]))
    assert kind == "urlset"
    listed = {(site.url(0, page.path), page.lastmod) for page in sitemaps.LISTED_PAGES}
    assert listed <= set(entries)
    assert (site.out_of_scope_url("/listed/elsewhere.html"), "2026-03-01") in entries
    pages = [site.graph.render_page(h, i) for h in range(3) for i in range(60)]
    for page in sitemaps.LISTED_PAGES:  # served, and linked from no page
        assert get(site.url(0, page.path))[0] == 200
        assert not any(page.path.encode() in body for body in pages)

    oversized = get(site.url(0, sitemaps.OVERSIZED_PATH))[2]
    inflated = zlib.decompressobj(16 + zlib.MAX_WBITS)
    size = sum(
        len(inflated.decompress(oversized[i : i + 65536])) for i in range(0, len(oversized), 65536)
    )
    assert len(oversized) < 1024 * 1024 < MAX_SITEMAP_BYTES < size
    assert inflated.eof
    assert get(site.url(0, "/sitemap.xml"))[0] == 404
