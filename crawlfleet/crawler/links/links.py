"""Link extraction: one fetched HTML page in, its title and crawlable absolute links out.

This runs once for every page the fleet fetches, so it is written for speed and for hostile
input. It must never raise on what a server sends: binary junk, unclosed tags, megabyte-long
attributes and malformed URLs all end as "no link", never as an exception that would cost the
worker its task.

Parser: ``selectolax.lexbor.LexborHTMLParser``, the faster of selectolax's two engines (the
comparison is in docs/benchmarks.md). selectolax 1.0 removed Modest; it stays only as an import
fallback for an old selectolax without lexbor, where ``<area>`` links may come out after
``<a>`` links.

What makes it fast: elements are fetched with ``tags()`` (CSS queries compile their selector
for every document, which costs about half a parse); each href is deduplicated as a raw string
*before* resolution (navigation links repeat a lot); the common relative shapes are resolved by
string concatenation instead of ``urljoin`` (which costs more per link than the parse),
``../page`` included; absolute URLs are split and checked once and remembered across pages in
a bounded cache (a site's navigation links are the same on every page); no per-link regular
expression. The rare href with spaces or non-ASCII characters is percent-encoded with w3lib,
its host spelled by ``crawlfleet.hosts`` (IDNA 2008, as the scope spells ``allowedDomains``),
so every URL handed to the frontier is ASCII.

Bytes are parsed as UTF-8 (lexbor's rule); a page in another encoding is decoded first
(``crawler/links/charset.py``) and comes as ``str`` with its ``encoding``, in which a non-ASCII
query is percent-encoded, as browsers do (a path is always UTF-8).

A page gives at most ``max_links`` links (the first ones, in document order); the anchors past
the cap are not even resolved, only counted (``PageLinks.over_cap``), as are the links skipped
for ``nofollow`` (``PageLinks.nofollow``): every link left out has a counted reason.

Feeds a page announces (``<link rel="alternate" type="application/rss+xml">`` or Atom's type,
where sites and browsers discover them) come first, as the head comes first, counted in
``PageLinks.feeds``: at most :data:`MAX_FEED_LINKS_PER_PAGE`, outside ``max_links`` (a page
announces one or two; the bound, whose excess counts in ``over_cap``, stops a page from
announcing thousands).

A job that downloads files (``spec.files``) names the elements whose links it must see as
such (``file_contexts``): ``PageLinks.embedded`` then holds each such link with its element, in
document order, deduplicated by the pair, at most ``max_links`` of them (the rest counted in
``embedded_over_cap``), read with :data:`EMBEDDING_ATTRIBUTES` from one CSS query that only a
page of such a job pays for; ``<a>`` and ``<link>`` links are in both lists.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Protocol, cast
from urllib.parse import SplitResult, urljoin, urlsplit, urlunsplit

from w3lib.url import safe_url_string

from crawlfleet.hosts import normalize_host
from crawlfleet.urls import DEFAULT_PORTS, authority_prefix

__all__ = [
    "EMBEDDING_ATTRIBUTES",
    "INVISIBLE_ELEMENTS",
    "MAX_FEED_LINKS_PER_PAGE",
    "PARSER_NAME",
    "PageLinks",
    "extract_links",
    "visible_text",
]


class _Node(Protocol):
    """The part of a selectolax node (lexbor or Modest) this module uses."""

    @property
    def attributes(self) -> dict[str, str | None]: ...

    @property
    def tag(self) -> str | None: ...

    def text(self, deep: bool = True, separator: str = "", strip: bool = False) -> str: ...


class _Document(Protocol):
    """The part of a selectolax parser (lexbor or Modest) this module uses."""

    def css(self, query: str) -> list[_Node]: ...

    def tags(self, name: str) -> list[_Node]: ...

    def strip_tags(self, tags: list[str]) -> None: ...

    @property
    def body(self) -> _Node | None: ...


_ParserFactory = Callable[[str | bytes], _Document]


def _load_parser() -> tuple[_ParserFactory, str, tuple[type[Exception], ...]]:
    """Pick lexbor when the installed selectolax has it, else the old Modest parser.

    Imported by name so that the same code type-checks against selectolax 1.x (no Modest)
    and 0.3/0.4 (both). The error tuple names what a parser may raise on input it cannot
    handle; selectolax's own ``SelectolaxError`` derives from ``Exception`` directly.
    """
    errors: tuple[type[Exception], ...] = (ValueError, RuntimeError, TypeError)
    try:
        module = importlib.import_module("selectolax.lexbor")
        factory = module.LexborHTMLParser
        name = "lexbor"
    except ImportError:  # pragma: no cover - only with an old selectolax built without lexbor
        module = importlib.import_module("selectolax.parser")
        factory = module.HTMLParser
        name = "modest"
    selectolax_error = getattr(module, "SelectolaxError", None)
    if isinstance(selectolax_error, type) and issubclass(selectolax_error, Exception):
        errors = (*errors, selectolax_error)
    return cast(_ParserFactory, factory), name, errors


_parse, PARSER_NAME, _PARSE_ERRORS = _load_parser()

_LINK_SELECTOR = "a[href], area[href]"
#: Elements whose text a reader never sees (``output.content: text``).
INVISIBLE_ELEMENTS: Final = ["script", "style", "noscript", "template"]
_HTTP_SCHEMES = frozenset(DEFAULT_PORTS)
# Leading/trailing characters browsers strip from an href (C0 controls and space).
_STRIP_CHARS = "".join(chr(code) for code in range(0x21))
# The URL standard's forbidden domain code points, plus '"`{}' that no DNS name holds either.
_FORBIDDEN_HOST_CHARS = frozenset(
    ' #%/:<>?@[\\]^|"`{}' + "".join(chr(code) for code in range(0x20)) + "\x7f"
)
# Longest URL we hand on; longer ones are nearly always junk or traps, and the frontier stores them.
_MAX_URL_LENGTH = 4096
# Absolute URLs remembered across pages, and the longest worth remembering (so a hostile
# page cannot fill the cache with megabytes).
_CACHE_ENTRIES = 8192
_MAX_CACHED_LENGTH = 512
#: Feed links taken from one page's ``<link rel="alternate">`` elements.
MAX_FEED_LINKS_PER_PAGE: Final = 8
_FEED_LINK_TYPES: Final = frozenset({"application/rss+xml", "application/atom+xml"})
#: The attributes that link a resource, per element a ``files`` rule may name as its context
#: (crawljob/files.py ``FILE_ELEMENTS``), in the order they are read: an ``<img>``'s
#: ``srcset`` gives its first URL, a ``<video>``'s ``poster`` is its still image.
EMBEDDING_ATTRIBUTES: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "a": ("href",),
        "audio": ("src",),
        "embed": ("src",),
        "img": ("src", "srcset"),
        "link": ("href",),
        "object": ("data",),
        "source": ("src",),
        "video": ("src", "poster"),
    }
)
#: Elements whose ``rel="nofollow"`` keeps their link out (the others have no ``rel``).
_REL_ELEMENTS: Final = frozenset({"a", "link"})
# Whitespace as the HTML standard's srcset parser splits on it.
_SRCSET_SPACE: Final = " \t\n\r\f"


@dataclass(frozen=True, slots=True)
class PageLinks:
    """What a page offers the crawl: its ``<title>`` (whitespace collapsed) and its links.

    ``links`` are absolute http(s) URLs without fragments, deduplicated in first-seen order.
    """

    title: str | None
    links: list[str] = field(default_factory=list)
    #: Anchors left unread past ``max_links``.
    over_cap: int = 0
    #: Links left out for ``rel="nofollow"`` or a robots meta tag's ``nofollow``.
    nofollow: int = 0
    #: The page's visible text, when asked for (``text=True``); else None.
    text: str | None = None
    #: Of ``links``, the feeds the page announces (``<link rel="alternate">``), first.
    feeds: int = 0
    #: ``(absolute URL, element)`` of the links found in the elements ``file_contexts`` named,
    #: in document order (empty unless asked for).
    embedded: list[tuple[str, str]] = field(default_factory=list)
    #: Of those, the ones left out past ``max_links``.
    embedded_over_cap: int = 0


def visible_text(html: bytes | str) -> str:
    """The text a reader sees in the page's body, whitespace collapsed ("" when unparsable)."""
    try:
        return _visible_text(_parse(html))
    except _PARSE_ERRORS:
        return ""


