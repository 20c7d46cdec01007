"""Declarative extraction (``spec.extract``): pages in, items out, with parsel's selectors.

A rule applies to the pages whose URL its ``match`` (RE2) finds; it makes one item per page, or
one per node of its ``each`` selector (a listing), each field read by a CSS or XPath selector.
CSS means what it means in Scrapy: parsel's translator turns it into XPath (``::text`` and
``::attr(name)`` included), and the page is parsed the way parsel parses it (lxml's HTML parser,
huge trees allowed).

Compiled once per worker, cheap per page: every rule's ``match`` is in one RE2 set, so a page
whose URL no rule matches costs one linear scan of its URL and is never parsed; every selector
is translated and compiled by lxml once per thread (``crawlfleet.selection.compile_selector``:
an lxml XPath runs one evaluation at a time, and one overrunning in a thread the harvest gave up
on must not hold up the next page's), not for every page as a string query would be; the page
is parsed once, however many rules and fields apply. The EXSLT ``re:`` functions run on RE2
(``crawlfleet/xpath_regexp.py``). The worker runs this for a whole batch of pages in a thread,
page by page under a time bound (``crawler/harvest/harvest.py``).

The model refused every selector that parsel cannot run (``crawlfleet.selection``), so what can
still fail here is the page: an evaluation error (an ``re:`` pattern taken from the page that
RE2 refuses) is an :class:`ExtractionError`, which costs that page a ``parser_error`` failure,
never the worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import re2

from crawlfleet.patterns import URLPatterns, compile_patterns, compile_regexp
from crawlfleet.selection import SelectorKind, compile_selector
from crawlfleet.xpath_regexp import xpath_string

if TYPE_CHECKING:
    from crawlfleet.crawljob import ExtractField, ExtractRule, ExtractSelector

__all__ = ["ExtractionError", "Extractor", "FieldValue", "Item"]

#: A field's value in an item: the first value found (or None), or every value (``all``).
FieldValue: TypeAlias = str | list[str] | None
#: A compiled query: called on a node, it gives lxml's XPath result.
_Query: TypeAlias = Callable[[object], object]


class ExtractionError(Exception):
    """A page on which a rule could not be evaluated; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Item:
    """One item: the rule that made it (``source``, its index in ``spec.extract``), its place
    among that rule's items on the page (``position``), and its fields. (url, source,
    position) names it: a page crawled twice gives the same names, so readers keep one."""

    source: int | str
    """The rule's index in ``spec.extract``, or the parser's reference (``spec.parser``)."""
    position: int
    fields: Mapping[str, object]


class _Queries(threading.local):
    """Every selector of the rules, compiled once in each thread that evaluates them."""

    def __init__(self, selectors: Sequence[tuple[SelectorKind, str]]) -> None:
        self.compiled: list[_Query] = [compile_selector(kind, query) for kind, query in selectors]


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    query: int  # its place in the rules' _Queries
    attr: str | None
    every: bool
    pattern: re2._Regexp | None

    def value(self, node: object, queries: Sequence[_Query]) -> FieldValue:
        found = queries[self.query](node)
        values: list[str] = []
        for result in found if isinstance(found, list) else [found]:
            text = _text(result, self.attr)
            if text is None:
                continue
            if self.pattern is not None:
                match = self.pattern.search(text)
                if match is None:
                    continue
                text = match.group(1 if self.pattern.groups else 0)
                if text is None:
                    continue
            if not self.every:
                return text
            values.append(text)
        return values if self.every else None


@dataclass(frozen=True, slots=True)
class _Rule:
    index: int
    each: int | None  # its place in the rules' _Queries
    fields: tuple[_Field, ...]

    def items(self, root: object, queries: Sequence[_Query]) -> list[Item]:
        if self.each is None:
            fields = {field.name: field.value(root, queries) for field in self.fields}
            return [Item(self.index, 0, fields)]
        nodes = queries[self.each](root)
        if not isinstance(nodes, list):
            return []
        return [
            Item(
                self.index,
                position,
                {field.name: field.value(node, queries) for field in self.fields},
            )
            for position, node in enumerate(node for node in nodes if _is_element(node))
        ]


class Extractor:
    """The compiled ``spec.extract`` of one job; build it with :meth:`from_rules`."""

    def __init__(
        self,
        matches: URLPatterns,
        rules: Sequence[_Rule],
        selectors: Sequence[tuple[SelectorKind, str]],
    ) -> None:
        self._matches = matches
        self._rules = tuple(rules)
        self._queries = _Queries(selectors)  # compiled here, and again in each other thread

    @classmethod
    def from_rules(cls, rules: Sequence[ExtractRule]) -> Extractor | None:
        """The extractor of ``rules``; None when there are none (nothing to do per page)."""
        matches = compile_patterns([rule.match for rule in rules])
        if matches is None:
            return None
        selectors: list[tuple[SelectorKind, str]] = []
        compiled = [_compile_rule(index, rule, selectors) for index, rule in enumerate(rules)]
        return cls(matches, compiled, selectors)

    def applies_to(self, url: str) -> bool:
        """Whether some rule matches ``url``: one RE2 scan, before any parsing."""
        return self._matches.search(url)

    def extract(self, html: str, url: str) -> list[Item]:
        """The items of the page ``html`` fetched from ``url`` (after redirects).

        Raises :class:`ExtractionError` when a rule cannot be evaluated on this page.
        """
        matching = self._matches.matching(url)
        if not matching:
            return []
        root = _parse(html)
        queries = self._queries.compiled
        items: list[Item] = []
        for index in matching:
            try:
                items += self._rules[index].items(root, queries)
            except Exception as error:  # lxml's, or an re: function's (a pattern RE2 refuses)
                raise ExtractionError(f"extract[{index}]: {error}") from error
        return items


def _parse(html: str) -> object:
    """The page as parsel parses it (what ``Selector(text=...)`` queries)."""
    from parsel import Selector

    return Selector(text=html, type="html").root


def _compile_rule(
    index: int, rule: ExtractRule, selectors: list[tuple[SelectorKind, str]]
) -> _Rule:
    return _Rule(
        index,
        _selector(rule.each, selectors) if rule.each is not None else None,
        tuple(_compile_field(name, field, selectors) for name, field in rule.fields.items()),
    )


def _compile_field(
    name: str, field: ExtractField, selectors: list[tuple[SelectorKind, str]]
) -> _Field:
    pattern = compile_regexp(field.pattern) if field.pattern is not None else None
    return _Field(name, _selector(field, selectors), field.attr, field.all_values, pattern)


def _selector(selector: ExtractSelector, selectors: list[tuple[SelectorKind, str]]) -> int:
    """Add a CSS or XPath selector to ``selectors``; its place there."""
    if selector.css is not None:
        selectors.append(("css", selector.css))
    else:
        assert selector.xpath is not None  # the model allows exactly one of the two
        selectors.append(("xpath", selector.xpath))
    return len(selectors) - 1


def _is_element(node: object) -> bool:
    from lxml import etree

    return isinstance(node, etree._Element)


def _text(result: object, attr: str | None) -> str | None:
    """One selected result as a string: an element's attribute or its text (whitespace
    collapsed); a text or attribute node as it is; a number or boolean as XPath writes it."""
    from lxml import etree

    if isinstance(result, etree._Element):
        if attr is not None:
            value: str | None = result.get(attr)
            return value
        if not isinstance(result.tag, str):  # a comment or processing instruction
            return None
        return " ".join("".join(result.itertext()).split())
    if attr is not None:
        return None
    return xpath_string(result)
