"""What the crawl waits for, cause by cause, and the news the ticks make of it."""

from __future__ import annotations

import dataclasses

import pytest

from crawlfleet.config import SteeringConfig
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.fleet import FleetPolicy, WorkerView
from crawlfleet.fleet.backend import UnitWaiting
from crawlfleet.fleet.exits import UnitExit
from crawlfleet.fleet.waiting import (
    WAIT_NOTICE_SECONDS,
    WAIT_SETTLE_SECONDS,
    WaitCause,
    Waiting,
    assess,
    duration,
    track,
)
from crawlfleet.frontier import (
    Backpressure,
    FrontierStats,
    FrontierWaits,
    PressureLevel,
    WorkerHeartbeat,
)

#: The defaults: heartbeats fresh for 20 s (deadAfterSeconds), 60 s to start.
POLICY = FleetPolicy.from_spec(
    CrawlJobSpec.from_mapping({"seeds": ["https://a.example/"]}),
    SteeringConfig(),
    completion_grace_seconds=0,
)
NOW = 1_800_000_000.0
LIVE = WorkerView("w-1", "w-1", running=True, started_at=NOW - 100, heartbeat_age_seconds=1.0)
BEAT = WorkerHeartbeat("w-1", NOW - 1, 1.0, {"output_blocked": 0})


def stats(
    queued: int = 1,
    delayed: int = 0,
    leased: int = 0,
    fetched: int = 0,
    next_retry_in: float | None = None,
    pressure: Backpressure | None = None,
    **waits: float | int | None,
) -> FrontierStats:
    return FrontierStats(
        queued=queued,
        delayed=delayed,
        leased=leased,
        fetched=fetched,
        seeded=True,
        next_retry_in_seconds=next_retry_in,
        pressure=pressure or Backpressure(),
        waits=FrontierWaits(**waits),  # type: ignore[arg-type]
    )


def judge(
    seen: FrontierStats,
    *,
    workers: tuple[WorkerView, ...] = (LIVE,),
    beats: tuple[WorkerHeartbeat, ...] = (BEAT,),
    suspended: bool = False,
    wanted: int = 1,
) -> Waiting | None:
    return assess(
        seen,
        now=NOW,
        suspended=suspended,
        workers=workers,
        beats=beats,
        policy=POLICY,
        wanted=wanted,
    )


def test_a_host_waiting_for_its_robots_txt_is_said_with_its_status_and_next_try() -> None:
    waiting = judge(
        stats(
            robots_hosts=1,
            robots_status=503,
            robots_next_try_in_seconds=552.0,
            ready_hosts=1,
            next_ready_in_seconds=552.0,
        )
    )
    assert waiting is not None
    assert waiting.reason == "RobotsTxt"
    assert waiting.sentence(NOW) == "1 host for robots.txt (503), next try in 9m12s"
    # For status and Events: a time, so the message does not change at every tick.
    assert waiting.sentence() == "1 host for robots.txt (503), next try at 2027-01-15T08:09:12Z"
    # The host held for robots.txt is not also counted as waiting for its delay.
    assert [cause.reason for cause in waiting.causes] == ["RobotsTxt"]


def test_several_hosts_for_robots_txt_and_one_that_never_answered() -> None:
    waiting = judge(stats(robots_hosts=3, robots_next_try_in_seconds=2.0, ready_hosts=3))
    assert waiting is not None
    assert (
        waiting.sentence(NOW) == "3 hosts for robots.txt (the next: no response), next try in 2.0s"
    )


@pytest.mark.parametrize(
    "seen",
    [
        stats(queued=0, robots_hosts=1),  # nothing queued: nothing waits
        stats(leased=2, fetched=1, robots_hosts=1),  # a request in progress: it moves
        stats(ready_hosts=1, next_ready_in_seconds=0.8),  # a polite crawl pacing itself
        stats(delayed=1, queued=0, next_retry_in=WAIT_NOTICE_SECONDS - 1),  # a retry soon
        stats(ready_hosts=2, next_ready_in_seconds=-0.1),  # a host is ready now
    ],
)
def test_no_wait_is_said_while_the_crawl_moves_or_only_paces_itself(seen: FrontierStats) -> None:
    assert judge(seen) is None


def test_retries_and_host_delays_are_waits_once_their_next_change_is_far() -> None:
    waiting = judge(
        stats(queued=4, delayed=2, next_retry_in=40.0, ready_hosts=2, next_ready_in_seconds=30.0)
    )
    assert waiting is not None
    assert [cause.reason for cause in waiting.causes] == ["RetryBackoff", "HostDelay"]
    assert waiting.sentence(NOW) == (
        "2 URLs for a retry (backoff or Retry-After), next due in 40s; 2 hosts for the delay"
        " between requests (hostDelaySeconds, Crawl-delay), next in 30s"
    )


