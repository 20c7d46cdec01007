"""``spec.dedup``: the Bloom filter that makes every URL crawled once, sized at creation.

The filter's size follows from capacity and errorRate alone (the textbook optimum,
:func:`bloom_shape`; ``frontier/bloom.py`` lays it out in Redis with the same figures), so what
it will cost is known before any Redis exists: :func:`memory_problem` refuses a filter that
would not fit the Redis the job gets, with both figures, instead of letting its first writes
push that Redis past its memory (a 12 GB first layer beside a 1 Gi managed Redis is killed at
once, and then again after every restart).
"""

from __future__ import annotations

import math
from typing import Annotated, Final

from crawlfleet.crawljob.base import Range, Section
from crawlfleet.crawljob.fields import MIB

__all__ = [
    "BLOOM_MEMORY_SHARE",
    "FIRST_LAYER_SHARE",
    "MAX_CAPACITY",
    "DedupSpec",
    "bloom_shape",
    "first_layer_bytes",
    "memory_problem",
]

MAX_CAPACITY: Final = 10_000_000_000  # ~12 GB of Bloom filter at errorRate 0.01
_MIN_ERROR_RATE: Final = 1e-9  # the Bloom sizing's floor (frontier/bloom.py)
#: Share of ``errorRate`` the filter's first layer gets (the layers it may grow share the
#: rest: frontier/bloom.py has the arithmetic).
FIRST_LAYER_SHARE: Final = 15 / 16
#: The most of a Redis's free memory (its maxmemory less what it holds) a job's Bloom filter
#: may take when the job starts: the rest is for the queues, leases, robots.txt cache and
#: counters that the crawl then grows, and for the layers the filter adds past its capacity.
BLOOM_MEMORY_SHARE: Final = 0.75


class DedupSpec(Section):
    """Sizes the Bloom filter; capacity is capped because memory grows with it."""

    capacity: Annotated[int, Range(ge=1, le=MAX_CAPACITY)] = 1_000_000
    """How many distinct URLs the Bloom filter (which remembers every URL seen, so each is
    crawled once) is sized for. Past it, more new URLs are wrongly taken for seen and skipped.
    Memory: about 1.2 MB per million at errorRate 0.01, at most three quarters of the job's
    Redis memory (checked before the job starts). Fixed once the job exists."""
    error_rate: Annotated[float, Range(ge=_MIN_ERROR_RATE, lt=0.5)] = 0.01
    """The Bloom filter's false-positive rate at capacity: the share of new URLs wrongly taken
    for seen and never crawled. Each halving costs about 0.18 bytes per URL of capacity.
    Fixed once the job exists."""


def bloom_shape(capacity: int, error_rate: float) -> tuple[int, int]:
    """The least bits, and the hashes, of a Bloom filter holding ``capacity`` at ``error_rate``.

    ``m = -n·ln p / ln²2`` bits and ``k = m/n·ln 2`` hashes, k rounded to an integer and the
    bits then raised, where rounding needs it, until the rate at capacity is the target or
    better.
    """
    ln2 = math.log(2)
    ideal = -capacity * math.log(error_rate) / (ln2 * ln2)
    hashes = max(1, round(ideal / capacity * ln2))
    needed = -hashes * capacity / math.log1p(-(error_rate ** (1 / hashes)))
    return max(64, math.ceil(max(ideal, needed))), hashes


def first_layer_bytes(capacity: int, error_rate: float) -> int:
    """The bytes of the filter's first layer: what a job's Redis holds once it starts."""
    bits, _ = bloom_shape(capacity, error_rate * FIRST_LAYER_SHARE)
    return math.ceil(bits / 8)


def _mib(count: float) -> str:
    return f"{count / MIB:,.1f} MiB"


def memory_problem(
    capacity: int, error_rate: float, max_memory_bytes: int, used_bytes: int, redis: str
) -> str | None:
    """Why the job's Bloom filter does not fit ``redis`` (None: it does), with both figures.

    ``max_memory_bytes`` is that Redis's maxmemory and ``used_bytes`` what it holds already
    (0 for a managed Redis, which is the job's own); the filter may take
    :data:`BLOOM_MEMORY_SHARE` of the difference.
    """
    need = first_layer_bytes(capacity, error_rate)
    room = BLOOM_MEMORY_SHARE * max(0, max_memory_bytes - used_bytes)
    if need <= room:
        return None
    held = f", {_mib(used_bytes)} of it in use" if used_bytes else ""
    return (
        f"the Bloom filter of {capacity:,} URLs at errorRate {error_rate:g} needs"
        f" {_mib(need)}, more than the {_mib(room)} it may take of {redis} (maxmemory"
        f" {_mib(max_memory_bytes)}{held}; {BLOOM_MEMORY_SHARE:.0%} of what is free, the rest"
        " is for the queues and leases): lower dedup.capacity or raise errorRate, or give the"
        " job a larger Redis"
    )
