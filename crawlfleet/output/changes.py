"""What changed in a crawl's output: the URLs that appeared, changed or disappeared.

``crawlfleet output changes`` reads this. A monitoring user (issue 23) does not want every
fetch, only what is different: a URL is

* **new** when a record of the window is its first fetch: ``"change": "new"`` (a tracked URL's
  first visit), or a successful record without a ``change`` field (a URL fetched once, as
  articles are: it is in the output only because it appeared);
* **changed** when a revisit found a different page (``"change": "changed"``);
* **gone** when a revisit of a URL that answered 200 before got 404 or 410
  (``"change": "gone"``). A first fetch that fails is not "gone": it never was there.

``unchanged`` and ``not_modified`` revisits are what did not change: never listed.

Each URL is listed once for the window: gone if its last event is, else new if it appeared in
the window, else changed; the line is the record of that event. Scheduled jobs write each run
under ``runs/<run-id>/`` (its ``run`` is named); a window is given by a time, a run id (that
run's start) or a duration back from now (:func:`parse_since`).

Memory: the page files are streamed twice, as :func:`~crawlfleet.output.reader.page_records`
does: the first pass keeps, per URL with an event in the window, a 12-byte digest and its
chosen event's rank; the second prints the records that hold those events. Nothing grows with
the size of the records or with the URLs that did not change.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from crawlfleet.crawljob.durations import parse_duration
from crawlfleet.destinations import RUNS_FOLDER
from crawlfleet.errors import ConfigError
from crawlfleet.output.reader import _lines, _parse, _url_digest

if TYPE_CHECKING:
    from crawlfleet.output.stores import OutputStore, StoredObject

__all__ = ["ChangeEvent", "ChangeKind", "changes", "parse_since"]

ChangeKind = Literal["new", "changed", "gone"]
_GONE_STATUSES: Final = frozenset({404, 410})
_RUN_ID_TIME: Final = "%Y%m%dT%H%M%SZ"
SINCE_FORMS: Final = (
    "a time (2026-12-02T08:15:00Z), a run id (20261202T081500Z) or a duration back from now"
    " (90m, 1h30m, 24h)"
)

Rank = tuple[float, str]


def _rank(record: dict[str, Any]) -> Rank:
    """When a record was fetched, its fetch id breaking a tie: the order of events. (The
    reader's own rank puts a revisit that found the page as it was below its capture, which
    is right for what a page holds, not for when it changed.)"""
    fetched_at = record.get("fetched_at")
    at = float(fetched_at) if isinstance(fetched_at, int | float) else 0.0
    return (at, str(record.get("fetch_id", "")))


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One URL's change in the window, and the record that says so."""

    url: str
    change: ChangeKind
    #: ``fetched_at`` of that record: seconds since the epoch.
    at: float
    status: int | None
    #: The scheduled run whose output holds it; None for a job's own layout.
    run: str | None

    def to_json(self) -> str:
        return json.dumps(
            {
                "url": self.url,
                "change": self.change,
                "at": self.at,
                "status": self.status,
                "run": self.run,
            },
            ensure_ascii=False,
        )

    def to_text(self) -> str:
        when = datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"{self.change:<8} {when}  {self.url}"


def parse_since(text: str, now: float) -> float:
    """``--since``: seconds since the epoch, from :data:`SINCE_FORMS`; ConfigError otherwise."""
    text = text.strip()
    try:
        return now - parse_duration(text)  # a spec's durations: 90m, 1h30m, 720h
    except ValueError:
        pass
    for parse in (_run_id_time, datetime.fromisoformat):
        try:
            when = parse(text)
        except ValueError:
            continue
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    raise ConfigError(f"--since {text!r}: not {SINCE_FORMS}")


def _run_id_time(text: str) -> datetime:
    return datetime.strptime(text, _RUN_ID_TIME).replace(tzinfo=UTC)


def _run_of(key: str) -> tuple[str | None, bool]:
    """(the run a file belongs to, whether it is a page file): ``pages/x.jsonl`` or
    ``runs/<run-id>/pages/x.jsonl``."""
    parts = key.split("/")
    if len(parts) == 4 and parts[0] == RUNS_FOLDER:
        return parts[1], parts[2] == "pages" and key.endswith(".jsonl")
    return None, len(parts) == 2 and parts[0] == "pages" and key.endswith(".jsonl")


def _event(record: dict[str, Any]) -> ChangeKind | None:
    change = record.get("change")
    if change in ("new", "changed"):
        return change  # type: ignore[no-any-return]
    if change == "gone":
        return "gone" if record.get("status") in _GONE_STATUSES else None
    if change is None and record.get("failure_class") is None and record.get("status") == 200:
        return "new"  # fetched once: it is here because it appeared
    return None


@dataclass(slots=True)
class _Seen:
    """One URL's events in the window, as far as choosing its line needs."""

    appeared: Rank | None
    last: Rank
    last_kind: ChangeKind

    def chosen(self) -> tuple[ChangeKind, Rank]:
        if self.last_kind == "gone":
            return "gone", self.last
        if self.appeared is not None:
            return "new", self.appeared
        return "changed", self.last


async def _page_files(store: OutputStore) -> list[tuple[StoredObject, str | None]]:
    found = []
    for stored in await store.files():
        run, is_pages = _run_of(stored.key)
        if is_pages:
            found.append((stored, run))
    # Runs in time order (run ids sort as time does), the job's own layout first.
    return sorted(found, key=lambda pair: (pair[1] or "", pair[0].key))


async def _records(
    store: OutputStore, files: list[tuple[StoredObject, str | None]], since: float | None
) -> AsyncIterator[tuple[dict[str, Any], ChangeKind, str | None]]:
    for stored, run in files:
        async for line in _lines(store, stored.key):
            record = _parse(line)
            if record is None:
                continue
            kind = _event(record)
            if kind is not None and (since is None or _rank(record)[0] >= since):
                yield record, kind, run


async def changes(store: OutputStore, *, since: float | None = None) -> AsyncIterator[ChangeEvent]:
    """Each URL that appeared, changed or went away at or after ``since`` (seconds since the
    epoch; None: ever), once, in file order."""
    files = await _page_files(store)
    seen: dict[bytes, _Seen] = {}
    async for record, kind, _run in _records(store, files, since):
        digest, rank = _url_digest(record), _rank(record)
        known = seen.get(digest)
        if known is None:
            seen[digest] = _Seen(rank if kind == "new" else None, rank, kind)
            continue
        if kind == "new" and (known.appeared is None or rank < known.appeared):
            known.appeared = rank
        if rank > known.last:
            known.last, known.last_kind = rank, kind
    chosen = {digest: state.chosen() for digest, state in seen.items()}
    del seen
    async for record, _kind, run in _records(store, files, since):
        digest = _url_digest(record)
        pick = chosen.get(digest)
        if pick is None or pick[1] != _rank(record):
            continue
        del chosen[digest]  # the same record twice (a duplicate file) is listed once
        status = record.get("status")
        yield ChangeEvent(
            url=record["url"],
            change=pick[0],
            at=_rank(record)[0],
            status=status if isinstance(status, int) else None,
            run=run,
        )
