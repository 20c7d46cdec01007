"""A Redis that stops answering is one error, FrontierUnavailable, from every public method.

The frontier is the one place that speaks Redis, so it is the one place that translates
redis-py's errors: no caller (worker, operator, local runner) should ever see a RedisError.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from crawlfleet.errors import FrontierUnavailable
from crawlfleet.frontier import (
    Backpressure,
    Failure,
    Frontier,
    FrontierLimits,
    Link,
    RobotsCache,
    RobotsEntry,
    canonicalize,
)
from crawlfleet.local.redis_server import RedisServer
from tests.support.specs import frontier_settings

Call = Callable[[Frontier], Awaitable[object]]


async def _first_dead_letter(frontier: Frontier) -> object:
    return [letter async for letter in frontier.dead_letters()]


async def _robots_fetch_once(frontier: Frontier) -> object:
    async def fetch(stored: RobotsEntry | None) -> RobotsEntry:
        return RobotsEntry(404, "", 0.0)

    return await frontier.robots.fetch_once(
        "http://a.example", fetch, fresh=lambda entry: True, lock_seconds=1.0
    )


URL = canonicalize("http://a.example/")

#: One call per public method that speaks to Redis.
CALLS: dict[str, Call] = {
    "add_if_new": lambda f: f.add_if_new([URL]),
    "contains": lambda f: f.contains([URL]),
    "enqueue": lambda f: f.enqueue([Link(URL, 1, "")]),
    "seed": lambda f: f.seed([URL]),
    "claim": lambda f: f.claim("w1", 1),
    "ack": lambda f: f.ack("w1", ["1\tx"]),
    "fail": lambda f: f.fail("w1", [Failure("1\tx", "http_500", "boom", retryable=True)]),
    "extend": lambda f: f.extend("w1", ["1\tx"]),
    "release": lambda f: f.release("w1", ["1\tx"]),
    "requeue_expired": lambda f: f.requeue_expired(),
    "requeue_owner": lambda f: f.requeue_owner("w1"),
    "set_host_delay": lambda f: f.set_host_delay("a.example", 1.0),
    "defer_host": lambda f: f.defer_host("a.example", 1.0, status=503),
    "pace": lambda f: f.pace("a.example"),
    "heartbeat": lambda f: f.heartbeat("w1", {}),
    "forget_worker": lambda f: f.forget_worker("w1"),
    "workers": lambda f: f.workers(),
    "stats": lambda f: f.stats(),
    "is_complete": lambda f: f.is_complete(),
    "dead_letters": _first_dead_letter,
    "record_output_files": lambda f: f.record_output_files(
        [{"path": "pages/a.jsonl", "size": 1, "sha256": "0" * 64, "records": 1}]
    ),
    "output_files": lambda f: f.output_files(),
    "claim_output_finish": lambda f: f.claim_output_finish("w1", 60),
    "output_finished": lambda f: f.output_finished(),
    "mark_output_finished": lambda f: f.mark_output_finished("{}"),
    "delete": lambda f: f.delete(),
    "ping": lambda f: f.ping(),
    "memory": lambda f: f.memory(),
    "set_pressure": lambda f: f.set_pressure(Backpressure()),
    "retune": lambda f: f.retune(FrontierLimits(per_host=2, host_delay_seconds=1.0)),
    "scope_rules": lambda f: f.scope_rules(),
    "set_scope_rules": lambda f: f.set_scope_rules(((), ("/private/",))),
    "revisit_states": lambda f: f.revisit_states([URL]),
    "promote_due": lambda f: f.promote_due(),
    "begin_run": lambda f: f.begin_run("20261202T081500Z"),
    "commit_run": lambda f: f.commit_run("20261202T081500Z"),
    "current_run": lambda f: f.current_run(),
    "tracked_bytes": lambda f: f.tracked_bytes(),
    "acquire_file_slot": lambda f: f.acquire_file_slot("a.example", "1\tx", 1, 60.0),
    "extend_file_slots": lambda f: f.extend_file_slots({"a.example": ["1\tx"]}, 60.0),
    "release_file_slot": lambda f: f.release_file_slot("a.example", "1\tx"),
    "reserve_file_bytes": lambda f: f.reserve_file_bytes("l", 1024, 0, ttl_seconds=5),
    "settle_file_bytes": lambda f: f.settle_file_bytes("l", 1024),
    "claim_content": lambda f: f.claim_content("ab" * 32, "files/sha256/ab/" + "ab" * 32),
    "count_files": lambda f: f.count_files(stored=1, bytes=1024),
    "file_stats": lambda f: f.file_stats(),
    "robots.read": lambda f: f.robots.read(["http://a.example"]),
    "robots.fetch_once": _robots_fetch_once,
}


def _public_redis_methods() -> set[str]:
    """Every public coroutine (or async generator) method, bar closing the client."""
    names = set()
    for prefix, cls in (("", Frontier), ("robots.", RobotsCache)):
        for name, member in vars(cls).items():
            if name.startswith("_") or name == "aclose" or isinstance(member, classmethod):
                continue
            if inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member):
                names.add(prefix + name)
    return names


def test_every_public_method_has_a_case() -> None:
    assert set(CALLS) == _public_redis_methods()


@pytest.fixture
async def stopped(tmp_path: Path) -> AsyncIterator[tuple[Frontier, str]]:
    """A frontier opened on a real redis-server that has since been stopped."""
    server = RedisServer(tmp_path / "redis").start()
    settings = frontier_settings("test.unavailable", {"concurrency": {"hostDelaySeconds": 0.0}})
    frontier = await Frontier.connect(server.url, settings, timeout_seconds=1.0)
    await frontier.seed([URL])
    server.stop()
    yield frontier, server.url
    await frontier.aclose()


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_stopped_redis_is_frontier_unavailable(
    stopped: tuple[Frontier, str], name: str
) -> None:
    frontier, _ = stopped
    with pytest.raises(FrontierUnavailable):
        await CALLS[name](frontier)


async def test_opening_on_a_stopped_redis_is_frontier_unavailable(
    stopped: tuple[Frontier, str],
) -> None:
    frontier, url = stopped
    settings = frontier_settings("test.unavailable")
    with pytest.raises(FrontierUnavailable):
        await Frontier.connect(url, settings, timeout_seconds=1.0)
    with pytest.raises(FrontierUnavailable):
        await Frontier.open(frontier.client, settings)
