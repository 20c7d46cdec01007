"""The address guard of a Scrapy job has no way round (issue 22): real Scrapy worker processes,
a real redis-server, real HTTP to a loopback server that logs every request it gets
(``tests/support/watched_server.py``).

* A redirect, a meta refresh, or a download of no lease (Scrapy's FilesPipeline) to a URL past
  8,192 characters is refused before any look-up (``invalid_url``): the guard cannot judge it,
  so it fails closed. One of the URLs is the watched server's own: let through, it would be
  seen there.
* A request through a proxy (``meta["proxy"]``) is refused: the proxy would resolve the name.
* A name that answers "public" to the guard's check and the watched server's address to the
  connect (DNS rebinding, the guard's resolver scripted by the test) is never connected to: the
  reactor resolves through the guard, which refuses the second answer (``forbidden_address``,
  "at connect time"). The name is ``localhost``, which the system resolves to the watched
  server: a connect that resolved again by itself would reach it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.local.redis_server import RedisServer
from tests.integration.scrapy.test_scrapy_runtime import (
    PROJECT,
    finish,
    frontier_of,
    start_worker,
    write_job,
)
from tests.support.scripted_dns import PUBLIC, lookups_of
from tests.support.watched_server import WatchedServer


@pytest.fixture
def server() -> Iterator[WatchedServer]:
    with WatchedServer() as running:
        yield running


async def dead_letters(job: Path, redis: RedisServer) -> dict[str, tuple[str, str]]:
    frontier = await frontier_of(job, redis)
    try:
        return {d.url: (d.failure_class, d.message) async for d in frontier.dead_letters()}
    finally:
        await frontier.aclose()


async def test_a_redirect_or_meta_refresh_past_8192_characters_is_never_requested(
    server: WatchedServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    seeds = [server.url(f"/{kind}/{target}") for kind in ("redirect", "refresh")
             for target in ("metadata", "here")]  # fmt: skip
    job = write_job(
        tmp_path,
        "graph",
        {},
        {"RETRY_TIMES": 0},
        seeds=seeds,
        scope={"allowPrivateNetworks": True, "allowedDomains": ["127.0.0.1", "169.254.169.254"]},
    )
    code, err = finish(start_worker(job, redis_server, "w1", tmp_path / "out"))
    assert code == 0, err[-3000:]
    assert server.watched() == []
    assert sorted(server.paths) == sorted(seed.removeprefix(server.url("")) for seed in seeds)
    dead = await dead_letters(job, redis_server)
    assert {url: failure for url, (failure, _) in dead.items()} == dict.fromkeys(
        seeds, "invalid_url"
    )
    assert all("longer than 8192 characters" in message for _, message in dead.values()), dead


async def test_a_download_of_no_lease_past_8192_characters_is_refused_and_counted(
    server: WatchedServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    # FilesPipeline downloads the file_urls of an item with engine.download: no lease.
    job = write_job(
        tmp_path,
        "graph",
        {"files": "1"},
        {
            "ITEM_PIPELINES": {"scrapy.pipelines.files.FilesPipeline": 1},
            "FILES_STORE": str(tmp_path / "files"),
        },
        seeds=[server.url("/files/here"), server.url("/files/metadata")],
        scope={"allowPrivateNetworks": True},
    )
    code, err = finish(start_worker(job, redis_server, "w1", tmp_path / "out"))
    assert code == 0, err[-3000:]
    assert server.watched() == []
    assert sorted(server.paths) == ["/files/here", "/files/metadata"]
    # Each refusal counted (invalid_url) and said: the pipeline's item records no file.
    assert err.count("not requested: URL longer than 8192 characters") == 2, err[-3000:]


async def test_a_request_through_a_proxy_is_refused(
    server: WatchedServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    # The proxy (the watched server) would resolve the name: the guard could not pin it.
    target = server.url("/via-proxy")
    job = write_job(
        tmp_path,
        "graph",
        {"start": target, "proxy": server.url("")},
        {"RETRY_TIMES": 0},
        scope={"allowPrivateNetworks": True},
    )
    code, err = finish(start_worker(job, redis_server, "w1", tmp_path / "out"))
    assert code == 0, err[-3000:]
    assert server.paths == []
    dead = await dead_letters(job, redis_server)
    assert list(dead) == [target]
    failure, message = dead[target]
    assert (failure, message.startswith("through a proxy")) == ("forbidden_address", True)


async def test_a_name_rebound_between_check_and_connect_is_never_connected_to(
    server: WatchedServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    seed = server.url("/rebound", host="localhost")
    assert server.reachable_as("localhost")  # unguarded, the name reaches the server
    answers = tmp_path / "dns.json"
    answers.write_text(json.dumps({"localhost": [[PUBLIC], ["127.0.0.1"]]}))
    job = write_job(
        tmp_path,
        "graph",
        {},
        {"RETRY_TIMES": 0},
        seeds=[seed],
        scope={"allowPrivateNetworks": False, "allowedDomains": ["localhost"]},
    )
    code, err = finish(scripted_worker(job, answers, redis_server, tmp_path / "out"))
    assert code == 0, err[-3000:]
    assert server.paths == ["/probe"]
    # The check got the public answer, the connect the rebound one (and refused it).
    dead = await dead_letters(job, redis_server)
    assert lookups_of(answers) == [("localhost", PUBLIC), ("localhost", "127.0.0.1")]
    assert list(dead) == [seed]
    failure, message = dead[seed]
    assert failure == "forbidden_address"
    assert message.startswith("at connect time: localhost resolves to 127.0.0.1"), message


def scripted_worker(
    job: Path, answers: Path, redis: RedisServer, out: Path
) -> subprocess.Popen[str]:
    """A Scrapy worker whose guard asks ``answers`` for DNS (``tests/support/scripted_dns.py``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.scripted_dns", str(job), str(answers), str(out),
         "w1", redis.url],
        cwd=PROJECT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
