"""When a tick queues a job's seeds: once at the start, and once per change of the list."""

from __future__ import annotations

import pytest

from crawlfleet.fleet import FleetMemory, seed_list_hash
from crawlfleet.fleet.policy import SeedAction, seed_action

A = seed_list_hash(["http://a.test/"])
B = seed_list_hash(["http://a.test/", "http://a.test/new"])


@pytest.mark.parametrize(
    ("seeded", "suspended", "remembered", "current", "action"),
    [
        (False, False, None, A, "seed"),  # a new job
        (False, False, A, A, "seed"),  # a frontier re-created (onLoss: Reseed): seeded again
        (False, False, None, None, "seed"),  # a caller that does not track the list
        (True, False, A, A, "none"),  # every later tick: nothing
        (True, False, A, B, "reseed"),  # seeds added to a running job: queued once
        (True, False, None, B, "adopt"),  # seeded before digests were kept: no re-queue
        (True, False, A, None, "none"),  # not tracked: never re-queued
        (True, True, A, B, "none"),  # suspended: queued when it resumes
        (False, True, None, A, "none"),  # suspended before its first seeding
    ],
)
def test_seed_action(
    seeded: bool, suspended: bool, remembered: str | None, current: str | None, action: SeedAction
) -> None:
    assert (
        seed_action(seeded=seeded, suspended=suspended, remembered=remembered, current=current)
        == action
    )


@pytest.mark.parametrize(
    ("seeded", "suspended", "remembered", "current", "action"),
    [
        (False, False, None, A, "none"),  # its processes seed it, not the tick
        (True, False, None, A, "catch_up"),  # once they have: through the filter, in case
        (True, False, A, A, "none"),  # every later tick: nothing
        (True, False, A, B, "reseed"),  # seeds added (crawlfleet enqueue): queued once
        (True, True, A, B, "none"),  # suspended: queued when it resumes
    ],
)
def test_seed_action_of_a_job_its_workers_seed(
    seeded: bool, suspended: bool, remembered: str | None, current: str | None, action: SeedAction
) -> None:
    got = seed_action(
        seeded=seeded,
        suspended=suspended,
        remembered=remembered,
        current=current,
        workers_seed=True,
    )
    assert got == action


def test_the_digest_changes_with_the_list_its_order_and_its_source() -> None:
    assert seed_list_hash(["http://a.test/"]) == A  # stable across processes (no hash())
    assert A != B
    assert seed_list_hash(["http://b.test/", "http://a.test/"]) != seed_list_hash(
        ["http://a.test/", "http://b.test/"]
    )
    assert seed_list_hash(["http://a.test/"], "configmap seeds/v1") != A
    # A URL cannot be split across two to give another list the same digest.
    assert seed_list_hash(["http://a.test/x", "y"]) != seed_list_hash(["http://a.test/xy"])


def test_the_digest_is_remembered_through_status_and_state_json() -> None:
    memory = FleetMemory(replicas=1, seeds_hash=B)
    raw = memory.to_mapping()
    assert raw["seedsHash"] == B
    assert FleetMemory.from_mapping(raw) == memory
    assert "seedsHash" not in FleetMemory(replicas=1).to_mapping()
