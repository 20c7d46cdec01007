"""CSS and XPath selectors of ``spec.extract``: checked one way for the model and the worker.

Extraction runs on parsel (Scrapy's selector library): a CSS selector is translated to XPath by
parsel's own translator (so ``::text`` and ``::attr(name)`` work as in Scrapy) and every query
runs on lxml. A selector the model accepts must never fail on a page, so the model checks each
one here by running it, through parsel, on an empty document: that refuses what lxml cannot
compile and also what only fails when evaluated (an unregistered function, an undefined
namespace prefix), each with the library's own message. Checked queries are remembered: the
operator validates every job on every tick.

Like ``crawlfleet.patterns`` it imports nothing of crawlfleet's, so the model can use it without
an import cycle; parsel itself is imported on the first check, so a job without extraction rules
never loads lxml.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from parsel import Selector

__all__ = ["SelectorError", "check_selector"]

SelectorKind = Literal["css", "xpath"]


class SelectorError(ValueError):
    """A CSS or XPath selector parsel refuses; ``reason`` is the library's message."""

    def __init__(self, kind: SelectorKind, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason

    @property
    def message(self) -> str:
        """The refusal as the CrawlJob model words it, after the selector's path."""
        language = "CSS" if self.kind == "css" else "XPath"
        return f"is not a valid {language} selector: {self.reason}"


@lru_cache(maxsize=1)
def _empty_document() -> Selector:
    from parsel import Selector

    return Selector(text="<html><body></body></html>")


@lru_cache(maxsize=1024)
def check_selector(kind: SelectorKind, query: str) -> None:
    """Raise ``SelectorError`` unless parsel runs ``query`` (``kind``: css or xpath)."""
    from cssselect import SelectorError as CssError
    from lxml import etree

    document = _empty_document()
    try:
        if kind == "css":
            document.css(query)
        else:
            document.xpath(query)
    except CssError as error:
        raise SelectorError(kind, str(error)) from None
    except (ValueError, etree.Error) as error:
        # parsel words an XPath refusal "XPath error: <lxml's reason> in <query>": the query
        # is already in the user's file, the reason is what helps.
        reason = str(error).removeprefix("XPath error: ")
        reason = reason.removesuffix(f" in {query}") or "not a valid selector"
        raise SelectorError(kind, reason) from None
