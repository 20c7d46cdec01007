"""What an HTML page yields besides its links: its content (``output.content``) and its items
(``spec.extract``), made for a whole batch of pages at once.

* ``html``: the body decoded with the page's charset, found as the link reader finds it (a BOM,
  then ``Content-Type``, then ``<meta>``; ``crawler/charset.py``, w3lib's ``html_to_unicode``),
  so a Shift_JIS or windows-1251 page reads right.
* ``text``: the visible text, read with selectolax (lexbor): the body without scripts, styles,
  ``<noscript>`` and ``<template>``, whitespace collapsed. The worker has the link reader make
  it from the parse that found the links (``crawler/links.py``), so a page is parsed by lexbor
  once; a page handed in without it is parsed here.
* content longer than ``maxContentBytes`` (as UTF-8) is cut at a character boundary and marked
  ``content_truncated``: never dropped or cut silently.
* items: :class:`~crawlfleet.crawler.extract.Extractor`, then the user's parser
  (``spec.parser``, :class:`~crawlfleet.crawler.parsers.ParserHost`), whose links are followed
  too.

A job with ``content: none`` and no rules has no :class:`Harvester` at all (``from_spec`` gives
None), so its pages cost nothing here. Otherwise the worker hands each flushed batch to
:meth:`Harvester.harvest_batch` at once: on its event loop when the batch is small and there
is no user parser, else in one thread hop (``harvest_on_loop`` in ``crawler/worker.py``), so
parsing never holds up heartbeats and lease extensions for long. A page whose extraction fails
gets a :class:`Harvest` with ``error``, which the worker turns into a ``parser_error`` failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from crawlfleet.crawler.charset import decode_html
from crawlfleet.crawler.extract import ExtractionError, Extractor, Item
from crawlfleet.crawler.links import visible_text
from crawlfleet.crawler.parsers import ParseRequest, ParserHost

if TYPE_CHECKING:
    from crawlfleet.crawljob import CrawlJobSpec

__all__ = ["ContentMode", "Harvest", "HarvestInput", "Harvester", "decoded_html", "visible_text"]

ContentMode = Literal["none", "html", "text"]

#: A UTF-8 character is at most this many bytes: text of at most max/4 characters fits.
_MAX_UTF8_CHARACTER_BYTES: Final = 4


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
    ) -> None:
        self.content: ContentMode = content
        self.max_content_bytes = max_content_bytes
        self.extractor = extractor
        self.parser = parser

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
        return cls(spec.output.content, spec.output.max_content_bytes, extractor, parser)

    def close(self) -> None:
        """Stop the parser's process, if there is one."""
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

    def harvest(self, page: HarvestInput) -> Harvest:
        """Content and items of one page; never raises for what the page holds."""
        html = decoded_html(page.body, page.content_type)
        content, truncated = None, False
        if self.content != "none":
            if self.content == "html":
                text = html
            else:
                text = page.text if page.text is not None else visible_text(html)
            content, truncated = _cut(text, self.max_content_bytes)
        items: tuple[Item, ...] = ()
        if self.extractor is not None:
            try:
                items = tuple(self.extractor.extract(html, page.url))
            except ExtractionError as failure:
                return Harvest(content, truncated, (), str(failure))
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
        """:meth:`harvest` for every page: the one call the worker makes per batch."""
        harvests = []
        for page in pages:
            try:
                harvests.append(self.harvest(page))
            except Exception as failure:  # a page nobody foresaw: that page fails, not the batch
                harvests.append(Harvest(error=f"{type(failure).__name__}: {failure}"[:500]))
        return harvests
