"""RobotsPolicy against a real redis-server: semantics, fleet-wide cache, TTLs, delays, batches.

The robots.txt fetcher is an injected callable, so these tests use a small honest fake that
answers canned bodies and counts calls; everything else (the frontier's robots hash, its lock
and store script, HMGET) is real Redis.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest
import redis.asyncio as aioredis

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.fetch import FetchResult
from crawlfleet.crawler.politeness.robots import (
    LOCAL_CACHE_BYTES,
    MAX_ROBOTS_BYTES,
    RobotsAccess,
    RobotsAnswer,
    RobotsPolicy,
    product_token,
    robots_answer,
)
from crawlfleet.errors import ConfigError, InvalidURL
from crawlfleet.frontier import Frontier, JobKeys
from crawlfleet.frontier.connection import connect
from crawlfleet.frontier.robots_cache import RobotsCacheState
from crawlfleet.local.redis_server import RedisServer
from tests.support.specs import frontier_settings, job_spec, merged

UA = "crawlfleet/0.1 (+https://example.invalid/bot)"
A, B, C = "http://a.test", "http://b.test", "https://c.test:8443"

_jobs = itertools.count()


#: A canned answer: a ``RobotsAnswer``, or ``(status, body)`` for one without Retry-After.
Canned = RobotsAnswer | tuple[int | None, bytes] | BaseException


class FakeRobots:
    """Canned answers per robots URL (404 when unknown); records every call."""

    def __init__(self, answers: Mapping[str, Canned], *, delay_seconds: float = 0.0) -> None:
        self.answers = dict(answers)
        self.delay_seconds = delay_seconds
        self.calls: list[str] = []

    async def __call__(self, url: str) -> RobotsAnswer:
        self.calls.append(url)
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        answer = self.answers.get(url, (404, b"not found"))
        if isinstance(answer, BaseException):
            raise answer
        return answer if isinstance(answer, RobotsAnswer) else RobotsAnswer(*answer)


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = connect(redis_server.url)
    yield client
    await client.aclose()


@pytest.fixture
async def frontier(client: aioredis.Redis) -> Frontier:
    return await Frontier.open(client, frontier_settings(f"test.robots-{next(_jobs)}"))


@pytest.fixture
def keys(frontier: Frontier) -> JobKeys:
    return frontier.keys


@pytest.fixture
def clock() -> Clock:
    return Clock()


PolicyFactory = Callable[..., RobotsPolicy]
#: A fetch deadline short enough to wait out in a test (the model keeps its timeouts below it).
QUICK_FETCH = {"connectTimeoutSeconds": 0.1, "readTimeoutSeconds": 0.1, "totalTimeoutSeconds": 0.1}


@pytest.fixture
def make_policy(frontier: Frontier, clock: Clock) -> PolicyFactory:
    """A new policy (one "worker") on the test's job; every call shares Redis and the clock."""

    def _make(
        robots_txt: FakeRobots,
        /,
        local_cache_size: int = 4096,
        local_cache_bytes: int = LOCAL_CACHE_BYTES,
        **changes: Any,
    ) -> RobotsPolicy:
        spec = job_spec(merged({"userAgent": UA}, changes))
        return RobotsPolicy.from_spec(
            frontier.robots,
            robots_txt,
            spec,
            clock=clock,
            local_cache_size=local_cache_size,
            local_cache_bytes=local_cache_bytes,
        )

    return _make


def robots(text: str) -> tuple[int, bytes]:
    return 200, text.encode()


# -- semantics --------------------------------------------------------------------------------


async def test_disallow_rule_is_honoured(make_policy: PolicyFactory) -> None:
    fetch = FakeRobots({A + "/robots.txt": robots("User-agent: *\nDisallow: /private\n")})
    policy = make_policy(fetch)
    assert await policy.allowed(A + "/private/page") is False
    assert await policy.allowed(A + "/public") is True
    assert await policy.allowed(A + "/robots.txt") is True
    assert fetch.calls == [A + "/robots.txt"]


async def test_group_for_our_product_token_wins_over_star(make_policy: PolicyFactory) -> None:
    text = "User-agent: crawlfleet\nDisallow: /\n\nUser-agent: *\nAllow: /\n"
    fetch = FakeRobots({A + "/robots.txt": robots(text)})
    assert await make_policy(fetch).allowed(A + "/x") is False
    assert await make_policy(fetch, userAgent="otherbot/2.0").allowed(A + "/x") is True


