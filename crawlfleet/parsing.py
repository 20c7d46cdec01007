"""What a user parser (``spec.parser: "package.module:function"``) is given: a :class:`Page`.

A parser is a plain function of one page::

    from crawlfleet.parsing import Page

    def parse(page: Page):
        for product in page.selector.css("li.product"):
            yield {"name": product.css("a::text").get()}      # an item: a dict of JSON values
        yield from page.selector.css("a.next::attr(href)").getall()  # a link: a str

It returns (or yields) items, each a ``dict`` whose keys are strings and whose values JSON can
hold, and links to follow, each a ``str`` (absolute, or relative to ``page.url``). Links still
pass the job's scope, robots.txt, dedup and politeness, exactly as links found in the page do.
Anything else, an exception, or a parser that runs past ``spec.parserTimeoutSeconds`` costs
that page a ``parser_error`` failure with the reason in its dead letter; never the worker.

The function runs in a process of its own beside the worker
(``crawlfleet.crawler.harvest.parsers``), so CPU-heavy code does not hold up the worker's
heartbeats, and a parser that never returns is stopped. This module imports only what a ``Page``
needs, so a parser package can depend on it without pulling in the worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parsel import Selector

__all__ = ["Page"]


@dataclass(frozen=True, slots=True)
class Page:
    """One fetched HTML page, as a parser sees it."""

    url: str
    """The page's URL after redirects."""
    status: int
    headers: Mapping[str, str]
    text: str
    """The body decoded in the page's charset (as ``output.content: html`` holds it)."""
    selector: Selector
    """A parsel Selector over ``text``: ``page.selector.css(...)``, ``.xpath(...)``."""
    depth: int
    """Links away from a seed (seeds are 0)."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Reserved for what the frontier carries with a URL; empty today."""
