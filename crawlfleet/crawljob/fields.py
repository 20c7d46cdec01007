"""Field types several sections share: units, string shapes, URL patterns, quantities.

Each is an ``Annotated`` type or a marker defined once, so that a bound or a message reads the
same in every section that uses it, and in the CRD.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Final, Protocol, TypeVar

from pydantic import AfterValidator, Field, JsonValue

from crawlfleet.crawljob.base import Cel, MaxLength, Pattern, Range
from crawlfleet.crawljob.durations import DURATION
from crawlfleet.crawljob.validation import problem
from crawlfleet.patterns import PatternError, compile_patterns

__all__ = [
    "CONTENT_TYPE",
    "CRON_SCHEDULE",
    "DAY_SECONDS",
    "GIB",
    "LIST_FROM_YAML",
    "MAX_TEXT_LENGTH",
    "MIB",
    "NAMESPACE",
    "OBJECT_NAME",
    "PARSER_REFERENCE",
    "PYTHON_MODULE",
    "QUANTITY",
    "RE2_CHECKS",
    "REGION",
    "RULE_PATTERNS",
    "SECRET_KEY",
    "SPIDER_NAME",
    "STRING_SHAPES",
    "TIME_ZONE",
    "DelaySeconds",
    "Image",
    "URLPattern",
    "URLPatterns",
    "parse_quantity",
    "unique",
]

MIB: Final = 1024 * 1024
GIB: Final = 1024 * MIB
DAY_SECONDS: Final = 86_400

# Every bound in these modules is the largest value that still makes sense, so that a typo (an
# extra zero, seconds written as milliseconds) is refused with its field instead of run, and no
# number reaches Redis, Lua or a timer that it would overflow.
MAX_TEXT_LENGTH: Final = 1024  # a User-Agent, an image reference

_MAX_PATTERNS: Final = 100  # per list; RE2 compiles them into one set
_MAX_PATTERN_LENGTH: Final = 1024

# RFC 1123 as Kubernetes uses it: a label for namespaces, a subdomain for object names.
_DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN: Final = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"

OBJECT_NAME: Final = Pattern(
    _DNS_SUBDOMAIN,
    "a lowercase RFC 1123 name (letters, digits, '-' and '.', starting and ending with a letter"
    " or digit, at most 253 characters)",
    max_length=253,
)
NAMESPACE: Final = Pattern(
    _DNS_LABEL,
    "a lowercase RFC 1123 label (letters, digits and '-', starting and ending with a letter"
    " or digit, at most 63 characters)",
    max_length=63,
)
SECRET_KEY: Final = Pattern(
    r"[-._a-zA-Z0-9]+",
    "a Secret or ConfigMap key (letters, digits, '-', '_' and '.')",
    max_length=253,
)
QUANTITY: Final = Pattern(
    r"[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?",
    "a Kubernetes quantity such as 1Gi or 500Mi",
    max_length=64,
)
_IMAGE: Final = Pattern(
    r"[^\s]+", "a container image reference without spaces, such as redis:7.4-alpine"
)
REGION: Final = Pattern(
    r"[a-z0-9][a-z0-9-]*", "a region name such as us-east-1 or auto", max_length=64
)


SPIDER_NAME: Final = Pattern(
    r"[A-Za-z0-9_][-A-Za-z0-9_.]*",
    "a spider name (letters, digits, '_', '-' and '.')",
    max_length=MAX_TEXT_LENGTH,
)
PYTHON_MODULE: Final = Pattern(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*",
    "a Python module as package.module",
    max_length=MAX_TEXT_LENGTH,
)
PARSER_REFERENCE: Final = Pattern(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*",
    "a Python function as package.module:function",
    max_length=MAX_TEXT_LENGTH,
)
# The shapes the API server can check of a schedule; whether it parses (and fires), and whether
# the zone exists, only Python can say (crawljob/schedule.py).
CRON_SCHEDULE: Final = Pattern(
    r"(@[a-z]+|\S+([ \t]+\S+){4})",
    "a cron schedule of five fields (minute hour day-of-month month day-of-week), such as"
    " */15 * * * *, or a macro such as @daily",
    max_length=256,
)
TIME_ZONE: Final = Pattern(
    r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+){0,2}",
    "an IANA time zone name such as UTC, Europe/Berlin or America/New_York",
    max_length=64,
)
#: A media type a files rule accepts: ``type/subtype`` or ``type/*`` (never ``*/*``: every page).
CONTENT_TYPE: Final = Pattern(
    r"[A-Za-z0-9][-A-Za-z0-9!#$&^_.+]*/(\*|[A-Za-z0-9][-A-Za-z0-9!#$&^_.+]*)",
    "a media type such as video/mp4, or a type with any subtype such as video/*",
    max_length=127,
)
#: Every string shape, for the CRD generator to find each one's message by its pattern.
STRING_SHAPES: Final = (
    OBJECT_NAME,
    NAMESPACE,
    SECRET_KEY,
    QUANTITY,
    _IMAGE,
    REGION,
    PARSER_REFERENCE,
    SPIDER_NAME,
    PYTHON_MODULE,
    DURATION,
    CRON_SCHEDULE,
    TIME_ZONE,
    CONTENT_TYPE,
)


def unique(values: tuple[str, ...]) -> tuple[str, ...]:
    """Each value once, where it first appears: a repeat in a list is no mistake worth refusing."""
    return tuple(dict.fromkeys(values))


def _url_pattern(pattern: str) -> str:
    """One pattern, compiled alone as RE2 (``_url_patterns`` then checks the list together)."""
    try:
        compile_patterns((pattern,))
    except PatternError as error:
        raise problem(error.message) from None  # RE2's reason quotes the offending part
    return pattern


def _url_patterns(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The list compiled exactly as the scope compiles it (one RE2 set), or refused."""
    try:
        compile_patterns(patterns)
    except PatternError as error:
        raise problem(error.message) from None
    return patterns


