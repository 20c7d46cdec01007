"""Streamed bodies: the seam through which a caller reads a response's body itself.

``Fetcher.stream`` (crawler/fetching/fetch.py) fetches a URL with all of ``fetch``'s guard,
redirects, hop checks, retries and failure classes, but hands the body of the responses a
:class:`StreamedBody` takes to that object, chunk by chunk, instead of reading it into memory.
A file download (``crawlfleet.crawler.files.download``) is the one such body: it asks for ranges
and writes the chunks into a part. The seam lives down here, and knows nothing of files, so
that fetching stays the bottom room of the crawler (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from crawlfleet.crawler.fetching.failures import FailureClass

__all__ = ["Consumed", "StreamedBody"]


@dataclass(frozen=True, slots=True)
class Consumed:
    """What became of a body a :class:`StreamedBody` read.

    ``failure`` None is a success (or a stop the body chose: it knows); ``again`` asks at once
    for a fresh request of the same URL (not a retry: no backoff, not counted against the
    attempts), which the body bounds itself.
    """

    failure: FailureClass | None = None
    message: str = ""
    again: bool = False


class StreamedBody(Protocol):
    """A body read by its caller (see the module docstring)."""

    async def prepare(self) -> Mapping[str, str]:
        """Awaited before each request (the first, retries, redirect hops, ``again``): the
        headers it adds to the request, replacing the fetcher's own of the same name."""
        ...

    def takes(self, status: int) -> bool:
        """True when a response of ``status`` is this body's to read (a redirect never is);
        the others are classified as ``fetch`` classifies them."""
        ...

    async def consume(
        self, status: int, headers: Mapping[str, str], chunks: AsyncIterator[bytes]
    ) -> Consumed:
        """Read the response (``headers`` keyed by lower-case names) from ``chunks``, as much
        of it as it wants; network errors raised while iterating propagate (the fetcher
        classifies them and may retry)."""
        ...
