"""``spec.extract``: declarative rules that turn matching pages into items (DESIGN §9).

Selectors are checked as parsel will run them (``crawlfleet.selection``), and every pattern is
RE2; the bounds keep the API server's CEL cost estimate of the RE2 checks within its budget.
The other way to items, ``spec.parser`` (user code), is a reference checked by its shape
(``PARSER_REFERENCE`` in ``fields``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Final

from pydantic import AfterValidator, Field

from crawlfleet.crawljob.base import MaxLength, Rule, Section
from crawlfleet.crawljob.fields import LIST_FROM_YAML, MAX_TEXT_LENGTH, RE2_CHECKS, URLPattern
from crawlfleet.crawljob.validation import problem, show
from crawlfleet.selection import SelectorError, check_selector

__all__ = [
    "ExtractField",
    "ExtractRule",
    "ExtractRules",
    "ExtractSelector",
    "extract_characters",
]

# spec.extract: rules, fields per rule, a selector's length. Bounded so that the API server's
# CEL cost estimate of the RE2 checks (rules x fields x pattern length) stays in its budget.
_MAX_EXTRACT_RULES: Final = 16
_MAX_EXTRACT_FIELDS: Final = 32
_MAX_SELECTOR_LENGTH: Final = 1024
_MAX_VALUE_PATTERN_LENGTH: Final = 256
_FIELD_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def _css(query: str) -> str:
    try:
        check_selector("css", query)
    except SelectorError as error:
        raise problem(error.message) from None
    return query


def _xpath(query: str) -> str:
    try:
        check_selector("xpath", query)
    except SelectorError as error:
        raise problem(error.message) from None
    return query


def _item_field_names(fields: dict[str, ExtractField]) -> dict[str, ExtractField]:
    if not fields:
        raise problem("must name at least one field")
    if len(fields) > _MAX_EXTRACT_FIELDS:
        raise problem(f"must hold at most {_MAX_EXTRACT_FIELDS} fields (got {len(fields)})")
    bad = [name for name in fields if not _FIELD_NAME.fullmatch(name)]
    if bad:
        raise problem(
            "field names must be letters, digits and '_', not starting with a digit, at most 64"
            f" characters (got {show(bad[0])})"
        )
    return fields


# A field's re: RE2 as the URL patterns are, shorter (there can be 16 x 32 of them, and the
# API server's CEL cost estimate grows with their number times their length).
_ValuePattern = Annotated[str, MaxLength(_MAX_VALUE_PATTERN_LENGTH), *RE2_CHECKS]
_CssQuery = Annotated[str, MaxLength(_MAX_SELECTOR_LENGTH), AfterValidator(_css)]
_XPathQuery = Annotated[str, MaxLength(_MAX_SELECTOR_LENGTH), AfterValidator(_xpath)]
_ONE_QUERY: Final[Rule[Any]] = Rule(
    field=None,
    message="must set exactly one of css and xpath",
    cel="has(self.css) != has(self.xpath)",
    holds=lambda selector: (selector.css is None) != (selector.xpath is None),
)


class ExtractSelector(Section):
    """A CSS or an XPath selector (exactly one), run with parsel as in Scrapy."""

    css: _CssQuery | None = None
    """A CSS selector, with Scrapy's ::text and ::attr(name) pseudo-elements, such as
    h1.title::text or a.next::attr(href)."""
    xpath: _XPathQuery | None = None
    """An XPath 1.0 expression, such as //h1/text(); parsel's has-class(), the EXSLT set:
    functions and the EXSLT re: functions (RE2 syntax, as every pattern of a job) are
    available. Inside a rule's each, start it with ./ to stay in the node."""

    cross_field_rules: ClassVar[tuple[Rule[Any], ...]] = (_ONE_QUERY,)


class ExtractField(ExtractSelector):
    """How one field of an item is read from the page (or from the rule's each node)."""

    attr: Annotated[str, MaxLength(MAX_TEXT_LENGTH)] | None = None
    """Take this attribute of each selected element (href, src, content ...) instead of its
    text. Unset: an element's text, all of its descendants' text joined and whitespace
    collapsed; a selected text or attribute node as it is."""
    all_values: bool = Field(default=False, alias="all")
    """Keep every value found, as a list (empty when none). false: the first value, or null."""
    pattern: _ValuePattern | None = Field(default=None, alias="re")
    """A regular expression (RE2 syntax) searched in each value: the value becomes its first
    group, or the whole match when it has no group; a value it does not match is dropped."""


class ExtractRule(Section):
    """Items from the pages whose URL matches: one per page, or one per each node."""

    match: URLPattern
    """A regular expression (RE2 syntax) searched in the page's URL (after redirects): the rule
    applies to the pages it matches."""
    each: ExtractSelector | None = None
    """For a listing: one item per element this selects, its fields read inside that element.
    Unset: one item per matching page."""
    fields: Annotated[
        dict[str, ExtractField],
        AfterValidator(_item_field_names),
        Field(json_schema_extra={"minProperties": 1, "maxProperties": _MAX_EXTRACT_FIELDS}),
    ]
    """The item's fields by name (letters, digits and _), each read by a css or an xpath
    selector."""


ExtractRules = Annotated[tuple[ExtractRule, ...], LIST_FROM_YAML, MaxLength(_MAX_EXTRACT_RULES)]


def extract_characters(rules: Sequence[ExtractRule]) -> int:
    """The characters of the extraction rules' strings: most of what they add to the JSON."""
    total = 0
    for rule in rules:
        total += len(rule.match) + sum(len(name) for name in rule.fields)
        selectors: list[ExtractSelector | ExtractField] = [*rule.fields.values()]
        if rule.each is not None:
            selectors.append(rule.each)
        for selector in selectors:
            total += len(selector.css or selector.xpath or "")
            if isinstance(selector, ExtractField):
                total += len(selector.attr or "") + len(selector.pattern or "")
    return total
