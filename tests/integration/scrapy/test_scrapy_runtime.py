"""crawlfleet.scrapy end to end: real Scrapy processes (crawlfleet worker), a real
redis-server, real HTTP to the test site, the test project under tests/scrapy_project."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.frontier import Frontier, FrontierSettings, FrontierStats
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from crawlfleet.testsite.shop import PRODUCTS

PROJECT = Path(__file__).resolve().parents[2] / "scrapy_project"
_jobs = iter(range(1_000_000))


@pytest.fixture
def site() -> Iterator[TestSite]:
    config = SiteConfig(hosts=2, pages_per_host=40, hostile=False, latency_seconds=0.05)
    with TestSite(config) as running:
        yield running


def shop_job(
    tmp_path: Path,
    site: TestSite,
    settings: dict[str, Any] | None = None,
    *,
    spider: str = "shop",
    **spec: Any,
) -> Path:
    """A spider of the shop (``shop`` or ``listing``) on host 0 of ``site``."""
    return write_job(tmp_path, spider, {"base": site.url(0, "/")}, settings, **spec)


def one_host_graph_job(
    tmp_path: Path,
    site: TestSite,
    per_host: int,
    per_worker: int,
    settings: dict[str, Any] | None = None,
) -> Path:
    """The graph spider over host 0 of ``site``, with these concurrency limits."""
    return write_job(
        tmp_path,
        "graph",
        {"start": site.url(0, "/")},
        settings,
        concurrency={"hostDelaySeconds": 0, "perHost": per_host, "perWorker": per_worker},
    )


def write_job(
    tmp_path: Path,
    spider: str,
    args: dict[str, str],
    settings: dict[str, Any] | None = None,
    **spec: Any,
) -> Path:
    name = f"scrapy-{next(_jobs)}-{time.monotonic_ns() % 1_000_000}"
    document = {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": name, "namespace": "t"},
        "spec": {
            "scope": {"allowPrivateNetworks": True, "maxDepth": 50},
            "concurrency": {"hostDelaySeconds": 0, "perHost": 4},
            "robots": {"obey": False},
            "output": {"maxFileAgeSeconds": 1},
            "crawler": {"scrapy": {"spider": spider, "args": args, "settings": settings or {}}},
            **spec,
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def start_worker(
    job: Path, redis: RedisServer, worker_id: str, out: Path, *extra: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "crawlfleet", "worker", str(job), "--redis-url", redis.url,
         "--worker-id", worker_id, "--out", str(out), *extra],
        cwd=PROJECT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def items_in(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted((out / "items").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


async def frontier_of(job: Path, redis: RedisServer) -> Frontier:
    document = yaml.safe_load(job.read_text())
    spec = CrawlJobSpec.from_mapping(document["spec"])
    job_id = f"t.{document['metadata']['name']}"
    return await Frontier.connect(redis.url, FrontierSettings.from_spec(job_id, spec))


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"worker did not end in {timeout} s:\n{err[-3000:]}") from None
    return proc.returncode, err


def crawl_alone(job: Path, redis: RedisServer, out: Path, timeout: float = 60) -> None:
    """One worker, run until the job is complete; it must exit 0."""
    code, err = finish(start_worker(job, redis, "w1", out), timeout=timeout)
    assert code == 0, err[-3000:]


async def final_stats(job: Path, redis: RedisServer) -> FrontierStats:
    frontier = await frontier_of(job, redis)
    try:
        return await frontier.stats()
    finally:
        await frontier.aclose()


async def test_shop_spider_items_pass_the_pipeline_and_the_job_completes(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # Items wait in a slow pipeline long after their page's callback: acked any earlier,
    # their pages' records would be written without them.
    job = shop_job(tmp_path, site, {"SITESHOP_PIPELINE_DELAY": 0.5})
    crawl_alone(job, redis_server, tmp_path / "out")
    items = {item["fields"]["sku"]: item for item in items_in(tmp_path / "out")}
    assert set(items) == {product.sku for product in PRODUCTS}
    for position, product in enumerate(PRODUCTS):
        fields = items[product.sku]["fields"]
        assert fields["price"] == float(product.price)  # the pipeline's
        assert fields["pipeline"] == "price"
        assert fields["listed_price"] == f"€{product.price}"  # meta, across the frontier
        assert fields["position"] == position  # cb_kwargs, across the frontier
        assert items[product.sku]["source"] == "shop"
    stats = await final_stats(job, redis_server)
    assert stats.complete
    assert stats.crawled == 1 + len(PRODUCTS)
    assert all(site.count(site.url(0, product.path)) == 1 for product in PRODUCTS)


async def test_a_callback_that_raises_is_retried_then_dead_lettered_with_its_class(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    job = write_job(
        tmp_path,
        "shop",
        {"base": site.url(0, "/"), "fail": "3"},
        retry={"taskAttempts": 2, "backoffBaseSeconds": 0.1, "backoffMaxSeconds": 0.2},
    )
    crawl_alone(job, redis_server, tmp_path / "out")
    frontier = await frontier_of(job, redis_server)
    dead = [letter async for letter in frontier.dead_letters()]
    stats = await frontier.stats()
    await frontier.aclose()
    failing = site.url(0, "/shop/product/3.html")
    assert [(d.url, d.failure_class, d.attempts) for d in dead] == [
        (failing, "callback_error:ValueError", 2)
    ]
    assert "refuses to parse" in dead[0].message
    assert site.count(failing) == 2  # fetched once per attempt, never acked
    assert stats.crawled == len(PRODUCTS)  # the listing and the four others
    skus = {item["fields"]["sku"] for item in items_in(tmp_path / "out")}
    assert skus == {p.sku for p in PRODUCTS if p.id != 3}


def test_a_spider_the_project_lacks_is_refused_with_the_ones_it_has(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    job = write_job(tmp_path, "books", {})
    log = tmp_path / "exit"
    code, err = finish(
        start_worker(job, redis_server, "w1", tmp_path / "out", "--termination-log", str(log))
    )
    assert code == 2
    assert "the project has no spider 'books'; its spiders: graph, listing, shop" in err
    assert "Traceback" not in err
    assert log.read_text().startswith("InvalidConfig: spec.crawler.scrapy.spider:")


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("siteshop.redis_settings", "set SCHEDULER = scrapy_redis.scheduler.Scheduler"),
        ("siteshop.missing", "the Scrapy project does not import (settings module"),
    ],
)
def test_a_project_that_would_bypass_the_frontier_or_does_not_import_is_refused(
    redis_server: RedisServer, tmp_path: Path, module: str, expected: str
) -> None:
    job = write_job(tmp_path, "shop", {})
    document = yaml.safe_load(job.read_text())
    document["spec"]["crawler"]["scrapy"]["settingsModule"] = module
    job.write_text(yaml.safe_dump(document))
    code, err = finish(start_worker(job, redis_server, "w1", tmp_path / "out"))
    assert code == 2
    assert expected in err
    assert "Traceback" not in err


async def until_holding_leases(frontier: Frontier, worker: str, timeout: float = 30) -> None:
    """Until ``worker``'s heartbeat says it has requests in flight: a kill then costs some."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        beats = {beat.worker: beat for beat in await frontier.workers()}
        beat = beats.get(worker)
        if beat is not None and beat.counters.get("in_flight", 0) > 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{worker} never held a lease")


