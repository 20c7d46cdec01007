"""The file downloads' frontier (spec.files) against a real redis-server: host file slots,
the byte budget, the content index and the counters (docs/frontier.md, "Files").

Nothing here depends on the Bloom backend, so the tests run on the plain one only.
"""

from __future__ import annotations

import asyncio
import random

import pytest
import redis.asyncio as aioredis

from crawlfleet.frontier import FileStats, Frontier
from crawlfleet.frontier.connection import connect
from crawlfleet.frontier.keys import FILE_KEYS
from tests.integration.frontier.conftest import TEST_JOB, OpenFrontier
from tests.support.specs import frontier_settings

HOST = "videos.example"
SHA = "ab" * 32


@pytest.fixture
def backend() -> str:
    """File keys are the same whatever the Bloom filter is."""
    return "bitmap"


def stored_key(sha256: str, run: str = "") -> str:
    return f"{run}files/sha256/{sha256[:2]}/{sha256}"


async def _second_worker(frontier: Frontier, redis_url: str) -> Frontier:
    """Another worker's handle of the same job: its own client, as a separate process has."""
    return await Frontier.open(connect(redis_url), frontier.settings)


# -- host file slots --------------------------------------------------------------------------


async def test_a_host_has_its_limit_of_slots_however_many_ask_at_once(
    open_frontier: OpenFrontier, redis_url: str
) -> None:
    one = await open_frontier()
    two = await _second_worker(one, redis_url)
    try:
        asks = [
            (frontier, f"{i}\tw{i % 2}\tlease")
            for i, frontier in enumerate([one, two] * 20)  # 40 acquirers, two clients
        ]
        held = await asyncio.gather(
            *(frontier.acquire_file_slot(HOST, lease, 3, 60.0) for frontier, lease in asks)
        )
        assert sum(held) == 3
        # Another host has slots of its own.
        assert await one.acquire_file_slot("other.example", "x", 1, 60.0)
        assert not await two.acquire_file_slot("other.example", "y", 1, 60.0)
        # A holder asking again keeps its slot, and takes no second one.
        holder = next(lease for (_, lease), ok in zip(asks, held, strict=True) if ok)
        assert await two.acquire_file_slot(HOST, holder, 3, 60.0)
        assert await one.client.zcard(one.keys.file_slots(HOST)) == 3
    finally:
        await two.aclose()