def _visible_text(document: _Document) -> str:
    """The visible text of ``document``, whose invisible elements it strips: read links first."""
    document.strip_tags(INVISIBLE_ELEMENTS)
    body = document.body
    if body is None:
        return ""
    return " ".join(body.text(separator=" ").split())


def extract_links(
    html: bytes | str,
    page_url: str,
    *,
    respect_nofollow: bool = True,
    max_links: int | None = None,
    encoding: str = "utf-8",
    text: bool = False,
    file_contexts: frozenset[str] = frozenset(),
) -> PageLinks:
    """Return the title and crawlable links of ``html`` fetched from ``page_url``.

    ``<base href>`` (the first one, resolved against ``page_url``) sets the base for relative
    links, as in a browser. With ``respect_nofollow``, links with ``rel="nofollow"`` are skipped,
    and a ``<meta name="robots">`` saying ``nofollow`` or ``none`` drops every link. At most
    ``max_links`` links are taken. ``encoding`` is the page's (``str`` input was decoded with
    it). Never raises on malformed input: what cannot be parsed or resolved is left out.

    With ``text``, the page's visible text (:func:`visible_text`) comes with its links, read
    from the same parse: a worker writing ``output.content: text`` parses a page once for both.

    With ``file_contexts`` (element names, keys of :data:`EMBEDDING_ATTRIBUTES`), the links
    found in those elements come as ``PageLinks.embedded``, each with its element: a job's
    ``files`` rules decide by them which links are downloads.
    """
    try:
        document = _parse(html)
    except _PARSE_ERRORS:
        return PageLinks(title=None, links=[])
    page = _read_links(document, page_url, respect_nofollow, max_links, encoding, file_contexts)
    if text:
        try:
            return dataclasses.replace(page, text=_visible_text(document))
        except _PARSE_ERRORS:
            return dataclasses.replace(page, text="")
    return page


