"""The fleet's local dedup hit rate, from its workers' heartbeats."""

from __future__ import annotations

from crawlfleet.fleet.link_checks import LinkChecks, by_worker, live_link_checks
from crawlfleet.frontier import WorkerHeartbeat


def beat(worker: str, hits: float, remote: float, age_seconds: float = 1.0) -> WorkerHeartbeat:
    counters = {"links_local_hits": hits, "links_remote_checks": remote, "fetched": 3.0}
    return WorkerHeartbeat(worker, 100.0, age_seconds, counters)  # type: ignore[arg-type]


def test_the_rate_is_the_share_of_link_checks_answered_in_the_workers() -> None:
    checks = live_link_checks([beat("a", 90, 10), beat("b", 270, 30)], fresh_seconds=20)
    assert checks == LinkChecks(360, 40)
    assert checks.hit_rate == 0.9


def test_dead_workers_and_workers_without_the_counters_do_not_count() -> None:
    old = WorkerHeartbeat("old", 100.0, 1.0, {"fetched": 5.0})  # an older worker's beat
    checks = live_link_checks(
        [beat("a", 8, 2), beat("dead", 1000, 0, age_seconds=60), old], fresh_seconds=20
    )
    assert checks == LinkChecks(8, 2)


def test_no_rate_before_any_link_was_checked() -> None:
    assert LinkChecks().hit_rate is None
    assert live_link_checks([], fresh_seconds=20).hit_rate is None


def test_a_worker_gone_keeps_its_last_counts_in_the_run_s_total() -> None:
    remembered = by_worker({}, [beat("a", 10, 5), beat("b", 1, 1)])
    remembered = by_worker(remembered, [beat("a", 30, 6)])  # b exited (scaled down)
    assert remembered == {"a": LinkChecks(30, 6), "b": LinkChecks(1, 1)}
    assert LinkChecks.total(remembered.values()) == LinkChecks(31, 7)
