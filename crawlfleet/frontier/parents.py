"""What a task's ``parent`` says besides where its URL was found: sitemap and file marks.

A queued task is four fields (``attempts, depth, url, parent``; ``lua/lib.lua``) and the frontier
keeps it compact: a run of tasks with the same parent stores that parent once. Sitemap work
(``scope.sitemaps``) needs two facts per URL that the format has no field for, and file work
(``spec.files``) one, so they ride in the parent as a *mark*, a fragment after the parent URL. A
canonical URL never has a fragment, so the first ``#`` of a parent is where a mark begins, and a
parent without one is a plain page URL (or "" for a seed): every other task reads exactly as
before.

``<where found>#sitemap=<level>``
    The task is a sitemap document, not a page; ``level`` counts the sitemap indexes above it
    (0 for a sitemap the site names itself). ``#sitemap=root`` marks a seed host's
    ``/sitemap.xml``, queued with the seeds: fetching it also reads the host's robots.txt
    ``Sitemap:`` lines, and a 404 there means only that the host has none.
``<sitemap URL>#lastmod=<W3C datetime>``
    The task is a page a sitemap listed with that ``<lastmod>``; the page's record carries it.
    Listed pages without one have the sitemap as a plain parent.
``<page URL>#file=<rule index>``
    The task is a file a ``spec.files`` rule took by the element the page linked it from
    (``crawler/files/rules.py``): the worker that claims it downloads it as a file by that rule,
    without the page at hand. A URL a rule takes by its URL alone needs no mark (a seed has none).

Why the parent and not a new field: the task layout is the frontier's largest memory cost and every
script reads it; a fifth field would change them all for a value most URLs lack. A marked parent
costs a listed page one more queue entry (its own parent entry, since lastmods differ from URL to
URL), a file link at most one (the links a rule takes on one page share it), and nothing for any
other page; reading it back is one substring test per record (:func:`split_parent`).
"""

from __future__ import annotations

from typing import Final, NamedTuple

from crawlfleet.frontier.models import Link
from crawlfleet.urls import canonicalize, origin_of

__all__ = [
    "SitemapTask",
    "file_mark",
    "file_parent",
    "listed_parent",
    "sitemap_parent",
    "sitemap_roots",
    "sitemap_task",
    "split_parent",
]

_SITEMAP: Final = "#sitemap="
_LASTMOD: Final = "#lastmod="
_FILE: Final = "#file="
_ROOT: Final = "root"


class SitemapTask(NamedTuple):
    """A task that is a sitemap document: its index level, and whether it is a host's root."""

    level: int
    root: bool


def sitemap_roots(seeds: list[str]) -> list[Link]:
    """One ``/sitemap.xml`` task per seed origin, in seed order, each marked as its root."""
    origins = dict.fromkeys(origin_of(seed) for seed in seeds)
    return [
        Link(canonicalize(f"{origin}/sitemap.xml"), 0, f"{origin}/robots.txt{_SITEMAP}{_ROOT}")
        for origin in origins
    ]


def sitemap_parent(found_in: str, level: int) -> str:
    """The parent of a sitemap document found in ``found_in`` (robots.txt or an index)."""
    return f"{found_in}{_SITEMAP}{level}"


def listed_parent(sitemap_url: str, lastmod: str | None) -> str:
    """The parent of a page ``sitemap_url`` lists, with its ``<lastmod>`` if it has one."""
    return sitemap_url if lastmod is None else f"{sitemap_url}{_LASTMOD}{lastmod}"


def sitemap_task(parent: str) -> SitemapTask | None:
    """What a sitemap document's parent says about it; None for any other task."""
    at = parent.find(_SITEMAP)
    if at < 0:
        return None
    level = parent[at + len(_SITEMAP) :]
    if level == _ROOT:
        return SitemapTask(0, root=True)
    return SitemapTask(int(level), root=False) if level.isdigit() else None


def file_parent(found_in: str, rule: int) -> str:
    """The parent of a file that rule ``rule`` took by the element ``found_in`` links it from."""
    return f"{found_in}{_FILE}{rule}"


def file_mark(parent: str) -> int | None:
    """The files rule a task's parent names (:func:`file_parent`); None for any other task."""
    at = parent.find(_FILE)
    if at < 0:
        return None
    rule = parent[at + len(_FILE) :]
    return int(rule) if rule.isdigit() and rule.isascii() else None


def split_parent(parent: str) -> tuple[str, str | None]:
    """The parent as a record shows it (any mark removed: a file's record names the page that
    linked it), and the lastmod it carries."""
    if "#" not in parent:
        return parent, None
    url, _, mark = parent.partition("#")
    lastmod = mark[len(_LASTMOD) - 1 :] if mark.startswith(_LASTMOD[1:]) else None
    return url, lastmod
