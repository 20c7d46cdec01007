"""What the crawl waits for, whenever URLs are queued and nothing is being fetched (DESIGN §4).

A crawl that does not move is never silent. When URLs wait (queued, or delayed for a retry)
and no request is in progress, :func:`assess` names each cause from what the steering tick
reads anyway -- the frontier's counters and waits (:class:`~crawlfleet.frontier.FrontierWaits`,
O(1) reads beside the counters), the workers' heartbeats and the backend's units -- with a
count and the next time it changes:

================  ===================================================================
reason            what holds the crawl back
================  ===================================================================
Suspended         ``spec.suspend``: no worker runs, on purpose
NoLiveWorker      no worker heartbeats: starting, never started (in the platform's
                  words: ``Unschedulable``, ``ErrImagePull``...), dying at start
OutputBlocked     the workers claim nothing: their output is failing or full
RobotsTxt         hosts held until their robots.txt is asked again (5xx, 429, no answer)
HeldSlots         host slots still counted for dead workers' requests, until their
                  fetch deadline
MemoryPressure    Redis is near its maxmemory: claims are slowed
RetryBackoff      URLs waiting out a retry's backoff or Retry-After
HostDelay         hosts waiting out their delay (``hostDelaySeconds``, a Crawl-delay)
NextRevisit       a job that keeps going (``spec.recrawl``, no schedule) has nothing
                  queued, delayed or leased: it waits for its next due revisit
================  ===================================================================

The first cause in that order is the main one (a condition's reason, an Event's). RetryBackoff
and HostDelay are how every polite crawl paces itself, so they count only when their next
change is at least :data:`WAIT_NOTICE_SECONDS` away: a crawl a second between pages is
moving; one that waits two minutes for a Crawl-delay is waiting, and says so.

:func:`track` turns the ticks' assessments into news for Events: a new main reason is announced
at once; a wait is over once the crawl has had nothing to wait for during
:data:`WAIT_SETTLE_SECONDS`, so a slow crawl that waits between its pages is one wait, not two
Events a page. The condition and the progress line show each tick's own assessment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal, get_args

from crawlfleet.fleet.policy import FleetPolicy, WorkerView
from crawlfleet.frontier.models import FrontierStats, PressureLevel, WorkerHeartbeat

__all__ = [
    "WAIT_NOTICE_SECONDS",
    "WAIT_REASONS",
    "WAIT_SETTLE_SECONDS",
    "WaitCause",
    "WaitNews",
    "WaitReason",
    "Waiting",
    "assess",
    "duration",
    "next_revisit",
    "plural",
    "track",
]

#: The causes, most telling first: the order they are listed in (and the main one is).
WaitReason = Literal[
    "Suspended",
    "NoLiveWorker",
    "OutputBlocked",
    "RobotsTxt",
    "HeldSlots",
    "MemoryPressure",
    "RetryBackoff",
    "HostDelay",
    "NextRevisit",
]
#: Every reason, most telling first: the order causes are listed in.
WAIT_REASONS: Final[tuple[WaitReason, ...]] = get_args(WaitReason)
#: A retry or a host's delay due sooner than this is a crawl pacing itself, not a wait.
WAIT_NOTICE_SECONDS: Final = 5.0
#: How long a crawl must have nothing to wait for before the wait it announced is over.
WAIT_SETTLE_SECONDS: Final = 30.0
#: The longest message of a unit that never started kept in a sentence (a scheduler's
#: message lists every node's refusal).
_UNIT_MESSAGE_CHARS: Final = 200


@dataclass(frozen=True, slots=True)
class WaitCause:
    """One thing the crawl waits for: ``what`` in words (``1 host for robots.txt (503)``),
    ``count`` of the things it counts (hosts, URLs, workers, slots; 0 where nothing counts),
    and when the first of them changes (``next_change_at``, wall-clock seconds; None when
    nobody knows: a pod waiting for a node, a failing destination)."""

    reason: WaitReason
    what: str
    count: int = 0
    next_change_at: float | None = None
    #: How the next change is said: "next try in 9m12s", "next due at ...", "freed in 3s".
    next_word: str = "next"
    #: The next change is the news, ``what`` its detail: "next revisit due at ... (3 tracked)".
    change_first: bool = False

    def text(self, now: float | None = None) -> str:
        """The cause in words, its next change relative to ``now`` ("in 9m12s"), or, with no
        ``now``, as a UTC time (for status and Events, which must not change at every tick)."""
        if self.next_change_at is None:
            return self.what
        if now is None:
            moment = datetime.fromtimestamp(self.next_change_at, UTC)
            when = f"at {moment:%Y-%m-%dT%H:%M:%SZ}"
        else:
            left = self.next_change_at - now
            when = f"in {duration(left)}" if left > 0 else "now"
            if not self.change_first and left <= 0:
                when = "due now"
        if self.change_first:
            return f"{self.next_word} {when} ({self.what})"
        return f"{self.what}, {self.next_word} {when}"


@dataclass(frozen=True, slots=True)
class Waiting:
    """What the crawl waits for: its causes, the main one first."""

    causes: tuple[WaitCause, ...]

    @property
    def main(self) -> WaitCause:
        return self.causes[0]

    @property
    def reason(self) -> WaitReason:
        return self.main.reason

    def sentence(self, now: float | None = None) -> str:
        """Every cause, the main one first (``now``: as :meth:`WaitCause.text`)."""
        return "; ".join(cause.text(now) for cause in self.causes)


def duration(seconds: float) -> str:
    """``0.4s``, ``42s``, ``9m12s``, ``2h05m``: a wait as a person reads it."""
    if seconds < 10:
        return f"{max(0.0, seconds):.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def plural(count: int, noun: str) -> str:
    """``1 host``, ``2 hosts``: a count and its noun, for the lines people read."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def assess(
    stats: FrontierStats,
    *,
    now: float,
    suspended: bool,
    workers: Sequence[WorkerView],
    beats: Sequence[WorkerHeartbeat],
    policy: FleetPolicy,
    wanted: int,
) -> Waiting | None:
    """What the crawl waits for, or None: nothing waits, something is being fetched, or
    whatever waits is only a crawl pacing itself (see :data:`WAIT_NOTICE_SECONDS`).

    ``workers``: the backend's units joined with their heartbeats; ``beats``: every
    heartbeat (a worker's fields: ``output_blocked``, ``output_blocked_reason``); a heartbeat
    is a live worker's while it is at most ``policy.dead_after_seconds`` old. ``wanted``: the
    workers the tick wants running (a fleet of none that wants some is being started).

    A job that keeps going (``policy.keeps_going``) with nothing queued, delayed or leased
    waits for its next revisit (``NextRevisit``): what it is meant to do, said with its due
    time and the URLs tracked, never taken for a crawl that is stuck.
    """
    if policy.keeps_going and stats.complete and not suspended:  # seeded, nothing pending
        return Waiting((next_revisit(stats, now),))
    if stats.queued + stats.delayed == 0 or stats.fetching > 0:
        return None
    if suspended:
        what = f"the job is suspended (spec.suspend) with {stats.queued + stats.delayed} URLs"
        return Waiting((WaitCause("Suspended", what),))
    causes = [
        cause
        for cause in (
            _no_live_worker(workers, policy, wanted=wanted, now=now),
            _output_blocked(beats, policy.dead_after_seconds),
            *_frontier_causes(stats, now),
        )
        if cause is not None
    ]
    return Waiting(tuple(causes)) if causes else None