def _read_links(
    document: _Document,
    page_url: str,
    respect_nofollow: bool,
    max_links: int | None,
    encoding: str,
    file_contexts: frozenset[str],
) -> PageLinks:
    try:
        # tags() rather than css(): see the module docstring. Only a page with an image map
        # pays for one CSS query, to keep <a> and <area> links in document order.
        titles = document.tags("title")
        bases = document.tags("base")
        areas = document.tags("area")
        nodes = document.css(_LINK_SELECTOR) if areas else document.tags("a")
        meta_nodes = document.tags("meta") if respect_nofollow else []
        feed_nodes = _feed_nodes(document.tags("link"))
    except _PARSE_ERRORS:
        return PageLinks(title=None, links=[])

    title = _title_text(titles[0] if titles else None)
    if respect_nofollow and _meta_says_nofollow(meta_nodes):
        return PageLinks(title=title, links=[], nofollow=len(nodes) + len(feed_nodes))

    resolver = _Resolver(_base_url(bases, page_url), encoding)
    embedded: list[tuple[str, str]] = []
    embedded_over_cap = 0
    if file_contexts:  # a job without files pays one test
        embedded, embedded_over_cap = _read_embedded(
            document, resolver, file_contexts, respect_nofollow, max_links
        )
    links: list[str] = []
    seen_links: set[str] = set()
    seen_hrefs: set[str] = set()
    nofollow = feeds_over_cap = 0
    for feed_href, feed_rel in feed_nodes:
        if respect_nofollow and "nofollow" in feed_rel:
            nofollow += 1
        elif len(links) >= MAX_FEED_LINKS_PER_PAGE:
            feeds_over_cap += 1
        elif (url := resolver.resolve(feed_href)) is not None and url not in seen_links:
            seen_links.add(url)
            links.append(url)
    feeds = len(links)
    cap = len(nodes) if max_links is None else max_links
    cap += feeds
    for position, node in enumerate(nodes):
        if len(links) >= cap:
            return PageLinks(
                title=title,
                links=links,
                over_cap=len(nodes) - position + feeds_over_cap,
                nofollow=nofollow,
                feeds=feeds,
                embedded=embedded,
                embedded_over_cap=embedded_over_cap,
            )
        try:
            attributes = node.attributes
        except _PARSE_ERRORS:  # older selectolax raises on attribute bytes that are not UTF-8
            continue
        href = attributes.get("href")
        if not href:
            continue
        if respect_nofollow:
            rel = attributes.get("rel")
            if rel and "nofollow" in rel.lower().split():
                nofollow += 1
                continue
        # Dedupe the raw string first: repeated navigation links then cost one set lookup.
        if href in seen_hrefs:
            continue
        seen_hrefs.add(href)
        url = resolver.resolve(href)
        if url is not None and url not in seen_links:
            seen_links.add(url)
            links.append(url)
    return PageLinks(
        title=title,
        links=links,
        over_cap=feeds_over_cap,
        nofollow=nofollow,
        feeds=feeds,
        embedded=embedded,
        embedded_over_cap=embedded_over_cap,
    )


