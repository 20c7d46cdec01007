"""CSS and XPath selectors of ``spec.extract``: checked one way for the model and the worker.

Extraction runs on parsel (Scrapy's selector library): a CSS selector is translated to XPath by
parsel's own translator (so ``::text`` and ``::attr(name)`` work as in Scrapy) and every query
runs on lxml. A selector the model accepts must never fail on a page, so the model checks each
one here by compiling it as the worker does and running it on an empty document: that refuses
what lxml cannot compile and also what only fails when evaluated (an unregistered function, an
undefined namespace prefix), each with the library's own message. Checked queries are
remembered: the operator validates every job on every tick.

Checking and running share one compiler, :func:`compile_selector`: parsel's translation and
namespaces, with the EXSLT ``re:`` functions on RE2 (``crawlfleet/xpath_regexp.py``) instead of
lxml's Python ``re``, which would backtrack, in the worker and here alike (the operator checks
every job, and an XPath of string literals runs whole on the empty document). A ``re:`` pattern
written as a literal is compiled here too, since on the empty document no node may call it.

Like ``crawlfleet.patterns`` it imports nothing of crawlfleet's but the leaf modules beside it, so
the model can use it without an import cycle; parsel itself is imported on the first check, so
a job without extraction rules never loads lxml.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Final, Literal

from crawlfleet.xpath_regexp import NAMESPACE, extensions, literal_problem

if TYPE_CHECKING:
    from lxml import etree

__all__ = ["NAMESPACES", "SelectorError", "SelectorKind", "check_selector", "compile_selector"]

SelectorKind = Literal["css", "xpath"]

#: The namespaces parsel gives every query (EXSLT regular expressions and sets).
NAMESPACES: Final = {"re": NAMESPACE, "set": "http://exslt.org/sets"}


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
def _empty_document() -> etree._Element:
    from parsel import Selector

    root: etree._Element = Selector(text="<html><body></body></html>").root
    return root


def compile_selector(kind: SelectorKind, query: str) -> etree.XPath:
    """An lxml XPath for a CSS or XPath selector, as parsel would run it, the ``re:`` functions
    on RE2. Compile one per thread: an XPath evaluates one call at a time."""
    import parsel.selector  # noqa: F401  (registers has-class(), which queries may call)
    from lxml import etree
    from parsel.csstranslator import css2xpath

    path = css2xpath(query) if kind == "css" else query
    return etree.XPath(
        path,
        namespaces=NAMESPACES,
        extensions=extensions(),
        regexp=False,  # lxml's own re: functions would replace the RE2 ones
        smart_strings=False,
    )


@lru_cache(maxsize=1024)
def check_selector(kind: SelectorKind, query: str) -> None:
    """Raise ``SelectorError`` unless ``query`` (``kind``: css or xpath) compiles, runs on an
    empty document, and its ``re:`` calls can run."""
    from cssselect import SelectorError as CssError
    from lxml import etree

    if kind == "xpath":
        problem = literal_problem(query)
        if problem is not None:
            raise SelectorError(kind, problem)
    try:
        compile_selector(kind, query)(_empty_document())
    except CssError as error:
        raise SelectorError(kind, str(error)) from None
    except (ValueError, TypeError, LookupError, etree.Error) as error:
        # lxml's compiler or evaluator, or an re: function given what it cannot use
        raise SelectorError(kind, str(error) or "not a valid selector") from None