def next_revisit(stats: FrontierStats, now: float) -> WaitCause:
    """The wait of a job that keeps going and has nothing else to do: its next revisit's due
    time and the URLs tracked ("next revisit due at <time> (12 tracked)")."""
    tracked = f"{stats.tracked} tracked"
    if stats.next_revisit_in_seconds is None:
        return WaitCause("NextRevisit", f"no revisit scheduled ({tracked})", count=stats.tracked)
    return WaitCause(
        "NextRevisit",
        tracked,
        count=stats.tracked,
        next_change_at=round(now + stats.next_revisit_in_seconds),  # as status.freshness says
        next_word="next revisit due",
        change_first=True,
    )


def _fresh(age_seconds: float | None, fresh_seconds: float) -> bool:
    return age_seconds is not None and age_seconds <= fresh_seconds


def _no_live_worker(
    workers: Sequence[WorkerView], policy: FleetPolicy, *, wanted: int, now: float
) -> WaitCause | None:
    """No worker heartbeats: why each unit is not one, in its backend's words.

    Workers being started are coming, not waited for, as every crawl begins: none yet when
    some are wanted, or each started within the startup grace while nothing is wrong with it
    (no reason given, or the container being created), or within :data:`WAIT_NOTICE_SECONDS`
    whatever its reason (an unschedulable pod is said after a few seconds, a slow image pull
    only past the grace)."""
    fresh_seconds = policy.dead_after_seconds
    live = [
        w
        for w in workers
        if w.running and not w.draining and _fresh(w.heartbeat_age_seconds, fresh_seconds)
    ]
    if live:
        return None
    if not workers:
        if wanted:
            return None
        return WaitCause("NoLiveWorker", "no live worker: none is wanted (pinned at 0)")
    if all(_coming(w, policy, now) for w in workers):
        return None
    states: Counter[str] = Counter(_unit_state(w, fresh_seconds) for w in workers)
    said = "; ".join(
        f"{count} {state}" if count > 1 else f"1 {state}" for state, count in states.items()
    )
    return WaitCause("NoLiveWorker", f"no live worker: {said}", count=len(workers))


