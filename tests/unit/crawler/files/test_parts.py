"""Unit tests for crawlfleet.crawler.files.parts: the part's state as JSON, its names, and local
parts in a temporary folder (durable offsets, resume by another instance, finish, dedup)."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from crawlfleet.crawler.files.parts import (
    WRITE_BEHIND_BYTES,
    LocalPart,
    LocalParts,
    PartState,
    StoredFile,
    content_key,
    open_parts,
    part_key,
)
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.destinations import LAYOUT_FOLDERS, parse_destination
from crawlfleet.errors import OutputUnavailable
from crawlfleet.output.stores import FolderStore

URL = "https://cdn.example/a/video.mp4"
SHA = "ab" + "0" * 62


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the state ----------------------------------------------------------------------------


def test_state_round_trips_through_json() -> None:
    state = PartState(
        url=URL,
        offset=10,
        total=20,
        etag='"e"',
        last_modified="Wed, 21 Oct 2015 07:28:00 GMT",
        content_type="video/mp4",
        restarts=2,
        upload_id="u-1",
        parts=[{"number": 1, "etag": '"p1"', "size": 10}],
    )
    assert PartState.from_json(state.to_json()) == state
    assert PartState.from_json(PartState(url=URL).to_json()) == PartState(url=URL)


def test_state_ignores_keys_it_does_not_know() -> None:
    data = json.dumps({"url": URL, "offset": 3, "from_a_newer_writer": True}).encode()
    assert PartState.from_json(data) == PartState(url=URL, offset=3)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"\xff\xfe",
        b"[]",
        b"{}",
        b'{"url": 7}',
        b'{"url": "u", "offset": -1}',
        b'{"url": "u", "offset": "10"}',
        b'{"url": "u", "offset": true}',
        b'{"url": "u", "total": 1.5}',
        b'{"url": "u", "etag": 5}',
        b'{"url": "u", "parts": {}}',
        b'{"url": "u", "parts": [1]}',
    ],
)
def test_a_sidecar_that_is_not_a_state_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a part's state"):
        PartState.from_json(data)


# -- the names ------------------------------------------------------------------------------


def test_part_key_is_the_sha256_of_the_canonical_url() -> None:
    assert part_key(URL) == sha256(URL.encode())
    assert part_key("HTTPS://CDN.example:443/a/video.mp4#t=10") == part_key(URL)
    assert part_key(URL + "?x=1") != part_key(URL)
    assert part_key("not a url") == sha256(b"not a url")


def test_content_key_spreads_files_over_256_folders() -> None:
    assert content_key(SHA) == f"files/sha256/ab/{SHA}"


# -- local parts ----------------------------------------------------------------------------


@pytest.fixture
def parts(tmp_path: Path) -> LocalParts:
    return LocalParts(tmp_path)


def part_files(root: Path) -> list[str]:
    folder = root / "files" / ".parts"
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


async def test_a_new_part_is_empty(parts: LocalParts, tmp_path: Path) -> None:
    part = await parts.open(URL)
    assert part.state == PartState(url=URL)
    assert part.path == tmp_path / "files" / ".parts" / f"{part_key(URL)}.part"
    assert [chunk async for chunk in part.durable_bytes()] == []
    await part.close()


async def test_a_checkpoint_makes_bytes_durable_and_another_instance_resumes(
    tmp_path: Path,
) -> None:
    part = await LocalParts(tmp_path).open(URL)
    part.state.etag, part.state.total = '"v1"', 100
    await part.write(b"hello ")
    await part.write(b"world")
    assert part.state.offset == 0  # written, not yet durable
    await part.checkpoint()
    assert part.state.offset == 11
    await part.write(b" and more that never got a checkpoint")
    await part.close()

    again = await LocalParts(tmp_path).open(URL)  # as another process would
    assert (again.state.offset, again.state.etag, again.state.total) == (11, '"v1"', 100)
    assert b"".join([chunk async for chunk in again.durable_bytes()]) == b"hello world"
    assert again.path.stat().st_size == 11  # the unvouched tail is cut
    await again.write(b"!")
    await again.checkpoint()
    assert again.path.read_bytes() == b"hello world!"
    await again.close()


async def test_a_checkpoint_behind_claims_its_bytes_only_once_their_fsync_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = await LocalParts(tmp_path).open(URL)
    part.state.etag = '"v1"'
    released = threading.Event()
    real_fsync = os.fsync

    def slow_fsync(descriptor: int) -> None:  # a disk that takes its time
        released.wait(10)
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    await part.write(b"a" * 10)
    await part.checkpoint_behind()  # returns while the fsync waits
    await part.write(b"b" * 5)  # the download goes on meanwhile
    await asyncio.sleep(0.05)
    assert part.state.offset == 0
    assert part_files(tmp_path) == [f"{part_key(URL)}.part"]  # no sidecar claims a byte yet

    released.set()
    sidecar = tmp_path / "files" / ".parts" / f"{part_key(URL)}.json"
    for _ in range(500):
        if sidecar.exists():  # replaced by a rename: whole once it is there
            break
        await asyncio.sleep(0.01)
    assert part.state.offset == 10  # the bytes written before the fsync, not the 5 after
    assert json.loads(sidecar.read_bytes())["offset"] == 10
    await part.checkpoint()
    assert part.state.offset == 15
    await part.close()
    again = await LocalParts(tmp_path).open(URL)
    assert again.state.offset == 15
    await again.close()


async def test_the_write_buffer_is_bounded(parts: LocalParts) -> None:
    part = await parts.open(URL)
    chunk = b"x" * (64 * 1024)
    for _ in range(2 * (WRITE_BEHIND_BYTES // len(chunk))):
        await part.write(chunk)
    # The first buffer went to the file once it was full, before any checkpoint: written
    # behind, and done before the second one went.
    assert part.path.stat().st_size >= WRITE_BEHIND_BYTES
    assert part.state.offset == 0
    await part.close()


async def test_a_failed_write_behind_ends_the_next_call_and_close_still_closes(
    parts: LocalParts, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = await parts.open(URL)

    def full_disk(descriptor: int, data: object, position: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full_disk)
    await part.write(b"x" * WRITE_BEHIND_BYTES)  # a full buffer: its write goes behind
    with pytest.raises(OutputUnavailable, match=r"\.part: No space left on device"):
        await part.checkpoint()
    assert part.state.offset == 0  # nothing claimed of what never reached the disk
    await part.close()  # the failure was told once; closing is quiet


async def test_close_waits_for_the_write_behind_before_the_descriptor_goes(
    parts: LocalParts, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = await parts.open(URL)
    released = threading.Event()
    real_pwrite = os.pwrite

    def slow_pwrite(descriptor: int, data: bytes, position: int) -> int:  # a slow disk
        released.wait(10)
        return real_pwrite(descriptor, data, position)

    monkeypatch.setattr(os, "pwrite", slow_pwrite)
    await part.write(b"y" * WRITE_BEHIND_BYTES)  # returns while the write waits
    closing = asyncio.create_task(part.close())
    await asyncio.sleep(0.05)
    assert not closing.done()  # a descriptor closed under the write could be another file's
    released.set()
    await closing
    assert part.path.stat().st_size == WRITE_BEHIND_BYTES  # the write went to this part


async def test_restart_drops_every_byte_and_what_the_part_knew(parts: LocalParts) -> None:
    part = await parts.open(URL)
    state = part.state
    state.etag, state.last_modified, state.total, state.content_type = '"a"', "d", 9, "t/t"
    await part.write(b"123")
    await part.checkpoint()
    await part.write(b"456")
    await part.restart()
    assert part.state == PartState(url=URL, restarts=1)
    assert part.path.stat().st_size == 0
    await part.write(b"new")
    await part.checkpoint()
    assert part.path.read_bytes() == b"new"
    await part.close()
    assert (await parts.open(URL)).state.restarts == 1


async def test_finish_moves_the_bytes_to_their_content_address(
    parts: LocalParts, tmp_path: Path
) -> None:
    part = await parts.open(URL)
    await part.write(b"payload")  # finish writes and fsyncs what is buffered
    stored = await part.finish(sha256(b"payload"))
    key = content_key(sha256(b"payload"))
    assert stored == StoredFile(key=key, size=7, duplicate=False)
    assert (tmp_path / key).read_bytes() == b"payload"
    assert part_files(tmp_path) == []  # data and sidecar are gone


async def test_the_same_bytes_are_stored_once(parts: LocalParts, tmp_path: Path) -> None:
    first = await parts.open(URL)
    await first.write(b"same")
    await first.finish(sha256(b"same"))
    mirror = await parts.open("https://mirror.example/video.mp4")
    await mirror.write(b"same")
    await mirror.checkpoint()
    stored = await mirror.finish(sha256(b"same"))
    assert stored == StoredFile(key=content_key(sha256(b"same")), size=4, duplicate=True)
    assert part_files(tmp_path) == []
    assert len(list((tmp_path / "files" / "sha256").rglob("*"))) == 2  # one folder, one file


async def test_discard_removes_the_part(parts: LocalParts, tmp_path: Path) -> None:
    part = await parts.open(URL)
    await part.write(b"x")
    await part.checkpoint()
    assert part_files(tmp_path) == [f"{part_key(URL)}.json", f"{part_key(URL)}.part"]
    await part.discard()
    assert part_files(tmp_path) == []
    assert (await parts.open(URL)).state.offset == 0


async def write_durably(parts: LocalParts, url: str, data: bytes) -> LocalPart:
    part = await parts.open(url)
    part.state.etag = '"v"'
    await part.write(data)
    await part.checkpoint()
    await part.close()
    return part


@pytest.mark.parametrize(
    "sidecar",
    [b"{torn", json.dumps({"url": "https://elsewhere.example/", "offset": 3}).encode()],
)
async def test_an_unreadable_or_foreign_sidecar_starts_afresh(
    parts: LocalParts, sidecar: bytes
) -> None:
    part = await write_durably(parts, URL, b"abc")
    part.path.with_suffix(".json").write_bytes(sidecar)
    again = await parts.open(URL)
    assert again.state == PartState(url=URL)
    assert again.path.stat().st_size == 0
    await again.close()


async def test_data_shorter_than_its_sidecar_starts_afresh(parts: LocalParts) -> None:
    part = await write_durably(parts, URL, b"abcdef")
    part.path.write_bytes(b"abc")  # lost bytes the sidecar vouched for
    again = await parts.open(URL)
    assert (again.state.offset, again.state.etag) == (0, None)
    assert again.path.stat().st_size == 0
    await again.close()


async def test_parts_are_never_listed_as_output(tmp_path: Path) -> None:
    store = FolderStore(parse_destination(str(tmp_path)))
    parts = open_parts(store, CrawlJobSpec.model_validate({"seeds": ["https://a.example/"]}))
    assert isinstance(parts, LocalParts)
    assert parts.root == store.root
    await write_durably(parts, URL, b"abc")
    finished = await parts.open("https://b.example/f.pdf")
    await finished.write(b"%PDF-")
    stored = await finished.finish(sha256(b"%PDF-"))
    listed = [item.key for item in await store.files()]
    # The stored file is output once files/ is a layout folder; a part never is.
    assert listed == ([stored.key] if "files" in LAYOUT_FOLDERS else [])


async def test_a_disk_error_is_output_unavailable_naming_the_path(tmp_path: Path) -> None:
    (tmp_path / "files").write_bytes(b"a file where the folder should be")
    with pytest.raises(OutputUnavailable, match=r"files"):
        await LocalParts(tmp_path).open(URL)


async def test_a_closed_part_refuses_writes(parts: LocalParts) -> None:
    part = await parts.open(URL)
    await part.close()
    await part.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        await part.checkpoint()


async def test_a_part_has_one_writer_at_a_time(tmp_path: Path) -> None:
    first = await LocalParts(tmp_path).open(URL)
    with pytest.raises(OutputUnavailable, match="another download is writing this part"):
        await LocalParts(tmp_path).open(URL)
    await first.write(b"mine")
    await first.checkpoint()
    await first.close()
    second = await LocalParts(tmp_path).open(URL)  # the first let go: the part is free
    assert second.state.offset == 4
    await second.close()
