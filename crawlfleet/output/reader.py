"""Reading a crawl's output back: what ``crawlfleet output ls|cat|verify`` do.

* :func:`page_records` streams the records of ``pages/``, one per URL: output is at least
  once (a page whose lease was lost is crawled again), so the same URL may appear in several
  lines, and the latest fetch wins (``fetched_at``, then ``fetch_id`` to break a tie) -- save
  that a revisit which found the page as it was (``change``: not_modified, unchanged) never
  wins over a capture: it carries no content and no items, the capture does. It reads
  the files twice -- first to choose the winners (a small index per URL), then to stream them
  -- so its memory grows with the number of URLs, not with the size of the records.
* :func:`item_records` streams the items of ``items/`` that belong to those winning fetches,
  once per (url, source, position) (DESIGN §9).
* :func:`verify` checks the destination against ``manifest.json``: every listed file present,
  with its size and SHA-256. A file that is durable but not listed is reported and allowed (a
  duplicate nobody acked); a missing or changed one is a failure.
* :func:`file_records` streams the records of ``files/`` (``spec.files``: one line per stored
  download), and :func:`verify` checks each one's stored object too: present with the record's
  size, and with ``deep`` its SHA-256 recomputed (a read of every stored byte). Stored objects
  (``files/sha256/<ab>/<sha256>``) are not in the manifest -- their records name them -- so
  they are not reported as unlisted while a record names them. :func:`stored_files` counts them.
* :func:`run_ids` names the runs of a scheduled job, each with the layout (and its own
  manifest) under ``runs/<run-id>/``; each is read or verified as a destination of its own.

Both read through the same :class:`~crawlfleet.output.stores.OutputStore` the workers wrote
with, so a folder and a bucket read alike.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawlfleet.destinations import RUNS_FOLDER
from crawlfleet.errors import OutputError
from crawlfleet.output.manifest import MANIFEST

if TYPE_CHECKING:
    from crawlfleet.output.stores import OutputStore, StoredObject

__all__ = [
    "Verification",
    "fetches_of",
    "file_records",
    "item_records",
    "page_files",
    "page_records",
    "run_ids",
    "stored_files",
    "verify",
]

_PAGES = "pages/"
_ITEMS = "items/"
_FILES = "files/"
#: Where stored downloads live: ``files/sha256/<ab>/<sha256>`` (``crawler/files/parts.py``).
_STORED = "files/sha256/"


async def _lines(store: OutputStore, key: str) -> AsyncIterator[bytes]:
    """The lines of one JSONL file, streamed; a line cut by a crash is skipped (never acked)."""
    rest = b""
    async for chunk in store.read(key):
        rest += chunk
        *lines, rest = rest.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    # A last line without "\n" was cut mid-write: its page was never acked, it is crawled again.


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("url"), str) else None


#: A revisit's entry that found the page as it was (``change`` of a tracked URL): it says the
#: last capture still stands, so it never hides that capture (its content, its items).
_FOUND_AS_IT_WAS = frozenset({"not_modified", "unchanged"})


def _rank(record: dict[str, Any]) -> tuple[bool, float, str]:
    fetched_at = record.get("fetched_at")
    return (
        record.get("change") not in _FOUND_AS_IT_WAS,
        float(fetched_at) if isinstance(fetched_at, int | float) else 0.0,
        str(record.get("fetch_id", "")),
    )


async def page_files(store: OutputStore) -> list[StoredObject]:
    return await _jsonl_files(store, _PAGES)


async def _jsonl_files(store: OutputStore, folder: str) -> list[StoredObject]:
    return [f for f in await store.files() if f.key.startswith(folder) and f.key.endswith(".jsonl")]


def _url_digest(record: dict[str, Any]) -> bytes:
    return hashlib.blake2b(record["url"].encode(), digest_size=12).digest()


async def _every_line(store: OutputStore, files: list[StoredObject]) -> AsyncIterator[bytes]:
    """Every whole record line of ``files``, in file order: one pass, nothing kept."""
    for stored in files:
        async for line in _lines(store, stored.key):
            if _parse(line) is not None:
                yield line


async def _latest_fetches(
    store: OutputStore, files: list[StoredObject]
) -> dict[bytes, tuple[bool, float, str]]:
    """The rank of each URL's latest fetch among the page records of ``files``."""
    best: dict[bytes, tuple[bool, float, str]] = {}
    for stored in files:
        async for line in _lines(store, stored.key):
            record = _parse(line)
            if record is None:
                continue
            url = _url_digest(record)
            rank = _rank(record)
            if url not in best or rank > best[url]:
                best[url] = rank
    return best


async def fetches_of(store: OutputStore, url: str) -> list[tuple[str, dict[str, Any]]]:
    """Every page record of ``url`` with the file that holds it, in file order: one pass over
    ``pages/`` that parses only the lines that contain the URL (``crawlfleet frontier url``
    says where a crawled URL landed)."""
    needle = json.dumps(url)[1:-1].encode()  # as a JSON string spells it
    found = []
    for stored in await page_files(store):
        async for line in _lines(store, stored.key):
            if needle in line and (record := _parse(line)) is not None and record["url"] == url:
                found.append((stored.key, record))
    return found


async def page_records(store: OutputStore, *, every_fetch: bool = False) -> AsyncIterator[bytes]:
    """Each page record as its JSON line (without the newline): one per URL, the latest fetch,
    unless ``every_fetch`` (then every line, in file order, in one pass)."""
    files = await page_files(store)
    if every_fetch:
        async for line in _every_line(store, files):
            yield line
        return
    best = await _latest_fetches(store, files)
    for stored in files:
        async for line in _lines(store, stored.key):
            record = _parse(line)
            if record is None:
                continue
            url = _url_digest(record)
            if best.get(url) == _rank(record):
                del best[url]  # a second line with the very same rank is not printed twice
                yield line


