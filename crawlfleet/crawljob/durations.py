"""Durations as Kubernetes writes them (``90s``, ``15m``, ``1h30m``, ``720h``), seconds in Python.

A revisit interval is read by people in minutes and hours, and by the API server's CEL with
``duration()``, which parses Go's ``time.ParseDuration`` syntax: so the YAML holds that syntax,
the model keeps seconds as a float, and :class:`DurationRange` says both. The parser here takes
exactly what Go's does for a non-negative duration (no days: Go has none), so a value that
``crawlfleet validate`` accepts is one CEL's ``duration()`` accepts, and the other way round.

From Python (not from a document) a number of seconds is accepted too: ``RecrawlRule(interval=60)``
reads better in code than ``"1m"``, and the CRD's type stays string, so a YAML number is refused
by both doors alike (:data:`crawlfleet.crawljob.validation.FROM_DOCUMENT` tells them apart).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Final

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from crawlfleet.crawljob.base import Pattern
from crawlfleet.crawljob.validation import FROM_DOCUMENT, problem, show

__all__ = [
    "DURATION",
    "DurationRange",
    "duration_cel",
    "format_duration",
    "parse_duration",
]

# Go's units (time.ParseDuration), in seconds; both micro signs, as Go takes both.
_UNITS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_NUMBER: Final = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)"
_UNIT: Final = "(ns|us|\u00b5s|\u03bcs|ms|s|m|h)"
_TERM: Final = re.compile(f"(?P<number>{_NUMBER})(?P<unit>{_UNIT})")
_MAX_DURATION_LENGTH: Final = 32  # "8760h" is 5; room for "1h2m3.456s" and the like

#: The shape of a duration, for the model and for CEL (``self.matches``) alike.
DURATION: Final = Pattern(
    f"(({_NUMBER}{_UNIT})+|0)",
    "a duration such as 90s, 15m, 1h30m or 720h (units h, m, s, ms)",
    max_length=_MAX_DURATION_LENGTH,
)
_SHAPE: Final = re.compile(DURATION.pattern)


def parse_duration(text: str) -> float:
    """Seconds of a Go duration string; ``ValueError`` if Go's ``ParseDuration`` would refuse it
    (or it is negative: nothing here waits a negative time)."""
    if text == "0":
        return 0.0
    if not _SHAPE.fullmatch(text):
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(term["number"]) * _UNITS[term["unit"]] for term in _TERM.finditer(text))


def format_duration(seconds: float) -> str:
    """The shortest Go duration string for ``seconds``: ``5400`` is ``1h30m``, ``0.5`` ``500ms``."""
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"not a duration: {seconds!r}")
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{_decimal(seconds * 1000)}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, rest = divmod(rest, 60)
    parts = [
        f"{int(hours)}h" if hours else "",
        f"{int(minutes)}m" if minutes else "",
        f"{_decimal(rest)}s" if rest else "",
    ]
    return "".join(parts)


def _decimal(value: float) -> str:
    """``value`` without a trailing ``.0``, to the nanosecond at most (Go's precision)."""
    return f"{round(value, 9):.9f}".rstrip("0").rstrip(".")


def duration_cel(expression: str, fields: tuple[str, ...]) -> str:
    """A CEL rule over duration fields, true when any of them is not a duration at all.

    CEL's ``duration()`` fails on text it cannot parse, and a failing rule adds the API server's
    own words to the refusal; the field's shape rule already says what is wrong, in ours.
    """
    return _guarded(expression, *(f"self.{name}" for name in fields))


def _guarded(expression: str, *values: str) -> str:
    shape = _cel_string(f"^{DURATION.pattern}$")
    guards = " || ".join(f"!{value}.matches({shape})" for value in values)
    return f"{guards} || ({expression})"


def _cel_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True, slots=True)
class DurationRange:
    """A duration field: a Go duration string in YAML and CRD, seconds (float) in Python.

    ``ge``/``le`` bound it in seconds; the message and the CEL rule say the bounds as durations.
    Written as a string again whenever the model is dumped, so a spec round-trips through the
    workers' ConfigMap and reads back in the user's units.
    """

    ge: float
    le: float

    def describe(self) -> str:
        return f"a duration between {format_duration(self.ge)} and {format_duration(self.le)}"

    def check(self, value: object, info: ValidationInfo) -> float:
        from_document = bool(info.context and info.context.get(FROM_DOCUMENT))
        if isinstance(value, str):
            try:
                seconds = parse_duration(value)
            except ValueError:
                raise problem(f"must be {DURATION.meaning} (got {show(value)})") from None
        elif isinstance(value, int | float) and not isinstance(value, bool) and not from_document:
            seconds = float(value)
            if not math.isfinite(seconds):
                raise problem(f"must be {self.describe()} (got {show(value)})")
        else:
            raise problem(f"must be {DURATION.meaning} (got {show(value)})")
        if not self.ge <= seconds <= self.le:
            raise problem(f"must be {self.describe()} (got {show(value)})")
        return seconds

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.with_info_plain_validator_function(
            self.check,
            serialization=core_schema.plain_serializer_function_ser_schema(format_duration),
            json_schema_input_schema=core_schema.str_schema(),
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        low, high = format_duration(self.ge), format_duration(self.le)
        within = f"duration(self) >= duration('{low}') && duration(self) <= duration('{high}')"
        return {
            "type": "string",
            "maxLength": _MAX_DURATION_LENGTH,
            "pattern": f"^{DURATION.pattern}$",
            "x-kubernetes-validations": [
                {"rule": _guarded(within, "self"), "message": f"must be {self.describe()}"}
            ],
        }
