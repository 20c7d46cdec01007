"""Bloom-filter sizing and hashing for the frontier's dedup, and the filter's growth.

Sizing follows the textbook optimum, ``m = -n·ln p / ln²2`` bits and ``k = m/n·ln 2`` hashes:
about 1.2 bytes per URL at 1 %, instead of the tens of bytes per URL a SET of SHA-1
fingerprints costs (docs/benchmarks.md).

Segments are sized to jemalloc's allocation classes, so the memory Redis reports is the
memory the formula asks for (see ``_fit_segments``). The filter is partitioned: a URL picks
one segment by hash and sets all k bits inside it, so
one segment (a plain Redis string, under 512 MB) is all a check touches, and segments can
later be placed on different shards by URL hash (DESIGN §7). Python hashes each URL once
(BLAKE2b, 16 bytes: segment, h1, h2, h3); the Lua script derives the k positions by triple
hashing (``h1 + i·h2 + i²·h3``, Dillinger and Manolios) over a prime number of bits per
segment, and only 16 bytes per URL cross the wire. Plain double hashing (Kirsch–Mitzenmacher)
is not enough here: two URLs whose (h1, h2) agree modulo a segment's bits are one URL to the
filter, a floor of about ``n/bits²`` under the false-positive rate -- 7e-6 for a
1,000-URL filter at 1e-7, seventy times the target (measured: one page in 5,000 skipped).
A third hash lowers the floor to ``n/bits³``; a prime size keeps every stride coprime
with it, so no stride revisits a handful of bits.

**Growth.** A filter past its capacity would take ever more new URLs for seen, so the filter
is a chain of layers, as a scalable Bloom filter is (Almeida et al.; RedisBloom's
``EXPANSION``): once the newest layer holds its capacity, the next new URL opens a layer twice
as large with half the error rate (:data:`GROWTH`, :data:`TIGHTENING`), inside the same
script, so two workers never both add one. A URL is seen when any layer has it, so the
rates add up: the first layer gets 15/16 of ``errorRate`` (:data:`FIRST_LAYER_SHARE`: a
filter that never grows costs almost what one of exactly ``errorRate`` does) and the layers
after it share the last 1/16, halving each time, so the sum never passes ``errorRate``. Each
layer's shape is computed here, once, when the job is created, and stored in its meta
(:meth:`BloomParams.to_meta`): a script grows the filter without computing anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from hashlib import blake2b
from typing import Final, Literal

from crawlfleet.crawljob.dedup import FIRST_LAYER_SHARE, bloom_shape
from crawlfleet.errors import ConfigError

__all__ = [
    "FIRST_LAYER_SHARE",
    "GROWTH",
    "MAX_CAPACITY",
    "MAX_LAYERS",
    "MAX_SEGMENT_BITS",
    "TIGHTENING",
    "BloomBackend",
    "BloomEstimate",
    "BloomLayer",
    "BloomParams",
    "allocated_bytes",
    "digests",
    "native_estimate",
    "native_reserve_capacity",
]

BloomBackend = Literal["native", "bitmap"]

#: Redis strings stop at 512 MB (2**32 bits); stay a little under.
MAX_SEGMENT_BITS = 2**32 - 2**20
#: Ten billion URLs (~12 GB of filter at 1 %) is past any single Redis a crawl would use.
MAX_CAPACITY = 10_000_000_000
MIN_ERROR_RATE = 1e-9
MAX_ERROR_RATE = 0.5
#: Each new layer holds this many times the URLs of the one before (RedisBloom's default).
GROWTH: Final = 2
#: ... at this fraction of its error rate (RedisBloom's tightening ratio).
TIGHTENING: Final = 0.5
#: Layers a filter may grow to; past the last one it fills on (its rate then rises, and the
#: stats say so). Also stops where the layers would hold more than MAX_CAPACITY.
MAX_LAYERS: Final = 32


@dataclass(frozen=True, slots=True)
class BloomLayer:
    """One layer of the filter: its capacity, target rate and shape."""

    capacity: int
    error_rate: float
    bits: int
    hashes: int
    segments: int

    @classmethod
    def sized(cls, capacity: int, error_rate: float) -> BloomLayer:
        """The least bits (fitted to the allocator) that hold ``capacity`` at ``error_rate``.

        k is the optimum rounded to an integer; the bits are then raised, where rounding
        needs it, until the rate at capacity is the target or better.
        """
        bits, hashes = bloom_shape(capacity, error_rate)  # the model's figures: one formula
        data_bytes = math.ceil(bits / 8)
        while True:
            segments, segment_bytes = _fit_segments(data_bytes)
            # A prime number of bits per segment: the double-hashing stride h2 (1..p-1) is
            # then coprime with it, so the k positions are always k distinct bits. With a
            # composite size, a stride sharing a large factor with it visits a handful of
            # bits over and over (3968 = 2^7 * 31 bits and h2 = 1984: two bits for k = 23),
            # and such URLs are taken for seen a thousand times more often than errorRate.
            segment_bits = _prime_at_most(segment_bytes * 8)
            if segments * segment_bits >= bits:
                return cls(capacity, error_rate, segments * segment_bits, hashes, segments)
            data_bytes += segments * 64  # the prime fell below the need: a size up

    @property
    def segment_bits(self) -> int:
        return self.bits // self.segments

    @property
    def bytes(self) -> int:
        return math.ceil(self.bits / 8)

    def false_positive_rate(self, items: int) -> float:
        """Expected false-positive rate of this layer after ``items`` insertions."""
        if items <= 0:
            return 0.0
        return float((1.0 - math.exp(-self.hashes * items / self.bits)) ** self.hashes)

    def spec(self) -> str:
        """``bits:hashes:segments:capacity``, as the scripts read a layer from the meta."""
        return f"{self.bits}:{self.hashes}:{self.segments}:{self.capacity}"


@dataclass(frozen=True, slots=True)
class BloomEstimate:
    """What the filter holds now, for stats and metrics."""

    #: Layers in use (1 until the first is full).
    layers: int
    #: URLs the layers in use hold at their target rates.
    capacity: int
    #: Items in the newest layer over its capacity; at 1.0 the next new URL adds a layer.
    fill_ratio: float
    #: Chance that a URL never added is taken for seen, over every layer: the sum of the
    #: layers' rates (an upper bound), at most ``errorRate`` until the last layer overfills.
    false_positive_rate: float


@dataclass(frozen=True, slots=True)
class BloomParams:
    """The shape of one job's filter, every layer it may grow to; fixed at creation (stored
    in the job's meta)."""

    capacity: int
    error_rate: float
    layers: tuple[BloomLayer, ...]

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
        layers = [BloomLayer.sized(capacity, error_rate * FIRST_LAYER_SHARE)]
        rest = error_rate * (1 - FIRST_LAYER_SHARE)
        total = capacity
        while len(layers) < MAX_LAYERS and total < MAX_CAPACITY:
            rest *= TIGHTENING
            size = layers[-1].capacity * GROWTH
            layers.append(BloomLayer.sized(size, rest))
            total += size
        return cls(capacity, float(error_rate), tuple(layers))

    # The first layer's shape: the whole filter until it grows.
    @property
    def bits(self) -> int:
        return self.layers[0].bits

    @property
    def hashes(self) -> int:
        return self.layers[0].hashes

    @property
    def segments(self) -> int:
        return self.layers[0].segments

    @property
    def segment_bits(self) -> int:
        return self.layers[0].segment_bits

    @property
    def bytes(self) -> int:
        return self.layers[0].bytes

    def false_positive_rate(self, items: int) -> float:
        """Expected false-positive rate after ``items`` insertions, over the layers they fill."""
        return self.estimate(items).false_positive_rate

    def estimate(self, items: int, layers: int | None = None) -> BloomEstimate:
        """Layers, fill and rate after ``items`` new URLs.

        The bitmap filter grows exactly when its newest layer is full, so the count says
        which layers hold what; ``layers`` (the count in use, from the meta) caps it when
        the filter stopped growing (no room under maxmemory, or the last layer): the newest
        layer in use then holds the overflow, and its rate shows it.
        """
        in_use = len(self.layers) if layers is None else max(1, min(layers, len(self.layers)))
        rate, capacity, left = 0.0, 0, max(0, items)
        for number, layer in enumerate(self.layers[:in_use], start=1):
            held = left if number == in_use else min(left, layer.capacity)
            rate += layer.false_positive_rate(held)
            capacity += layer.capacity
            left -= held
            if left <= 0 or number == in_use:
                return BloomEstimate(number, capacity, held / layer.capacity, min(1.0, rate))
        raise AssertionError("unreachable: the loop returns at the last layer in use")

    def to_meta(self) -> dict[str, str]:
        return {
            "bloom_capacity": str(self.capacity),
            "bloom_error_rate": repr(self.error_rate),
            "bloom_schedule": ",".join(layer.spec() for layer in self.layers),
        }

    @classmethod
    def from_meta(cls, meta: dict[str, str]) -> BloomParams:
        capacity, error_rate = int(meta["bloom_capacity"]), float(meta["bloom_error_rate"])
        layers = []
        rate = error_rate * FIRST_LAYER_SHARE
        rest = error_rate * (1 - FIRST_LAYER_SHARE)
        for index, spec in enumerate(meta["bloom_schedule"].split(",")):
            bits, hashes, segments, size = (int(x) for x in spec.split(":"))
            if index:
                rest *= TIGHTENING
                rate = rest
            layers.append(BloomLayer(size, rate, bits, hashes, segments))
        return cls(capacity, error_rate, tuple(layers))


