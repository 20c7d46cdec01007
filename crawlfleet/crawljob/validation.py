"""A document's problems in the words of the file: one ConfigError, one line per field.

A user fixing a YAML file wants all the mistakes at once, each at its path from the document root
(``spec.dedup.errorRate: ...``) and in a sentence, never pydantic's prose or links. The models'
own validators raise :func:`problem` (one message, already in the user's words) or
:func:`problems` (several fields at once from one model validator); :func:`validate` runs a
model and turns whatever pydantic reports into the one ConfigError, after refusing a document too
large or too deep to walk. :func:`show` renders an offending value the way the user wrote it.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Final, TypeVar, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from crawlfleet.errors import ConfigError

__all__ = [
    "FROM_DOCUMENT",
    "MAX_DOCUMENT_DEPTH",
    "Where",
    "problem",
    "problems",
    "show",
    "unknown_field",
    "validate",
    "without_userinfo",
]

# Past these a document is refused before validation: aliases can make a small YAML file a huge
# tree (each alias is walked again), and deep nesting exhausts the recursion of YAML's composer.
_MAX_DOCUMENT_NODES: Final = 1_000_000
MAX_DOCUMENT_DEPTH: Final = 64
#: The validation context key :func:`validate` sets: the values come from a document (YAML, a
#: ConfigMap, the API server), so a field may be as picky as the CRD's schema is about its type
#: where Python code is given more room (a duration as seconds: ``durations.DurationRange``).
FROM_DOCUMENT: Final = "crawlfleet_from_document"


def problem(message: str) -> PydanticCustomError:
    """A validation failure whose message is already in the user's words (no pydantic prose)."""
    return PydanticCustomError("crawljob", message)


def show(value: object) -> str:
    """Render an offending value the way the user wrote it in YAML/JSON, kept short."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def without_userinfo(url: str) -> str:
    """``url`` with a ``user:password@`` before its host masked, for a message (an Event, a log)."""
    scheme, separator, rest = url.partition("://")
    ends = [found for found in (rest.find(char) for char in "/?#") if found >= 0]
    at = rest.rfind("@", 0, min(ends, default=len(rest)))
    return url if not separator or at < 0 else f"{scheme}{separator}***@{rest[at + 1 :]}"


# Where a problem of a model validator lies, below the model: None (the model itself), a dotted
# field path ("scope.maxPages", as Rule.field says it) or a tuple of keys (dict keys may hold dots).
Where = str | tuple[str, ...] | None


def problems(found: Sequence[tuple[Where, str]]) -> PydanticCustomError:
    """Several problems at once from one model validator, each at its own field.

    Pydantic allows one error per validator call; the list rides in the context and
    ``_config_error`` spreads it back into one line per field.
    """
    summary = "; ".join(message for _, message in found)
    return PydanticCustomError(
        "crawljob_problems", "{summary}", {"summary": summary, "found": found}
    )


_ModelT = TypeVar("_ModelT", bound=BaseModel)


def validate(model: type[_ModelT], doc: object, *, prefix: tuple[str, ...], what: str) -> _ModelT:
    """``doc`` as a ``model``, or one ConfigError about ``what`` with every problem on its own
    line, each at its path below ``prefix`` (``("spec",)`` for a spec handed over alone)."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"invalid {what}: expected a mapping, got {type(doc).__name__}")
    _check_size(doc, what)
    try:
        # by_name=False: YAML must use the camelCase names the CRD knows.
        return model.model_validate(
            doc, by_alias=True, by_name=False, context={FROM_DOCUMENT: True}
        )
    except ValidationError as exc:
        # The message carries every problem; chaining pydantic's report would repeat it with
        # links to pydantic's docs, which mean nothing to someone editing a CrawlJob.
        raise _config_error(exc, model, prefix, what) from None


