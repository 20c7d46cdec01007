"""EXSLT regular expressions in extract XPath (``re:test``, ``re:match``, ``re:replace``) on RE2.

parsel, like Scrapy, gives every XPath the EXSLT ``re:`` functions, and lxml implements them with
Python's backtracking ``re``: ``re:test(., '^(a+)+$')`` on a 30-character value takes tens of
seconds, holding the GIL all the while, so no thread helps. Every other pattern of a job (scope,
``match``, a field's ``re``) is RE2, which matches in time linear in the text (DESIGN §6); so are
these. :func:`extensions` gives lxml the three functions, for an XPath compiled with
``regexp=False`` (lxml's own would otherwise replace them: ``crawlfleet/selection.py`` compiles
every extract XPath that way, for the model and the worker alike).

Semantics are EXSLT's (https://exslt.github.io/regexp/), with RE2's syntax for the pattern:

* the flag ``i`` matches regardless of case; ``g`` makes ``re:replace`` replace every match and
  ``re:match`` give the whole text of every match; other flag letters are ignored, as lxml does;
* ``re:match`` without ``g`` gives the whole match, then each group ('' for a group that took
  no part); each as a ``<match>`` element, none when nothing matches;
* ``re:replace``'s replacement may name groups as Python's ``re.sub`` does (``\\1``,
  ``\\g<name>``), as with lxml;
* an argument is converted as XPath's ``string()`` does: a node-set's first node's text, ''
  for an empty one, ``true``/``false``, a number without a needless ``.0``.

One difference from lxml with ``g``: lxml's ``re:match`` gives Python's ``findall`` (a pattern's
groups rather than its whole match); EXSLT's examples give whole matches, and so does this.

A pattern written as a string literal is checked when the job is validated
(:func:`literal_problem`, called by the model through ``crawlfleet/selection.py``), so a
look-ahead or a back-reference never reaches a worker; a pattern computed on the page (from a
node's text) that RE2 refuses raises ``ValueError`` with RE2's reason, which costs that page a
``parser_error``. Like ``crawlfleet.patterns`` it imports nothing of crawlfleet's but that.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Final

import re2

from crawlfleet.patterns import PatternError, compile_regexp

__all__ = ["NAMESPACE", "extensions", "literal_problem", "xpath_string"]

NAMESPACE: Final = "http://exslt.org/regular-expressions"
#: The prefix extract XPath uses for it (parsel's; crawlfleet/selection.py binds it).
_PREFIX: Final = "re"
#: Each function's number of arguments, least and most.
_ARITY: Final = {"test": (2, 3), "match": (2, 3), "replace": (4, 4)}
#: A call of a function of the prefix, where a name may start (not inside another name). Our own
#: pattern, on a selector of at most a few thousand characters: Python's re is safe for it.
_CALL: Final = re.compile(rf"(?<![\w.\-:]){_PREFIX}:([\w.\-]+)\s*\(")
_QUOTES: Final = "'\""


def extensions() -> dict[tuple[str, str], Callable[..., object]]:
    """The three functions, as lxml's ``extensions=`` takes them."""
    return {
        (NAMESPACE, "test"): _test,
        (NAMESPACE, "match"): _match,
        (NAMESPACE, "replace"): _replace,
    }


def _compiled(function: str, pattern: object, flags: object) -> re2._Regexp:
    text = xpath_string(pattern)
    try:
        return compile_regexp(text, ignore_case="i" in xpath_string(flags))
    except PatternError as error:
        raise ValueError(f"re:{function}(): {_shown(text)} {error.message}") from None


def _test(_context: object, value: object, pattern: object, flags: object = "") -> bool:
    regexp = _compiled("test", pattern, flags)
    return regexp.search(xpath_string(value)) is not None


def _match(_context: object, value: object, pattern: object, flags: object = "") -> list[object]:
    from lxml import etree

    regexp = _compiled("match", pattern, flags)
    text = xpath_string(value)
    if "g" in xpath_string(flags):
        found = [match.group(0) for match in regexp.finditer(text)]
    else:
        first = regexp.search(text)
        found = [] if first is None else [first.group(0), *first.groups("")]
    root = etree.Element("matches")
    elements = []
    for part in found:
        element = etree.SubElement(root, "match")
        element.text = part
        elements.append(element)
    return elements