def test_product_token_is_the_part_before_the_slash() -> None:
    assert product_token(UA) == "crawlfleet"
    assert product_token("MyBot") == "mybot"
    with pytest.raises(ConfigError):
        product_token("/1.0")


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ((404, b"<html>nope</html>"), True),
        ((410, b""), True),
        ((401, b""), True),
        ((301, b""), True),
        ((500, b"User-agent: *\nAllow: /\n"), False),
        ((503, b""), False),
        ((429, b""), False),
        ((None, b""), False),
        (ConnectionResetError("reset"), False),
    ],
)
async def test_status_semantics(
    make_policy: PolicyFactory,
    answer: Canned,
    expected: bool,
) -> None:
    policy = make_policy(FakeRobots({A + "/robots.txt": answer}))
    assert await policy.allowed(A + "/page") is expected


async def test_hung_fetch_counts_as_unreachable(make_policy: PolicyFactory) -> None:
    fetch = FakeRobots({}, delay_seconds=5.0)
    policy = make_policy(fetch, fetch=QUICK_FETCH)
    assert await policy.allowed(A + "/page") is False


async def test_obey_false_never_fetches(make_policy: PolicyFactory) -> None:
    fetch = FakeRobots({A + "/robots.txt": robots("User-agent: *\nDisallow: /\n")})
    policy = make_policy(fetch, robots={"obey": False})
    assert await policy.allowed(A + "/x") is True
    assert await policy.allowed(B + "/y") is True
    assert await policy.crawl_delay(A) is None
    assert fetch.calls == []


async def test_invalid_url_is_refused(make_policy: PolicyFactory) -> None:
    with pytest.raises(InvalidURL):
        await make_policy(FakeRobots({})).allowed("ftp://a.test/file")