def _check_size(doc: object, what: str) -> None:
    """Refuse a document too deep or too large to validate, before pydantic walks it.

    YAML aliases share one object between places, and a validator walks every place again: ten
    levels of ten aliases are ten billion nodes. The walk stops at the first bound it passes.
    """
    budget = _MAX_DOCUMENT_NODES
    stack: list[tuple[object, int]] = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(
                f"invalid {what}: more than {_MAX_DOCUMENT_NODES} values once its YAML aliases"
                " are expanded"
            )
        if depth > MAX_DOCUMENT_DEPTH:
            raise ConfigError(f"invalid {what}: nested more than {MAX_DOCUMENT_DEPTH} levels deep")
        if isinstance(node, Mapping):
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list | tuple):
            stack.extend((value, depth + 1) for value in node)


_JSON_VALUE_TAGS: Final = frozenset({"list", "dict", "str", "bool", "int", "float"})
_TYPE_MESSAGES: Final = {
    "missing": "is required",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}


def _config_error(
    exc: ValidationError, model: type[BaseModel], prefix: tuple[str, ...], what: str
) -> ConfigError:
    lines: list[str] = []
    for error in exc.errors(include_url=False):
        # A free-form Kubernetes structure (resources, volume) is a JsonValue, whose errors
        # carry the union member tried ("dict", "float"): no part of the user's path.
        loc = tuple(part for part in error["loc"] if part not in _JSON_VALUE_TAGS)
        if error["type"] == "invalid_key":  # the location ends with the key itself
            lines.append(f"{_path(prefix + loc[:-1])}: has a key that is not a string")
        elif error["type"] == "crawljob_problems":
            found: list[tuple[Where, str]] = error.get("ctx", {})["found"]
            lines += [
                f"{_path(prefix + loc + _parts(where))}: {message}" for where, message in found
            ]
        else:
            lines.append(f"{_path(prefix + loc)}: {_describe(error, model, loc)}")
    count = f"{len(lines)} problem" + ("" if len(lines) == 1 else "s")
    return ConfigError("\n  ".join([f"invalid {what} ({count}):", *lines]))


def _describe(error: ErrorDetails, model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    kind, ctx = error["type"], error.get("ctx", {})
    if kind == "crawljob":
        return error["msg"]
    if kind == "extra_forbidden":
        return unknown_field(str(loc[-1]), _field_names(model, loc[:-1]))
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        one_of = "one of " if " or " in expected else ""
        return f"must be {one_of}{expected} (got {show(error['input'])})"
    if kind in _TYPE_MESSAGES:
        got = "" if kind == "missing" else f" (got {show(error['input'])})"
        return _TYPE_MESSAGES[kind] + got
    message = error["msg"]
    return message[:1].lower() + message[1:]


def unknown_field(key: str, known: frozenset[str] | list[str]) -> str:
    by_lower = {name.lower().replace("_", ""): name for name in known}
    close = by_lower.get(key.lower().replace("_", "")) or next(
        iter(difflib.get_close_matches(key, sorted(known), n=1)), None
    )
    if close:
        return f"unknown field; did you mean {close}?"
    return f"unknown field (known: {', '.join(sorted(known))})" if known else "unknown field"


def _field_names(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The camelCase field names of the model found at ``loc``, for "did you mean" hints."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            continue
        if current is None:
            return []
        info = next(
            (f for name, f in current.model_fields.items() if part in (name, f.alias)), None
        )
        current = _model_in(info.annotation) if info else None
    if current is None:
        return []
    return [info.alias or name for name, info in current.model_fields.items()]


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _parts(where: Where) -> tuple[str, ...]:
    if where is None:
        return ()
    return tuple(where.split(".")) if isinstance(where, str) else where


_PLAIN_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _path(loc: tuple[int | str, ...]) -> str:
    """``spec.seeds[0]``; a key that is no plain name is quoted: ``limits["nvidia.com/gpu"]``;
    a name of ``extract[].fields`` in brackets, as the API server writes a map's keys
    (``spec.extract[0].fields[price].re``)."""
    path = ""
    for index, part in enumerate(loc):
        field_name = index >= 3 and loc[index - 1] == "fields" and loc[index - 3] == "extract"
        if isinstance(part, int) or field_name:
            path += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            path += f"[{json.dumps(part, ensure_ascii=False)}]"
        else:
            path += f".{part}" if path else part
    return path