def _read_embedded(
    document: _Document,
    resolver: _Resolver,
    file_contexts: frozenset[str],
    respect_nofollow: bool,
    max_links: int | None,
) -> tuple[list[tuple[str, str]], int]:
    """The ``(URL, element)`` links of the elements in ``file_contexts``, in document order, at
    most ``max_links``; and how many more there were.

    One CSS query over the named elements keeps document order across element kinds (``tags()``
    would give them kind by kind); it costs about a third of a parse, paid only by pages of a job
    with files.
    """
    selector = _embedding_selector(file_contexts)
    if not selector:
        return [], 0
    try:
        nodes = document.css(selector)
    except _PARSE_ERRORS:
        return [], 0
    found: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    cap = max_links if max_links is not None else sys.maxsize
    over_cap = 0
    for node in nodes:
        try:
            element = node.tag
            attributes = node.attributes
        except _PARSE_ERRORS:
            continue
        if element is None or element not in file_contexts:
            continue
        if respect_nofollow and element in _REL_ELEMENTS:
            rel = attributes.get("rel")
            if rel and "nofollow" in rel.lower().split():
                continue
        for name in EMBEDDING_ATTRIBUTES[element]:
            value = attributes.get(name)
            if not value:
                continue
            if name == "srcset":
                value = _first_srcset_url(value)
            url = resolver.resolve(value)
            if url is None or (url, element) in seen:
                continue
            seen.add((url, element))
            if len(found) < cap:
                found.append((url, element))
            else:
                over_cap += 1
    return found, over_cap


@functools.lru_cache(maxsize=64)
def _embedding_selector(elements: frozenset[str]) -> str:
    """One CSS selector list for the elements' linking attributes (``img[src], img[srcset]``),
    in a fixed order; names that are no key of :data:`EMBEDDING_ATTRIBUTES` are left out."""
    return ", ".join(
        f"{element}[{attribute}]"
        for element in sorted(elements)
        if element in EMBEDDING_ATTRIBUTES
        for attribute in EMBEDDING_ATTRIBUTES[element]
    )