async def test_body_is_capped_at_500_kib(
    make_policy: PolicyFactory, client: aioredis.Redis, keys: JobKeys
) -> None:
    head = "User-agent: *\nDisallow: /early\n"
    filler = "# " + "x" * 97 + "\n"  # 100-byte comment lines
    body = head + filler * (MAX_ROBOTS_BYTES // 100) + "Disallow: /late\n"
    assert len(body.encode()) > MAX_ROBOTS_BYTES
    policy = make_policy(FakeRobots({A + "/robots.txt": robots(body)}))
    assert await policy.allowed(A + "/early") is False
    assert await policy.allowed(A + "/late") is True  # past the cap: ignored
    stored = json.loads(await client.hget(keys.robots, A) or "{}")
    assert len(stored["body"].encode()) <= MAX_ROBOTS_BYTES
    assert stored["body"].endswith("\n")  # cut at a line break


# -- fleet-wide cache -------------------------------------------------------------------------


async def test_answer_is_shared_through_redis(
    make_policy: PolicyFactory, client: aioredis.Redis, keys: JobKeys, clock: Clock
) -> None:
    fetch = FakeRobots({A + "/robots.txt": robots("User-agent: *\nDisallow: /a\n")})
    first, second = make_policy(fetch), make_policy(fetch)
    assert await first.allowed(A + "/a") is False
    assert await second.allowed(A + "/a") is False  # another worker: reads Redis
    assert await second.allowed(A + "/b") is True
    assert len(fetch.calls) == 1
    stored = json.loads(await client.hget(keys.robots, A) or "{}")
    assert stored == {
        "status": 200,
        "body": "User-agent: *\nDisallow: /a\n",
        "fetched_at": clock.now,
    }


async def test_ttl_expiry_refetches(make_policy: PolicyFactory, clock: Clock) -> None:
    url = A + "/robots.txt"
    fetch = FakeRobots({url: robots("User-agent: *\nDisallow: /\n")})
    policy = make_policy(fetch, robots={"ttlSeconds": 3600.0})
    assert await policy.allowed(A + "/x") is False
    clock.now += 3599
    assert await policy.allowed(A + "/x") is False
    assert len(fetch.calls) == 1
    fetch.answers[url] = (404, b"")
    clock.now += 2
    assert await policy.allowed(A + "/x") is True  # local and Redis entries both expired
    assert len(fetch.calls) == 2
    assert await make_policy(fetch).allowed(A + "/x") is True  # the fresh answer is shared
    assert len(fetch.calls) == 2


async def test_server_error_is_retried_after_the_short_ttl(
    make_policy: PolicyFactory, clock: Clock
) -> None:
    url = A + "/robots.txt"
    fetch = FakeRobots({url: (503, b"")})
    policy = make_policy(fetch, robots={"errorTtlSeconds": 600.0})
    assert await policy.allowed(A + "/x") is False
    clock.now += 599
    assert await policy.allowed(A + "/x") is False
    assert len(fetch.calls) == 1
    fetch.answers[url] = robots("User-agent: *\nAllow: /\n")
    clock.now += 2  # far below the 24 h TTL of a real answer
    assert await policy.allowed(A + "/x") is True
    assert len(fetch.calls) == 2


async def test_unreadable_cache_entry_is_refetched(
    make_policy: PolicyFactory, client: aioredis.Redis, keys: JobKeys
) -> None:
    await client.hset(keys.robots, A, "{not json")
    fetch = FakeRobots({A + "/robots.txt": robots("User-agent: *\nDisallow: /\n")})
    assert await make_policy(fetch).allowed(A + "/x") is False
    assert len(fetch.calls) == 1


async def test_concurrent_callers_share_one_fetch(make_policy: PolicyFactory) -> None:
    fetch = FakeRobots(
        {A + "/robots.txt": robots("User-agent: *\nDisallow: /no\n")}, delay_seconds=0.3
    )
    workers = [make_policy(fetch) for _ in range(3)]
    checks = [w.allowed(A + f"/no/{i}") for i, w in enumerate(workers * 5)]
    assert await asyncio.gather(*checks) == [False] * 15
    assert len(fetch.calls) == 1  # one worker held the lock, the others waited for its answer


async def test_lock_of_a_dead_worker_is_waited_out(
    make_policy: PolicyFactory, client: aioredis.Redis, keys: JobKeys
) -> None:
    await client.set(keys.robots_lock(A), "dead-worker", px=300)
    fetch = FakeRobots({A + "/robots.txt": robots("User-agent: *\nDisallow: /\n")})
    loop = asyncio.get_running_loop()
    started = loop.time()
    workers = [make_policy(fetch) for _ in range(4)]
    answers = await asyncio.gather(*(w.allowed(A + "/x") for w in workers))
    assert answers == [False] * 4
    assert loop.time() - started >= 0.25
    assert len(fetch.calls) == 1  # after the dead lock expired, one worker took it over
    assert await client.exists(keys.robots_lock(A)) == 0  # and released it after the fetch


# -- crawl delay ------------------------------------------------------------------------------


async def test_crawl_delay_is_read_and_clamped(make_policy: PolicyFactory) -> None:
    fetch = FakeRobots(
        {
            A + "/robots.txt": robots("User-agent: *\nCrawl-delay: 2.5\n"),
            B + "/robots.txt": robots("User-agent: *\nCrawl-delay: 3600\n"),
            C + "/robots.txt": robots("User-agent: crawlfleet\nRequest-rate: 1/10s\n"),
        }
    )
    policy = make_policy(fetch, robots={"maxCrawlDelaySeconds": 60.0})
    assert await policy.crawl_delay(A) == 2.5
    assert await policy.crawl_delay(B) == 60.0
    assert await policy.crawl_delay(C) == 10.0
    assert await policy.crawl_delay("http://d.test") is None  # 404: no robots, no delay
    assert len(fetch.calls) == 4


async def test_crawl_delay_by_frontier_host_key(make_policy: PolicyFactory) -> None:
    fetch = FakeRobots({C + "/robots.txt": robots("User-agent: *\nCrawl-delay: 4\n")})
    first = make_policy(fetch)
    assert await first.crawl_delay("c.test:8443") is None  # never fetched by a bare host
    assert fetch.calls == []
    assert await first.allowed(C + "/page") is True
    assert await first.crawl_delay("c.test:8443") == 4.0
    assert await make_policy(fetch).crawl_delay("c.test:8443") == 4.0  # from Redis
    assert len(fetch.calls) == 1


# -- Redis reads ------------------------------------------------------------------------------


async def _hmget_calls(client: aioredis.Redis) -> int:
    """HMGETs sent by clients: each frontier script reads the job's settings with one more."""
    stats = await client.info("commandstats")

    def calls(command: str) -> int:
        return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))

    return calls("hmget") - calls("evalsha") - calls("eval")


