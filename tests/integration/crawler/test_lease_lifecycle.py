"""The lease book (crawlfleet/crawler/worker/leases.py) against a real redis-server, driven through
random sequences of what happens to leases in a worker: claims, responses, refusals before any
request, deferrals, output written and made durable (or never), SIGTERM, leases lost to the
fleet (requeued while held), heartbeats and a Redis restart (AOF on).

After every step: each lease the book holds is in exactly one stage and is the frontier's (its
token exists there); the frontier's in-flight count of every host equals this worker's leases
that still hold a slot there (fetching, or their freeing not sent yet), and the global leased
count equals the book's. At the end, once everything held is settled, every URL is acked,
dead-lettered or queued -- none in between.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)
from prometheus_client import CollectorRegistry

from crawlfleet.crawler.worker.flow import worker_counters
from crawlfleet.crawler.worker.leases import LeaseBook, Stage
from crawlfleet.crawler.worker.metrics import WorkerMetrics
from crawlfleet.errors import FrontierUnavailable
from crawlfleet.frontier import Failure, Frontier, Link, canonicalize
from crawlfleet.local.redis_server import RedisServer
from tests.support.slots import read_slots
from tests.support.specs import frontier_settings

pytestmark = pytest.mark.slow

JOB = "test.lifecycle"
WORKER = "w1"
HOSTS = ("a.test", "b.test", "c.test")
URLS = [canonicalize(f"http://{host}/{n}") for host in HOSTS for n in range(12)]


class LeaseLifecycle(RuleBasedStateMachine):
    """See the module docstring. ``server_dir`` is set per test (a private redis-server)."""

    server_dir: Path
    leases = Bundle("leases")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.server = RedisServer(self.server_dir, appendonly=True).start()
        self.sync = redis.Redis.from_url(self.server.url)
        self.frontier: Frontier = self.run(
            Frontier.connect(
                self.server.url,
                frontier_settings(
                    JOB,
                    {
                        "concurrency": {"perHost": 2, "hostDelaySeconds": 0.0},
                        "retry": {"taskAttempts": 3},
                        "lease": {"ttlSeconds": 60.0},
                    },
                ),
                timeout_seconds=1.0,
            )
        )
        self.counters = worker_counters()
        self.book = LeaseBook(
            self.frontier,
            WORKER,
            metrics=WorkerMetrics(CollectorRegistry()),
            counters=self.counters,
        )
        self.generation = 0
        self.restarts = 0

    def run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            self._settle_everything()
        finally:
            self.run(self.frontier.aclose())
            self.loop.close()
            self.sync.close()
            self.server.stop()

    # -- steps --------------------------------------------------------------------------

    @initialize()
    def seed(self) -> None:
        self.run(self.frontier.enqueue([Link(url, 0) for url in URLS], seeding=True))

    @rule(target=leases, room=st.integers(1, 6))
    def claim(self, room: int):  # type: ignore[no-untyped-def]
        claimed = self.run(self.book.claim(room)) or []
        return multiple(*(lease.lease_id for lease in claimed))

    @rule(lease_id=leases)
    def response_arrives(self, lease_id: str) -> None:
        self.book.fetched(lease_id)

    @rule(lease_id=consumes(leases), retryable=st.booleans())
    def refused_before_any_request(self, lease_id: str, retryable: bool) -> None:
        """robots.txt, the guard or an error of ours: the slot goes back, the lease fails."""
        self.book.fetched(lease_id)
        self.book.fail_later(lease_id, Failure(lease_id, "robots_disallowed", "no", retryable))

    @rule(lease_id=consumes(leases))
    def deferred(self, lease_id: str) -> None:
        """robots.txt unreadable: given back before any request, no attempt counted."""
        entry = self.book.get(lease_id)
        if entry is not None and entry.stage is Stage.FETCHING:
            self.run(self.book.defer(lease_id, entry.lease.host, 0.0))

    @rule(data=st.data())
    def written(self, data: st.DataObject) -> None:
        """A flush: some processed leases' records go into a new output generation."""
        processing = sorted(self.book.lease_ids(Stage.PROCESSING))
        if not processing:
            return
        chosen = data.draw(st.lists(st.sampled_from(processing), min_size=1, unique=True))
        self.generation += 1
        self.run(self.book.written(chosen, self.generation))

    @rule(data=st.data())
    def durable(self, data: st.DataObject) -> None:
        """An output generation became durable: its leases are settled, once."""
        waiting = self.book.waiting_generations()
        if waiting:
            self.run(self.book.durable(data.draw(st.sampled_from(waiting)), ()))

    @rule()
    def heartbeat(self) -> None:
        self.run(self.book.keep_alive())

    @rule(data=st.data())
    def lease_lost(self, data: st.DataObject) -> None:
        """The fleet took this worker's leases back (found gone): the book learns at its next
        heartbeat, and counts them lost once."""
        if not len(self.book):
            return
        before = self.counters["leases_lost"]
        held = len(self.book)
        self.run(self.frontier.requeue_owner(WORKER, ended=True))
        self.run(self.book.keep_alive())
        assert len(self.book) == 0
        assert self.counters["leases_lost"] == before + held

    @rule()
    def sigterm(self) -> None:
        """Shutdown: everything not settled goes back, no attempt counted."""
        self.run(self.book.release_all("SIGTERM"))
        assert len(self.book) == 0

    @precondition(lambda self: self.restarts < 1)
    @rule()
    def redis_restarts(self) -> None:
        """Redis goes down (a claim sees it, and waits), then comes back with its AOF."""
        self.restarts += 1
        self.server.stop()
        assert self.run(self.book.claim(1)) is None  # no answer: back off, nothing lost
        assert self.book.retry_in_seconds > 0
        self.server.start()

    # -- what must hold -----------------------------------------------------------------

    @invariant()
    def stages_and_slots_agree_with_the_frontier(self) -> None:
        entries = [self.book.get(lease_id) for lease_id in self.book.lease_ids()]
        assert all(entry is not None and entry.stage in Stage for entry in entries)
        for stage in Stage:  # the O(1) counts follow every move
            assert self.book.count(stage) == len(self.book.lease_ids(stage))
        account = read_slots(self.sync, JOB)
        assert account.wrong == {}
        assert account.held == Counter()
        assert account.fetching == self.book.slots_in_frontier()
        leased = int(self.sync.hget(f"cf:{{{JOB}}}:stats", "leased") or 0)
        assert leased == len(self.book)

    # -- helpers --------------------------------------------------------------------------

    def _settle_everything(self) -> None:
        """Every lease settled, then every URL crawled or given up: nothing in between."""
        for lease_id in self.book.lease_ids():
            self.book.fetched(lease_id)
        self.run(self.book.written(self.book.lease_ids(), None))
        for _ in range(200):
            claimed = self.run(self.book.claim(10))
            if not claimed:
                break
            for lease in claimed:
                self.book.fetched(lease.lease_id)
            self.run(self.book.written([lease.lease_id for lease in claimed], None))
        stats = self.run(self.frontier.stats())
        assert stats.leased == 0
        assert stats.queued == 0
        assert stats.delayed == 0
        assert stats.crawled + stats.dead == len(URLS)