#: RedisBloom's double-hashing floor, measured (scripts in docs/frontier.md): about
#: ``FLOOR / (n · b²)`` for a full sub-filter of n URLs at b bits per URL (1.7e-6 at n = 1,000
#: and 1e-7, seventeen times that rate).
_NATIVE_FLOOR: Final = 2.0


def native_reserve_capacity(capacity: int, error_rate: float) -> int:
    """The capacity to reserve RedisBloom's first sub-filter at, for ``capacity`` URLs.

    RedisBloom derives its k positions from two 64-bit hashes (double hashing), so two URLs
    whose pair agrees modulo the filter's bits are one URL to it: a floor under the
    false-positive rate that falls with the filter's size. A small filter at a tight rate
    sits on that floor, far above the rate asked for; reserving enough URLs that the floor
    is a quarter of the rate costs a few hundred kilobytes at 1e-7 and nothing at 1 %.
    """
    bits_per_url = -math.log(error_rate) / math.log(2) ** 2
    least = math.ceil(4 * _NATIVE_FLOOR / (error_rate * bits_per_url**2))
    return max(capacity, min(least, MAX_CAPACITY))


def native_estimate(debug: list[str]) -> tuple[int, BloomEstimate]:
    """Items and estimate of a RedisBloom filter from its ``BF.DEBUG`` reply.

    BF.DEBUG lists every sub-filter with its bits, hashes, capacity and items; RedisBloom
    grows by the same rule (and since 2.8 reserves the first layer at half the rate, so its
    layers' rates too sum to at most the one asked for).
    """
    rate, capacity, items = 0.0, 0, 0
    fill = 0.0
    layers = 0
    for line in debug[1:]:
        fields = dict(part.split(":", 1) for part in line.split() if ":" in part)
        bits, hashes = int(fields["bits"]), int(fields["hashes"])
        size, held = int(fields["capacity"]), int(fields["size"])
        rate += float((1.0 - math.exp(-hashes * held / bits)) ** hashes) if held else 0.0
        capacity += size
        items += held
        fill = held / size
        layers += 1
    return items, BloomEstimate(max(1, layers), capacity, fill, min(1.0, rate))


