"""URL patterns (``scope.include``, ``scope.exclude``): RE2, compiled one way for model and crawl.

A worker tests every link it finds against these patterns, and links come from pages anyone
writes. Python's backtracking ``re`` can take exponential time on a pattern such as ``(a+)+$``
and a crafted link, stalling a worker for good; RE2 matches in time linear in the URL's length,
whatever the pattern. RE2 is also the syntax of CEL's ``matches()`` on the API server, so a
pattern means the same in a CrawlJob everywhere. Its syntax: https://github.com/google/re2/wiki/Syntax
(no backreferences or look-around; ``\\z``, not ``\\Z``, ends the text).

The patterns of one list are compiled into one ``RE2::Set``: each pattern is parsed on its own
(its flags, its group names stay its own, so two patterns that each name a group ``id`` still
work), and a URL costs one linear scan, however many patterns there are. ``compile_patterns`` is
the only way to build them: the model (``crawlfleet.crawljob``) calls it to validate a list
exactly as the scope (``crawler/links/scope.py``) will compile it, so a list the model accepts
cannot fail later.

It imports nothing of crawlfleet's, so the model can use it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

import re2

__all__ = ["PatternError", "URLPatterns", "compile_patterns", "compile_regexp"]

#: RE2's memory budget for one pattern, and for one list's Set with its matching automaton.
#: RE2's default; a list that needs more is refused when compiled, never while matching.
_MAX_MEMORY_BYTES: Final = 8 << 20
# Go's RE2 (CEL's) refuses a repetition count it cannot parse as a number below 10**8; C++ RE2
# takes the same text as literal characters. Both refuse counts above 1000.
_MAX_COUNT_DIGITS: Final = 9
# The one escape C++ RE2 has and Go's does not: \C, any single byte (it can split a character).
_BYTE_ESCAPE: Final = "\\C"


class PatternError(ValueError):
    """A pattern list that cannot be compiled: ``index`` names the pattern (None: the list)."""

    def __init__(self, index: int | None, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        self.reason = reason

    @property
    def message(self) -> str:
        """The refusal as the CrawlJob model words it, after the path of what ``index`` names."""
        return self.reason if self.index is None else f"is not a valid RE2 pattern: {self.reason}"


@dataclass(frozen=True, slots=True)
class URLPatterns:
    """A compiled pattern list; ``search`` says whether any pattern occurs in a URL."""

    patterns: tuple[str, ...]
    _set: re2.Set = field(repr=False, compare=False)

    def search(self, url: str) -> bool:
        """True when some pattern matches somewhere in ``url`` (``re.search`` semantics)."""
        return self._set.Match(url) is not None

    def matching(self, url: str) -> list[int]:
        """The indexes of the patterns that match somewhere in ``url``, in ascending order."""
        found = self._set.Match(url)
        return sorted(found) if found else []


def _options(*, capture: bool = False, ignore_case: bool = False) -> re2.Options:
    options = re2.Options()
    options.max_mem = _MAX_MEMORY_BYTES
    options.log_errors = False  # the reason comes back in the exception; stderr stays clean
    options.never_capture = not capture  # "does it match" needs no group bookkeeping
    options.case_sensitive = not ignore_case
    return options


def compile_patterns(patterns: Sequence[str]) -> URLPatterns | None:
    """Compile ``patterns`` for ``URLPatterns.search``; None for an empty list.

    Raises ``PatternError`` naming the first pattern RE2 refuses (with RE2's reason), or the
    list (index None) when the patterns are valid alone but too large together. Compiled lists
    are remembered: the model validates a spec each time it is read (the operator reads every
    job on every tick), and the scope then gets the very list the model compiled.
    """
    if not patterns:
        return None
    return _compile(tuple(patterns))


@lru_cache(maxsize=256)
def _compile(patterns: tuple[str, ...]) -> URLPatterns:
    options = _options()
    searcher = re2.Set.SearchSet(options)
    for index, pattern in enumerate(patterns):
        try:
            re2.compile(pattern, options)  # Set.Add says only "failed": this says why
        except re2.error as error:
            raise PatternError(index, _reason(error)) from None
        go_refuses = _only_cpp_accepts(pattern)
        if go_refuses is not None:
            raise PatternError(index, go_refuses)
        searcher.Add(pattern)
    try:
        searcher.Compile()
    except re2.error:
        reason = "are too large to match together (each is valid alone): use fewer or simpler ones"
        raise PatternError(None, reason) from None
    return URLPatterns(tuple(patterns), searcher)


@lru_cache(maxsize=256)
def compile_regexp(pattern: str, *, ignore_case: bool = False) -> re2._Regexp:
    """One pattern, with its groups, for searching values; ``PatternError`` (index 0) if RE2
    refuses it. Remembered: an XPath may test the same pattern on every node of a page."""
    try:
        return re2.compile(pattern, _options(capture=True, ignore_case=ignore_case))
    except re2.error as error:
        raise PatternError(0, _reason(error)) from None


def _reason(error: re2.error) -> str:
    (raw,) = error.args or (b"",)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return text or "not a valid RE2 pattern"


def _only_cpp_accepts(pattern: str) -> str | None:
    """Why Go's RE2 (CEL's) refuses a pattern that C++ RE2 compiled, or None.

    Two cases, found by compiling the same patterns with both: a repetition ``{n}``, ``{n,}`` or
    ``{n,m}`` with a number of 10 digits or more (C++ reads it as literal text), and the byte
    escape ``\\C``. Refused here, a pattern means the same in a CrawlJob everywhere. Escapes,
    ``\\Q...\\E`` and character classes are skipped, as RE2's parser does.
    """
    index, length = 0, len(pattern)
    while index < length:
        char = pattern[index]
        if char == "\\":
            if pattern.startswith("\\Q", index):
                end = pattern.find("\\E", index + 2)
                index = length if end < 0 else end + 2
                continue
            if pattern.startswith(_BYTE_ESCAPE, index):
                return f"invalid escape sequence: {_BYTE_ESCAPE} (CEL's RE2 has no byte escape)"
            index += 2
        elif char == "[":
            index = _class_end(pattern, index)
        elif char == "{":
            close = pattern.find("}", index)
            body = pattern[index + 1 : close] if close > 0 else ""
            numbers = body.split(",")
            if (
                len(numbers) in (1, 2)
                and numbers[0].isdigit()
                and numbers[0].isascii()
                and all(number.isdigit() and number.isascii() for number in numbers[1:] if number)
                and any(len(number) > _MAX_COUNT_DIGITS and number[0] != "0" for number in numbers)
            ):
                return f"invalid repeat count: {pattern[index : close + 1]}"
            index += 1
        else:
            index += 1
    return None


def _class_end(pattern: str, start: int) -> int:
    """The index just past the character class that opens at ``start``."""
    index = start + 1
    if pattern.startswith("^", index):
        index += 1
    if pattern.startswith("]", index):  # a leading ']' is a literal
        index += 1
    while index < len(pattern):
        if pattern[index] == "\\":
            index += 2
        elif pattern.startswith("[:", index):
            close = pattern.find(":]", index + 2)
            index = index + 1 if close < 0 else close + 2
        elif pattern[index] == "]":
            return index + 1
        else:
            index += 1
    return index
