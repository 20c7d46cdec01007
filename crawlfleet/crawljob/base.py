"""What every section is made of: the pydantic bases, and markers that state a rule twice.

A rule is said once in Python, for ``crawlfleet run`` and ``crawlfleet validate``, and once for
the API server, in the CRD that ``crawlfleet/operator/crd.py`` generates from these models; the
two sit side by side so they cannot drift:

* per-field rules are markers on the fields: ``Range``, ``Pattern`` and ``MaxLength`` check a
  value and write ``minimum``/``maximum``/``pattern``/``maxLength`` into the JSON schema; a
  ``Cel`` marker beside a Python validator restates it in CEL (``x-kubernetes-validations``);
* cross-field rules are ``Rule`` objects in a section's ``cross_field_rules``, each with its
  message and the same rule in CEL; ``Section`` checks them all and reports every broken one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from crawlfleet.crawljob.validation import problem, problems, show

__all__ = ["Cel", "MaxLength", "Model", "Pattern", "Range", "Rule", "Section"]

_SectionT = TypeVar("_SectionT", bound=BaseModel)
_NumberT = TypeVar("_NumberT", int, float)


@dataclass(frozen=True, slots=True)
class Range:
    """A numeric range that explains itself in full and shows up in the JSON schema.

    Pydantic's own bounds report one side at a time ("less than 0.5"); a user deserves the whole
    range ("greater than 0 and less than 0.5"), and the CRD generator still finds
    minimum/maximum in the schema.
    """

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def describe(self) -> str:
        if self.ge is not None and self.le is not None:
            return f"between {self.ge} and {self.le}"
        lower = (
            f"greater than {self.gt}"
            if self.gt is not None
            else f"at least {self.ge}"
            if self.ge is not None
            else None
        )
        upper = (
            f"less than {self.lt}"
            if self.lt is not None
            else f"at most {self.le}"
            if self.le is not None
            else None
        )
        return " and ".join(part for part in (lower, upper) if part)

    def check(self, value: _NumberT) -> _NumberT:
        # Written as "fails unless inside" so that nothing unexpected slips through.
        inside = (
            (self.gt is None or value > self.gt)
            and (self.ge is None or value >= self.ge)
            and (self.lt is None or value < self.lt)
            and (self.le is None or value <= self.le)
        )
        if not inside:
            raise problem(f"must be {self.describe()} (got {show(value)})")
        return value

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        bounds = {
            "exclusiveMinimum": self.gt,
            "minimum": self.ge,
            "exclusiveMaximum": self.lt,
            "maximum": self.le,
        }
        json_schema.update({key: value for key, value in bounds.items() if value is not None})
        return json_schema


@dataclass(frozen=True, slots=True)
class Pattern:
    """A string shape with a human description; RE2-compatible so the CRD can reuse it."""

    pattern: str
    meaning: str
    max_length: int | None = None

    def check(self, value: str) -> str:
        too_long = self.max_length is not None and len(value) > self.max_length
        if too_long or not re.fullmatch(self.pattern, value):
            raise problem(f"must be {self.meaning} (got {show(value)})")
        return value

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["pattern"] = f"^{self.pattern}$"
        if self.max_length is not None:
            json_schema["maxLength"] = self.max_length
        return json_schema


@dataclass(frozen=True, slots=True)
class MaxLength:
    """A cap on a string's characters or a list's items, in the user's words and the schema.

    A list is measured before its items are validated, so ten million seeds cost one ``len``,
    not ten million URL checks.
    """

    limit: int

    def check(self, value: object) -> object:
        if isinstance(value, str) and len(value) > self.limit:
            raise problem(f"must be at most {self.limit} characters long (got {len(value)})")
        if isinstance(value, list | tuple) and len(value) > self.limit:
            raise problem(f"must hold at most {self.limit} items (got {len(value)})")
        return value

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        key = "maxItems" if json_schema.get("type") == "array" else "maxLength"
        json_schema[key] = self.limit
        return json_schema


@dataclass(frozen=True, slots=True)
class Cel:
    """A single-value rule restated in CEL, for the CRD's ``x-kubernetes-validations``.

    It sits beside the Python validator it mirrors and only writes the JSON schema: the API
    server cannot run Python, and keeping the two side by side is what stops them drifting.
    ``message`` is the validator's own words, so both refusals read alike.
    """

    rule: str
    message: str

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        rules = json_schema.setdefault("x-kubernetes-validations", [])
        rules.append({"rule": self.rule, "message": self.message})
        return json_schema


@dataclass(frozen=True, slots=True)
class Rule(Generic[_SectionT]):
    """A rule over several fields of one section: what a per-field schema cannot say.

    ``cel`` states the same rule over ``self`` (the section) for the CRD's
    ``x-kubernetes-validations``, with ``message`` and ``field`` (its fieldPath), so the cluster
    refuses exactly what ``crawlfleet run`` refuses. Locally the message also quotes the values of
    ``shows``.
    """

    field: str | None
    message: str
    cel: str
    holds: Callable[[_SectionT], bool]
    shows: tuple[str, ...] = ()

    def explain(self, section: _SectionT) -> str:
        if not self.shows:
            return self.message
        values = section.model_dump(by_alias=True)
        got = ", ".join(f"{name}={show(_dig(values, name))}" for name in self.shows)
        return f"{self.message} (got {got})"


def _dig(values: Mapping[str, Any], dotted: str) -> object:
    """``values["scope"]["maxPages"]`` for ``"scope.maxPages"``."""
    found: Any = values
    for part in dotted.split("."):
        found = found[part]
    return found


class Model(BaseModel):
    """Spec models: camelCase aliases, typos refused, no coercion the API server would not do.

    ``strict`` keeps ``crawlfleet run`` as picky as the CRD schema ("3" is not an integer).
    The docstring under each field is its user-facing description: the CRD (``kubectl
    explain``) and docs/crawljob.md both print it, so it says what, in which unit, and why.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )


class Section(Model):
    """A spec section; checks its ``cross_field_rules`` and reports every broken one."""

    cross_field_rules: ClassVar[tuple[Rule[Any], ...]] = ()

    @model_validator(mode="after")
    def _check_cross_field_rules(self) -> Self:
        found = [
            (rule.field, rule.explain(self))
            for rule in self.cross_field_rules
            if not rule.holds(self)
        ]
        if found:
            raise problems(found)
        return self