def _first_srcset_url(srcset: str) -> str:
    """The first image candidate's URL of a ``srcset`` (``a.jpg 1x, b.jpg 2x`` gives ``a.jpg``),
    as the HTML standard's parser collects it: leading spaces and commas skipped, the URL runs to
    the next space, trailing commas dropped."""
    rest = srcset.lstrip(_SRCSET_SPACE + ",")
    end = len(rest)
    for space in _SRCSET_SPACE:
        found = rest.find(space, 0, end)
        if found >= 0:
            end = found
    return rest[:end].rstrip(",")


def _feed_nodes(nodes: list[_Node]) -> list[tuple[str, list[str]]]:
    """The ``(href, rel words)`` of the ``<link>`` elements that announce an RSS or Atom feed
    (``rel`` holding ``alternate``, ``type`` one of theirs), in document order."""
    found: list[tuple[str, list[str]]] = []
    for node in nodes:
        try:
            attributes = node.attributes
        except _PARSE_ERRORS:
            continue
        rel = (attributes.get("rel") or "").lower().split()
        media_type = (attributes.get("type") or "").split(";", 1)[0].strip().lower()
        href = attributes.get("href")
        if href and "alternate" in rel and media_type in _FEED_LINK_TYPES:
            found.append((href, rel))
    return found


def _title_text(node: _Node | None) -> str | None:
    """The title with runs of whitespace collapsed, or None when missing or blank."""
    if node is None:
        return None
    try:
        title = " ".join(node.text().split())
    except _PARSE_ERRORS:
        return None
    return title or None


def _meta_says_nofollow(nodes: list[_Node]) -> bool:
    """True when a ``<meta name="robots">`` forbids following links (``nofollow`` or ``none``)."""
    for node in nodes:
        try:
            attributes = node.attributes
        except _PARSE_ERRORS:
            continue
        name = attributes.get("name")
        if name is None or name.strip().lower() != "robots":
            continue
        content = attributes.get("content") or ""
        directives = {part.strip() for part in content.lower().split(",")}
        if "nofollow" in directives or "none" in directives:
            return True
    return False


def _base_url(bases: list[_Node], page_url: str) -> str:
    """The document's base URL: the first ``<base href>`` if it resolves to http(s), else the page.

    A ``<base>`` pointing at another scheme (``javascript:``, ``data:``) or not parsing at all is
    ignored, as the HTML standard falls back to the document URL when the base URL fails.
    """
    href: str | None = None
    for node in bases:
        try:
            href = node.attributes.get("href")
        except _PARSE_ERRORS:
            return page_url
        if href is not None:
            break
    href = (href or "").strip(_STRIP_CHARS)
    if not href:
        return page_url
    try:
        candidate = urljoin(page_url, href)
        parts = urlsplit(candidate)
        if parts.scheme in _HTTP_SCHEMES and parts.hostname:
            _ = parts.port  # a base with a broken port would break every relative link
            return candidate
    except ValueError:
        pass
    return page_url


