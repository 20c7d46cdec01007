"""The worker's memory budget: how many body bytes it may hold, and a byte semaphore over them.

A worker's memory is mostly response bodies: up to ``concurrency.perWorker`` being read, plus
the finished pages waiting in the done buffer for their flush. Sixteen decompressed 50 MiB
bodies are 800 MiB, over a 1 GiB container limit once Python's own share is counted, and an
OOM kill costs the in-flight URLs of every host an attempt. So the bytes are budgeted: a body
takes what it decodes from one :class:`ByteBudget`, chunk by chunk, and gives it back once its
page is flushed (or its fetch failed); a fetch that would overrun the budget waits for room
instead (and the claim loop claims nothing while the budget is spent).

Waiting must not deadlock: sixteen fetches each half-way through a large body could all wait
for each other. So the *oldest* reservation is always granted, even past the budget: it
finishes, gives its bytes back, and the next oldest goes on. The budget can thus be overrun by
at most one body (``fetch.maxDecompressedBytes``), which :func:`budget_bytes` leaves room for.

The budget comes from the container's memory limit: the cgroup the process lives in
(``/proc/self/cgroup``), cgroup v2's ``memory.max`` or v1's ``memory.limit_in_bytes``, the
lowest along the path up to the hierarchy's root (a parent's limit binds its children too). No
limit at all ("max") gives :data:`DEFAULT_LIMIT_BYTES`. ``CRAWLFLEET_MEMORY_LIMIT_BYTES``
(``WorkerConfig.memory_limit_bytes``) overrides what the cgroup says, where several workers
share one limit, and 0 turns the budget off (the benchmark's A/B comparison).

Accounting costs a few attribute updates per body chunk and no await unless the budget is spent
(``try_grow`` is synchronous), so the hot path of a page stays as it was.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

__all__ = [
    "BUDGET_FRACTION",
    "DEFAULT_LIMIT_BYTES",
    "MIN_BUDGET_BYTES",
    "ByteBudget",
    "Reservation",
    "budget_bytes",
    "cgroup_memory_limit",
]

_MIB: Final = 1024 * 1024
#: The limit assumed when the cgroup sets none: the worker's share of a modest machine.
DEFAULT_LIMIT_BYTES: Final = 1024 * _MIB
#: The share of the limit bodies may hold: the rest is Python, parsers, link lists, the output
#: buffers and the one body that may run past the budget.
BUDGET_FRACTION: Final = 0.5
#: Never less than this, whatever the limit: a worker must be able to hold a few pages.
MIN_BUDGET_BYTES: Final = 16 * _MIB
# A limit this large is "none" (cgroup v1 writes 2**63 rounded down to a page).
_UNLIMITED: Final = 1 << 60


def cgroup_memory_limit(root: Path = Path("/")) -> int | None:
    """The memory limit of this process's cgroup in bytes, or None when it has none.

    ``root`` is where ``proc`` and ``sys`` are found (tests pass a folder laid out like them).
    A file that is missing or unreadable is skipped: no cgroup knowledge means no limit.
    """
    try:
        lines = (root / "proc/self/cgroup").read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    limits: list[int] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2's unified hierarchy
            limits += _limits_up(root / "sys/fs/cgroup", path, "memory.max")
        elif "memory" in controllers.split(","):  # cgroup v1's memory controller
            limits += _limits_up(root / "sys/fs/cgroup/memory", path, "memory.limit_in_bytes")
    return min(limits) if limits else None


def _limits_up(mount: Path, path: str, name: str) -> list[int]:
    """The limits in ``name`` from the cgroup at ``path`` up to the mount's root.

    Walking up also finds the limit when the process sees its own cgroup as the root (a
    cgroup namespace, or v1 mounted at the container's cgroup) while /proc names a deeper path.
    """
    found: list[int] = []
    parts = [part for part in path.strip().split("/") if part and part not in (".", "..")]
    for depth in range(len(parts), -1, -1):
        try:
            text = (mount.joinpath(*parts[:depth]) / name).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isdigit() and 0 < int(text) < _UNLIMITED:
            found.append(int(text))
    return found


def budget_bytes(limit_bytes: int | None, *, max_body_bytes: int) -> int:
    """Body bytes a worker may hold under a memory limit (None: :data:`DEFAULT_LIMIT_BYTES`).

    :data:`BUDGET_FRACTION` of the limit, less one body (the oldest fetch may overrun the
    budget by that much), but never below :data:`MIN_BUDGET_BYTES`.
    """
    limit = DEFAULT_LIMIT_BYTES if limit_bytes is None else limit_bytes
    return max(MIN_BUDGET_BYTES, int(limit * BUDGET_FRACTION) - max_body_bytes)


class ByteBudget:
    """A byte semaphore: reservations grow within ``capacity_bytes`` (None: no cap, counted).

    Single event loop, no locks: every method but :meth:`Reservation.grow` is synchronous.
    """

    __slots__ = ("_holders", "_room", "capacity_bytes", "in_use_bytes", "waits")

    def __init__(self, capacity_bytes: int | None) -> None:
        if capacity_bytes is not None and capacity_bytes < 1:
            raise ValueError(f"capacity_bytes must be at least 1 (got {capacity_bytes})")
        self.capacity_bytes = capacity_bytes
        self.in_use_bytes = 0
        #: How often a body had to wait for room (for the metrics).
        self.waits = 0
        # Live reservations, oldest first (dicts keep insertion order): the oldest one is
        # always granted, so waiting never deadlocks.
        self._holders: dict[Reservation, None] = {}
        self._room = asyncio.Event()

    @property
    def exhausted(self) -> bool:
        """No room left: the claim loop stops claiming until some is given back."""
        return self.capacity_bytes is not None and self.in_use_bytes >= self.capacity_bytes

    def reservation(self) -> Reservation:
        """A new, empty reservation (one fetch's body, then its page until flushed)."""
        reservation = Reservation(self)
        self._holders[reservation] = None
        return reservation

    def _grant(self, reservation: Reservation, count: int) -> bool:
        capacity = self.capacity_bytes
        if (
            capacity is not None
            and self.in_use_bytes + count > capacity
            and next(iter(self._holders)) is not reservation
        ):
            return False
        self.in_use_bytes += count
        reservation.held += count
        return True

    def _give_back(self, count: int) -> None:
        if count:
            self.in_use_bytes -= count
            self._room.set()

    async def _wait_for_room(self) -> None:
        self._room.clear()
        await self._room.wait()


class Reservation:
    """The bytes one body holds in a :class:`ByteBudget`; :meth:`release` when it is gone."""

    __slots__ = ("_budget", "held")

    def __init__(self, budget: ByteBudget) -> None:
        self._budget = budget
        self.held = 0

    def try_grow(self, count: int) -> bool:
        """Take ``count`` more bytes if there is room (or this is the oldest reservation)."""
        return self._budget._grant(self, count)

    async def grow(self, count: int) -> None:
        """Take ``count`` more bytes, waiting for room first (bounded by the fetch deadline)."""
        budget = self._budget
        budget.waits += 1
        while not budget._grant(self, count):
            await budget._wait_for_room()

    def shrink_to(self, count: int) -> None:
        """Give back all but ``count`` bytes (a failed read returns what it took)."""
        if count < self.held:
            self._budget._give_back(self.held - count)
            self.held = count

    def release(self) -> None:
        """Give every byte back and leave the budget; idempotent."""
        budget = self._budget
        if budget._holders.pop(self, False) is None:
            budget._give_back(self.held)
            self.held = 0
