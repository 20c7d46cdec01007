"""A file's SHA-256, computed in a thread one batch behind the bytes.

Why a thread: ``hashlib`` lets go of the GIL while it hashes a large buffer, so the digest of a
download can be computed on another core while the event loop reads the next bytes from the
socket. Hashed on the loop, SHA-256 took about a fifth of the worker's time per MiB of a file
(docs/benchmarks.md, "Files"), time in which nothing was read.

Order is kept by construction: the bytes go in batches of at least :data:`HASH_BATCH_BYTES`,
and a batch starts only once the one before it is done (at most one in flight). The chunks are
held, not copied: a local part holds the same ones for its write behind.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Final

from crawlfleet.crawler.files.parts import WRITE_BEHIND_BYTES

__all__ = ["HASH_BATCH_BYTES", "BackgroundDigest"]

#: Bytes gathered before a batch goes to the thread: a local part's write size, so both hold
#: the same chunks, and one thread hop per 2 MiB.
HASH_BATCH_BYTES: Final = WRITE_BEHIND_BYTES


class BackgroundDigest:
    """SHA-256 of everything given to :meth:`update`, in order; :meth:`hexdigest` waits for
    the batches still on their way. Not safe for concurrent use (one download's)."""

    def __init__(self) -> None:
        self._hasher = hashlib.sha256()
        self._batch: list[bytes] = []
        self._batched = 0
        self._running: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"BackgroundDigest(batched={self._batched}, running={self._running is not None})"

    async def update(self, data: bytes) -> None:
        """Take ``data`` (held until hashed); a full batch goes to the thread once the last
        one is done."""
        self._batch.append(data)
        self._batched += len(data)
        if self._batched >= HASH_BATCH_BYTES:
            await self._send()

    async def hexdigest(self) -> str:
        """The digest of every byte given so far (what is batched is hashed first)."""
        await self._send()
        await self._wait()
        return self._hasher.hexdigest()

    async def _send(self) -> None:
        await self._wait()
        if not self._batch:
            return
        batch, self._batch, self._batched = self._batch, [], 0
        self._running = asyncio.ensure_future(asyncio.to_thread(_update, self._hasher, batch))

    async def _wait(self) -> None:
        """The batch in flight is hashed on return. Shielded: a caller cancelled meanwhile
        leaves it to finish (a hash never fails), still tracked."""
        running = self._running
        if running is not None:
            await asyncio.shield(running)
            self._running = None


def _update(hasher: hashlib._Hash, chunks: Sequence[bytes]) -> None:
    for chunk in chunks:
        hasher.update(chunk)