class _Resolver:
    """Resolves hrefs against one base URL, as ``urljoin`` would, but mostly without it.

    ``urljoin`` costs more per call than the parse costs per link. The common shapes
    (``/path``, ``path``, ``?query`` without dot segments) are resolved by concatenation with
    parts of the base, which was validated once, and so are leading ``../`` segments;
    absolute and scheme-relative URLs are split and their host checked once per distinct URL
    (cached across pages); the rest (other dot segments, ``http:path``, a base that is not a
    clean http(s) URL) goes to ``urljoin``. The unit tests check agreement with ``urljoin`` on
    a table of shapes. One deliberate difference: empty path segments (``a//b``) are kept, as
    RFC 3986 and browsers do, where ``urljoin`` collapses them.
    """

    __slots__ = (
        "_base",
        "_directory",
        "_directory_path",
        "_encoding",
        "_fast",
        "_origin",
        "_scheme",
        "_without_query",
    )

    def __init__(self, base_url: str, encoding: str = "utf-8") -> None:
        self._base = base_url
        # None for UTF-8, the common case: URLs are then finished (and cached) as they were.
        self._encoding = None if encoding in ("utf-8", "utf8") else encoding
        self._fast = False
        self._scheme = self._origin = self._directory = self._without_query = ""
        self._directory_path = "/"
        clean = _clean_base(base_url)
        if clean is not None:
            scheme, netloc, raw_path = clean
            path = raw_path or "/"
            # A base path with dot segments needs urljoin's merging and removal.
            self._fast = "/." not in path and not path.startswith(".")
            self._scheme = scheme
            self._origin = f"{scheme}://{netloc}"
            self._directory_path = path[: path.rfind("/") + 1]
            self._directory = self._origin + self._directory_path
            self._without_query = self._origin + raw_path

    def resolve(self, href: str) -> str | None:
        """``href`` as an absolute http(s) URL without fragment, or None if it is not one."""
        href = href.strip(_STRIP_CHARS)
        # Everything from the first '#' is the fragment: cut it before parsing (cheaper than
        # urldefrag); in-page links ('#top') and empty hrefs end here.
        hash_at = href.find("#")
        if hash_at >= 0:
            href = href[:hash_at]
        if not href or len(href) > _MAX_URL_LENGTH:
            return None
        if not href.isprintable():  # browsers drop tabs and newlines anywhere in a URL
            href = href.replace("\t", "").replace("\n", "").replace("\r", "")
        colon = href.find(":")
        if colon > 0:
            scheme = href[:colon]
            if _is_scheme(scheme):
                scheme = scheme.lower()
                if scheme not in _HTTP_SCHEMES:
                    return None  # mailto:, javascript:, tel:, data:, ftp:, ...
                if href.startswith("//", colon + 1):
                    return self._absolute(href)
                return self._joined(href)  # 'http:path' is relative to an http base
        first = href[0]
        if self._fast and "/." not in href and first != ".":
            if first == "/":
                if not href.startswith("//"):
                    return _finish(self._origin + href, self._encoding)
                # Scheme-relative: take the base's scheme. An empty authority ('//') is no URL,
                # although urljoin would quietly return the base for it.
                return self._absolute(self._scheme + ":" + href)
            elif first == "?":
                return _finish(self._without_query + href, self._encoding)
            else:
                return _finish(self._directory + href, self._encoding)
        if self._fast and href.startswith("./") and "/." not in href[1:]:
            return _finish(
                self._directory + href[2:], self._encoding
            )  # './page': common, and urljoin is slow
        if self._fast and href.startswith("../") and "//" not in self._directory_path:
            return self._up(href)
        return self._joined(href)

    def _up(self, href: str) -> str | None:
        """``../page`` (any number of ``../``): the directory's ancestor plus the rest.

        As RFC 3986's dot-segment removal (and ``urljoin``) does it, ``..`` at the root stays
        at the root. What follows the ``../`` prefix must hold no dot segment of its own.
        """
        rest = href
        path = self._directory_path
        while rest.startswith("../"):
            rest = rest[3:]
            path = path[: path.rfind("/", 0, -1) + 1] or "/"
        if "/." in rest or rest.startswith("."):
            return self._joined(href)
        return _finish(self._origin + path + rest, self._encoding)

    def _joined(self, href: str) -> str | None:
        try:
            joined = urljoin(self._base, href)
        except ValueError:
            return None
        return self._absolute(joined)

    def _absolute(self, url: str) -> str | None:
        if self._encoding is not None and not url.isascii():
            return _absolute(url, self._encoding)  # not cached: the page's encoding matters
        if len(url) <= _MAX_CACHED_LENGTH:
            return _cached_absolute(url)
        return _absolute(url)

    @staticmethod
    def _netloc_valid(parts: SplitResult) -> bool:
        """A usable host is present and the port, if any, is a number in 0..65535.

        Bracketed IPv6 hosts were validated by ``urlsplit``; other hosts must not hold the
        WHATWG URL standard's forbidden host code points (space, '<', '%', controls, ...).
        """
        try:
            host = parts.hostname
            if not host or (parts.port is not None and parts.port < 0):
                return False
        except ValueError:
            return False
        return "[" in parts.netloc or _FORBIDDEN_HOST_CHARS.isdisjoint(host)