#: Redis' string header and terminating NUL, allocated with the data.
_SDS_OVERHEAD = 16
#: Up to 64 equal segments: enough to land within 1 % of an allocator class for any size
#: from a few MB up (a segment is a key: ~100 bytes more each, nothing per URL).
_MAX_SEGMENTS = 64
_GOOD_ENOUGH_SLACK = 0.01


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
            break  # fewer segments mean fewer keys to allocate and list
    assert best is not None
    return best[1], best[2]


def _prime_at_most(n: int) -> int:
    """The largest prime <= n (n >= 2): a few steps down at most, prime gaps below 2**32 being
    under 340 and about 22 on average."""
    candidate = n if n % 2 else n - 1
    while candidate > 2 and not _is_prime(candidate):
        candidate -= 2
    return max(2, candidate)


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24 (the first 13 prime bases suffice)."""
    if n < 2:
        return False
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    if n in bases:
        return True
    if any(n % b == 0 for b in bases):
        return False
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for b in bases:
        x = pow(b, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def allocated_bytes(layer: BloomParams | BloomLayer) -> int:
    """What Redis' allocator holds for a layer's bitmap segments (the first layer's, for
    params): MEMORY USAGE, near enough."""
    return layer.segments * _size_class(math.ceil(layer.segment_bits / 8) + _SDS_OVERHEAD)


def digests(urls: Iterable[str]) -> list[bytes]:
    """16-byte BLAKE2b digests (segment, h1, h2, h3 as little-endian uint32) the Lua filter
    reads."""
    return [blake2b(u.encode(), digest_size=16).digest() for u in urls]