async def test_each_host_is_fetched_once_and_read_from_redis_once_per_worker(
    make_policy: PolicyFactory, client: aioredis.Redis
) -> None:
    fetch = FakeRobots(
        {
            A + "/robots.txt": robots("User-agent: *\nDisallow: /x\n"),
            B + "/robots.txt": (500, b""),
        }
    )
    urls = [A + "/x", A + "/y", B + "/x", C + "/x", A + "/x/1", C + "/z"]
    expected = [False, True, False, True, False, True]

    async def answers(policy: RobotsPolicy) -> list[bool]:
        return [await policy.allowed(url) for url in urls]

    policy = make_policy(fetch)
    before = await _hmget_calls(client)
    assert await answers(policy) == expected
    assert await _hmget_calls(client) - before == 3  # one read per origin, then local
    assert sorted(fetch.calls) == sorted(o + "/robots.txt" for o in (A, B, C))

    other = make_policy(fetch)  # another worker: one read per origin, no fetch
    before = await _hmget_calls(client)
    assert await answers(other) == expected
    assert await _hmget_calls(client) - before == 3
    assert len(fetch.calls) == 3

    before = await _hmget_calls(client)
    assert await answers(other) == expected  # local cache: no Redis at all
    assert await _hmget_calls(client) == before


async def test_local_cache_is_bounded(make_policy: PolicyFactory) -> None:
    fetch = FakeRobots({})
    policy = make_policy(fetch, local_cache_size=2)
    for origin in (A, B, C):
        assert await policy.allowed(origin + "/") is True
    assert await policy.allowed(A + "/") is True  # evicted locally, read back from Redis
    assert len(fetch.calls) == 3
    shared, local = policy.cache_states()
    assert (local.origins, local.evictions) == (2, 2)
    assert (shared.origins, shared.evictions) == (3, 0)


async def test_local_cache_is_bounded_in_bytes_and_says_what_it_holds(
    make_policy: PolicyFactory,
) -> None:
    body = "User-agent: *\n" + "Disallow: /private\n" * 50  # 964 characters
    fetch = FakeRobots({o + "/robots.txt": robots(body) for o in (A, B, C)})
    policy = make_policy(fetch, local_cache_bytes=2 * len(body))
    for origin in (A, B, C):
        assert await policy.allowed(origin + "/private") is False
    shared, local = policy.cache_states()
    assert local == RobotsCacheState(origins=2, bytes=2 * len(body), evictions=1)
    assert (shared.origins, shared.evictions) == (3, 0)
    assert await policy.allowed(A + "/private") is False  # read back from Redis, not fetched
    assert len(fetch.calls) == 3
    assert policy.cache_states()[1] == RobotsCacheState(2, 2 * len(body), 2)


# -- RFC 9309: an unreachable robots.txt defers the host ------------------------------------


async def test_unreachable_file_defers_the_host_until_it_is_asked_again(
    make_policy: PolicyFactory, clock: Clock
) -> None:
    url = A + "/robots.txt"
    fetch = FakeRobots({url: (503, b"")})
    policy = make_policy(fetch, robots={"errorTtlSeconds": 10.0, "giveUpAfterSeconds": 1000.0})
    verdict = await policy.check(A + "/x")
    assert verdict.access is RobotsAccess.DEFERRED  # not a Disallow: the URL waits
    assert verdict.retry_in_seconds == pytest.approx(10.0)
    assert "HTTP 503" in verdict.detail
    clock.now += 10.5
    second = await policy.check(A + "/x")
    assert second.access is RobotsAccess.DEFERRED
    assert second.retry_in_seconds == pytest.approx(20.0)  # the wait doubles
    assert len(fetch.calls) == 2
    fetch.answers[url] = robots("User-agent: *\nDisallow: /private\n")
    clock.now += 20.5
    back = await policy.check(A + "/x")
    assert back.access is RobotsAccess.ALLOWED
    assert back.recovered  # the first good answer after failures: undo the deferral
    assert (await policy.check(A + "/private/1")).access is RobotsAccess.DISALLOWED
    assert len(fetch.calls) == 3