def _replace(
    _context: object, value: object, pattern: object, flags: object, replacement: object
) -> str:
    regexp = _compiled("replace", pattern, flags)
    count = 0 if "g" in xpath_string(flags) else 1
    replaced: str = regexp.sub(xpath_string(replacement), xpath_string(value), count)
    return replaced


def xpath_string(value: object) -> str:
    """``value`` (an XPath result as lxml hands it over) as XPath's ``string()`` makes it."""
    from lxml import etree

    if isinstance(value, str):
        return str(value)
    if isinstance(value, list):
        if not value:
            return ""
        first = value[0]
        if isinstance(first, etree._Element):
            if not isinstance(first.tag, str):  # a comment or processing instruction
                return first.text or ""
            text: str = etree.tostring(first, method="text", encoding=str, with_tail=False)
            return text
        if isinstance(first, tuple):  # a namespace node: (prefix, URI)
            return str(first[1])
        return str(first)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def literal_problem(query: str) -> str | None:
    """Why an XPath's ``re:`` calls cannot run, as far as its text tells, or None.

    A call with the wrong number of arguments, or whose pattern is a string literal RE2 refuses
    (a look-ahead, a back-reference), is refused here: on a page it would fail every time. A
    pattern computed from the page is compiled when the call runs.
    """
    literals = _literal_spans(query)
    for call in _CALL.finditer(query):
        if any(start <= call.start() < end for start, end in literals):
            continue  # inside a string: text, not a call
        function = call.group(1)
        if function not in _ARITY:
            known = ", ".join(f"{_PREFIX}:{name}()" for name in _ARITY)
            return f"{_PREFIX}:{function}() is no EXSLT regular expression function ({known})"
        arguments = _arguments(query, call.end())
        if arguments is None:
            continue  # unbalanced: lxml's compiler says so in its own words
        least, most = _ARITY[function]
        if not least <= len(arguments) <= most:
            wanted = f"{least}" if least == most else f"{least} or {most}"
            return f"re:{function}() takes {wanted} arguments (got {len(arguments)})"
        pattern = _literal(arguments[1])
        if pattern is None:
            continue
        try:
            compile_regexp(pattern)
        except PatternError as error:
            return f"re:{function}(): {_shown(pattern)} {error.message}"
    return None


def _literal_spans(query: str) -> list[tuple[int, int]]:
    """Where the string literals of an XPath are (XPath 1.0 has no escapes inside them)."""
    spans = []
    index = 0
    while index < len(query):
        if query[index] in _QUOTES:
            end = query.find(query[index], index + 1)
            end = len(query) if end < 0 else end + 1
            spans.append((index, end))
            index = end
        else:
            index += 1
    return spans


def _arguments(query: str, start: int) -> list[str] | None:
    """The argument texts of a call whose ``(`` ends just before ``start``; None if unclosed."""
    arguments: list[str] = []
    depth, begin, index = 0, start, start
    while index < len(query):
        char = query[index]
        if char in _QUOTES:
            end = query.find(char, index + 1)
            if end < 0:
                return None
            index = end + 1
            continue
        if char in "([":
            depth += 1
        elif char in ")]":
            if depth == 0:
                last = query[begin:index]
                if arguments or last.strip():
                    arguments.append(last)
                return arguments if char == ")" else None
            depth -= 1
        elif char == "," and depth == 0:
            arguments.append(query[begin:index])
            begin = index + 1
        index += 1
    return None


def _literal(argument: str) -> str | None:
    """The string an argument spells when it is one string literal, else None."""
    text = argument.strip()
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] == text[0]:
        inner = text[1:-1]
        return None if text[0] in inner else inner
    return None


def _shown(pattern: str) -> str:
    return repr(pattern if len(pattern) <= 60 else pattern[:57] + "...")