async def test_a_released_slot_is_free_at_once(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    assert await frontier.acquire_file_slot(HOST, "a", 1, 60.0)
    assert not await frontier.acquire_file_slot(HOST, "b", 1, 60.0)
    await frontier.release_file_slot(HOST, "a")
    assert await frontier.acquire_file_slot(HOST, "b", 1, 60.0)
    await frontier.release_file_slot(HOST, "not a holder")  # harmless


async def test_a_dead_holders_slot_frees_itself_at_its_expiry(
    open_frontier: OpenFrontier, redis_client: aioredis.Redis
) -> None:
    frontier = await open_frontier()
    assert await frontier.acquire_file_slot(HOST, "dead", 1, 0.3)
    assert not await frontier.acquire_file_slot(HOST, "alive", 1, 60.0)
    await asyncio.sleep(0.4)
    assert await frontier.acquire_file_slot(HOST, "alive", 1, 0.3)
    assert await redis_client.zrange(frontier.keys.file_slots(HOST), 0, -1) == ["alive"]
    # The host's key goes with its last holder: an idle host costs nothing.
    await asyncio.sleep(0.4)
    assert await redis_client.exists(frontier.keys.file_slots(HOST)) == 0


@pytest.mark.parametrize("fetched", [False, True])
async def test_an_ended_workers_slots_come_back_with_its_leases_at_once(
    open_frontier: OpenFrontier, fetched: bool
) -> None:
    """A worker whose process is gone (SIGKILL) downloads nothing: requeueing its leases frees
    their file slots in the same script, not a lease ttl later. A worker that may still run
    (an expired lease, ``ended`` False) keeps them until they expire. A download's lease is in
    the fetched form once its file slot counts it (``fetched``): its slot is freed too."""
    frontier = await open_frontier()
    url = f"http://{HOST}/clip.mp4"
    await frontier.seed([url])
    (lease,) = await frontier.claim("w", 1)
    assert await frontier.acquire_file_slot(lease.host, lease.lease_id, 1, 60.0)
    if fetched:
        await frontier.claim("w", 0, [lease.lease_id])
    assert (await frontier.requeue_owner("w", ended=True))[0] == 1
    (again,) = await frontier.claim("w2", 1)
    assert await frontier.acquire_file_slot(again.host, again.lease_id, 1, 60.0)
    assert (await frontier.requeue_owner("w2", ended=False))[0] == 1
    (third,) = await frontier.claim("w3", 1)
    assert not await frontier.acquire_file_slot(third.host, third.lease_id, 1, 60.0)


async def test_extending_keeps_a_slot_past_its_first_expiry(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    assert await frontier.acquire_file_slot(HOST, "long", 1, 0.4)
    assert await frontier.acquire_file_slot("b.example", "other", 2, 0.4)
    await asyncio.sleep(0.2)
    await frontier.extend_file_slots({HOST: ["long"], "b.example": ["other"]}, 60.0)
    await asyncio.sleep(0.4)
    assert not await frontier.acquire_file_slot(HOST, "next", 1, 60.0)
    expiry = await frontier.client.pttl(frontier.keys.file_slots(HOST))
    assert 50_000 < expiry <= 60_000  # the key lives as long as its holder
    await frontier.extend_file_slots({}, 60.0)  # nothing to extend: nothing sent


async def test_a_slot_lost_to_its_expiry_is_not_taken_back_by_extending(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    assert await frontier.acquire_file_slot(HOST, "late", 1, 0.2)
    await asyncio.sleep(0.3)
    assert await frontier.acquire_file_slot(HOST, "next", 1, 60.0)
    await frontier.extend_file_slots({HOST: ["late"]}, 60.0)
    assert await frontier.client.zrange(frontier.keys.file_slots(HOST), 0, -1) == ["next"]


async def test_slot_arguments_are_checked(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    for host, lease, limit, ttl in [
        ("", "a", 1, 1.0),
        ("a b", "a", 1, 1.0),
        (HOST, "", 1, 1.0),
        (HOST, "a", 0, 1.0),
        (HOST, "a", 1, 0.0),
    ]:
        with pytest.raises(ValueError, match="bad"):
            await frontier.acquire_file_slot(host, lease, limit, ttl)


# -- the byte budget --------------------------------------------------------------------------


async def test_concurrent_reservations_never_overshoot_the_budget(
    open_frontier: OpenFrontier, redis_url: str
) -> None:
    one = await open_frontier()
    two = await _second_worker(one, redis_url)
    try:
        budget = 10 * 2**30
        sizes = [random.Random(i).randrange(1, 2**30) for i in range(200)]
        granted = await asyncio.gather(
            *(
                (one if i % 2 else two).reserve_file_bytes(f"l{i}", size, budget, ttl_seconds=60)
                for i, size in enumerate(sizes)
            )
        )
        reserved = sum(size for size, ok in zip(sizes, granted, strict=True) if ok)
        assert 0 < reserved <= budget
        assert not all(granted)
        # Each refusal was right when it was made: nothing smaller than it fits now.
        assert budget - reserved < min(s for s, ok in zip(sizes, granted, strict=True) if not ok)
        assert (await one.file_stats()).reserved == reserved

        # Equal sizes: exactly as many as fit.
        for i, ok in enumerate(granted):
            if ok:
                await one.settle_file_bytes(f"l{i}", 0)
        equal = await asyncio.gather(
            *(one.reserve_file_bytes(f"e{i}", 2**30, budget, ttl_seconds=60) for i in range(30))
        )
        assert sum(equal) == 10
    finally:
        await two.aclose()


async def test_settled_bytes_count_against_the_budget_and_reservations_go(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    budget = 1000
    assert await frontier.reserve_file_bytes("a", 600, budget, ttl_seconds=60)  # declared length
    assert not await frontier.reserve_file_bytes("b", 500, budget, ttl_seconds=60)
    await frontier.settle_file_bytes("a", 550)  # it stored 550
    stats = await frontier.file_stats()
    assert (stats.reserved, stats.settled) == (0, 550)
    assert not await frontier.reserve_file_bytes("c", 451, budget, ttl_seconds=60)
    assert await frontier.reserve_file_bytes("c", 450, budget, ttl_seconds=60)
    await frontier.settle_file_bytes("c", 0)  # a duplicate stores no new bytes
    assert (await frontier.file_stats()).settled == 550
    # Settling a holder with no reservation (settled already, or dropped by a begin_run)
    # releases nothing.
    assert await frontier.reserve_file_bytes("d", 100, budget, ttl_seconds=60)
    await frontier.settle_file_bytes("c", 0)
    assert (await frontier.file_stats()).reserved == 100
    # A holder reserving again replaces its reservation rather than adding to it.
    assert await frontier.reserve_file_bytes("d", 300, budget, ttl_seconds=60)
    assert (await frontier.file_stats()).reserved == 300


async def test_a_reservation_its_holder_never_settles_expires_unless_extended(
    open_frontier: OpenFrontier,
) -> None:
    """A worker killed between reserving and settling (its file stored, its lease not yet
    acked) leaves its reservation behind: it expires with its ttl, so the job's budget is
    whole again; a reservation whose holder's heartbeat extends it (with its file slot) stays."""
    frontier = await open_frontier()
    budget = 1000
    assert await frontier.acquire_file_slot(HOST, "alive", 1, 60.0)
    assert await frontier.reserve_file_bytes("alive", 400, budget, ttl_seconds=0.5)
    assert await frontier.reserve_file_bytes("killed", 500, budget, ttl_seconds=0.5)
    assert not await frontier.reserve_file_bytes("new", 200, budget, ttl_seconds=60)
    for _ in range(3):  # the living holder's heartbeats, past the first ttl
        await asyncio.sleep(0.3)
        await frontier.extend_file_slots({HOST: ["alive"]}, 0.5)
    # The killed holder's 500 bytes are back; the living one's 400 are still held.
    assert await frontier.reserve_file_bytes("new", 601, budget, ttl_seconds=60) is False
    assert await frontier.reserve_file_bytes("new", 500, budget, ttl_seconds=60)
    assert (await frontier.file_stats()).reserved == 900
    await frontier.settle_file_bytes("alive", 400)
    stats = await frontier.file_stats()
    assert (stats.reserved, stats.settled) == (500, 400)


async def test_no_budget_grants_everything_and_still_counts(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    big = 2**50  # the bound of files.maxTotalBytes; far past Lua's %.14g
    assert await frontier.reserve_file_bytes("a", big, 0, ttl_seconds=60)
    assert await frontier.reserve_file_bytes("b", big + 1, 0, ttl_seconds=60)
    await frontier.settle_file_bytes("a", big - 1)
    stats = await frontier.file_stats()
    assert (stats.reserved, stats.settled) == (big + 1, big - 1)
    with pytest.raises(ValueError, match="bad"):
        await frontier.reserve_file_bytes("c", -1, 0, ttl_seconds=60)
    with pytest.raises(ValueError, match="bad"):
        await frontier.reserve_file_bytes("c", 1, 0, ttl_seconds=0)
    with pytest.raises(ValueError, match="bad"):
        await frontier.settle_file_bytes("c", -1)


# -- the content index ------------------------------------------------------------------------


async def test_the_first_stored_copy_wins_and_the_rest_are_duplicates(
    open_frontier: OpenFrontier, redis_url: str
) -> None:
    one = await open_frontier()
    two = await _second_worker(one, redis_url)
    try:
        keys = [stored_key(SHA, f"runs/r{i}/") for i in range(20)]
        found = await asyncio.gather(
            *((one if i % 2 else two).claim_content(SHA, key) for i, key in enumerate(keys))
        )
        winners = [key for key, existing in zip(keys, found, strict=True) if existing is None]
        assert len(winners) == 1
        assert {existing for existing in found if existing is not None} == set(winners)
        assert await one.claim_content("cd" * 32, stored_key("cd" * 32)) is None
        assert await two.claim_content(SHA, stored_key(SHA)) == winners[0]
    finally:
        await two.aclose()


# -- counters ---------------------------------------------------------------------------------


async def test_counters_add_up_and_are_read_in_one_round_trip(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    assert await frontier.file_stats() == FileStats()
    await frontier.count_files(stored=1, bytes=512 * 2**20, resumed=1, resumed_bytes=300)
    await frontier.count_files(duplicates=2, restarts=1, stored=0)
    await frontier.count_files()  # nothing: nothing sent
    assert await frontier.file_stats() == FileStats(
        stored=1, duplicates=2, bytes=512 * 2**20, resumed=1, restarts=1, resumed_bytes=300
    )
    with pytest.raises(ValueError, match="unknown file counters"):
        await frontier.count_files(pages=1)
    with pytest.raises(ValueError, match="whole number"):
        await frontier.count_files(stored=-1)


async def test_file_stats_are_two_reads_however_many_files(
    private_client: aioredis.Redis, job_id: str
) -> None:
    """O(1): the same three commands (two HMGETs and the epoch) with 1 file or 1,000."""
    frontier = await Frontier.open(private_client, frontier_settings(job_id, TEST_JOB))

    async def commands_of_file_stats() -> dict[str, int]:
        await private_client.config_resetstat()
        await frontier.file_stats()
        stats = await private_client.info("commandstats")
        calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
        return {name: n for name, n in calls.items() if not name.startswith(("config", "info"))}

    await frontier.count_files(stored=1, bytes=10)
    few = await commands_of_file_stats()
    for i in range(1000):
        digest = f"{i:064x}"
        await frontier.claim_content(digest, stored_key(digest))
        await frontier.acquire_file_slot(f"h{i}.example", "x", 1, 60.0)
    await frontier.count_files(stored=1000, bytes=1000 * 10)
    many = await commands_of_file_stats()
    assert few == many == {"hmget": 2, "hget": 1}
    assert (await frontier.file_stats()).stored == 1001


# -- runs and deletion ------------------------------------------------------------------------


async def test_a_new_run_resets_the_counters_and_keeps_the_content_and_stored_bytes(
    open_frontier: OpenFrontier,
) -> None:
    frontier = await open_frontier()
    await frontier.begin_run("20261202T080000Z")
    assert await frontier.reserve_file_bytes("a", 100, 1000, ttl_seconds=60)
    # in flight when the run is replaced
    assert await frontier.reserve_file_bytes("b", 200, 1000, ttl_seconds=60)
    await frontier.settle_file_bytes("a", 100)
    assert await frontier.claim_content(SHA, stored_key(SHA, "runs/20261202T080000Z/")) is None
    await frontier.count_files(stored=1, bytes=100)
    assert await frontier.acquire_file_slot(HOST, "downloading", 1, 60.0)

    await frontier.begin_run("20261202T090000Z")  # run 1 never committed: it failed
    assert await frontier.file_stats() == FileStats(settled=100)
    # The same bytes fetched in run 2 are a duplicate of run 1's copy.
    assert await frontier.claim_content(SHA, stored_key(SHA, "runs/20261202T090000Z/")) == (
        stored_key(SHA, "runs/20261202T080000Z/")
    )
    # A download still on the wire keeps its host's slot until it ends or expires.
    assert not await frontier.acquire_file_slot(HOST, "new run", 1, 60.0)
    # the job's stored bytes count
    assert not await frontier.reserve_file_bytes("c", 901, 1000, ttl_seconds=60)
    # the dropped reservation is gone for good: its holder settling later releases nothing
    await frontier.settle_file_bytes("b", 0)
    assert await frontier.file_stats() == FileStats(settled=100)

    await frontier.commit_run("20261202T090000Z")
    await frontier.begin_run("20261202T100000Z")
    assert (await frontier.file_stats()).settled == 100


async def test_deleting_the_job_deletes_its_file_keys(
    open_frontier: OpenFrontier, redis_client: aioredis.Redis
) -> None:
    frontier = await open_frontier()
    await frontier.acquire_file_slot(HOST, "a", 1, 60.0)
    await frontier.reserve_file_bytes("a", 1, 0, ttl_seconds=60)
    await frontier.claim_content(SHA, stored_key(SHA))
    await frontier.count_files(stored=1)
    names = [frontier.keys.file_slots(HOST), *map(frontier.keys.key, FILE_KEYS.values())]
    assert await redis_client.exists(*names) == len(names)
    await frontier.delete()
    assert await redis_client.exists(*names) == 0


async def test_a_download_can_finish_when_redis_refuses_writes(
    private_client: aioredis.Redis, job_id: str
) -> None:
    """Past maxmemory (noeviction) a download under way still takes its slot and budget,
    records its copy and counts, and gives its slot back: what leads to its ack, which is what
    frees memory. The file scripts are allow-oom, as claim and ack are."""
    frontier = await Frontier.open(private_client, frontier_settings(job_id, TEST_JOB))
    await private_client.config_set("maxmemory", 1)
    try:
        assert await frontier.acquire_file_slot(HOST, "a", 1, 60.0)
        await frontier.extend_file_slots({HOST: ["a"]}, 60.0)
        assert await frontier.reserve_file_bytes("a", 100, 0, ttl_seconds=60)
        assert await frontier.claim_content(SHA, stored_key(SHA)) is None
        await frontier.settle_file_bytes("a", 100)
        await frontier.count_files(stored=1, bytes=100)
        await frontier.release_file_slot(HOST, "a")
        assert await frontier.file_stats() == FileStats(stored=1, bytes=100, settled=100)
    finally:
        await private_client.config_set("maxmemory", 0)