async def item_records(store: OutputStore, *, every_fetch: bool = False) -> AsyncIterator[bytes]:
    """Each item as its JSON line: those of the latest fetch of their page (the page record
    that :func:`page_records` keeps), once per (url, source, position); every line, in file
    order, with ``every_fetch``.

    An item belongs to its page's fetch: a page crawled again after a kill gives the same items
    again (kept once), and a listing whose latest fetch holds fewer items has only those.
    """
    files = await _jsonl_files(store, _ITEMS)
    if every_fetch:
        async for line in _every_line(store, files):
            yield line
        return
    latest = await _latest_fetches(store, await page_files(store))
    kept: set[tuple[bytes, object, object]] = set()
    for stored in files:
        async for line in _lines(store, stored.key):
            item = _parse(line)
            if item is None:
                continue
            url = _url_digest(item)
            if latest.get(url) != _rank(item):
                continue  # an earlier fetch's, or one whose page record was never durable
            name = (url, item.get("source"), item.get("position"))
            if name not in kept:
                kept.add(name)
                yield line


async def file_records(store: OutputStore) -> AsyncIterator[dict[str, Any]]:
    """Every file record of ``files/``, in file order (at least once: a download whose lease
    was lost after its record was written may have a second record, naming the same stored
    object)."""
    files = [
        stored
        for stored in await _jsonl_files(store, _FILES)
        if "/" not in stored.key.removeprefix(_FILES)  # record files, not stored objects
    ]
    for stored in files:
        async for line in _lines(store, stored.key):
            record = _parse(line)
            if record is not None and isinstance(record.get("stored"), str):
                yield record


def stored_files(files: Sequence[StoredObject]) -> tuple[int, int]:
    """How many stored downloads ``files`` holds, and their bytes (each content once)."""
    stored = [f for f in files if f.key.startswith(_STORED)]
    return len(stored), sum(f.size for f in stored)


@dataclass
class Verification:
    """What :func:`verify` found; ``ok`` when nothing listed is missing or changed."""

    manifest: dict[str, Any] | None
    checked: int = 0
    missing: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    problem: str | None = None
    #: Stored downloads the file records name, checked (size; SHA-256 with ``deep``).
    files_checked: int = 0
    #: ``(stored key, url)`` of records whose stored object is absent, or differs.
    files_missing: list[tuple[str, str]] = field(default_factory=list)
    files_changed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.problem is None
            and not self.missing
            and not self.changed
            and not self.files_missing
            and not self.files_changed
        )


async def verify(store: OutputStore, *, deep: bool = False) -> Verification:
    """Check every file ``manifest.json`` lists: present, same size, same SHA-256; then every
    stored download a file record names: present with its size, and (``deep``) its SHA-256."""
    present = {stored.key: stored.size for stored in await store.files()}
    if MANIFEST not in present:
        return Verification(
            None,
            problem=f"{store.destination.url}: no {MANIFEST} (the crawl has not completed, or"
            " this is not a crawl's output)",
        )
    try:
        manifest = json.loads(b"".join([chunk async for chunk in store.read(MANIFEST)]))
        listed = {str(entry["path"]): entry for entry in manifest["files"]}
    except (ValueError, KeyError, TypeError) as error:
        return Verification(None, problem=f"{MANIFEST} is not a crawlfleet manifest: {error}")
    result = Verification(manifest)
    for path, entry in sorted(listed.items()):
        if path not in present:
            result.missing.append(path)
            continue
        result.checked += 1
        if present[path] != int(entry["size"]) or await _sha256(store, path) != entry["sha256"]:
            result.changed.append(path)
    named = await _verify_stored(store, present, result, deep=deep)
    result.unlisted = sorted(
        key
        for key in present
        if key not in listed
        and key not in named
        and key != MANIFEST
        and not key.startswith(f"{RUNS_FOLDER}/")
    )
    return result


async def _verify_stored(
    store: OutputStore, present: dict[str, int], result: Verification, *, deep: bool
) -> set[str]:
    """Check each stored object the file records name (each once); returns their keys."""
    checked: dict[str, bool] = {}
    async for record in file_records(store):
        key, url = str(record["stored"]), str(record.get("url", ""))
        if key in checked:
            continue
        if key not in present:
            checked[key] = False
            result.files_missing.append((key, url))
            continue
        size, digest = record.get("size"), record.get("sha256")
        same = present[key] == size and (not deep or await _sha256(store, key) == digest)
        checked[key] = same
        result.files_checked += 1
        if not same:
            result.files_changed.append((key, url))
    return set(checked)


def run_ids(files: Sequence[StoredObject]) -> list[str]:
    """The runs of a scheduled job found among ``files`` (``runs/<run-id>/...``), oldest
    first (run ids sort as time does)."""
    return sorted(
        {
            parts[1]
            for parts in (stored.key.split("/") for stored in files)
            if len(parts) > 2 and parts[0] == RUNS_FOLDER
        }
    )


async def _sha256(store: OutputStore, key: str) -> str:
    digest = hashlib.sha256()
    try:
        async for chunk in store.read(key):
            digest.update(chunk)
    except FileNotFoundError as error:
        raise OutputError(f"{store.destination.key(key)} vanished while it was read") from error
    return digest.hexdigest()