#: The reasons a pod's container waits while it is started as it should be.
_STARTING_REASONS: Final = frozenset({"ContainerCreating", "PodInitializing"})


def _coming(worker: WorkerView, policy: FleetPolicy, now: float) -> bool:
    """Started lately, never heartbeated, and not dying: a worker on its way."""
    if not worker.running or worker.quick_deaths or worker.heartbeat_age_seconds is not None:
        return False
    waiting = worker.waiting
    starting = waiting is None or waiting.reason in _STARTING_REASONS
    grace = policy.startup_grace_seconds if starting else WAIT_NOTICE_SECONDS
    return now - worker.started_at < grace


def _unit_state(worker: WorkerView, fresh_seconds: float) -> str:
    """One unit that is no live worker, in words (grouped and counted by the caller)."""
    waiting = worker.waiting
    exit_ = worker.last_exit
    if worker.quick_deaths and exit_ is not None:
        backing_off = f"{waiting.reason}, " if waiting is not None else ""
        said = f"{exit_.reason}: {exit_.message[:_UNIT_MESSAGE_CHARS]}"
        return f"dying at start ({backing_off}{said})"
    if waiting is not None and worker.heartbeat_age_seconds is None:
        message = waiting.message[:_UNIT_MESSAGE_CHARS]
        return f"not started: {waiting.reason}" + (f" ({message})" if message else "")
    if worker.draining:
        return "draining"
    if not worker.running:
        why = f" ({exit_.reason})" if exit_ is not None else ""
        return f"exited{why}"
    if worker.heartbeat_age_seconds is None:
        return "starting (no heartbeat yet)"
    return f"silent (no heartbeat for over {duration(fresh_seconds)})"


def _output_blocked(beats: Sequence[WorkerHeartbeat], fresh_seconds: float) -> WaitCause | None:
    blocked = [b for b in beats if b.age_seconds <= fresh_seconds and b.number("output_blocked")]
    if not blocked:
        return None
    reasons = sorted({b.text("output_blocked_reason") for b in blocked} - {""})
    why = f": {reasons[0]}" if reasons else ": their output destination is failing or full"
    what = f"{plural(len(blocked), 'worker')} with output blocked{why}"
    return WaitCause("OutputBlocked", what, count=len(blocked))


