"""Resuming a download with ``Range``: what to ask, and what an answer allows (pure).

A part that already holds bytes is continued with ``Range: bytes=<offset>-`` and ``If-Range``
(the validator of the response those bytes came from), so the server either sends exactly the
rest of the same representation (206) or the whole current one (200). Anything else restarts
from zero: the one rule that keeps a stored file from ever being spliced from two versions.

* :func:`request_headers`: the headers of a request for a part holding ``offset`` bytes;
* :func:`judge`: append the response's body (:class:`Append`), drop the part and take this
  response's body from its first byte (:class:`Whole`), or drop the part and ask again without a
  range (:class:`Restart`), with the reason counted (``crawlfleet_file_restarts_total``);
* :func:`parse_content_range`: ``Content-Range: bytes <start>-<end>/<total or *>``.

``If-Range`` takes a strong ETag only (RFC 9110 §13.1.5: a weak one may not be sent there), else
``Last-Modified``; a part without either cannot be resumed safely and restarts (``no_validator``):
a ``Range`` without ``If-Range`` would append another version's bytes if the file changed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from crawlfleet.crawler.files.parts import PartState

__all__ = [
    "RESTART_REASONS",
    "Append",
    "ContentRange",
    "Decision",
    "Restart",
    "RestartReason",
    "Whole",
    "adopt",
    "declared_total",
    "if_range",
    "judge",
    "parse_content_range",
    "request_headers",
]

#: Why a download went back to byte zero: the label values of the restarts metric.
RestartReason = Literal[
    "no_range", "validator_changed", "range_mismatch", "unsatisfiable", "no_validator"
]
RESTART_REASONS: Final[tuple[RestartReason, ...]] = (
    "no_range",
    "validator_changed",
    "range_mismatch",
    "unsatisfiable",
    "no_validator",
)

_PARTIAL_CONTENT: Final = 206
_RANGE_NOT_SATISFIABLE: Final = 416
_CONTENT_RANGE: Final = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", re.ASCII | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ContentRange:
    """A satisfied ``Content-Range``: bytes ``start`` to ``end`` inclusive, of ``total``
    (None when the server wrote ``*``, a length it does not know)."""

    start: int
    end: int
    total: int | None


@dataclass(frozen=True, slots=True)
class Append:
    """The response continues the part: its body goes after the bytes the part holds."""


@dataclass(frozen=True, slots=True)
class Whole:
    """The response is the whole representation: the part restarts with its body.

    ``reason`` is None for a download that starts from zero anyway (no bytes held); otherwise the
    part's bytes are dropped and the restart counted under it.
    """

    reason: RestartReason | None = None


@dataclass(frozen=True, slots=True)
class Restart:
    """The response cannot be used: the part restarts and the file is asked again, whole."""

    reason: RestartReason


Decision = Append | Whole | Restart


def parse_content_range(value: str | None) -> ContentRange | None:
    """``bytes 100-199/1000`` (or ``/*``) as a :class:`ContentRange`; None when absent,
    malformed, backwards (end before start) or past its own total, and for the unsatisfied form
    ``bytes */1000`` that only a 416 carries."""
    if value is None:
        return None
    match = _CONTENT_RANGE.fullmatch(value.strip())
    if match is None:
        return None
    start, end = int(match[1]), int(match[2])
    total = None if match[3] == "*" else int(match[3])
    if end < start or (total is not None and end >= total):
        return None
    return ContentRange(start, end, total)


def if_range(state: PartState) -> str | None:
    """The validator a resumed request sends in ``If-Range``: the strong ETag, else
    ``Last-Modified``; None when the part has neither (it cannot be resumed)."""
    if state.etag and not state.etag.startswith("W/"):
        return state.etag
    return state.last_modified or None


def request_headers(state: PartState, offset: int | None = None) -> dict[str, str]:
    """The headers that ask for the rest of a part holding ``offset`` bytes (default: the durable
    ``state.offset``; a retry within one attempt passes what it holds, buffered bytes included).

    Empty when the part is empty. ``ValueError`` when it holds bytes but no validator: the
    caller restarts it first (reason ``no_validator``), see :func:`if_range`.
    """
    held = state.offset if offset is None else offset
    if held <= 0:
        return {}
    validator = if_range(state)
    if validator is None:
        raise ValueError("a part without a validator cannot be resumed: restart it first")
    return {"Range": f"bytes={held}-", "If-Range": validator}


def judge(
    state: PartState, status: int, headers: Mapping[str, str], offset: int | None = None
) -> Decision:
    """What to do with a 2xx, or a 416 to a range request, for a part holding ``offset`` bytes
    (default ``state.offset``); ``headers`` keyed by lower-case names, as the fetcher has them.

    * nothing held: a 206 starting at byte 0 is appended, any other 2xx is :class:`Whole`
      without a reason, and a 206 elsewhere is a ``range_mismatch``;
    * a 416: ``unsatisfiable`` (the part is longer than the file now is, or the server refuses
      ranges it advertised);
    * a validator of the response that differs from the part's: ``validator_changed`` (a 200
      is taken whole under that reason, a 206 is asked again: a server that ignored
      ``If-Range`` must not extend the part);
    * a 200 (any 2xx but 206): the server ignored ``Range``, or ``If-Range`` failed: whole,
      ``no_range``;
    * a 206 whose ``Content-Range`` starts elsewhere than ``offset``, is missing or malformed,
      or whose total differs from the one the part knows: ``range_mismatch``.
    """
    held = state.offset if offset is None else offset
    if status == _RANGE_NOT_SATISFIABLE:
        return Restart("unsatisfiable")
    if held <= 0:
        if status != _PARTIAL_CONTENT:
            return Whole()
        content_range = parse_content_range(headers.get("content-range"))
        if content_range is None or content_range.start != 0:
            return Restart("range_mismatch")
        return Append()
    if _validator_changed(state, headers):
        return (
            Whole("validator_changed")
            if status != _PARTIAL_CONTENT
            else Restart("validator_changed")
        )
    if status != _PARTIAL_CONTENT:
        return Whole("no_range")
    content_range = parse_content_range(headers.get("content-range"))
    if content_range is None or content_range.start != held:
        return Restart("range_mismatch")
    if (
        state.total is not None
        and content_range.total is not None
        and content_range.total != state.total
    ):
        return Restart("range_mismatch")
    return Append()


def declared_total(status: int, headers: Mapping[str, str]) -> int | None:
    """The full length a response declares: a 206's ``Content-Range`` total, else a 2xx's
    ``Content-Length``; None when it does not say (``*``, chunked, malformed)."""
    if status == _PARTIAL_CONTENT:
        content_range = parse_content_range(headers.get("content-range"))
        return None if content_range is None else content_range.total
    length = headers.get("content-length", "").strip()
    return int(length) if length.isdigit() else None


def adopt(state: PartState, status: int, headers: Mapping[str, str], *, continuing: bool) -> None:
    """Record in ``state`` what a response the part now follows says of the file: its
    validators, its declared length and its type. A response ``continuing`` a part that holds
    bytes keeps what the part knew and fills in only what it did not (the first response's type
    and validators describe the whole file); any other replaces it all."""
    etag = headers.get("etag") or None
    last_modified = headers.get("last-modified") or None
    total = declared_total(status, headers)
    content_type = headers.get("content-type") or None
    if continuing:
        state.etag = state.etag or etag
        state.last_modified = state.last_modified or last_modified
        state.total = state.total if state.total is not None else total
        state.content_type = state.content_type or content_type
        return
    state.etag, state.last_modified, state.total = etag, last_modified, total
    state.content_type = content_type


def _validator_changed(state: PartState, headers: Mapping[str, str]) -> bool:
    """The response names another version than the part's: a different ETag (compared weakly:
    ``W/"x"`` and ``"x"`` are one version), or, when the part has no ETag, another
    ``Last-Modified``. A validator the response leaves out changes nothing."""
    etag = headers.get("etag")
    if state.etag and etag:
        return _opaque(state.etag) != _opaque(etag)
    last_modified = headers.get("last-modified")
    if not state.etag and state.last_modified and last_modified:
        return state.last_modified.strip() != last_modified.strip()
    return False


def _opaque(etag: str) -> str:
    etag = etag.strip()
    return etag[2:] if etag.startswith("W/") else etag