def test_a_delay_behind_a_robots_wait_has_no_next_time_of_its_own() -> None:
    waiting = judge(
        stats(
            robots_hosts=1,
            robots_status=429,
            robots_next_try_in_seconds=60.0,
            ready_hosts=3,
            next_ready_in_seconds=60.0,
        )
    )
    assert waiting is not None
    delay = waiting.causes[1]
    assert (delay.reason, delay.count, delay.next_change_at) == ("HostDelay", 2, None)


def test_suspended_is_the_whole_story() -> None:
    waiting = judge(stats(queued=7, robots_hosts=1), workers=(), suspended=True)
    assert waiting is not None
    assert waiting.causes == (
        WaitCause("Suspended", "the job is suspended (spec.suspend) with 7 URLs"),
    )


def test_no_live_worker_is_said_in_the_platforms_own_words() -> None:
    unschedulable = UnitWaiting("Unschedulable", "0/1 nodes are available: 1 Insufficient cpu.")
    pending = WorkerView("w-2", "w-2", running=True, started_at=NOW - 600, waiting=unschedulable)
    crashing = dataclasses.replace(
        pending,
        worker_id="w-3",
        unit="w-3",
        waiting=UnitWaiting("CrashLoopBackOff", "back-off 10s"),
        last_exit=UnitExit(2, "OutputUnavailable", "no such bucket", 0.5),
        quick_deaths=4,
    )
    starting = WorkerView("w-4", "w-4", running=True, started_at=NOW - 61)
    waiting = judge(stats(queued=5), workers=(pending, pending, crashing, starting), beats=())
    assert waiting is not None
    assert waiting.reason == "NoLiveWorker"
    assert waiting.main.count == 4
    assert waiting.sentence(NOW) == (
        "no live worker: 2 not started: Unschedulable (0/1 nodes are available: 1 Insufficient"
        " cpu.); 1 dying at start (CrashLoopBackOff, OutputUnavailable: no such bucket); 1"
        " starting (no heartbeat yet)"
    )


def test_workers_being_started_are_coming_not_waited_for() -> None:
    assert judge(stats(), workers=(), beats=(), wanted=1) is None  # this tick starts one
    starting = WorkerView("w-1", "w-1", running=True, started_at=NOW - 30)
    pulling = dataclasses.replace(starting, waiting=UnitWaiting("ContainerCreating"))
    assert judge(stats(), workers=(starting, pulling), beats=()) is None  # within the grace
    pulled_for_long = dataclasses.replace(pulling, started_at=NOW - 60)
    waiting = judge(stats(), workers=(pulled_for_long,), beats=())
    assert waiting is not None
    assert waiting.main.what == "no live worker: 1 not started: ContainerCreating"
    # Something wrong with it is said after a few seconds, not after the whole grace.
    no_node = dataclasses.replace(
        pulling, waiting=UnitWaiting("Unschedulable"), started_at=NOW - WAIT_NOTICE_SECONDS
    )
    waiting = judge(stats(), workers=(no_node,), beats=())
    assert waiting is not None
    assert waiting.main.what == "no live worker: 1 not started: Unschedulable"
    assert judge(stats(), workers=(dataclasses.replace(no_node, started_at=NOW - 1),)) is None


def test_a_fleet_of_none_and_a_silent_worker() -> None:
    assert judge(stats(), workers=(), beats=(), wanted=0) == Waiting(
        (WaitCause("NoLiveWorker", "no live worker: none is wanted (pinned at 0)"),)
    )
    silent = dataclasses.replace(LIVE, heartbeat_age_seconds=45.0)
    waiting = judge(stats(), workers=(silent,), beats=())
    assert waiting is not None
    assert waiting.main.what == "no live worker: 1 silent (no heartbeat for over 20s)"


def test_blocked_output_says_the_workers_reason() -> None:
    blocked = WorkerHeartbeat(
        "w-1",
        NOW - 1,
        1.0,
        {"output_blocked": 1, "output_blocked_reason": "ENOSPC writing /out/p.jsonl"},
    )
    stale = WorkerHeartbeat("w-9", NOW - 90, 90.0, {"output_blocked": 1})
    waiting = judge(stats(leased=3, fetched=3), beats=(blocked, stale))
    assert waiting is not None
    assert waiting.causes == (
        WaitCause(
            "OutputBlocked", "1 worker with output blocked: ENOSPC writing /out/p.jsonl", count=1
        ),
    )


