"""One worker's leases, from claim to settlement: the lease lifecycle every kind of worker uses.

crawlfleet's own worker (``worker.py``) and the Scrapy runtime (``crawlfleet/scrapy/``) differ in
how a page is fetched and what it yields; what happens to its lease does not, so it lives here,
once (DESIGN §4). A lease goes through three stages in the worker:

``fetching``
    Claimed; its request may be on the wire, so it holds one of its host's ``perHost`` slots
    in the frontier.
``processing``
    Its request phase is over -- a response arrived, or it was refused before any request
    (robots.txt, the address guard, an error of ours) -- and its page is being parsed, its
    callbacks run, its links admitted. Its host slot is freed at this step, **on every path**,
    exactly once: :meth:`LeaseBook.fetched` queues the lease, and the next claim (or the next
    heartbeat, if no claim comes) tells the frontier in the same round trip.
``output``
    Its record sits in an output file generation that is not durable yet (DESIGN §8).

and leaves the book exactly once, settled by one of: **ack** (its record durable), **fail** (a
failed attempt, durable too), **release** (given back without an attempt: shutdown, output that
never became durable), **defer** (robots.txt unreadable: released and its host held back), or
found **lost** (its lease expired or was requeued while the worker held it; counted once).
Every lease in the book is extended at each heartbeat, whatever its stage, so a page waiting on
a slow parser or a failing destination keeps its lease for as long as the worker lives.

Redis outages: a claim that fails returns None and the book's :class:`Backoff` says how long to
wait (0.5 s doubling to 30 s, the same for every worker); a settlement that fails is sent
again under the same call ids (the frontier answers a call it applied with its first reply,
so a retried ack is never "not yours" and no lease is counted lost twice).

Revisits (``spec.recrawl``, DESIGN §10): :meth:`LeaseBook.read_revisit_states` reads the
revisit state of a claimed batch (one round trip) into its entries, and a lease's
:class:`~crawlfleet.frontier.Revisit` (:meth:`LeaseBook.revisit_later`) goes with its ack or
fail, so the frontier reschedules the URL in the same script that settles the lease. A job
without rules never reads or sends either: its calls are the one-shot crawl's.

The book also keeps the account the fleet reads in heartbeats (:meth:`LeaseBook.account`): how
many leases are in each stage and how long the oldest has been there, so a lease that stops
moving is seen, with the stage it stopped in (the fleet's watchdog, ``Stalled``).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from crawlfleet.errors import FrontierUnavailable
from crawlfleet.frontier import (
    FailOutcome,
    Failure,
    Frontier,
    Lease,
    Outcomes,
    Revisit,
    RevisitState,
)

if TYPE_CHECKING:
    from crawlfleet.crawler.worker.metrics import WorkerMetrics
    from crawlfleet.crawler.worker.sinks import DurableFile

__all__ = ["Backoff", "Entry", "LeaseBook", "Stage"]

log = logging.getLogger(__name__)

#: The first wait after a Redis call failed, the factor, and the longest wait.
OUTAGE_FIRST_SECONDS: Final = 0.5
OUTAGE_FACTOR: Final = 2.0
OUTAGE_MAX_SECONDS: Final = 30.0
#: Durable generations remembered: a batch is said written within one of the worker's awaits
#: of its write, while a handful of generations at most can become durable.
_DURABLE_GENERATIONS_KEPT: Final = 1024


class Stage(enum.StrEnum):
    """Where a lease held by a worker is, from claim to settlement (see the module docstring)."""

    FETCHING = "fetching"
    PROCESSING = "processing"
    OUTPUT = "output"


class Backoff:
    """Growing waits while Redis does not answer: the first failure waits ``OUTAGE_FIRST``,
    each further one twice as long, up to ``OUTAGE_MAX``; a success starts over."""

    def __init__(self) -> None:
        self._next = 0.0

    def failed(self) -> float:
        """One more failure: the seconds to wait before trying again."""
        self._next = (
            min(OUTAGE_MAX_SECONDS, self._next * OUTAGE_FACTOR)
            if self._next
            else OUTAGE_FIRST_SECONDS
        )
        return self._next

    def succeeded(self) -> None:
        self._next = 0.0


@dataclass(slots=True)
class Entry:
    """One lease in the book."""

    lease: Lease
    #: When it entered its current stage (the book's clock, monotonic).
    stage_since: float
    stage: Stage = Stage.FETCHING
    #: Its failure, when it failed: settled by ``fail`` instead of ``ack``.
    failure: Failure | None = None
    #: A settlement of it is on its way to the frontier (not lost if an extend misses it).
    settling: bool = False
    #: Its URL's revisit state when claimed (None: not tracked, or a job without rules).
    state: RevisitState | None = None
    #: What its settlement tells the frontier about its URL's next visit.
    revisit: Revisit | None = None


@dataclass(slots=True)
class _Settlement:
    """One batch of leases on their way out: the call ids and the steps done survive a retry,
    so a failed call sent again applies once and its reply is the first one's."""

    entries: list[Entry]
    ack_call: str
    fail_call: str
    acked: bool = False
    failed: bool = False
    #: Leases the frontier answered "not yours" for (expired or requeued meanwhile).
    lost_acks: int = 0
    lost_fails: int = 0
    #: The output generation whose records these leases' are (None: no file to wait for).
    generation: int | None = None
    #: A call of LeaseBook.settle is sending it now: another call (the flush and a replay
    #: of held links settle concurrently) leaves it to that one, so it is sent, counted and
    #: removed once.
    sending: bool = False


