"""What an HTML page yields besides its links: its content (``output.content``) and its items
(``spec.extract``), made for a whole batch of pages at once.

* ``html``: the body decoded with the page's charset, found as the link reader finds it (a BOM,
  then ``Content-Type``, then ``<meta>``; ``crawler/links/charset.py``, w3lib's
  ``html_to_unicode``), so a Shift_JIS or windows-1251 page reads right.
* ``text``: the visible text, read with selectolax (lexbor): the body without scripts, styles,
  ``<noscript>`` and ``<template>``, whitespace collapsed. The worker has the link reader make
  it from the parse that found the links (``crawler/links/links.py``), so a page is parsed by lexbor
  once; a page handed in without it is parsed here.
* content longer than ``maxContentBytes`` (as UTF-8) is cut at a character boundary and marked
  ``content_truncated``: never dropped or cut silently.
* items: :class:`~crawlfleet.crawler.harvest.extract.Extractor`, then the user's parser
  (``spec.parser``, :class:`~crawlfleet.crawler.harvest.parsers.ParserHost`), whose links are
  followed too.

A job with ``content: none`` and no rules has no :class:`Harvester` at all (``from_spec`` gives
None), so its pages cost nothing here. Otherwise the worker hands each flushed batch to
:meth:`Harvester.harvest_batch_bounded`, which harvests it page by page in a thread of the
harvester's own while the event loop keeps time. A page whose extraction fails gets a
:class:`Harvest` with ``error``, which the worker turns into a ``parser_error`` failure.

Why a thread, and a bound. A user's selector has no cost bound: lxml evaluates XPath in time
that grows with the page's nodes squared or worse (``//*[count(following::*) > 0]`` on a 1 MiB
page: about 20 s; ``python -m bench.extract_bounds``), and a hostile page can make an innocent
``contains(., 'x')`` quadratic by nesting. lxml releases the GIL while it evaluates, so the
thread leaves the loop free: heartbeats and lease extensions go on. When one page's extraction
runs past ``parserTimeoutSeconds`` the loop gives up on it: that page fails ("extraction took
longer than N s"), the rest of the batch goes on in a new thread. lxml cannot be stopped inside
a query, so the thread given up on runs until its query ends; at most
``_MAX_OVERRUNNING_THREADS`` may, past which extraction fails at once until one has ended, so
a pathological rule costs pages, never the worker's memory or its loop.

Why the loop first waits, blocked, for a moment: a thread harvesting beside a busy loop traded
the GIL with it at every syscall of the loop (18 % more CPU a page, docs/benchmarks.md), where
a batch run on the loop did not. Blocked in a wait (which releases the GIL), the loop costs the
thread nothing, and most batches finish within ``_BLOCKING_WAIT_SECONDS``; a longer one
continues beside the loop, which then awaits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from crawlfleet.crawler.harvest.extract import ExtractionError, Extractor, Item
from crawlfleet.crawler.harvest.parsers import ParseRequest, ParserHost
from crawlfleet.crawler.links.charset import decode_html
from crawlfleet.crawler.links.links import visible_text

if TYPE_CHECKING:
    from crawlfleet.crawljob import CrawlJobSpec

__all__ = ["ContentMode", "Harvest", "HarvestInput", "Harvester", "decoded_html", "visible_text"]

ContentMode = Literal["none", "html", "text"]

#: A UTF-8 character is at most this many bytes: text of at most max/4 characters fits.
_MAX_UTF8_CHARACTER_BYTES: Final = 4
#: How long the event loop waits, blocked, for a batch's harvest thread before it goes on and
#: awaits the batch: a batch done within it costs the loop what harvesting on it would (lxml
#: and lexbor parse 50-100 MB/s), and heartbeats never wait longer than this.
_BLOCKING_WAIT_SECONDS: Final = 0.05
#: Harvest threads given up on (a page's extraction past its bound) that may still be running.
_MAX_OVERRUNNING_THREADS: Final = 2


@dataclass(frozen=True, slots=True)
class Harvest:
    """What one page yielded; ``error`` says why extraction failed on it (None: it did not)."""

    content: str | None = None
    content_truncated: bool = False
    items: tuple[Item, ...] = ()
    error: str | None = None
    #: Links the user's parser gave, as it gave them (absolute or relative to the page).
    links: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HarvestInput:
    """One HTML page to harvest: its body as fetched, its Content-Type, its URL after redirects."""

    body: bytes
    content_type: str | None
    url: str
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    depth: int = 0
    #: The visible text, when the link reader made it from its own parse (the worker asks it
    #: to for ``content: text``); None: read it here.
    text: str | None = None


NOTHING: Final = Harvest()


def decoded_html(body: bytes, content_type: str | None) -> str:
    """The body as text in the page's own charset (undecodable bytes replaced)."""
    html, _ = decode_html(body, content_type)
    return html if isinstance(html, str) else html.decode("utf-8", errors="replace")


