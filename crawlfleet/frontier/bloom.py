"""Bloom-filter sizing and hashing for the frontier's dedup.

Sizing follows the textbook optimum, ``m = -n·ln p / ln²2`` bits and ``k = m/n·ln 2`` hashes:
about 1.2 bytes per URL at 1 % instead of ~100 bytes for a SET of SHA-1 fingerprints.

The filter is partitioned: a URL picks one segment by hash and sets all k bits inside it, so
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
        bits = max(64, math.ceil(-capacity * math.log(error_rate) / (ln2 * ln2)))
        hashes = max(1, round(bits / capacity * ln2))
        segments = math.ceil(bits / MAX_SEGMENT_BITS)
        # Every segment has the same size, so round the total up to a multiple.
        bits = math.ceil(bits / segments) * segments
        return cls(capacity, float(error_rate), bits, hashes, segments)

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


def digests(urls: Iterable[str]) -> list[bytes]:
    """12-byte BLAKE2b digests (segment, h1, h2 as little-endian uint32) the Lua filter reads."""
    return [blake2b(u.encode(), digest_size=12).digest() for u in urls]
