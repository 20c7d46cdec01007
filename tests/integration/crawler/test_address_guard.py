"""The address guard of crawlfleet's own (httpx) worker has no way round (issue 22): real worker
processes, a real redis-server, real HTTP to a loopback server that logs every request it gets
(``tests/support/watched_server.py``). The Scrapy runtime's twin is
tests/integration/scrapy/test_address_guard.py.

* A redirect to a URL past 8,192 characters is refused before any look-up (``invalid_url``);
  a meta refresh is never followed (the worker reads a page's links, not its refreshes), and
  a link past 8,192 characters is dropped before it is queued. One of the URLs is the watched
  server's own: let through, it would be seen there.
* A name that answers "public" to the guard's checks and the watched server's address to the
  connect (DNS rebinding, the guard's resolver scripted by the test) is never connected to: the
  connection resolves through the guard, which refuses the rebound answer. The name is
  ``localhost``, which the system resolves to the watched server: a client that resolved it
  again by itself would reach it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import RedisServer
from tests.support.crawls import Crawl, wait_all
from tests.support.scripted_dns import PUBLIC, lookups_of
from tests.support.watched_server import WatchedServer

_jobs = iter(range(1_000_000))


@pytest.fixture
def server() -> Iterator[WatchedServer]:
    with WatchedServer() as running:
        yield running


def crawl_of(tmp_path: Path, redis: RedisServer, **spec: Any) -> Crawl:
    """A one-attempt job of ``spec`` (seeds and scope), robots.txt not asked."""
    name = f"guard-{next(_jobs)}"
    document = {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "robots": {"obey": False},
            "retry": {"requestAttempts": 1, "taskAttempts": 1},
            "output": {"maxFileAgeSeconds": 1},
            **spec,
        },
    }
    job = tmp_path / f"{name}.yaml"
    job.write_text(yaml.safe_dump(document))
    out = tmp_path / name
    out.mkdir()
    return Crawl(name, job, out, redis.url)


async def test_a_redirect_past_8192_characters_or_a_meta_refresh_is_never_requested(
    server: WatchedServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    redirects = [server.url(f"/redirect/{target}") for target in ("metadata", "here")]
    pages = [server.url(f"/{kind}/{target}") for kind in ("refresh", "files")
             for target in ("metadata", "here")]  # fmt: skip
    crawl = crawl_of(
        tmp_path,
        redis_server,
        seeds=[*redirects, *pages],
        scope={"allowPrivateNetworks": True, "allowedDomains": ["127.0.0.1", "169.254.169.254"]},
    )
    assert wait_all([crawl.start("w1")], timeout=60) == [0]
    assert server.watched() == []
    seeds = [*redirects, *pages]
    assert sorted(server.paths) == sorted(url.removeprefix(server.url("")) for url in seeds)
    dead = await crawl.dead()
    assert {url: letter["failure_class"] for url, letter in dead.items()} == {
        canonicalize(url): "invalid_url" for url in redirects
    }
    assert all("longer than 8192 characters" in letter["message"] for letter in dead.values())
    fetched = [page["url"] for page in crawl.pages() if page["failure_class"] is None]
    assert sorted(fetched) == sorted(pages)
    assert all(page["outlinks"] == 0 for page in crawl.pages())  # the long links: dropped


async def test_a_name_rebound_between_check_and_connect_is_never_connected_to(
    server: WatchedServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    seed = server.url("/rebound", host="localhost")
    assert server.reachable_as("localhost")  # unguarded, the name reaches the server
    # The worker's check and the fetcher's get the public answer, the connect the rebound one.
    answers = tmp_path / "dns.json"
    answers.write_text(json.dumps({"localhost": [[PUBLIC], [PUBLIC], ["127.0.0.1"]]}))
    crawl = crawl_of(
        tmp_path,
        redis_server,
        seeds=[seed],
        scope={"allowPrivateNetworks": False, "allowedDomains": ["localhost"]},
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.support.scripted_dns", str(crawl.job_file), str(answers),
         str(crawl.out), "w1", redis_server.url],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        _, err = worker.communicate(timeout=60)
    finally:
        worker.kill()
    assert worker.returncode == 0, err[-3000:]
    assert server.paths == ["/probe"]
    assert lookups_of(answers) == [("localhost", PUBLIC)] * 2 + [("localhost", "127.0.0.1")]
    dead = await crawl.dead()
    assert {url: letter["failure_class"] for url, letter in dead.items()} == {
        canonicalize(seed): "forbidden_address"
    }