async def test_a_503_with_retry_after_is_asked_again_after_it_not_after_the_error_ttl(
    make_policy: PolicyFactory, client: aioredis.Redis, keys: JobKeys, clock: Clock
) -> None:
    url = A + "/robots.txt"
    fetch = FakeRobots({url: RobotsAnswer(503, retry_after_seconds=1.0)})
    policy = make_policy(fetch, robots={"errorTtlSeconds": 600.0})
    verdict = await policy.check(A + "/x")
    assert verdict.access is RobotsAccess.DEFERRED
    assert verdict.status == 503
    assert verdict.retry_in_seconds == pytest.approx(1.0)
    assert verdict.detail.endswith("(last answer: HTTP 503); next try in 1 s")
    # The fleet's copy says the same: one HGET gives the host's last status and next try.
    (stored,) = await stored_entries(client, keys, A)
    assert (stored["status"], stored["next_try_at"]) == (503, clock.now + 1.0)
    other = make_policy(fetch)  # another worker: the same wait, from Redis
    assert (await other.check(A + "/x")).retry_in_seconds == pytest.approx(1.0)
    assert len(fetch.calls) == 1
    fetch.answers[url] = RobotsAnswer(429, retry_after_seconds=0.0)
    clock.now += 1.01
    again = await policy.check(A + "/x")
    assert (again.status, again.retry_in_seconds) == (429, pytest.approx(1.0))  # at least 1 s
    assert len(fetch.calls) == 2
    fetch.answers[url] = robots("User-agent: *\nDisallow: /private\n")
    clock.now += 1.01
    back = await policy.check(A + "/x")
    assert (back.access, back.recovered) == (RobotsAccess.ALLOWED, True)
    assert len(fetch.calls) == 3
    (stored,) = await stored_entries(client, keys, A)
    assert "next_try_at" not in stored  # a good answer: nothing to wait for


async def test_a_retry_after_past_the_error_ttl_waits_the_error_ttl(
    make_policy: PolicyFactory, clock: Clock
) -> None:
    fetch = FakeRobots({A + "/robots.txt": RobotsAnswer(503, retry_after_seconds=86_400.0)})
    policy = make_policy(fetch, robots={"errorTtlSeconds": 60.0, "giveUpAfterSeconds": 1000.0})
    assert (await policy.check(A + "/x")).retry_in_seconds == pytest.approx(60.0)
    clock.now += 61
    await policy.check(A + "/x")
    assert len(fetch.calls) == 2


async def stored_entries(
    client: aioredis.Redis, keys: JobKeys, *origins: str
) -> list[dict[str, Any]]:
    """The raw shared entries, as any reader of the frontier's robots hash sees them."""
    return [json.loads(value or "{}") for value in await client.hmget(keys.robots, list(origins))]


async def test_a_host_is_given_up_after_the_long_wait(
    make_policy: PolicyFactory, clock: Clock
) -> None:
    fetch = FakeRobots({A + "/robots.txt": ConnectionResetError("reset")})
    policy = make_policy(fetch, robots={"errorTtlSeconds": 60.0, "giveUpAfterSeconds": 100.0})
    assert (await policy.check(A + "/x")).access is RobotsAccess.DEFERRED
    clock.now += 61
    assert (await policy.check(A + "/x")).access is RobotsAccess.DEFERRED  # 61 s < 100 s
    clock.now += 121
    verdict = await policy.check(A + "/x")
    assert verdict.access is RobotsAccess.UNAVAILABLE
    assert "no response" in verdict.detail
    assert await policy.allowed(A + "/x") is False


async def test_the_last_good_copy_is_obeyed_while_the_file_is_unreachable(
    make_policy: PolicyFactory, client: aioredis.Redis, keys: JobKeys, clock: Clock
) -> None:
    url = A + "/robots.txt"
    body = "User-agent: *\nDisallow: /private\nSitemap: http://a.test/sitemap.xml\n"
    fetch = FakeRobots({url: robots(body)})
    policy = make_policy(
        fetch, robots={"ttlSeconds": 100.0, "errorTtlSeconds": 5.0, "giveUpAfterSeconds": 50.0}
    )
    assert (await policy.check(A + "/x")).access is RobotsAccess.ALLOWED
    fetch.answers[url] = (500, b"")
    clock.now += 101  # the good answer expired; the refetch fails
    assert (await policy.check(A + "/private/x")).access is RobotsAccess.DISALLOWED
    assert (await policy.check(A + "/x")).access is RobotsAccess.ALLOWED
    clock.now += 10_000  # far past giveUpAfterSeconds: a good copy is never given up
    assert (await policy.check(A + "/x")).access is RobotsAccess.ALLOWED
    stored = json.loads(await client.hget(keys.robots, A) or "{}")
    assert stored["status"] == 500
    assert stored["failures"] >= 2
    assert stored["good"]["body"] == body
    assert stored["good"]["sitemaps"] == ["http://a.test/sitemap.xml"]