def test_held_slots_and_memory_pressure() -> None:
    pressure = Backpressure.at(PressureLevel.CRITICAL, claims_per_second=3.0)
    waiting = judge(stats(held_slots=2, next_held_release_in_seconds=12.0, pressure=pressure))
    assert waiting is not None
    assert waiting.sentence(NOW) == (
        "2 host slots held for dead workers' requests, next freed in 12s;"
        " frontier memory pressure CRITICAL: claims at most 3 a second"
    )


def test_a_wait_past_its_next_try_is_due_now() -> None:
    waiting = judge(stats(robots_hosts=1, robots_status=503, robots_next_try_in_seconds=-1.0))
    assert waiting is not None
    assert waiting.sentence(NOW) == "1 host for robots.txt (503), next try due now"


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.44, "0.4s"), (-3.0, "0.0s"), (42.4, "42s"), (552, "9m12s"), (7500, "2h05m")],
)
def test_durations_read_as_people_say_them(seconds: float, said: str) -> None:
    assert duration(seconds) == said


# -- the news: Events on change, and a wait ends only once the crawl has settled ----------------

ROBOTS = Waiting((WaitCause("RobotsTxt", "1 host for robots.txt (503)", 1),))
DELAY = Waiting((WaitCause("HostDelay", "1 host for the delay between requests", 1),))


def test_a_new_wait_is_news_once_and_a_new_main_reason_again() -> None:
    news, announced, since = track(ROBOTS, announced=None, moving_since=None, now=NOW)
    assert (news.began, announced, since) == (ROBOTS, "RobotsTxt", None)
    news, announced, _ = track(ROBOTS, announced="RobotsTxt", moving_since=None, now=NOW + 1)
    assert (news.began, news.ended, announced) == (None, None, "RobotsTxt")
    news, announced, _ = track(DELAY, announced="RobotsTxt", moving_since=None, now=NOW + 2)
    assert (news.began, announced) == (DELAY, "HostDelay")


def test_a_slow_crawl_waiting_between_its_pages_is_one_wait_not_an_event_a_page() -> None:
    announced: str | None = "HostDelay"
    since: float | None = None
    for second in range(0, int(WAIT_SETTLE_SECONDS) * 3, 10):  # a page every 10 s
        moving = second % 10 == 0 and second % 20 == 0
        news, announced, since = track(
            None if moving else DELAY, announced=announced, moving_since=since, now=NOW + second
        )
        assert news.began is None
        assert news.ended is None
    assert announced == "HostDelay"


def test_a_wait_ends_once_the_crawl_has_moved_for_the_settle_time() -> None:
    news, announced, since = track(None, announced="RobotsTxt", moving_since=None, now=NOW)
    assert (news.ended, announced, since) == (None, "RobotsTxt", NOW)
    news, announced, since = track(
        None, announced=announced, moving_since=since, now=NOW + WAIT_SETTLE_SECONDS
    )
    assert (news.ended, announced, since) == ("RobotsTxt", None, None)
    news, announced, since = track(None, announced=None, moving_since=None, now=NOW + 99)
    assert (news.began, news.ended, announced, since) == (None, None, None, None)


def test_downloads_that_count_as_fetched_are_said_when_urls_wait_behind_them() -> None:
    # Two workers downloading three files (each lease counted fetched once its file slot is
    # held), a stale heartbeat's download not counted, URLs queued behind them.
    downloading = WorkerHeartbeat("w-1", NOW - 1, 1.0, {"output_blocked": 0, "file_downloads": 2})
    other = WorkerHeartbeat("w-2", NOW - 1, 1.0, {"file_downloads": 1})
    stale = WorkerHeartbeat("w-9", NOW - 90, 90.0, {"file_downloads": 4})
    waiting = judge(stats(queued=5, leased=3, fetched=3), beats=(downloading, other, stale))
    assert waiting is not None
    assert waiting.causes == (WaitCause("Downloading", "downloading 3 files", count=3),)
    # a wait of the frontier's own comes first; a download with a page in progress is no wait
    delayed = judge(stats(delayed=2, next_retry_in=40.0, leased=1, fetched=1), beats=(other,))
    assert delayed is not None
    assert [cause.reason for cause in delayed.causes] == ["RetryBackoff", "Downloading"]
    assert judge(stats(queued=5, leased=2, fetched=1), beats=(other,)) is None
    assert judge(stats(queued=5, leased=1, fetched=1)) is None  # no download: nothing to say