async def test_two_processes_killed_repeatedly_lose_no_page(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    config = SiteConfig(hosts=2, pages_per_host=60, hostile=False, latency_seconds=0.3)
    with TestSite(config) as site:
        starts = ",".join(site.url(host, "/") for host in range(config.hosts))
        job = write_job(
            tmp_path,
            "graph",
            {"start": starts},
            {"SITESHOP_PIPELINE_DELAY": 0.3},
            lease={"ttlSeconds": 3, "heartbeatSeconds": 0.5, "deadAfterSeconds": 2},
            concurrency={"hostDelaySeconds": 0, "perHost": 4, "perWorker": 3},
            # A killed process's leases hold their host slots until their fetch deadline.
            fetch={"totalTimeoutSeconds": 3, "readTimeoutSeconds": 3, "connectTimeoutSeconds": 3},
        )
        out = tmp_path / "out"
        frontier = await frontier_of(job, redis_server)
        steady = start_worker(job, redis_server, "steady", out)
        for round_number in range(3):
            victim = start_worker(job, redis_server, f"victim-{round_number}", out)
            await until_holding_leases(frontier, f"victim-{round_number}")
            victim.send_signal(signal.SIGKILL)
            victim.wait()
        victim = start_worker(job, redis_server, "victim-last", out)
        code, err = finish(steady, timeout=120)
        assert code == 0, err[-3000:]
        code, err = finish(victim, timeout=30)
        assert code == 0, err[-3000:]
        stats = await frontier.stats()
        await frontier.aclose()
        expected = set(site.expected_pages())
        urls = [item["url"] for item in items_in(out)]
        assert expected <= set(urls), sorted(expected - set(urls))[:5]
        assert stats.complete
        assert stats.dead == 0
        assert stats.requeued > 0  # the kills cost leases: what this test is about
        # Server side: a page fetched again only for a lease that came back; output side: an
        # item written twice only for such a page (the killed process's file never counted).
        fetched_again = sum(max(0, site.count(url) - 1) for url in expected)
        assert fetched_again <= stats.requeued
        assert len(urls) - len(set(urls)) <= stats.requeued


def test_per_host_politeness_holds_across_three_processes(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    config = SiteConfig(hosts=1, pages_per_host=40, hostile=False, latency_seconds=0.15)
    with TestSite(config) as site:
        job = one_host_graph_job(tmp_path, site, per_host=2, per_worker=8)
        procs = [start_worker(job, redis_server, f"w{i}", tmp_path / "out") for i in range(3)]
        for proc in procs:
            code, err = finish(proc, timeout=90)
            assert code == 0, err[-3000:]
        assert site.max_concurrency(0) == 2
        assert set(site.expected_pages()) <= {i["url"] for i in items_in(tmp_path / "out")}


async def test_sigterm_releases_the_leases_at_once(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    config = SiteConfig(hosts=1, pages_per_host=200, hostile=False, latency_seconds=2.0)
    with TestSite(config) as site:
        # Scrapy sends two at a time: of the eight leases claimed, six wait in the buffer.
        job = one_host_graph_job(
            tmp_path, site, per_host=8, per_worker=8, settings={"CONCURRENT_REQUESTS": 2}
        )
        proc = start_worker(job, redis_server, "w1", tmp_path / "out", "--grace-seconds", "20")
        frontier = await frontier_of(job, redis_server)
        deadline = time.monotonic() + 30
        while (await frontier.stats()).leased < 8 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert (await frontier.stats()).leased >= 8  # perWorker 8 (and maybe the root page)
        proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(1.0)
        # The buffered six are back in the queue at once; the two in flight still run.
        during = await frontier.stats()
        assert proc.poll() is None
        assert during.released >= 6
        assert 1 <= during.leased <= 3
        code, err = finish(proc, timeout=30)
        assert code == 0, err[-3000:]
        stats = await frontier.stats()
        await frontier.aclose()
        assert stats.leased == 0
        assert stats.queued > 0
        assert not stats.complete


def test_crawlfleet_run_steers_scrapy_workers_like_any_other(
    site: TestSite, tmp_path: Path
) -> None:
    """The local runner (its zygote forks crawlfleet worker) needs no special case: two
    Scrapy workers crawl, the job completes, the closing files are written."""
    job = shop_job(tmp_path, site)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "crawlfleet", "run", str(job), "--workers", "2",
         "--output", str(out)],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "seeded by its Scrapy spider's start requests" in done.stderr
    assert "complete: 6 pages crawled, 0 dead-lettered" in done.stderr
    assert {item["fields"]["sku"] for item in items_in(out)} == {p.sku for p in PRODUCTS}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["itemRecords"] == len(PRODUCTS)
    assert manifest["counts"]["pageRecords"] == 1 + len(PRODUCTS)


def test_without_scrapy_installed_the_job_is_refused_with_the_install_line(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # A test double for an environment without the extra: the import of scrapy fails.
    job = write_job(tmp_path, "shop", {})
    entry = (
        "import sys; sys.modules['scrapy'] = None;"
        " from crawlfleet.launch import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", entry, str(job), "--redis-url", redis_server.url],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert (
        "spec.crawler.scrapy: Scrapy is not installed (pip install 'crawlfleet[scrapy]')"
        in done.stderr
    )


async def test_the_jobs_scope_limits_what_the_spider_queues(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    starts = ",".join(site.url(host, "/") for host in range(site.config.hosts))
    job = write_job(
        tmp_path, "graph", {"start": starts}, scope={"allowPrivateNetworks": True, "maxDepth": 1}
    )
    crawl_alone(job, redis_server, tmp_path / "out")
    crawled = {url for url in site.expected_pages() if site.count(url)}
    assert crawled == set(site.expected_pages(max_depth=1))
    assert {item["url"] for item in items_in(tmp_path / "out")} == crawled


async def test_the_address_guard_refuses_a_private_address_as_a_dead_letter(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    job = shop_job(tmp_path, site, scope={})
    crawl_alone(job, redis_server, tmp_path / "out")
    frontier = await frontier_of(job, redis_server)
    dead = [letter async for letter in frontier.dead_letters()]
    await frontier.aclose()
    assert [(d.url, d.failure_class) for d in dead] == [
        (site.url(0, "/shop/"), "forbidden_address")
    ]
    assert site.count(site.url(0, "/shop/")) == 0


async def test_requests_scrapys_offsite_filter_drops_do_not_hold_their_page(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # Host 0's pages link host 1, which the spider's allowed_domains leave out: Scrapy drops
    # those requests before the scheduler sees them, and their pages must still be acked.
    job = write_job(tmp_path, "graph", {"start": site.url(0, "/")})
    crawl_alone(job, redis_server, tmp_path / "out", timeout=40)
    assert site.requests_for(1) == []
    urls = {item["url"] for item in items_in(tmp_path / "out")}
    assert site.url(0, "/") in urls
    assert all(url.startswith(site.url(0, "/")) for url in urls)
    stats = await final_stats(job, redis_server)
    assert stats.complete
    assert stats.crawled == len(urls)


async def test_leases_are_extended_while_their_items_wait_in_the_pipelines(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # Each item waits 3 s in a pipeline, twice the lease's ttl: only extension keeps it.
    job = shop_job(
        tmp_path,
        site,
        {"SITESHOP_PIPELINE_DELAY": 3},
        lease={"ttlSeconds": 1.5, "heartbeatSeconds": 0.3, "deadAfterSeconds": 1},
    )
    crawl_alone(job, redis_server, tmp_path / "out")
    stats = await final_stats(job, redis_server)
    assert stats.requeued == 0
    assert all(site.count(site.url(0, product.path)) == 1 for product in PRODUCTS)
    assert len(items_in(tmp_path / "out")) == len(PRODUCTS)


def test_a_claimed_batch_goes_to_scrapy_highest_priority_first(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # The listing yields its products with priority = position, all queued in one enqueue
    # and claimed in one batch (perHost 8); one request at a time shows the order.
    job = shop_job(
        tmp_path,
        site,
        {"CONCURRENT_REQUESTS": 1},
        concurrency={"hostDelaySeconds": 0, "perHost": 8},
    )
    crawl_alone(job, redis_server, tmp_path / "out")
    order = [r.path for r in site.requests_for(0) if r.path.startswith("/shop/product/")]
    assert order == [product.path for product in reversed(PRODUCTS)]


async def test_a_request_the_frontier_cannot_carry_is_dropped_and_said_not_lost_silently(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    job = write_job(tmp_path, "shop", {"base": site.url(0, "/"), "lambdas": "1"})
    proc = start_worker(job, redis_server, "w1", tmp_path / "out")
    code, err = finish(proc)
    assert code == 0, err[-3000:]
    assert "request not queued" in err
    assert "/shop/?again" in err
    assert site.count(site.url(0, "/shop/?again")) == 0
    stats = await final_stats(job, redis_server)
    assert stats.complete
    assert stats.crawled == 1 + len(PRODUCTS)  # the listing is acked all the same


async def test_retries_and_redirects_stay_in_their_lease_and_the_frontier_retries_the_rest(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # /flaky/1 answers 500 twice: Scrapy's RetryMiddleware (RETRY_TIMES 1) retries once in
    # the lease, gives up, the lease fails as http_5xx, and the frontier's second attempt
    # heals it. /redirect/chain/3 is three hops, all followed inside one lease.
    flaky, chain = site.url(0, "/flaky/1"), site.url(0, "/redirect/chain/3")
    job = write_job(
        tmp_path,
        "graph",
        {"start": f"{flaky},{chain}"},
        retry={"backoffBaseSeconds": 0.1, "backoffMaxSeconds": 0.2},
    )
    crawl_alone(job, redis_server, tmp_path / "out")
    stats = await final_stats(job, redis_server)
    assert site.count(flaky) == 3
    assert [site.count(site.url(0, f"/redirect/chain/{n}")) for n in range(4)] == [1, 1, 1, 1]
    assert (stats.crawled, stats.failed, stats.dead) == (2, 1, 0)
    items = {item["url"]: item["fields"] for item in items_in(tmp_path / "out")}
    assert items[chain]["url"] == site.url(0, "/redirect/chain/0")
    assert items[flaky]["url"] == flaky


async def test_format_warc_archives_the_spiders_responses(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    from warcio.archiveiterator import ArchiveIterator

    job = shop_job(tmp_path, site, output={"format": "warc"})
    crawl_alone(job, redis_server, tmp_path / "out")
    archived = []
    for path in (tmp_path / "out" / "warc").glob("*.warc.gz"):
        with path.open("rb") as stream:
            archived += [
                record.rec_headers.get_header("WARC-Target-URI")
                for record in ArchiveIterator(stream)
                if record.rec_type == "response"
            ]
    assert sorted(archived) == sorted(
        [site.url(0, "/shop/"), *(site.url(0, product.path) for product in PRODUCTS)]
    )


async def test_an_item_pipeline_that_raises_fails_its_page_and_a_404_is_dead_at_once(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    missing = site.url(0, "/status/404")
    job = shop_job(
        tmp_path,
        site,
        {"SITESHOP_PIPELINE_FAIL_SKU": "CM-004"},
        seeds=[missing],
        retry={"taskAttempts": 2, "backoffBaseSeconds": 0.1, "backoffMaxSeconds": 0.2},
    )
    crawl_alone(job, redis_server, tmp_path / "out")
    frontier = await frontier_of(job, redis_server)
    dead = {letter.url: letter async for letter in frontier.dead_letters()}
    await frontier.aclose()
    product = site.url(0, "/shop/product/4.html")
    assert set(dead) == {missing, product}
    assert (dead[product].failure_class, dead[product].attempts) == (
        "item_pipeline_error:RuntimeError",
        2,
    )
    assert (dead[missing].failure_class, dead[missing].attempts) == ("http_404", 1)
    assert site.count(missing) == 1  # a 404 is neither Scrapy's retry nor the frontier's
    assert site.count(product) == 2


async def test_max_pages_bounds_what_a_spider_queues(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    job = shop_job(
        tmp_path,
        site,
        scope={"allowPrivateNetworks": True, "maxPages": 3},
    )
    crawl_alone(job, redis_server, tmp_path / "out")
    stats = await final_stats(job, redis_server)
    assert (stats.crawled, stats.over_limit) == (3, len(PRODUCTS) - 2)
    assert len(items_in(tmp_path / "out")) == 2


async def test_a_redirect_scrapys_offsite_filter_drops_fails_its_lease_instead_of_holding_it(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # Host 0's /redirect/host/1 redirects to host 1, outside the spider's allowed_domains.
    offsite = site.url(0, "/redirect/host/1")
    job = write_job(tmp_path, "graph", {"start": offsite})
    crawl_alone(job, redis_server, tmp_path / "out", timeout=40)
    frontier = await frontier_of(job, redis_server)
    dead = [letter async for letter in frontier.dead_letters()]
    await frontier.aclose()
    assert [(d.url, d.failure_class) for d in dead] == [(offsite, "out_of_scope")]
    assert site.requests_for(1) == []


def test_an_items_position_is_its_place_in_the_output_not_in_the_pipelines(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    # The listing's later items leave the slow pipeline first; a page crawled again must
    # name its items alike, so a position is where the callback yielded the item.
    job = shop_job(
        tmp_path,
        site,
        {"SITESHOP_PIPELINE_DELAY_REVERSED": 1.0},
        spider="listing",
    )
    crawl_alone(job, redis_server, tmp_path / "out")
    items = items_in(tmp_path / "out")
    assert sorted(item["position"] for item in items) == list(range(len(PRODUCTS)))
    assert all(item["position"] == item["fields"]["position"] for item in items)


def test_a_scrapy_worker_serves_crawlfleets_worker_metrics(
    site: TestSite, redis_server: RedisServer, tmp_path: Path
) -> None:
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    job = shop_job(tmp_path, site, scope={"allowPrivateNetworks": True, "maxPages": 4})
    proc = start_worker(
        job, redis_server, "w1", tmp_path / "out", "--keep-running",
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        text = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                text = ""
            if 'crawlfleet_worker_pages_fetched_total{status_class="2xx"} 4.0' in text:
                break
            time.sleep(0.3)
        assert 'crawlfleet_worker_pages_fetched_total{status_class="2xx"} 4.0' in text
        assert 'crawlfleet_worker_links_dropped_total{reason="max_pages"} 2.0' in text
    finally:
        proc.send_signal(signal.SIGTERM)
        code, err = finish(proc)
    assert code == 0, err[-3000:]
