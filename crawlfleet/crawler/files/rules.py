"""Which URLs are files, and by which rule: ``spec.files.rules`` as the worker applies them.

A rule decides at one of three moments, and these are its three questions (DESIGN §11):

* when a page's links are admitted, :meth:`FileRules.for_link`: is a link found in this element
  a file? The answer rides on the link's parent as a mark (``frontier/parents.py``), so that the
  worker claiming it later knows without the page;
* when a worker claims a URL, :meth:`FileRules.for_url`: the rule its mark names, else the first
  rule whose ``match`` alone takes the URL (seeds and plain links too);
* when a page fetch's response arrives, :meth:`FileRules.for_response`: its content type may
  confirm a candidate whose rule has ``contentTypes``, or make a page a file by a rule of
  ``contentTypes`` alone (the fetcher then stops after the headers).

Rules are tried in order and the first that takes a URL decides: a link an earlier rule takes
by its URL alone is marked with that rule, not with a later rule that names its element.
The patterns of all rules compile into one RE2 set (as ``recrawl`` rules do), so a claim costs
one linear scan of the URL however many rules there are, and a job with no ``files`` pays
nothing: :meth:`FileRules.from_spec` gives an empty, falsy set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from crawlfleet.crawljob.files import FilesSpec
from crawlfleet.patterns import URLPatterns, compile_patterns

__all__ = ["FileRule", "FileRules", "media_type"]

_ANY_SUBTYPE: Final = "/*"


def media_type(content_type: str | None) -> str | None:
    """The ``type/subtype`` of a Content-Type header, lowercased, parameters dropped; None when
    there is none or it has no ``/``."""
    if not content_type:
        return None
    essence = content_type.split(";", 1)[0].strip().lower()
    return essence if "/" in essence else None


@dataclass(frozen=True, slots=True)
class FileRule:
    """One rule of ``spec.files.rules``, as the worker applies it.

    ``index`` is its position in the spec: the mark a link carries, the ``rule`` of a file's
    record. ``content_types`` are lowercased (a media type is case-insensitive).
    """

    index: int
    max_bytes: int
    min_bytes: int | None
    content_types: tuple[str, ...]
    match: str | None
    context: frozenset[str]

    def accepts_type(self, content_type: str | None) -> bool:
        """Whether a response of ``content_type`` is one of this rule's types (a ``type/*``
        takes every subtype of its type). A response without a type is none of them."""
        essence = media_type(content_type)
        if essence is None:
            return False
        for accepted in self.content_types:
            if accepted == essence:
                return True
            if accepted.endswith(_ANY_SUBTYPE) and essence.startswith(accepted[:-1]):
                return True
        return False

    @property
    def by_type_only(self) -> bool:
        """The rule names responses, not URLs: only ``contentTypes``."""
        return self.match is None and not self.context


class FileRules:
    """The rules of one job, compiled: the worker builds it once and asks it per URL."""

    __slots__ = (
        "_by_url",
        "_by_url_patterns",
        "_match_positions",
        "_patterns",
        "_type_only",
        "contexts",
        "rules",
    )

    def __init__(self, rules: Sequence[FileRule]) -> None:
        """``rules`` in the spec's order, each at its ``index`` (:meth:`from_spec` builds them)."""
        if any(rule.index != position for position, rule in enumerate(rules)):
            raise ValueError("each rule must sit at its index: a mark names a rule by position")
        self.rules: tuple[FileRule, ...] = tuple(rules)
        #: Elements whose links ``extract_links`` must report (``PageLinks.embedded``).
        self.contexts: frozenset[str] = frozenset(
            element for rule in self.rules for element in rule.context
        )
        with_match = [rule for rule in self.rules if rule.match is not None]
        # Every pattern, for links; the patterns of rules without a context, for claims.
        self._match_positions = [rule.index for rule in with_match]
        self._patterns: URLPatterns | None = compile_patterns(
            [rule.match or "" for rule in with_match]
        )
        by_url = [rule for rule in with_match if not rule.context]
        self._by_url = [rule.index for rule in by_url]
        self._by_url_patterns: URLPatterns | None = compile_patterns(
            [rule.match or "" for rule in by_url]
        )
        self._type_only = tuple(rule for rule in self.rules if rule.by_type_only)

    @classmethod
    def from_spec(cls, files: FilesSpec | None) -> FileRules:
        """The job's rules (none when ``spec.files`` is unset)."""
        if files is None:
            return cls(())
        return cls(
            [
                FileRule(
                    index=index,
                    max_bytes=rule.max_bytes,
                    min_bytes=rule.min_bytes,
                    content_types=tuple(kind.lower() for kind in rule.content_types),
                    match=rule.match,
                    context=frozenset(rule.context),
                )
                for index, rule in enumerate(files.rules)
            ]
        )

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def for_link(self, url: str, element: str) -> FileRule | None:
        """The rule that makes ``url``, linked from an ``element`` of a page, a file candidate;
        None: the link is a page link (or a file only by its response's type).

        The first rule, in order, that takes it: by its element (a rule naming ``element`` in
        ``context``, whose ``match`` also occurs in ``url`` if it has one), or by its URL alone
        (a rule with ``match`` and no ``context``).
        """
        if not self.rules:
            return None
        found = self._patterns.matching(url) if self._patterns is not None else []
        matched = {self._match_positions[position] for position in found}
        for rule in self.rules:
            if rule.by_type_only:
                continue
            if rule.context and element not in rule.context:
                continue
            if rule.match is None or rule.index in matched:
                return rule
        return None

    def for_url(self, url: str, marked: int | None) -> FileRule | None:
        """The rule a claimed ``url`` is a file candidate of; None: a page.

        ``marked`` is the rule its parent's mark names (``frontier.parents.file_mark``); a mark
        no rule has any more (the spec changed between runs) counts as none. Without one, the
        first rule with ``match`` and no ``context`` whose pattern occurs in ``url``.
        """
        if marked is not None and 0 <= marked < len(self.rules):
            return self.rules[marked]
        if self._by_url_patterns is None:
            return None
        found = self._by_url_patterns.matching(url)
        return self.rules[self._by_url[found[0]]] if found else None

    def needs_response_type(self, rule: FileRule) -> bool:
        """Whether a candidate of ``rule`` is a file only if its response has one of the rule's
        types: its fetch must stop after the headers and ask :meth:`for_response`."""
        return bool(rule.content_types)

    def for_response(self, content_type: str | None, candidate: FileRule | None) -> FileRule | None:
        """At a page fetch's response: the rule it is downloaded as a file by; None: read it as
        a page. ``candidate`` is :meth:`for_url`'s answer for the lease.

        The candidate, if it has no types or its types accept ``content_type``; else the first
        rule of ``contentTypes`` alone that accepts it.
        """
        if candidate is not None and (
            not candidate.content_types or candidate.accepts_type(content_type)
        ):
            return candidate
        for rule in self._type_only:
            if rule.accepts_type(content_type):
                return rule
        return None

    @property
    def response_types_matter(self) -> bool:
        """Some rule decides by content type: a page fetch may turn out to be a file, so the
        worker asks the fetcher to stop after the headers when :meth:`for_response` says so."""
        return any(rule.content_types for rule in self.rules)