class _Matching(Protocol):
    """A rule that may name URLs by a pattern (``recrawl[]``, ``files.rules[]``)."""

    @property
    def match(self) -> str | None: ...


_RuleT = TypeVar("_RuleT", bound=_Matching)


def _rule_patterns(rules: tuple[_RuleT, ...]) -> tuple[_RuleT, ...]:
    """The rules' ``match`` patterns compiled together, as the worker compiles them (one RE2
    set), or refused; each pattern alone was checked by its field."""
    try:
        compile_patterns([rule.match for rule in rules if rule.match is not None])
    except PatternError as error:
        if error.index is not None:  # each compiled alone already: cannot happen
            raise
        raise problem(f"have match patterns that {error.reason}") from None
    return rules


# Kubernetes' quantity grammar (k8s.io/apimachinery/pkg/api/resource): a number, then a binary
# or decimal SI suffix or an exponent.
_KUBE_QUANTITY: Final = re.compile(
    r"\+?(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_SI_FACTORS: Final = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    **{f"{prefix}i": Decimal(1024) ** (power + 1) for power, prefix in enumerate("KMGTPE")},
}  # fmt: skip


def parse_quantity(value: JsonValue) -> Decimal | None:
    """A Kubernetes quantity (``500m``, ``1Gi``, ``2``) as a number, or None if it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value)) if value >= 0 and value == value else None
    if not isinstance(value, str) or len(value) > 64:
        return None
    match = _KUBE_QUANTITY.fullmatch(value)
    if match is None:
        return None
    suffix = match["suffix"] or ""
    if suffix[:1] in ("e", "E"):
        exponent = int(suffix[1:])
        if abs(exponent) > 30:  # past any resource a node has (E is 1e18)
            return None
        return Decimal(match["number"]) * Decimal(10) ** exponent
    return Decimal(match["number"]) * _SI_FACTORS[suffix]


# YAML hands us lists; tuples keep the frozen models immutable all the way down.
LIST_FROM_YAML: Final = Field(strict=False)

# CEL's matches() compiles its pattern with Go's RE2 when the rule runs, and a pattern it cannot
# compile is an evaluation error: the API server refuses the object with Go's reason and this
# message. type() keeps the rule from being true either way (an error inside || could be
# absorbed). A list too large to compile together is the operator's InvalidSpec.
RE2_CHECKS: Final = (
    AfterValidator(_url_pattern),
    Cel("type(''.matches(self)) == bool", "is not a valid RE2 pattern"),
)
URLPattern = Annotated[str, MaxLength(_MAX_PATTERN_LENGTH), *RE2_CHECKS]
URLPatterns = Annotated[
    tuple[URLPattern, ...],
    LIST_FROM_YAML,
    MaxLength(_MAX_PATTERNS),
    AfterValidator(_url_patterns),
]

#: A rule list's patterns must compile together too (a list too large is the operator's
#: InvalidSpec: CEL cannot compile them as one set).
RULE_PATTERNS: Final = AfterValidator(_rule_patterns)

DelaySeconds = Annotated[float, Range(ge=0, le=DAY_SECONDS)]
Image = Annotated[
    str,
    MaxLength(MAX_TEXT_LENGTH),
    _IMAGE,
]
