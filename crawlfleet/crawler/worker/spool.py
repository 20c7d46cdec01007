"""Links a frontier partition could not take, kept on disk until it answers again (DESIGN §7).

With ``frontier.shards`` past 1 a page's links go to the partitions of their hosts. When one
partition's node is down, the others still take theirs (:class:`~crawlfleet.errors.
PartitionsUnavailable` carries their answers), and the links bound for the silent one come
here: one append-only JSON-lines file per partition in the worker's spool folder, so a
long outage costs disk, not memory, up to a bound (``CRAWLFLEET_LINK_SPOOL_BYTES``). The
worker goes on crawling the hosts of the partitions that answer, and replays a partition's
file as soon as it answers again (every second or so, backing off to five).

**Nothing is lost** even if the spool is: the pages whose links wait here are *held* in the
lease book (:meth:`~crawlfleet.crawler.worker.leases.LeaseBook.hold`), their leases extended
and never acked until every partition their links went to has taken them. A worker killed
meanwhile loses its spool with its leases, which expire back into the queue: the pages are
fetched again and their links found again. So the files are not fsynced (the lease is what
makes the links durable), and a worker that starts never reads another's spool.

**Full**: an add past the bound is refused whole (:attr:`LinkSpool.full`); the worker keeps
that batch and tries it again at its next flush, stops claiming meanwhile, and says so in its
heartbeat (``link_spool_full``), which the fleet reports (``PartitionUnavailable``). Never a
silent drop. It is full until a replay frees room or a batch goes through without it
(:meth:`LinkSpool.passed`): a batch larger than the whole bound waits for its partitions.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from crawlfleet.config import LINK_SPOOL_BYTES
from crawlfleet.frontier import Link
from crawlfleet.urls import CanonicalURL

__all__ = ["LINK_SPOOL_BYTES", "LinkSpool", "ReplayBackoff"]

log = logging.getLogger(__name__)

#: Replays of a partition that did not answer: the first retry after this, doubling to the
#: longest wait (a partition back from an outage is found within seconds).
REPLAY_FIRST_SECONDS: Final = 1.0
REPLAY_MAX_SECONDS: Final = 5.0


@dataclass(slots=True)
class _Entry:
    """One add: the leases it holds, and the partitions that still owe their links."""

    holders: list[str]
    partitions: set[int]


@dataclass(slots=True)
class ReplayBackoff:
    """When the next replay may be tried: sooner after a success, later after each miss."""

    next_at: float = 0.0
    _wait: float = field(default=0.0)

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def missed(self, now: float) -> float:
        self._wait = min(REPLAY_MAX_SECONDS, self._wait * 2) if self._wait else REPLAY_FIRST_SECONDS
        self.next_at = now + self._wait
        return self._wait

    def answered(self) -> None:
        self._wait, self.next_at = 0.0, 0.0


class LinkSpool:
    """The worker's spooled links, by partition, and the leases they hold (module docstring).

    ``directory`` None: a private temporary folder, removed by :meth:`close`.
    """

    def __init__(self, directory: Path | None = None, *, max_bytes: int = LINK_SPOOL_BYTES) -> None:
        self._own = directory is None
        self.directory = (
            Path(tempfile.mkdtemp(prefix="crawlfleet-links-")) if directory is None else directory
        )
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob("partition-*.jsonl"):  # a predecessor's: held
            leftover.unlink()  # by leases that expired with it, its pages to be fetched again
        self.max_bytes = max_bytes
        #: An add was refused for the bound since the last replay that freed room.
        self.full = False
        self.backoff = ReplayBackoff()
        self._bytes: dict[int, int] = {}
        self._links: dict[int, int] = {}
        self._entries: list[_Entry] = []

    # -- reading ------------------------------------------------------------------------

    @property
    def links(self) -> int:
        """Links waiting, all partitions."""
        return sum(self._links.values())

    @property
    def bytes(self) -> int:
        return sum(self._bytes.values())

    @property
    def partitions(self) -> tuple[int, ...]:
        """The partitions links wait for, in order."""
        return tuple(sorted(p for p, n in self._links.items() if n))

    def _path(self, partition: int) -> Path:
        return self.directory / f"partition-{partition}.jsonl"

    # -- adding and replaying -------------------------------------------------------------

    def add(self, by_partition: Mapping[int, Sequence[Link]], holders: Sequence[str]) -> bool:
        """Spool each partition's links, the ``holders`` (lease ids) held until every one of
        these partitions has taken them. False, nothing written, when the bound would be
        passed (:attr:`full`)."""
        lines = {
            p: "".join(
                json.dumps([link.url, link.depth, link.parent], separators=(",", ":")) + "\n"
                for link in links
            ).encode()
            for p, links in by_partition.items()
            if links
        }
        size = sum(len(data) for data in lines.values())
        if self.bytes + size > self.max_bytes:
            self.full = True
            return False
        for p, data in lines.items():
            with self._path(p).open("ab") as spooled:
                spooled.write(data)
            self._bytes[p] = self._bytes.get(p, 0) + len(data)
            self._links[p] = self._links.get(p, 0) + len(by_partition[p])
        self._entries.append(_Entry(list(holders), set(lines)))
        return True

    def passed(self) -> None:
        """A batch's links all reached their partitions without the spool: a batch refused
        for the bound has gone through (the worker may claim again)."""
        self.full = False

    def read(self, partition: int) -> list[Link]:
        """The links waiting for ``partition``, in the order they came."""
        if not self._links.get(partition):
            return []
        links = []
        with self._path(partition).open("rb") as spooled:
            for line in spooled:
                url, depth, parent = json.loads(line)
                links.append(Link(CanonicalURL(url), int(depth), str(parent)))
        return links

    def replayed(self, partition: int) -> list[str]:
        """``partition`` took every link :meth:`read` gave: its file goes, and the leases of
        the adds no partition owes any more are returned (to unhold)."""
        self._path(partition).unlink(missing_ok=True)
        self._bytes.pop(partition, None)
        self._links.pop(partition, None)
        self.full = False
        released: list[str] = []
        kept: list[_Entry] = []
        for entry in self._entries:
            entry.partitions.discard(partition)
            if entry.partitions:
                kept.append(entry)
            else:
                released.extend(entry.holders)
        self._entries = kept
        return released

    def close(self) -> None:
        """Forget everything (the held leases are released by the book at shutdown: their
        pages are fetched again), and remove a private folder."""
        self._entries.clear()
        self._bytes.clear()
        self._links.clear()
        if self._own:
            shutil.rmtree(self.directory, ignore_errors=True)
        else:
            for path in self.directory.glob("partition-*.jsonl"):
                path.unlink(missing_ok=True)
