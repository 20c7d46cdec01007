"""``spec.dedup``: the Bloom filter that makes every URL crawled once, sized at creation."""

from __future__ import annotations

from typing import Annotated, Final

from crawlfleet.crawljob.base import Range, Section

__all__ = ["MAX_CAPACITY", "DedupSpec"]

MAX_CAPACITY: Final = 10_000_000_000  # ~12 GB of Bloom filter at errorRate 0.01
_MIN_ERROR_RATE: Final = 1e-9  # the Bloom sizing's floor (frontier/bloom.py)


class DedupSpec(Section):
    """Sizes the Bloom filter; capacity is capped because memory grows with it."""

    capacity: Annotated[int, Range(ge=1, le=MAX_CAPACITY)] = 1_000_000
    """How many distinct URLs the Bloom filter (which remembers every URL seen, so each is
    crawled once) is sized for. Past it, more new URLs are wrongly taken for seen and skipped.
    Memory: about 1.2 MB per million at errorRate 0.01. Fixed once the job exists."""
    error_rate: Annotated[float, Range(ge=_MIN_ERROR_RATE, lt=0.5)] = 0.01
    """The Bloom filter's false-positive rate at capacity: the share of new URLs wrongly taken
    for seen and never crawled. Each halving costs about 0.18 bytes per URL of capacity.
    Fixed once the job exists."""