def test_every_lease_is_settled_once_and_every_slot_freed_once(tmp_path: Path) -> None:
    runs = iter(range(10_000))

    class Machine(LeaseLifecycle):
        def __init__(self) -> None:
            type(self).server_dir = tmp_path / f"redis-{next(runs)}"
            super().__init__()

    Machine.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    Machine.TestCase().runTest()


@asynccontextmanager
async def _one_book(
    tmp_path: Path, *, appendonly: bool = False
) -> AsyncIterator[tuple[RedisServer, Frontier, dict[str, float], LeaseBook]]:
    """A private redis-server, the job's frontier on it, and one worker's lease book over it
    (perHost 4, no delay, leases of a minute), with the counters the book keeps."""
    server = RedisServer(tmp_path / "redis", appendonly=appendonly).start()
    job = {"concurrency": {"perHost": 4, "hostDelaySeconds": 0.0}, "lease": {"ttlSeconds": 60.0}}
    frontier = await Frontier.connect(server.url, frontier_settings(JOB, job), timeout_seconds=1.0)
    counters = worker_counters()
    book = LeaseBook(
        frontier, WORKER, metrics=WorkerMetrics(CollectorRegistry()), counters=counters
    )
    try:
        yield server, frontier, counters, book
    finally:
        await frontier.aclose()
        server.stop()


async def test_two_settle_calls_at_once_send_each_settlement_once(tmp_path: Path) -> None:
    """Settlements that failed (Redis away) wait in the book; when it answers again, the
    flush and a replay of held links may both call settle at once: each settlement is sent,
    counted and removed by one of them (CI saw the other remove it twice: a ValueError that
    failed a flush)."""
    async with _one_book(tmp_path, appendonly=True) as (server, frontier, counters, book):
        await frontier.enqueue([Link(url, 0) for url in URLS[:4] + URLS[12:16]], seeding=True)
        claimed = await book.claim(8) or []
        assert len(claimed) == 8
        for generation, half in ((1, claimed[:4]), (2, claimed[4:])):
            await book.written([lease.lease_id for lease in half], generation)
        server.stop()
        for generation in (1, 2):
            with pytest.raises(FrontierUnavailable):
                await book.durable(generation, ())
        assert book.unsettled == 2
        server.start()
        settled = await asyncio.gather(book.settle(()), book.settle(()))
        assert book.unsettled == 0
        assert sorted(i for s in settled for i in s.lease_ids) == sorted(
            lease.lease_id for lease in claimed
        )  # each lease reported settled by one call only
        assert counters["succeeded"] == 8
        assert (await frontier.stats()).crawled == 8


async def test_leases_said_written_into_a_generation_already_durable_are_settled(
    tmp_path: Path,
) -> None:
    """The worker writes a batch, heartbeats, then says the batch written; an idle worker's
    rotate (or the file's age) can make the generation durable in between. Its leases were
    listed as waiting for it then, and waited for good: a worker that never exited with its
    pages on disk (CI: two tests, once each in a few thousand runs)."""
    async with _one_book(tmp_path) as (_, frontier, _, book):
        await frontier.enqueue([Link(url, 0) for url in URLS[:3]], seeding=True)
        claimed = await book.claim(3) or []
        assert len(claimed) == 3
        first, late = claimed[:1], claimed[1:]
        await book.written([lease.lease_id for lease in first], 1)
        # Generation 1 becomes durable before the second batch written into it is said so.
        assert sorted((await book.durable(1, ())).lease_ids) == [first[0].lease_id]
        book.fail_later(late[0].lease_id, Failure(late[0].lease_id, "http_404", "gone", False))
        settled = await book.written([lease.lease_id for lease in late], 1)
        assert sorted(settled.lease_ids) == sorted(lease.lease_id for lease in late)
        assert book.generations == 0
        assert len(book) == 0
        stats = await frontier.stats()
        assert (stats.crawled, stats.dead, stats.leased) == (2, 1, 0)