async def test_sitemap_lines_are_kept_in_the_shared_entry(
    make_policy: PolicyFactory, client: aioredis.Redis, keys: JobKeys
) -> None:
    body = "Sitemap: http://a.test/s1.xml\nUser-agent: *\nDisallow:\nsitemap: /s2.xml\n"
    await make_policy(FakeRobots({A + "/robots.txt": robots(body)})).check(A + "/")
    stored = json.loads(await client.hget(keys.robots, A) or "{}")
    assert stored["sitemaps"][0] == "http://a.test/s1.xml"
    assert len(stored["sitemaps"]) == 2
    assert "failures" not in stored  # a plain entry stays small
    assert "good" not in stored


async def test_sitemaps_are_read_from_the_rules_already_fetched(make_policy: PolicyFactory) -> None:
    body = "Sitemap: http://a.test/s1.xml\nUser-agent: *\nDisallow: /\nsitemap: /s2.xml\n"
    fetch = FakeRobots({A + "/robots.txt": robots(body)})
    policy = make_policy(fetch)
    assert (await policy.check(A + "/sitemap.xml")).access is RobotsAccess.DISALLOWED
    assert await policy.sitemaps(A) == ("http://a.test/s1.xml", "/s2.xml")
    assert fetch.calls == [A + "/robots.txt"]  # once, for the check and the sitemaps
    assert await make_policy(FakeRobots({})).sitemaps("http://b.test") == ()  # a 404: none


async def test_sitemaps_are_fetched_for_themselves_when_robots_are_not_obeyed(
    make_policy: PolicyFactory,
) -> None:
    fetch = FakeRobots({A + "/robots.txt": robots("User-agent: *\nDisallow: /\nSitemap: /s.xml\n")})
    policy = make_policy(fetch, robots={"obey": False})
    assert await policy.allowed(A + "/anything") is True
    assert fetch.calls == []
    assert await policy.sitemaps(A) == ("/s.xml",)
    assert fetch.calls == [A + "/robots.txt"]


@pytest.mark.parametrize(
    ("status", "failure", "expected"),
    [
        (200, None, RobotsAnswer(200, b"rules")),
        # more than 5 hops: no robots.txt
        (302, FailureClass.TOO_MANY_REDIRECTS, RobotsAnswer(302)),
        (301, FailureClass.REDIRECT_LOOP, RobotsAnswer(301)),
        (302, FailureClass.TIMEOUT, RobotsAnswer(None)),  # the hop's target did not answer
        (404, FailureClass.HTTP_404, RobotsAnswer(404, retry_after_seconds=7.0)),
        (503, FailureClass.HTTP_5XX, RobotsAnswer(503, retry_after_seconds=7.0)),
        (429, FailureClass.HTTP_429, RobotsAnswer(429, retry_after_seconds=7.0)),
        (200, FailureClass.BODY_TOO_LARGE, RobotsAnswer(None)),  # unread is not "allow all"
        (200, FailureClass.PROTOCOL_ERROR, RobotsAnswer(None)),
        (None, FailureClass.CONNECT_ERROR, RobotsAnswer(None)),
    ],
)
def test_what_a_robots_fetch_means(
    status: int | None, failure: FailureClass | None, expected: RobotsAnswer
) -> None:
    result = FetchResult(
        url=A + "/robots.txt",
        final_url=A + "/robots.txt",
        status=status,
        content_type="text/plain",
        body=b"rules" if failure is None else b"",
        headers={},
        redirects=[],
        attempts=1,
        elapsed_seconds=0.0,
        fetched_at=0.0,
        failure=failure,
        message="",
        retry_after_seconds=7.0,  # the last answer's Retry-After, passed on with its status
        wire_bytes=0,
    )
    assert robots_answer(result) == expected