def _cut(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` in at most ``max_bytes`` of UTF-8, cut at a character boundary; and whether cut."""
    if len(text) * _MAX_UTF8_CHARACTER_BYTES <= max_bytes:
        return text, False  # fits whatever its characters: no encoding needed
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= max_bytes:
        return text, False
    return encoded[:max_bytes].decode("utf-8", errors="ignore"), True


class Harvester:
    """A job's content mode and extraction rules, compiled once per worker."""

    def __init__(
        self,
        content: ContentMode,
        max_content_bytes: int,
        extractor: Extractor | None,
        parser: ParserHost | None = None,
        *,
        extract_timeout_seconds: float,
    ) -> None:
        self.content: ContentMode = content
        self.max_content_bytes = max_content_bytes
        self.extractor = extractor
        self.parser = parser
        #: Longest a page's extraction (its rules' selectors) may run in a bounded harvest.
        self.extract_timeout_seconds = extract_timeout_seconds
        self._lane: _Lane | None = None
        self._overrunning: list[_Lane] = []

    @classmethod
    def from_spec(cls, spec: CrawlJobSpec) -> Harvester | None:
        """The harvester a job needs; None when it wants neither content nor items. A parser's
        process is started here: ConfigError when the parser cannot be imported."""
        extractor = Extractor.from_rules(spec.extract)
        if spec.output.content == "none" and extractor is None and spec.parser is None:
            return None
        parser = None
        if spec.parser is not None:
            parser = ParserHost(spec.parser, spec.parser_timeout_seconds)
            parser.start()
        return cls(
            spec.output.content,
            spec.output.max_content_bytes,
            extractor,
            parser,
            extract_timeout_seconds=spec.parser_timeout_seconds,
        )

    def close(self) -> None:
        """Stop the harvest thread and the parser's process, if there are any."""
        if self._lane is not None:
            self._lane.retire()
            self._lane = None
        if self.parser is not None:
            self.parser.close()

    def wants(self, url: str) -> bool:
        """Whether a page from ``url`` yields anything here (checked before it is queued for a
        batch, so a page no rule matches is never decoded for nothing)."""
        return (
            self.content != "none"
            or self.parser is not None
            or (self.extractor is not None and self.extractor.applies_to(url))
        )

    def harvest(self, page: HarvestInput, clock: _Batch | None = None) -> Harvest:
        """Content and items of one page; never raises for what the page holds. ``clock``, in
        a bounded harvest, is told when extraction starts and ends (and may refuse it)."""
        html = decoded_html(page.body, page.content_type)
        content, truncated = None, False
        if self.content != "none":
            if self.content == "html":
                text = html
            else:
                text = page.text if page.text is not None else visible_text(html)
            content, truncated = _cut(text, self.max_content_bytes)
        items: tuple[Item, ...] = ()
        if self.extractor is not None and self.extractor.applies_to(page.url):
            refusal = clock.start_extracting() if clock is not None else None
            if refusal is not None:
                return Harvest(content, truncated, (), refusal)
            try:
                items = tuple(self.extractor.extract(html, page.url))
            except ExtractionError as failure:
                return Harvest(content, truncated, (), str(failure))
            finally:
                if clock is not None:
                    clock.stop_extracting()
            if clock is not None and clock.given_up:
                return NOTHING  # the loop gave up on this page: no parser call for nothing
        links: tuple[str, ...] = ()
        if self.parser is not None:
            request = ParseRequest(page.url, page.status, page.headers, html, page.depth)
            parsed = self.parser.parse(request)
            if parsed.error is not None:
                return Harvest(
                    content, truncated, (), f"parser {self.parser.reference}: {parsed.error}"
                )
            source = self.parser.reference
            items += tuple(Item(source, n, fields) for n, fields in enumerate(parsed.items))
            links = parsed.links
        return Harvest(content, truncated, items, None, links)

    def harvest_batch(self, pages: Sequence[HarvestInput]) -> list[Harvest]:
        """:meth:`harvest` for every page, here and now, however long it takes."""
        return [self._harvest_one(page, None) for page in pages]

    async def harvest_batch_bounded(self, pages: Sequence[HarvestInput]) -> list[Harvest]:
        """:meth:`harvest` for every page, in the harvest thread, each page's extraction bounded
        by ``extract_timeout_seconds``: the one call the worker makes per batch."""
        harvests: list[Harvest] = []
        rest = list(pages)
        while rest:
            self._overrunning = [lane for lane in self._overrunning if lane.running()]
            refusal = None
            if len(self._overrunning) >= _MAX_OVERRUNNING_THREADS:
                refusal = (
                    f"extraction not started: {len(self._overrunning)} earlier pages' extraction"
                    f" still running past the {self.extract_timeout_seconds:g} s bound"
                )
            batch = _Batch(rest, refusal)
            if self._lane is None:
                self._lane = _Lane(self)
            lane = self._lane
            lane.put(batch)
            # Blocked, the loop leaves the GIL to the thread; most batches are done by then.
            if not batch.wait_blocked(_BLOCKING_WAIT_SECONDS):
                await self._watch(batch)
            harvests += batch.harvests  # the thread adds none after it finished or was given up
            if not batch.given_up:
                break
            harvests.append(
                Harvest(error=f"extraction took longer than {self.extract_timeout_seconds:g} s")
            )
            lane.retire()  # its thread ends once lxml returns
            self._overrunning.append(lane)
            self._lane = None
            rest = rest[len(batch.harvests) + 1 :]
        return harvests

    async def _watch(self, batch: _Batch) -> None:
        """Wait for ``batch`` while the loop runs, giving up on a page whose extraction runs
        past the bound."""
        bound = self.extract_timeout_seconds
        while (done := batch.done()) is not None:
            since = batch.extracting_since
            left = bound if since is None else since + bound - time.monotonic()
            if left <= 0 and batch.give_up_if_past(bound):
                return
            await asyncio.wait([done], timeout=max(left, 0.0))

    def _harvest_one(self, page: HarvestInput, clock: _Batch | None) -> Harvest:
        try:
            return self.harvest(page, clock)
        except Exception as failure:  # a page nobody foresaw: that page fails, not the batch
            return Harvest(error=f"{type(failure).__name__}: {failure}"[:500])

    def _run(self, batch: _Batch) -> None:
        """The harvest thread's part: the batch's pages in order, until done or given up."""
        try:
            for page in batch.pages:
                if not batch.add(self._harvest_one(page, batch)):
                    return
        finally:
            batch.finish()


class _Batch:
    """One batch harvested in a harvest thread while the event loop keeps time: the thread
    says when a page's extraction starts and ends, the loop may give up on the page. The lock
    orders the two, so a page is either harvested or given up, never both."""

    def __init__(self, pages: Sequence[HarvestInput], refusal: str | None) -> None:
        self.pages = pages
        #: Why extraction must not start at all (too many threads overrunning), or None.
        self.refusal = refusal
        self.harvests: list[Harvest] = []
        #: When the page in hand began its extraction (time.monotonic()), or None.
        self.extracting_since: float | None = None
        self.given_up = False
        self.finished = False
        self._lock = threading.Lock()
        self._unfinished = threading.Lock()  # held until the thread is done: the blocked wait
        self._unfinished.acquire()
        self._done: asyncio.Future[None] | None = None  # only once the loop awaits it

    # -- the harvest thread's side

    def start_extracting(self) -> str | None:
        """Before a page's extraction: None to go on, or why that page must fail instead."""
        with self._lock:
            if self.refusal is None and not self.given_up:
                self.extracting_since = time.monotonic()
            return self.refusal

    def stop_extracting(self) -> None:
        with self._lock:
            self.extracting_since = None

    def add(self, harvest: Harvest) -> bool:
        """Keep a page's harvest; False when the loop gave up on it (the thread stops)."""
        with self._lock:
            if self.given_up:
                return False
            self.harvests.append(harvest)
            return True

    def finish(self) -> None:
        with self._lock:
            self.finished = True
            done = self._done
        self._unfinished.release()
        if done is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                done.get_loop().call_soon_threadsafe(_resolve, done)

    # -- the loop's side

    def wait_blocked(self, seconds: float) -> bool:
        """Wait for the thread, the loop blocked (the GIL left to the thread); True if done."""
        return self._unfinished.acquire(timeout=seconds)

    def done(self) -> asyncio.Future[None] | None:
        """A future the thread resolves when it is done; None if it is done already. Made
        only when asked: a batch done within the blocked wait costs the loop no wake-up."""
        with self._lock:
            if not self.finished and self._done is None:
                self._done = asyncio.get_running_loop().create_future()
            return None if self.finished else self._done

    def give_up_if_past(self, bound_seconds: float) -> bool:
        """Give up on the page in hand if its extraction has run ``bound_seconds``."""
        with self._lock:
            since = self.extracting_since
            if since is None or time.monotonic() - since < bound_seconds:
                return False
            self.given_up = True
            return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Lane:
    """A daemon thread harvesting the batches put on it, one at a time. Daemon: one given up
    on may be inside an lxml query for hours, and must not keep the process from exiting."""

    def __init__(self, harvester: Harvester) -> None:
        self._harvester = harvester
        self._batches: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="crawlfleet-harvest", daemon=True)
        self._thread.start()

    def put(self, batch: _Batch) -> None:
        self._batches.put(batch)

    def retire(self) -> None:
        """End the thread after the batch in hand."""
        self._batches.put(None)

    def running(self) -> bool:
        return self._thread.is_alive()

    def _serve(self) -> None:
        while (batch := self._batches.get()) is not None:
            self._harvester._run(batch)