def _frontier_causes(stats: FrontierStats, now: float) -> list[WaitCause | None]:
    """The causes the frontier's own reads say: robots.txt, held slots, memory, retries,
    delays. A wait whose next change is due (<= 0) is waiting for a claim to notice."""
    waits = stats.waits

    def at(in_seconds: float | None) -> float | None:
        return None if in_seconds is None else now + in_seconds

    def noticed(in_seconds: float | None) -> bool:
        return in_seconds is not None and in_seconds >= WAIT_NOTICE_SECONDS

    robots = held = pressure = retry = delay = None
    if waits.robots_hosts:
        status = "no response" if waits.robots_status is None else str(waits.robots_status)
        said = status if waits.robots_hosts == 1 else f"the next: {status}"
        robots = WaitCause(
            "RobotsTxt",
            f"{plural(waits.robots_hosts, 'host')} for robots.txt ({said})",
            count=waits.robots_hosts,
            next_change_at=at(waits.robots_next_try_in_seconds),
            next_word="next try",
        )
    if waits.held_slots:
        held = WaitCause(
            "HeldSlots",
            f"{plural(waits.held_slots, 'host slot')} held for dead workers' requests",
            count=waits.held_slots,
            next_change_at=at(waits.next_held_release_in_seconds),
            next_word="next freed",
        )
    level = stats.pressure.level
    if level != PressureLevel.NONE:
        rate = stats.pressure.claims_per_second
        slowed = f"claims at most {rate:g} a second" if rate else "claims slowed"
        pressure = WaitCause("MemoryPressure", f"frontier memory pressure {level.name}: {slowed}")
    if stats.delayed and noticed(stats.next_retry_in_seconds):
        retry = WaitCause(
            "RetryBackoff",
            f"{plural(stats.delayed, 'URL')} for a retry (backoff or Retry-After)",
            count=stats.delayed,
            next_change_at=at(stats.next_retry_in_seconds),
            next_word="next due",
        )
    delayed_hosts = waits.ready_hosts - waits.robots_hosts
    if delayed_hosts > 0 and noticed(waits.next_ready_in_seconds):
        # The first host of the ready index may be one held for robots.txt (placed at its
        # next try): the hosts waiting out their delay change later then, when is not read.
        robots_first = waits.robots_next_try_in_seconds
        first_is_robots = (
            robots_first is not None
            and waits.next_ready_in_seconds is not None
            and abs(robots_first - waits.next_ready_in_seconds) < 0.001
        )
        delay = WaitCause(
            "HostDelay",
            f"{plural(delayed_hosts, 'host')} for the delay between requests"
            " (hostDelaySeconds, Crawl-delay)",
            count=delayed_hosts,
            next_change_at=None if first_is_robots else at(waits.next_ready_in_seconds),
        )
    return [robots, held, pressure, retry, delay]


@dataclass(frozen=True, slots=True)
class WaitNews:
    """What a tick's assessment changes for people: a wait (or a new main reason) to announce,
    or the reason of a wait that is over."""

    began: Waiting | None = None
    ended: WaitReason | str | None = None


def track(
    waiting: Waiting | None,
    *,
    announced: str | None,
    moving_since: float | None,
    now: float,
) -> tuple[WaitNews, str | None, float | None]:
    """The news of one tick, and what to remember (the announced reason, moving since when).

    ``announced`` and ``moving_since`` are the memory of the ticks before
    (:class:`~crawlfleet.fleet.policy.FleetMemory`): a reason announced stays so while the
    crawl waits for it, and for :data:`WAIT_SETTLE_SECONDS` after it last did.
    """
    if waiting is not None:
        news = WaitNews(began=waiting) if waiting.reason != announced else WaitNews()
        return news, waiting.reason, None
    if announced is None:
        return WaitNews(), None, None
    since = moving_since if moving_since is not None else now
    if now - since >= WAIT_SETTLE_SECONDS:
        return WaitNews(ended=announced), None, None
    return WaitNews(), announced, since