def _clean_base(url: str) -> tuple[str, str, str] | None:
    """(scheme, netloc, path) of a clean http(s) base URL, as ``urlsplit`` gives them, or None.

    Clean: a lower-case http(s) scheme (no re-normalising needed) and a valid host and port.
    Every page has its own URL but shares its scheme and netloc with many: for a plain
    printable URL those come from a cache per ``authority_prefix``, and the path is the rest
    up to ``?`` or ``#``, as ``urlsplit`` cuts it.
    """
    prefix = authority_prefix(url)
    if prefix is not None and url.isascii() and url.isprintable() and " " not in url:
        origin = _clean_origin(prefix)
        if origin is None:
            return None
        rest = url[len(prefix) :]
        end = len(rest)
        for stop in "?#":
            found = rest.find(stop, 0, end)
            if found >= 0:
                end = found
        return origin[0], origin[1], rest[:end]
    return _split_clean(url)


def _split_clean(url: str) -> tuple[str, str, str] | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if (
        parts.scheme in _HTTP_SCHEMES
        and url.startswith(parts.scheme)
        and _Resolver._netloc_valid(parts)
    ):
        return parts.scheme, parts.netloc, parts.path
    return None


@functools.lru_cache(maxsize=1024)
def _clean_origin(prefix: str) -> tuple[str, str] | None:
    clean = _split_clean(prefix)
    return None if clean is None else (clean[0], clean[1])


def _absolute(url: str, encoding: str | None = None) -> str | None:
    """An absolute URL checked (http(s), a valid host and port) and finished, or None."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. 'http://[::1'
        return None
    if parts.scheme not in _HTTP_SCHEMES or not _Resolver._netloc_valid(parts):
        return None
    if not url.startswith(parts.scheme):  # 'HTTP://...': let urlunsplit lower-case it
        url = parts.geturl()
    return _finish(url, encoding)


# A pure function of the URL; navigation links repeat on every page of a site, and urlsplit
# costs more than the rest of a link's handling.
_cached_absolute = functools.lru_cache(maxsize=_CACHE_ENTRIES)(_absolute)


def _is_scheme(candidate: str) -> bool:
    """RFC 3986 scheme syntax (``ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )``), as urlsplit."""
    return (
        candidate.isascii()
        and candidate[0].isalpha()
        and (
            candidate.isalnum()
            or candidate.replace("+", "").replace("-", "").replace(".", "").isalnum()
        )
    )


def _finish(url: str, encoding: str | None = None) -> str | None:
    """Return ``url`` percent-encoded when it holds spaces, controls or non-ASCII characters.

    The path as UTF-8, the query in the page's ``encoding`` (None: UTF-8), as browsers do.
    """
    if url.isascii() and url.isprintable() and " " not in url:
        return url if len(url) <= _MAX_URL_LENGTH else None
    try:
        encoded = str(safe_url_string(_with_ascii_host(url), encoding or "utf-8"))
    except ValueError:  # includes UnicodeError from IDNA-encoding a malformed host
        return None
    if len(encoded) > _MAX_URL_LENGTH or not encoded.isascii():
        return None
    return encoded


def _with_ascii_host(url: str) -> str:
    """``url`` with a non-ASCII host spelled as ``crawlfleet.hosts`` spells it.

    safe_url_string would encode it with Python's IDNA 2003 codec (``faß.de`` as ``fass.de``),
    and the scope, like the CrawlJob model, speaks IDNA 2008. Raises ``ValueError``.
    """
    parts = urlsplit(url)
    host = parts.hostname
    if host is None or host.isascii():
        return url
    userinfo, at, host_and_port = parts.netloc.rpartition("@")
    _, colon, port = host_and_port.partition(":")
    netloc = f"{userinfo}{at}{normalize_host(host)}{colon}{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
