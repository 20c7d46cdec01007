"""The file site's pure parts (crawlfleet/testsite/files.py): ranges, bodies, headers."""

from __future__ import annotations

import hashlib
import struct

import pytest

from crawlfleet.testsite.files import BLOCK_BYTES, file_body, file_header, parse_range

SIZE = 5 * BLOCK_BYTES + 777


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-", (0, 1000)),
        ("bytes=10-19", (10, 20)),
        ("bytes=999-", (999, 1000)),
        ("bytes=990-5000", (990, 1000)),
        ("bytes=-10", (990, 1000)),
        ("bytes=-5000", (0, 1000)),
        ("bytes=1000-", "unsatisfiable"),
        ("bytes=1000-2000", "unsatisfiable"),
        ("bytes=-0", "unsatisfiable"),
        ("bytes=20-10", None),
        ("bytes=0-1,5-6", None),
        ("bytes=-", None),
        ("pages=1-2", None),
    ],
)
def test_parse_range(header: str, expected: object) -> None:
    assert parse_range(header, 1000) == expected


def test_an_empty_file_has_no_satisfiable_range() -> None:
    assert parse_range("bytes=0-", 0) == "unsatisfiable"
    assert parse_range("bytes=-1", 0) == "unsatisfiable"


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (0, 1),
        (0, SIZE),
        (BLOCK_BYTES - 3, BLOCK_BYTES + 3),
        (17, 3 * BLOCK_BYTES),
        (SIZE - 1, SIZE),
    ],
)
def test_any_slice_equals_the_same_bytes_of_the_whole(start: int, end: int) -> None:
    whole = b"".join(file_body("a.mp4", SIZE, 3))
    assert len(whole) == SIZE
    assert b"".join(file_body("a.mp4", SIZE, 3, start=start, end=end)) == whole[start:end]


def test_chunks_are_bounded_and_blocks_do_not_repeat() -> None:
    chunks = list(file_body("a.bin", 40 * BLOCK_BYTES, chunk_bytes=4 * BLOCK_BYTES))
    assert max(map(len, chunks)) == 4 * BLOCK_BYTES
    whole = b"".join(chunks)
    blocks = {whole[i : i + BLOCK_BYTES] for i in range(0, len(whole), BLOCK_BYTES)}
    assert len(blocks) == 40
    digest = hashlib.sha256(whole).hexdigest()
    assert digest == hashlib.sha256(b"".join(file_body("a.bin", 40 * BLOCK_BYTES))).hexdigest()


def test_mp4_header_is_an_ftyp_box_then_an_mdat_that_spans_the_file() -> None:
    header = file_header("clip.mp4", 10_000)
    (ftyp_size,) = struct.unpack(">I", header[:4])
    assert header[4:12] == b"ftypisom"
    assert header[ftyp_size + 4 : ftyp_size + 8] == b"mdat"
    assert struct.unpack(">I", header[ftyp_size : ftyp_size + 4])[0] == 10_000 - ftyp_size
    big = file_header("clip.mp4", 5 << 30)  # over 4 GiB: a 64-bit largesize
    assert big[ftyp_size : ftyp_size + 8] == b"\x00\x00\x00\x01mdat"


def test_a_file_smaller_than_its_header_is_the_header_cut_short() -> None:
    assert b"".join(file_body("d.pdf", 3)) == b"%PD"
    assert b"".join(file_body("d.pdf", 0)) == b""
