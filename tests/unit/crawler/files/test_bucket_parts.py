"""The pure rules of a bucket part: which uploaded parts a later process builds on, and how big
a part must be before a checkpoint uploads it."""

from __future__ import annotations

from crawlfleet.crawler.files.bucket_parts import (
    MAX_PARTS,
    MIN_PART_BYTES,
    _part_floor,
    _resumable,
)

MIB = 2**20


def part(number: int, size: int = MIN_PART_BYTES) -> dict[str, object]:
    return {"number": number, "etag": f'"{number}"', "size": size}


def test_the_parts_from_one_without_a_gap_are_kept_in_order() -> None:
    assert _resumable([part(2), part(1), part(3, 7 * MIB)]) == [part(1), part(2), part(3, 7 * MIB)]


def test_a_gap_ends_what_is_kept() -> None:
    assert _resumable([part(1), part(3)]) == [part(1)]
    assert _resumable([part(2)]) == []


def test_a_part_under_5_mib_ends_what_is_kept() -> None:
    # Only a last part may be that small: it cannot be built on, its bytes are asked again.
    assert _resumable([part(1), part(2, MIB), part(3)]) == [part(1)]


def test_a_part_must_hold_5_mib_or_a_ten_thousandth_of_a_huge_file() -> None:
    assert _part_floor(None) == _part_floor(4 * 2**30) == MIN_PART_BYTES
    huge = 2**40
    assert _part_floor(huge) * (MAX_PARTS - 1) >= huge > MIN_PART_BYTES * MAX_PARTS
