"""What a lease's request must pass before it is sent: the address guard, then robots.txt.

Every kind of worker asks here, so a refusal is decided alike for crawlfleet's worker and for
the Scrapy runtime (DESIGN §6): a forbidden address (``forbidden_address``, from the guard,
which refuses cloud metadata addresses even with ``allowPrivateNetworks``), a URL the guard
cannot judge (``bad_scheme``, ``invalid_url``: it fails closed), a Disallow
(``robots_disallowed``), a robots.txt given up after ``robots.giveUpAfterSeconds``
(``robots_unavailable``, not retried), or a robots.txt that cannot be read yet: the lease is
**deferred** -- given back without an attempt, its host held in the frontier until robots.txt is
asked again, so every worker's claims skip the host meanwhile (RFC 9309: an unreachable
robots.txt means "wait", not "allowed"). A refusal costs its lease nothing but its host slot,
which the lease book frees as for any ended request phase (``leases.py``).

An allowed answer also sets the host's pace from its robots.txt: a Crawl-delay longer than the
job's ``hostDelaySeconds`` paces every worker (once per robots entry), and a host held by a
deferral, or given up, gets its delay back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.politeness.robots import RobotsAccess, RobotsPolicy, RobotsVerdict
from crawlfleet.errors import FetchError, InvalidURL, UnsupportedScheme
from crawlfleet.frontier import CanonicalURL, Frontier, Lease, canonicalize, host_of

if TYPE_CHECKING:
    from crawlfleet.crawler.fetching.safety import AddressGuard
    from crawlfleet.crawler.worker.leases import LeaseBook
    from crawlfleet.crawler.worker.metrics import WorkerMetrics
    from crawlfleet.crawljob import CrawlJobSpec

__all__ = ["DEFERRED", "Deferred", "Refused", "RequestGate"]

log = logging.getLogger(__name__)

#: Hosts whose robots delay a worker remembers having applied (then it starts over).
_ROBOTS_APPLIED_MAX: Final = 65_536


@dataclass(frozen=True, slots=True)
class Refused:
    """The request must not be sent: the lease fails with this class and message
    (``retryable`` None: the class's own fate)."""

    failure_class: FailureClass
    message: str
    retryable: bool | None = None


class Deferred:
    """The lease was given back (robots.txt cannot be read yet): nothing more to do with it."""


DEFERRED: Final = Deferred()


class RequestGate:
    """See the module docstring. One per worker process."""

    def __init__(
        self,
        *,
        frontier: Frontier,
        leases: LeaseBook,
        robots: RobotsPolicy,
        guard: AddressGuard | None,
        metrics: WorkerMetrics,
        obey: bool,
        host_delay_seconds: float,
    ) -> None:
        self.frontier = frontier
        self.leases = leases
        self.robots = robots
        self.guard = guard
        self.metrics = metrics
        self.obey = obey
        self.host_delay_seconds = host_delay_seconds
        # host -> stamp of the robots entry whose delay this worker applied (see
        # _apply_delay); hosts this worker deferred, whose delay it must undo.
        self._applied: dict[str, float] = {}
        self._deferred_hosts: set[str] = set()

    @classmethod
    def from_spec(
        cls,
        spec: CrawlJobSpec,
        leases: LeaseBook,
        *,
        robots: RobotsPolicy,
        guard: AddressGuard | None,
    ) -> RequestGate:
        """The gate of a worker of this job, over its lease book (whose frontier and metrics
        it shares)."""
        return cls(
            frontier=leases.frontier,
            leases=leases,
            robots=robots,
            guard=guard,
            metrics=leases.metrics,
            obey=spec.robots.obey,
            host_delay_seconds=spec.concurrency.host_delay_seconds,
        )

    async def before_request(self, lease: Lease) -> Refused | Deferred | None:
        """None: send it. Refused: fail the lease. DEFERRED: the lease is given back."""
        if self.guard is not None:
            try:  # before robots.txt too: no request at all to a forbidden address
                await self.guard.check_url(lease.url)
            except FetchError as exc:
                return Refused(FailureClass(exc.failure_class), exc.message)
        if not self.obey:
            return None
        verdict = await self.robots.check(lease.url)
        if verdict.access is RobotsAccess.DEFERRED:
            await self._defer(lease, verdict)
            return DEFERRED
        # Read (allowed or not), or given up: either way the host's delay follows its
        # robots.txt now -- a deferral's hold ends whichever URL is asked first, and a host
        # given up is no longer held: its other URLs fail at once, not one per deferral.
        await self._apply_delay(lease.host, verdict)
        if verdict.access is RobotsAccess.DISALLOWED:
            return Refused(FailureClass.ROBOTS_DISALLOWED, "robots.txt")
        if verdict.access is RobotsAccess.UNAVAILABLE:
            return Refused(FailureClass.ROBOTS_UNAVAILABLE, verdict.detail, retryable=False)
        return None

    async def check_address(self, url: str) -> CanonicalURL | Refused:
        """Any URL about to be requested, failing closed: one that is not an http(s) URL the
        crawl can canonicalise (another scheme, no host, over 8,192 characters, malformed) is
        refused before any look-up (``bad_scheme``, ``invalid_url``), the rest is the guard's
        to judge (``forbidden_address``, ``dns_error``). Its canonical form when it may go."""
        try:
            canonical = canonicalize(url)
        except UnsupportedScheme as exc:
            return Refused(FailureClass.BAD_SCHEME, str(exc))
        except InvalidURL as exc:
            return Refused(FailureClass.INVALID_URL, str(exc))
        if self.guard is not None:
            try:
                await self.guard.check_url(canonical)
            except FetchError as exc:
                return Refused(FailureClass(exc.failure_class), exc.message)
        return canonical

    async def before_hop(self, url: str) -> Refused | None:
        """A redirect's target (or any further request of a lease to another URL), asked
        before it is requested: the guard (:meth:`check_address`), then robots.txt. A target
        whose robots.txt cannot be read fails the lease (retryable): the lease is not the
        hop's host's to defer."""
        checked = await self.check_address(url)
        if isinstance(checked, Refused):
            return Refused(checked.failure_class, f"redirect to {url[:200]}: {checked.message}")
        canonical = checked
        if not self.obey:
            return None
        verdict = await self.robots.check(canonical)
        if verdict.access is not RobotsAccess.DEFERRED:
            await self._apply_delay(host_of(canonical), verdict)
        if verdict.access is RobotsAccess.ALLOWED:
            return None
        if verdict.access is RobotsAccess.DISALLOWED:
            return Refused(
                FailureClass.ROBOTS_DISALLOWED, f"redirect to {url} is disallowed by robots.txt"
            )
        return Refused(FailureClass.ROBOTS_UNAVAILABLE, f"redirect to {url}: {verdict.detail}")

    async def check_hop(self, url: str) -> tuple[FailureClass, str] | None:
        """:meth:`before_hop` in the shape the fetcher's ``check_hop`` hook takes."""
        refused = await self.before_hop(url)
        return None if refused is None else (refused.failure_class, refused.message)

    async def _apply_delay(self, host: str, verdict: RobotsVerdict) -> None:
        """Set the host's delay in the frontier from its robots.txt, once per robots entry.

        A Crawl-delay longer than the job's paces every worker; a host this worker (or, as the
        entry's ``recovered`` says, any worker) deferred gets its delay back, and so does a host
        given up (any worker's deferral held it).
        """
        if self._applied.get(host) == verdict.stamp:
            return
        if len(self._applied) >= _ROBOTS_APPLIED_MAX:
            self._applied.clear()
        self._applied[host] = verdict.stamp
        delay = verdict.crawl_delay_seconds
        wanted = delay if delay is not None and delay > self.host_delay_seconds else None
        given_up = verdict.access is RobotsAccess.UNAVAILABLE
        if wanted is not None or verdict.recovered or given_up or host in self._deferred_hosts:
            await self.frontier.set_host_delay(host, wanted)
            self._deferred_hosts.discard(host)

    async def _defer(self, lease: Lease, verdict: RobotsVerdict) -> None:
        """Give the lease back without an attempt and hold its host until robots.txt is asked
        again: every worker's claims skip it meanwhile (the host's delay in the frontier)."""
        wait = max(verdict.retry_in_seconds, self.host_delay_seconds)
        self.metrics.observe_robots_deferral()
        if not await self.leases.defer(lease.lease_id, lease.host, wait, verdict.status):
            return  # Redis did not answer: the lease expires back by itself
        self._deferred_hosts.add(lease.host)
        self._applied.pop(lease.host, None)
        log.debug(
            "deferred %s for %.1f s: %s", lease.url, wait, verdict.detail, extra={"layer": "task"}
        )
