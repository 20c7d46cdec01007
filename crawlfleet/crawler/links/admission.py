"""Which links of finished pages still need the Bloom filter: the worker's exact local cache.

A page's navigation links come back on nearly every page of its site: on the benchmark site
each URL is linked from about nine pages, so eight of every nine links the worker extracts
were already settled by this very worker. Settling one again costs a canonicalisation, a scope
check, a hash for the filter, its share of the ``enqueue`` script and of Redis's CPU, only to
hear "seen before". DESIGN §7 plans the answer: the worker keeps a small exact cache of links
it has settled, so repeats never leave the process.

A link is *settled* once nothing it could lead to is left to do anywhere:

* it cannot be canonicalised or is out of scope for reasons that do not depend on depth
  (scheme, domain, ``include``/``exclude``): the same link is refused again anyway;
* the filter answered for it (new and queued, or seen before): the filter never forgets, so
  any later answer is "seen before".

Not settled, so they are offered again when met again: links refused for depth (the same URL
may turn up at a lower depth), links refused because ``maxPages`` was reached or held back by
memory pressure (they were not added to the filter), and every link of a batch whose
``enqueue`` failed. So a URL is skipped as *seen* only once the frontier admitted it or said it
had seen it: the cache never holds a URL the filter has not answered, and a new URL is never
lost to it. Links refused by scope are remembered apart (their own sets), so that a repeat of
one is not taken for a dedup answer.

The cache is exact (sets, no false positives: a link is skipped only when this worker really
settled it) and bounded: two generations of ``generation_size`` links each (those the filter
answered and those scope refused, together); when the current one fills, the older one is
dropped, so a link forgotten that way costs one more trip to the filter, never a lost page.
Memory: each entry is the link's ``str`` (about 50 bytes of object header plus one byte per
character of an ASCII URL) and its set slot (16 bytes, in a table kept at most 60 % full), so
about ``2 × generation_size × (URL length + 80 bytes)`` at most: with the default 65,536 and
100-character URLs, about 24 MB (docs/operations.md, "The worker's link cache").

What it saves is counted per batch (:attr:`PendingLinks.local_hits`, against the
``enqueue``'s :attr:`PendingLinks.remote_checks`): a link the cache answered as seen, or a
repeat within the batch of a URL the batch already carries. Skipped links are not counted as
the filter's duplicates (``bloom_results_total`` and the frontier's ``duplicates`` count only
what the filter answered).

Everything here is per batch: one set lookup per extracted link, the rest per fresh link.
A fresh link already in canonical shape (lower-case host, no port or a non-default one, a
path of unreserved characters without dot segments, no query) is its own canonical form and
skips w3lib's ``canonicalize_url`` (the costliest step of admitting a link); the unit tests
check that shortcut
against ``canonicalize`` on generated URLs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from crawlfleet.config import LINK_CACHE_GENERATION_SIZE
from crawlfleet.crawler.links.scope import Scope, ScopeVerdict
from crawlfleet.frontier import Admission, CanonicalURL, Link, try_canonicalize

__all__ = [
    "DEFAULT_GENERATION_SIZE",
    "LinkAdmission",
    "PageLinksToAdmit",
    "PendingLinks",
    "canonical_link",
]

#: Links per generation (of the two kept): see the module doc for the memory it bounds. A
#: worker's is ``CRAWLFLEET_LINK_CACHE_GENERATION_SIZE`` (crawlfleet.config), this by default.
DEFAULT_GENERATION_SIZE: Final = LINK_CACHE_GENERATION_SIZE

_FILTER_ANSWERED: Final = frozenset({Admission.NEW, Admission.SEEN})

_LABEL: Final = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
#: URLs that canonicalisation leaves as they are, but for a default port and dot segments.
_CANONICAL_SHAPE: Final = re.compile(
    rf"https?://(?:{_LABEL}\.)*{_LABEL}(?::(?P<port>[1-9][0-9]{{0,4}}))?/[A-Za-z0-9._~/-]*"
)
_MAX_PORT: Final = 65535


def canonical_link(url: str) -> CanonicalURL | None:
    """``try_canonicalize(url)``, without w3lib for a URL that is already canonical."""
    match = _CANONICAL_SHAPE.fullmatch(url)
    if match is not None and "/." not in url:  # dot segments ('/./', '/../') get resolved
        port = match["port"]
        if port is None:
            return CanonicalURL(url)
        number = int(port)
        if number <= _MAX_PORT and number != (443 if url.startswith("https") else 80):
            return CanonicalURL(url)
    return try_canonicalize(url)


@dataclass(frozen=True, slots=True)
class PageLinksToAdmit:
    """The links one finished page offers, with the depth they would have and their parent."""

    links: Sequence[str]
    depth: int
    parent: str
    #: Admitted even one level past ``scope.maxDepth`` (a page's embedded files, found by a
    #: ``files`` rule's ``context``: the page at maxDepth keeps its images, as Heritrix does).
    past_max_depth: bool = False


@dataclass(slots=True)
class PendingLinks:
    """One batch's links for ``enqueue``, and what to settle once the filter has answered.

    ``links`` are canonical, in scope and unique within the batch. ``settled`` holds the raw
    links that scope refused, settled whatever the filter says; ``waiting[i]`` the raw links
    that are settled once ``links[i]`` gets a filter answer (new or seen).
    """

    links: list[Link] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)
    waiting: list[list[str]] = field(default_factory=list)
    #: Links skipped as settled before: answered by the filter, or refused by scope.
    skipped: int = 0
    #: Links answered here instead of by the filter: settled by it before (skipped), or
    #: repeats within the batch of a URL ``links`` already carries. Links of a page refused
    #: for depth are not counted (the filter would not have been asked).
    local_hits: int = 0
    #: Links refused here, by reason (a ScopeVerdict's value, or ``invalid_url``).
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def remote_checks(self) -> int:
        """Links the ``enqueue`` asks the filter about."""
        return len(self.links)


class LinkAdmission:
    """Prepares a batch's links for the filter and remembers what it settled; see module doc."""

    def __init__(self, scope: Scope, *, generation_size: int = DEFAULT_GENERATION_SIZE) -> None:
        if generation_size < 1:
            raise ValueError(f"generation_size must be at least 1 (got {generation_size})")
        self._scope = scope
        self._generation_size = generation_size
        self._current: set[str] = set()
        self._previous: set[str] = set()
        #: Links scope refused (settled without the filter), in the same two generations.
        self._refused: set[str] = set()
        self._refused_previous: set[str] = set()

    def __len__(self) -> int:
        return (
            len(self._current)
            + len(self._previous)
            + len(self._refused)
            + len(self._refused_previous)
        )

    def prepare(self, pages: Iterable[PageLinksToAdmit]) -> PendingLinks:
        """The links of ``pages`` that the filter must still see, in page and link order."""
        current, previous = self._current, self._previous
        refused, refused_previous = self._refused, self._refused_previous
        max_depth = self._scope.max_depth
        pending = PendingLinks()
        dropped = pending.dropped
        index_of: dict[str, int] = {}  # canonical URL -> its position in pending.links
        hits = waiting = 0  # links the cache answered; raw links put to wait for the filter
        for page in pages:
            links = page.links
            unseen = [link for link in links if link not in current and link not in previous]
            fresh = (
                [link for link in unseen if link not in refused and link not in refused_previous]
                if refused or refused_previous
                else unseen
            )
            pending.skipped += len(links) - len(fresh)
            depth = page.depth
            if max_depth is not None and page.past_max_depth and depth == max_depth + 1:
                depth = max_depth  # judged as at maxDepth, queued at its own depth
            if max_depth is not None and depth > max_depth:
                if fresh:
                    _count(dropped, ScopeVerdict.TOO_DEEP, len(fresh))
                continue  # too deep here is not too deep everywhere: nothing settles
            hits += len(links) - len(unseen)
            if not fresh:
                continue
            settled_before = len(pending.settled)
            canonical = list(map(canonical_link, fresh))
            valid = [url for url in canonical if url is not None]
            if len(valid) < len(canonical):
                _count(dropped, ScopeVerdict.INVALID_URL, len(canonical) - len(valid))
            in_scope, refusals = self._scope.filter(valid, depth)
            for verdict, count in refusals.items():
                _count(dropped, verdict, count)
            kept = set(in_scope)
            for raw, url in zip(fresh, canonical, strict=True):
                if url is None or url not in kept:
                    pending.settled.append(raw)
                    continue
                position = index_of.get(url)
                if position is None:
                    position = index_of[url] = len(pending.links)
                    pending.links.append(Link(url, page.depth, page.parent))
                    pending.waiting.append([])
                pending.waiting[position].append(raw)
            waiting += len(fresh) - (len(pending.settled) - settled_before)
        # Raw links waiting beyond one per URL are the batch's own repeats.
        pending.local_hits = hits + waiting - len(pending.links)
        return pending

    def settle(self, pending: PendingLinks, admitted: Sequence[Admission | None]) -> None:
        """Remember what ``pending`` settled, given the filter's answers to its links (None:
        no answer yet, the link spooled for a partition that is down: not settled)."""
        answered = self._current
        for raws, code in zip(pending.waiting, admitted, strict=True):
            if code in _FILTER_ANSWERED:
                answered.update(raws)
        self._refused.update(pending.settled)
        if len(answered) + len(self._refused) >= self._generation_size:
            self._previous, self._current = answered, set()
            self._refused_previous, self._refused = self._refused, set()


def _count(dropped: dict[str, int], verdict: ScopeVerdict, count: int) -> None:
    dropped[verdict.value] = dropped.get(verdict.value, 0) + count
