"""Reading items back (output/reader.py): those of each page's latest fetch, each name once."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from crawlfleet.destinations import parse_destination
from crawlfleet.output.reader import (
    file_records,
    item_records,
    page_records,
    stored_files,
    verify,
)
from crawlfleet.output.stores import FolderStore


def page(url: str, fetch_id: str, fetched_at: float) -> dict[str, Any]:
    return {"url": url, "fetch_id": fetch_id, "fetched_at": fetched_at, "status": 200}


def item(url: str, fetch_id: str, fetched_at: float, source: int, position: int) -> dict[str, Any]:
    return {
        "url": url,
        "fetch_id": fetch_id,
        "fetched_at": fetched_at,
        "source": source,
        "position": position,
        "fields": {"n": f"{fetch_id}/{position}"},
    }


def write(root: Path, key: str, lines: list[dict[str, Any]], *, cut: bool = False) -> None:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(line) + "\n" for line in lines)
    path.write_text(text + ('{"url": "http://cut' if cut else ""))


async def read(store: FolderStore, **options: bool) -> list[dict[str, Any]]:
    return [json.loads(line) async for line in item_records(store, **options)]


async def test_items_of_the_latest_fetch_once_per_url_source_and_position(tmp_path: Path) -> None:
    listing, product = "http://shop.test/", "http://shop.test/p/1"
    # The listing was crawled by a worker killed after its files were durable but before it
    # acked (a-1), then again by another (b-7), whose copy of the same generation was written
    # twice (a retried upload that had landed: the same lines in two files).
    write(tmp_path, "pages/a-0.jsonl", [page(listing, "a-1", 10.0), page(product, "a-2", 11.0)])
    write(tmp_path, "items/a-0.jsonl", [
        item(listing, "a-1", 10.0, 1, 0), item(listing, "a-1", 10.0, 1, 1),
        item(listing, "a-1", 10.0, 1, 2), item(product, "a-2", 11.0, 0, 0),
    ], cut=True)  # fmt: skip
    write(tmp_path, "pages/b-0.jsonl", [page(listing, "b-7", 20.0)])
    newer = [item(listing, "b-7", 20.0, 1, 0), item(listing, "b-7", 20.0, 1, 1)]
    write(tmp_path, "items/b-0.jsonl", newer)
    write(tmp_path, "items/b-1.jsonl", newer)
    # Items whose page record never became durable belong to no fetch a reader knows.
    write(tmp_path, "items/c-0.jsonl", [item(product, "c-9", 30.0, 0, 0)])
    store = FolderStore(parse_destination(str(tmp_path)))

    kept = await read(store)

    names = sorted((i["url"], i["source"], i["position"], i["fetch_id"]) for i in kept)
    assert names == [
        (listing, 1, 0, "b-7"),  # the latest fetch's two items, once each
        (listing, 1, 1, "b-7"),
        (product, 0, 0, "a-2"),  # not c-9's: its page record is nowhere
    ]
    assert len(await read(store, every_fetch=True)) == 4 + 2 + 2 + 1  # the cut line skipped
    assert len([line async for line in page_records(store)]) == 2


async def test_no_items_folder_no_items(tmp_path: Path) -> None:
    write(tmp_path, "pages/a-0.jsonl", [page("http://shop.test/", "a-1", 1.0)])
    assert await read(FolderStore(parse_destination(str(tmp_path)))) == []


async def test_a_revisit_that_found_the_page_as_it_was_never_hides_its_capture(
    tmp_path: Path,
) -> None:
    """A tracked page: captured, then found not modified and unchanged, then changed, then
    unchanged again. The capture that stands is read back with its items; a URL whose only
    records are such entries (captured in an earlier run) still has its latest one."""
    front, other = "http://news.test/", "http://news.test/old"
    write(tmp_path, "pages/a-0.jsonl", [
        page(front, "a-1", 10.0),
        {**page(front, "a-2", 20.0), "status": 304, "change": "not_modified"},
        {**page(front, "a-3", 30.0), "change": "unchanged"},
        {**page(other, "a-4", 31.0), "status": 304, "change": "not_modified"},
        {**page(other, "a-5", 32.0), "status": 304, "change": "not_modified"},
    ])  # fmt: skip
    write(tmp_path, "items/a-0.jsonl", [item(front, "a-1", 10.0, 0, 0)])
    store = FolderStore(parse_destination(str(tmp_path)))

    latest = {r["url"]: r["fetch_id"] async for r in _pages(store)}
    assert latest == {front: "a-1", other: "a-5"}
    assert [i["fetch_id"] for i in await read(store)] == ["a-1"]

    write(tmp_path, "pages/a-1.jsonl", [
        {**page(front, "a-6", 40.0), "change": "changed"},
        {**page(front, "a-7", 50.0), "change": "unchanged"},
    ])  # fmt: skip
    write(tmp_path, "items/a-1.jsonl", [item(front, "a-6", 40.0, 0, 0)])
    latest = {r["url"]: r["fetch_id"] async for r in _pages(store)}
    assert latest[front] == "a-6"
    assert [i["fetch_id"] for i in await read(store)] == ["a-6"]


async def _pages(store: FolderStore) -> AsyncIterator[dict[str, Any]]:
    async for line in page_records(store):
        yield json.loads(line)


def store_file(root: Path, data: bytes) -> dict[str, Any]:
    """A stored download and its record, as a worker leaves them."""
    digest = hashlib.sha256(data).hexdigest()
    key = f"files/sha256/{digest[:2]}/{digest}"
    (root / key).parent.mkdir(parents=True, exist_ok=True)
    (root / key).write_bytes(data)
    return {
        "url": f"https://example.com/{digest[:8]}.pdf",
        "stored": key,
        "size": len(data),
        "sha256": digest,
    }


def manifest(root: Path) -> None:
    listed = []
    for folder in ("pages", "files"):
        for path in sorted((root / folder).glob("*.jsonl")):
            data = path.read_bytes()
            listed.append(
                {
                    "path": f"{folder}/{path.name}",
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "records": 1,
                }
            )
    (root / "manifest.json").write_text(json.dumps({"files": listed}))


async def test_verify_checks_each_stored_download_and_deep_rehashes(tmp_path: Path) -> None:
    good = store_file(tmp_path, b"%PDF-1.7 good")
    bad = store_file(tmp_path, b"%PDF-1.7 will rot")
    duplicate = {**good, "url": "https://mirror.example.com/a.pdf"}
    write(tmp_path, "pages/w-1.jsonl", [page("https://example.com/", "w-1", 1.0)])
    write(tmp_path, "files/w-1.jsonl", [good, bad, duplicate])
    manifest(tmp_path)
    store = FolderStore(parse_destination(str(tmp_path)))

    result = await verify(store)
    assert result.ok
    assert result.files_checked == 2
    assert result.unlisted == []
    assert stored_files(await store.files()) == (2, len(b"%PDF-1.7 good") * 2 + 4)

    (tmp_path / bad["stored"]).write_bytes(b"%PDF-1.7 will ROT")  # same size, other bytes
    assert (await verify(store)).ok  # a shallow check sees the size only
    deep = await verify(store, deep=True)
    assert not deep.ok
    assert deep.files_changed == [(bad["stored"], bad["url"])]

    (tmp_path / good["stored"]).unlink()
    gone = await verify(store)
    assert gone.files_missing == [(good["stored"], good["url"])]
    assert [record["url"] async for record in file_records(store)] == [
        good["url"],
        bad["url"],
        duplicate["url"],
    ]