@dataclass(frozen=True, slots=True)
class Settled:
    """What a settlement did: the leases that left the book (acked, failed, or found lost
    on the way), and how many of each."""

    lease_ids: tuple[str, ...] = ()
    acked: int = 0
    failed: int = 0
    lost: int = 0

    def __add__(self, other: Settled) -> Settled:
        return Settled(
            self.lease_ids + other.lease_ids,
            self.acked + other.acked,
            self.failed + other.failed,
            self.lost + other.lost,
        )


class LeaseBook:
    """A worker's leases, claimed to settled (see the module docstring).

    ``counters`` are the worker's heartbeat counters (``flow.worker_counters``): the book
    counts ``fetched``/``succeeded``/``failed``/``released``/``leases_lost`` there, so every
    kind of worker reports them alike.
    """

    def __init__(
        self,
        frontier: Frontier,
        worker_id: str,
        *,
        metrics: WorkerMetrics,
        counters: dict[str, float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.frontier = frontier
        self.worker_id = worker_id
        self.metrics = metrics
        self.counters = counters
        self.outage = Backoff()
        #: How long to wait after a claim that returned None.
        self.retry_in_seconds = 0.0
        self._clock = clock
        self._entries: dict[str, Entry] = {}
        #: Leases in each stage (kept at each move: count() is O(1)).
        self._counts: dict[Stage, int] = dict.fromkeys(Stage, 0)
        #: Leases whose request phase ended, their slots not yet freed in the frontier.
        self._to_free: dict[str, None] = {}
        #: Leases by the output generation their records wait in.
        self._generations: dict[int, list[str]] = {}
        #: Generations whose files are recorded for the manifest, their leases not settled yet.
        self._files_recorded: set[int] = set()
        #: The latest generations made durable (their numbers, oldest first, bounded): leases
        #: whose records went into one of them are settled as soon as they are said written.
        self._durable: dict[int, None] = {}
        #: Settlements that failed on their way: sent again, with their call ids, first.
        self._retry: list[_Settlement] = []
        #: Leases whose page's links wait in the worker's link spool (a frontier partition
        #: did not take them): not settled until :meth:`unhold` (``spool.py``).
        self._held: set[str] = set()
        #: Held leases whose records are durable: settled as soon as they are unheld.
        self._held_durable: set[str] = set()
        self._claim_call = frontier.new_call_id()

    # -- reading ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, lease_id: object) -> bool:
        return lease_id in self._entries

    def get(self, lease_id: object) -> Entry | None:
        return self._entries.get(lease_id) if isinstance(lease_id, str) else None

    def lease_ids(self, stage: Stage | None = None) -> list[str]:
        """The leases held, of one stage or all."""
        return [i for i, entry in self._entries.items() if stage is None or entry.stage is stage]

    def waiting_generations(self) -> list[int]:
        """Output generations whose leases wait for them to become durable."""
        return sorted(self._generations)

    def count(self, stage: Stage) -> int:
        """Leases in ``stage``: O(1), kept at each move (workers ask at every flush, with
        tens of thousands of leases waiting for their output files)."""
        return self._counts[stage]

    @property
    def generations(self) -> int:
        """Output generations with leases waiting for them."""
        return len(self._generations)

    def slots_in_frontier(self) -> Counter[str]:
        """Host slots the frontier counts for this worker's leases right now, by host: the
        leases still fetching and those whose freeing is not sent yet (for tests and the
        invariant "the frontier's in-flight counts equal the leases that exist")."""
        return Counter(
            entry.lease.host
            for lease_id, entry in self._entries.items()
            if entry.stage is Stage.FETCHING or lease_id in self._to_free
        )

    def account(self) -> dict[str, float]:
        """Heartbeat fields: leases by stage, and how long the oldest of each stage has been
        there (seconds; 0 when none), so the fleet sees a lease that stopped moving, and where."""
        now = self._clock()
        since = dict.fromkeys(Stage, now)
        for entry in self._entries.values():  # once a heartbeat
            if entry.stage_since < since[entry.stage]:
                since[entry.stage] = entry.stage_since
        fields: dict[str, float] = {}
        for stage in Stage:
            fields[f"leases_{stage}"] = self._counts[stage]
            fields[f"oldest_{stage}_seconds"] = round(now - since[stage], 1)
        return fields

    # -- claiming -----------------------------------------------------------------------

    async def claim(self, room: int) -> list[Lease] | None:
        """Up to ``room`` new leases, the slots of finished fetches freed in the same round
        trip; None when Redis did not answer (wait :attr:`retry_in_seconds`, which grows
        while the outage lasts). A claim that failed is sent again under its call id: if it had
        reached Redis, the retry gets its leases instead of claiming more."""
        freeing = list(self._to_free)
        try:
            leases = await self.frontier.claim(
                self.worker_id, room, freeing, call_id=self._claim_call
            )
        except FrontierUnavailable as exc:
            self.retry_in_seconds = self.outage.failed()
            log.warning(
                "claim failed, retrying in %.1f s: %s",
                self.retry_in_seconds,
                exc,
                extra={"layer": "flow"},
            )
            return None
        self.outage.succeeded()
        self._claim_call = self.frontier.new_call_id()
        for lease_id in freeing:
            self._to_free.pop(lease_id, None)
        now = self._clock()
        for lease in leases:
            self._entries[lease.lease_id] = Entry(lease, now)
        self._counts[Stage.FETCHING] += len(leases)
        self.metrics.observe_claims(len(leases))
        return leases

    async def free_slots(self) -> None:
        """Tell the frontier now about fetches that ended (a worker that is not claiming,
        blocked or draining, must not keep its hosts' slots): one claim of nothing."""
        if not self._to_free:
            return
        freeing = list(self._to_free)
        await self.frontier.claim(self.worker_id, 0, freeing)
        for lease_id in freeing:
            self._to_free.pop(lease_id, None)

    # -- the stages ---------------------------------------------------------------------

    def fetched(self, lease_id: str) -> None:
        """The lease's request phase is over, whatever its result (a response, a refusal
        before any request, an error): its host slot goes back. Idempotent."""
        entry = self._entries.get(lease_id)
        if entry is None or entry.stage is not Stage.FETCHING:
            return
        self._move(entry, Stage.PROCESSING)
        self._to_free[lease_id] = None

    def moving(self, lease_id: str) -> None:
        """The lease makes progress in its stage (a file download received bytes): its time
        in the stage, which the fleet's watchdog reads, counts from now. A download of an hour
        that keeps receiving is not stalled; one that stops is caught by its read timeout."""
        entry = self._entries.get(lease_id)
        if entry is not None:
            entry.stage_since = self._clock()

    async def read_revisit_states(self, leases: Sequence[Lease]) -> None:
        """The revisit state of a claimed batch into its entries: one round trip. Raises
        FrontierUnavailable (a read: calling again is harmless)."""
        states = await self.frontier.revisit_states([lease.url for lease in leases])
        for lease in leases:
            entry = self._entries.get(lease.lease_id)
            if entry is not None:
                entry.state = states.get(lease.url)

    def state_of(self, lease_id: str) -> RevisitState | None:
        """The lease's URL's revisit state as read after its claim."""
        entry = self._entries.get(lease_id)
        return None if entry is None else entry.state

    def revisit_later(self, lease_id: str, revisit: Revisit) -> None:
        """The lease's ack or fail will carry ``revisit`` (its URL's next visit)."""
        entry = self._entries.get(lease_id)
        if entry is not None:
            entry.revisit = revisit

    def fail_later(self, lease_id: str, failure: Failure) -> None:
        """The lease failed: its settlement will be ``fail`` with this failure (the first
        failure stands)."""
        entry = self._entries.get(lease_id)
        if entry is not None and entry.failure is None:
            entry.failure = failure

    async def written(self, lease_ids: Sequence[str], generation: int | None) -> Settled:
        """The leases' records are in output ``generation``; they are settled when it is
        durable (:meth:`durable`). None: nothing was written to wait for (format ``none``),
        so they are settled now."""
        if generation is None or generation in self._durable:
            # Durable already: the worker yields between writing a batch and saying so (its
            # last heartbeat, say), and an idle worker's rotate or the file's age may make the
            # generation durable meanwhile. Listed now, its leases would wait for good.
            return await self.settle(lease_ids)
        now = self._clock()
        for lease_id in lease_ids:
            entry = self._entries.get(lease_id)
            if entry is None:
                continue
            self.fetched(lease_id)  # a lease never waits for output holding its slot
            self._move(entry, Stage.OUTPUT, now)
            self._generations.setdefault(generation, []).append(lease_id)
        return Settled()

    async def durable(self, generation: int, files: Sequence[DurableFile]) -> Settled:
        """Output ``generation`` is durable as ``files``: record them for the manifest (once),
        then settle the leases whose records they hold. Raises FrontierUnavailable when Redis
        did not answer; calling again finishes the job, repeating nothing done."""
        self._durable[generation] = None
        while len(self._durable) > _DURABLE_GENERATIONS_KEPT:
            del self._durable[next(iter(self._durable))]
        if generation in self._generations and generation not in self._files_recorded:
            await self.frontier.record_output_files([f.to_mapping() for f in files])
            self._files_recorded.add(generation)
        settled = await self.settle(self._generations.pop(generation, ()), generation=generation)
        self._files_recorded.discard(generation)
        return settled

    # -- holding ------------------------------------------------------------------------

    def hold(self, lease_ids: Iterable[str]) -> None:
        """Keep the leases from being settled, durable or not, until :meth:`unhold`: their
        pages' links wait in the worker's spool for a partition that did not answer, and the
        lease is what brings them back if this worker dies first (its page is fetched again)."""
        self._held.update(lease_id for lease_id in lease_ids if lease_id in self._entries)

    @property
    def held(self) -> int:
        """Leases held for their links."""
        return len(self._held)

    async def unhold(self, lease_ids: Iterable[str]) -> Settled:
        """The leases' links reached their partitions: settle those whose records are durable
        (the others settle with their generation). Raises FrontierUnavailable as
        :meth:`settle` does; the leases are settled by its next call."""
        ready = []
        for lease_id in lease_ids:
            self._held.discard(lease_id)
            if lease_id in self._held_durable:
                self._held_durable.discard(lease_id)
                ready.append(lease_id)
        return await self.settle(ready)

    # -- settling -----------------------------------------------------------------------

    async def settle(self, lease_ids: Iterable[str], *, generation: int | None = None) -> Settled:
        """Ack the leases without a failure and fail the others: one call each, applied once.
        A held lease (:meth:`hold`) waits for :meth:`unhold` instead.

        Raises FrontierUnavailable when Redis did not answer this call's settlement (that of
        ``generation``'s leases, for a call that retries one; for a call with neither, any
        earlier one's); a failed settlement is kept and sent
        again (same call ids) by the next call of this method, so a retry never acks twice or
        counts a lease lost that its first call settled. One that keeps failing (its leases'
        partition is down) holds up no other: each is sent on its own.
        """
        batch = []
        for lease_id in lease_ids:
            entry = self._entries.get(lease_id)
            if entry is None or entry.settling:
                continue
            if lease_id in self._held:
                self._held_durable.add(lease_id)
                continue
            batch.append(entry)
        mine: _Settlement | None = None
        if batch:
            for entry in batch:
                entry.settling = True
            mine = _Settlement(
                batch,
                self.frontier.new_call_id(),
                self.frontier.new_call_id(),
                generation=generation,
            )
            self._retry.append(mine)
        elif generation is not None:
            mine = next((x for x in self._retry if x.generation == generation), None)
        total = Settled()
        failed: FrontierUnavailable | None = None
        for settlement in list(self._retry):
            if settlement.sending:
                continue
            settlement.sending = True
            try:
                total += await self._send(settlement)
            except FrontierUnavailable as error:
                if settlement is mine or (mine is None and generation is None):
                    failed = failed or error
                continue
            finally:
                settlement.sending = False
            if settlement in self._retry:  # release_all may have cleared it meanwhile
                self._retry.remove(settlement)
        if failed is not None:
            raise failed
        return total

    @property
    def unsettled(self) -> int:
        """Settlements that failed on their way and wait to be sent again."""
        return len(self._retry)

    async def _send(self, settlement: _Settlement) -> Settled:
        succeeded = [entry for entry in settlement.entries if entry.failure is None]
        failures = [entry.failure for entry in settlement.entries if entry.failure is not None]
        if not settlement.acked:
            acked = await self._ack(succeeded, settlement.ack_call)
            settlement.acked = True
            settlement.lost_acks = acked.count(False)
        if not settlement.failed:
            codes = await self._fail(settlement.entries, failures, settlement.fail_call)
            settlement.failed = True
            settlement.lost_fails = sum(1 for code in codes if code is FailOutcome.NOT_OWNER)
        for entry in settlement.entries:
            self._forget(entry.lease.lease_id)
        lost = settlement.lost_acks + settlement.lost_fails
        self.counters["fetched"] += len(settlement.entries)
        self.counters["succeeded"] += len(succeeded)
        self.counters["failed"] += len(failures)
        self._lost(lost)
        return Settled(
            tuple(entry.lease.lease_id for entry in settlement.entries),
            len(succeeded) - settlement.lost_acks,
            len(failures) - settlement.lost_fails,
            lost,
        )

    async def _ack(self, entries: Sequence[Entry], call_id: str) -> Outcomes[bool]:
        """Ack ``entries``, with their revisits when any has one: a job without rules (and a
        frontier that knows nothing of revisits) gets the one-shot call, unchanged."""
        lease_ids = [entry.lease.lease_id for entry in entries]
        revisits = _revisits(entries)
        if revisits is None:
            return await self.frontier.ack(self.worker_id, lease_ids, call_id=call_id)
        return await self.frontier.ack(
            self.worker_id, lease_ids, revisits=revisits, call_id=call_id
        )

    async def _fail(
        self, entries: Sequence[Entry], failures: list[Failure], call_id: str
    ) -> Outcomes[FailOutcome]:
        """Fail ``failures`` (those of ``entries``), with their revisits when any has one."""
        revisits = _revisits([entry for entry in entries if entry.failure is not None])
        if revisits is None:
            return await self.frontier.fail(self.worker_id, failures, call_id=call_id)
        return await self.frontier.fail(
            self.worker_id, failures, revisits=revisits, call_id=call_id
        )

    async def release(self, lease_ids: Sequence[str], why: str) -> int:
        """Give leases back without an attempt (they are queued again at the front of their
        host's queue); returns how many were still ours. Raises FrontierUnavailable."""
        ids = [
            lease_id
            for lease_id in lease_ids
            if (entry := self._entries.get(lease_id)) is not None and not entry.settling
        ]
        if not ids:
            return 0
        for lease_id in ids:
            self._entries[lease_id].settling = True
        try:
            released = await self.frontier.release(self.worker_id, ids)
        except BaseException:
            for lease_id in ids:
                if (entry := self._entries.get(lease_id)) is not None:
                    entry.settling = False
            raise
        for lease_id in ids:
            self._forget(lease_id)
        count = sum(released)
        self.counters["released"] += count
        self._lost(len(ids) - count)
        log.info("released %d lease(s): %s", count, why, extra={"layer": "flow"})
        return count

    async def defer(
        self, lease_id: str, host: str, wait_seconds: float, status: int | None = None
    ) -> bool:
        """Give a lease back without an attempt and hold its host for ``wait_seconds`` (its
        robots.txt could not be read, ``status`` its last HTTP status): every worker's claims
        skip the host meanwhile, and the fleet reports the wait. False when Redis did not
        answer: the lease stays, and expires back by itself."""
        try:
            await self.frontier.defer_host(host, wait_seconds, status=status)
            await self.release([lease_id], f"deferred for {wait_seconds:.0f} s")
        except FrontierUnavailable as exc:
            log.warning("could not defer a lease: %s", exc, extra={"layer": "task"})
            return False
        return True

    async def release_all(self, why: str) -> int:
        """Give back every lease not settled (shutdown: pages whose records never became
        durable, fetches past the grace). Best effort: with Redis gone they expire back."""
        # Settlements that failed on their way are durable: finish them, not release them.
        with contextlib.suppress(FrontierUnavailable):
            await self.settle(())
        self._retry.clear()
        self._held.clear()  # their pages are fetched again: their links with them
        self._held_durable.clear()
        for entry in self._entries.values():
            entry.settling = False
        try:
            return await self.release(list(self._entries), why)
        except FrontierUnavailable as exc:
            log.warning(
                "could not release %d lease(s) (%s): %s",
                len(self._entries),
                why,
                exc,
                extra={"layer": "flow"},
            )
            return 0

    # -- keeping them ---------------------------------------------------------------------

    async def keep_alive(self) -> None:
        """The heartbeat's part: extend every lease held (one call), forget those that are
        not ours any more (counted lost once), free the slots of finished fetches if no claim
        did, and return expired leases of dead peers (any worker does: a crawl needs no
        operator)."""
        ids = list(self._entries)
        if ids:
            extended = await self.frontier.extend(self.worker_id, ids)
            gone = [
                lease_id
                for lease_id, ok in zip(ids, extended, strict=True)
                if not ok
                and (entry := self._entries.get(lease_id)) is not None
                and not entry.settling  # settled while the extend was on its way
            ]
            if gone:
                for lease_id in gone:
                    self._forget(lease_id)
                self._lost(len(gone))
                log.warning(
                    "%d lease(s) could not be extended: lost", len(gone), extra={"layer": "flow"}
                )
        await self.free_slots()
        await self.frontier.requeue_expired()

    # -- internals ------------------------------------------------------------------------

    def _move(self, entry: Entry, stage: Stage, now: float | None = None) -> None:
        self._counts[entry.stage] -= 1
        self._counts[stage] += 1
        entry.stage = stage
        entry.stage_since = self._clock() if now is None else now

    def _forget(self, lease_id: str) -> None:
        """Out of the book (a lease lost while its generation waits stays listed there, and
        is skipped when the generation settles)."""
        entry = self._entries.pop(lease_id, None)
        if entry is not None:
            self._counts[entry.stage] -= 1
        self._to_free.pop(lease_id, None)
        self._held.discard(lease_id)
        self._held_durable.discard(lease_id)

    def _lost(self, count: int) -> None:
        if count:
            self.counters["leases_lost"] += count
            self.metrics.observe_leases_lost(count)
            log.warning("%d lease(s) were lost before completion", count, extra={"layer": "flow"})


def _revisits(entries: Sequence[Entry]) -> dict[str, Revisit] | None:
    """The revisits of a settlement's leases, by lease token; None when none has one."""
    found = {e.lease.lease_id: e.revisit for e in entries if e.revisit is not None}
    return found or None
