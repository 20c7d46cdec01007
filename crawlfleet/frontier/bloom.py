"""Bloom-filter sizing and hashing for the frontier's dedup.

Sizing follows the textbook optimum, ``m = -n·ln p / ln²2`` bits and ``k = m/n·ln 2`` hashes:
about 1.2 bytes per URL at 1 %, instead of the tens of bytes per URL a SET of SHA-1
fingerprints costs (docs/benchmarks.md).

Segments are sized to jemalloc's allocation classes, so the memory Redis reports is the
memory the formula asks for (see ``_fit_segments``). The filter is partitioned: a URL picks
one segment by hash and sets all k bits inside it, so
one segment (a plain Redis string, under 512 MB) is all a check touches, and segments can
later be placed on different shards by URL hash (DESIGN §7). Python hashes each URL once
(BLAKE2b, 12 bytes: segment, h1, h2); the Lua script derives the k positions by double
hashing (Kirsch–Mitzenmacher), so only 12 bytes per URL cross the wire.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from hashlib import blake2b
from typing import Literal

from crawlfleet.errors import ConfigError

__all__ = [
    "MAX_CAPACITY",
    "MAX_SEGMENT_BITS",
    "BloomBackend",
    "BloomParams",
    "allocated_bytes",
    "digests",
]

BloomBackend = Literal["native", "bitmap"]

#: Redis strings stop at 512 MB (2**32 bits); stay a little under.
MAX_SEGMENT_BITS = 2**32 - 2**20
#: Ten billion URLs (~12 GB of filter at 1 %) is past any single Redis a crawl would use.
MAX_CAPACITY = 10_000_000_000
MIN_ERROR_RATE = 1e-9
MAX_ERROR_RATE = 0.5


@dataclass(frozen=True, slots=True)
class BloomParams:
    """The shape of one job's filter; fixed at creation (stored in the job's meta)."""

    capacity: int
    error_rate: float
    bits: int
    hashes: int
    segments: int

    @classmethod
    def for_capacity(cls, capacity: int, error_rate: float) -> BloomParams:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise ConfigError(f"dedup.capacity must be an integer (got {capacity!r})")
        if not 1 <= capacity <= MAX_CAPACITY:
            raise ConfigError(
                f"dedup.capacity must be between 1 and {MAX_CAPACITY:,} (got {capacity!r})"
            )
        if not isinstance(error_rate, int | float) or not (
            MIN_ERROR_RATE <= error_rate < MAX_ERROR_RATE
        ):
            raise ConfigError(
                f"dedup.errorRate must be at least {MIN_ERROR_RATE} and less than "
                f"{MAX_ERROR_RATE} (got {error_rate!r})"
            )
        ln2 = math.log(2)
        ideal = max(64, math.ceil(-capacity * math.log(error_rate) / (ln2 * ln2)))
        hashes = max(1, round(ideal / capacity * ln2))
        segments, segment_bytes = _fit_segments(math.ceil(ideal / 8))
        return cls(capacity, float(error_rate), segments * segment_bytes * 8, hashes, segments)

    @property
    def segment_bits(self) -> int:
        return self.bits // self.segments

    @property
    def bytes(self) -> int:
        return math.ceil(self.bits / 8)

    def false_positive_rate(self, items: int) -> float:
        """Expected false-positive rate after ``items`` insertions."""
        if items <= 0:
            return 0.0
        return float((1.0 - math.exp(-self.hashes * items / self.bits)) ** self.hashes)

    def fill_ratio(self, items: int) -> float:
        """Expected fraction of bits set after ``items`` insertions."""
        return 1.0 - math.exp(-self.hashes * items / self.bits)

    def to_meta(self) -> dict[str, str]:
        return {
            "bloom_capacity": str(self.capacity),
            "bloom_error_rate": repr(self.error_rate),
            "bloom_bits": str(self.bits),
            "bloom_hashes": str(self.hashes),
            "bloom_segments": str(self.segments),
        }

    @classmethod
    def from_meta(cls, meta: dict[str, str]) -> BloomParams:
        return cls(
            capacity=int(meta["bloom_capacity"]),
            error_rate=float(meta["bloom_error_rate"]),
            bits=int(meta["bloom_bits"]),
            hashes=int(meta["bloom_hashes"]),
            segments=int(meta["bloom_segments"]),
        )


#: Redis' string header and terminating NUL, allocated with the data.
_SDS_OVERHEAD = 16
_MAX_SEGMENTS = 16
_GOOD_ENOUGH_SLACK = 0.04


def _size_class(size: int) -> int:
    """jemalloc's allocation for ``size`` bytes: four classes per power of two."""
    if size <= 4096:
        return 1 << max(3, (size - 1).bit_length())
    base = 1 << ((size - 1).bit_length() - 1)
    step = base // 4
    return base + math.ceil((size - base) / step) * step


def _fit_segments(data_bytes: int) -> tuple[int, int]:
    """Segment count and size that hold ``data_bytes`` with the least allocator slack.

    Redis allocates a string in jemalloc size classes (up to 25 % above the request); a few
    equal segments each just under a class waste almost nothing, and the slack that is left
    becomes filter bits (fewer false positives) instead of dead memory.
    """
    least = math.ceil(data_bytes * 8 / MAX_SEGMENT_BITS)
    best: tuple[int, int, int] | None = None
    for segments in range(least, max(least, _MAX_SEGMENTS) + 1):
        per_segment = math.ceil(data_bytes / segments)
        allocated = _size_class(per_segment + _SDS_OVERHEAD)
        usable = min(allocated - _SDS_OVERHEAD, MAX_SEGMENT_BITS // 8)
        total = segments * allocated
        if best is None or total < best[0]:
            best = (total, segments, usable)
        if total <= data_bytes * (1 + _GOOD_ENOUGH_SLACK):
            break  # fewer segments mean fewer KEYS per script call
    assert best is not None
    return best[1], best[2]


def allocated_bytes(params: BloomParams) -> int:
    """What Redis' allocator holds for the bitmap segments (MEMORY USAGE, near enough)."""
    return params.segments * _size_class(params.segment_bits // 8 + _SDS_OVERHEAD)


def digests(urls: Iterable[str]) -> list[bytes]:
    """12-byte BLAKE2b digests (segment, h1, h2 as little-endian uint32) the Lua filter reads."""
    return [blake2b(u.encode(), digest_size=12).digest() for u in urls]
