"""URLs as the crawl reads them: one canonical spelling, and one reading of host and origin.

**Canonical form.** w3lib's ``canonicalize_url`` does the hard part (percent-encoding, sorted
query, dropped fragment); we add what it leaves: the default port and user-info are removed,
the host is spelled by ``crawlfleet.hosts`` (IDNA 2008, as the CrawlJob model spells
``allowedDomains``; w3lib would use Python's IDNA 2003 codec), and anything that is not an
absolute http(s) URL with a host is refused with :class:`InvalidURL`. Results are cached because
a crawl meets the same navigation links on every page. A :data:`CanonicalURL` is what the
frontier queues and hands out in leases; its host key is a slice of it (:func:`host_of`).

**Authority.** Every part of the crawl that asks where a URL points (the address guard, the
scope, robots.txt, canonicalisation) asks :func:`authority_of`: scheme, host and port with the
scheme's default filled in (:data:`DEFAULT_PORTS`), from one ``urlsplit``. Those checks run
before every request for URLs of a few hosts, so their callers cache answers per
``scheme://netloc`` prefix (:func:`per_authority`), which is right only where ``urlsplit`` reads
that prefix exactly as it reads the whole URL: only plain prefixes (printable ASCII, no space,
backslash, ``?`` or ``#``, followed by a ``/``) are offered, every other URL keeps the full parse.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, NewType, TypeVar
from urllib.parse import SplitResult, urlsplit, urlunsplit

from w3lib.url import canonicalize_url

from crawlfleet.errors import InvalidURL, UnsupportedScheme
from crawlfleet.hosts import normalize_host

__all__ = [
    "DEFAULT_PORTS",
    "Authority",
    "CanonicalURL",
    "authority_of",
    "authority_prefix",
    "canonicalize",
    "host_of",
    "origin_of",
    "per_authority",
    "try_canonicalize",
]

CanonicalURL = NewType("CanonicalURL", str)

#: The schemes the crawl fetches, and the port each means when a URL names none.
DEFAULT_PORTS: Final[Mapping[str, int]] = MappingProxyType({"http": 80, "https": 443})
_MAX_URL_LENGTH: Final = 8192
# Characters that make urlsplit look past, or rewrite, a URL's scheme://netloc.
_SPECIAL: Final = frozenset(" \\?#")

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Authority:
    """Where an absolute http(s) URL points.

    ``host`` is as ``urlsplit`` reads it (lower case, IPv6 without brackets, not IDNA-mapped);
    ``port`` is the URL's, or its scheme's default.
    """

    scheme: str
    host: str
    port: int

    @property
    def netloc(self) -> str:
        """``host[:port]``, default port left out, IPv6 in brackets, as canonical URLs have it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        """``scheme://host[:port]``: the unit robots.txt applies to (RFC 9309)."""
        return f"{self.scheme}://{self.netloc}"


def authority_of(url: str) -> Authority:
    """Scheme, host and port of an absolute http(s) URL, from one parse.

    Raises :class:`UnsupportedScheme` for another scheme and :class:`InvalidURL` for a URL
    without a usable host or port; both messages name the URL.
    """
    return _split(url)[0]


def _split(url: str) -> tuple[Authority, SplitResult]:
    """The authority and the rest of ``url``, from one ``urlsplit``."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # unbalanced brackets
        raise InvalidURL(f"malformed URL {url[:200]!r}: {exc}") from exc
    scheme = parts.scheme  # lower case already
    default = DEFAULT_PORTS.get(scheme)
    if default is None:  # the most telling reason first: ftp://... is refused for its scheme
        raise UnsupportedScheme(f"only http and https URLs are crawled, not {url[:200]!r}")
    host = parts.hostname
    if not host:
        raise InvalidURL(f"URL has no host: {url[:200]!r}")
    try:
        port = parts.port
    except ValueError as exc:  # not a number, or out of range
        raise InvalidURL(f"malformed URL {url[:200]!r}: {exc}") from exc
    return Authority(scheme, host, default if port is None else port), parts


def authority_prefix(url: str) -> str | None:
    """``scheme://netloc`` when it stands for ``url``'s own, for answers per host; else None."""
    parts = url.split("/", 3)
    if len(parts) != 4 or parts[1]:
        return None
    prefix = f"{parts[0]}//{parts[2]}"
    if prefix.isascii() and prefix.isprintable() and _SPECIAL.isdisjoint(prefix):
        return prefix
    return None


def per_authority(
    compute: Callable[[str], _T], *, errors: type[Exception], maxsize: int
) -> Callable[[str], _T]:
    """``compute(url)`` answered from a cache of ``compute(prefix)`` where a prefix stands in.

    ``compute`` must depend on the URL's scheme and netloc only. When the prefix raises one
    of ``errors``, the whole URL is computed again, so that the error names the URL.
    """
    cached = functools.lru_cache(maxsize=maxsize)(compute)

    def answer(url: str) -> _T:
        prefix = authority_prefix(url)
        if prefix is not None:
            with contextlib.suppress(errors):
                return cached(prefix)
        return compute(url)

    return answer


def _origin(url: str) -> str:
    return authority_of(url).origin


#: ``scheme://host[:port]`` of a URL, default port dropped (:class:`InvalidURL` if it has
#: none). Asked before every fetch, for URLs of a few origins: cached per prefix.
origin_of: Final = per_authority(_origin, errors=InvalidURL, maxsize=1024)


@functools.lru_cache(maxsize=65536)
def canonicalize(url: str) -> CanonicalURL:
    """Return the canonical form of an absolute http(s) URL, or raise :class:`InvalidURL`."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidURL(f"not a URL: {url!r}")
    if len(url) > _MAX_URL_LENGTH:
        raise InvalidURL(f"URL longer than {_MAX_URL_LENGTH} characters: {url[:80]!r}...")
    authority, parts = _split(url.strip())
    try:
        host = normalize_host(authority.host)
    except ValueError as exc:
        raise InvalidURL(f"malformed host in URL {url[:200]!r}: {exc}") from exc
    netloc = Authority(authority.scheme, host, authority.port).netloc
    rebuilt = urlunsplit((authority.scheme, netloc, parts.path or "/", parts.query, ""))
    try:
        canonical = canonicalize_url(rebuilt, keep_fragments=False)
    except (ValueError, UnicodeError) as exc:
        raise InvalidURL(f"malformed URL {url[:200]!r}: {exc}") from exc
    if any(c in canonical for c in "\t\r\n "):
        raise InvalidURL(f"URL contains whitespace after canonicalisation: {url[:200]!r}")
    return CanonicalURL(canonical)


def try_canonicalize(url: str) -> CanonicalURL | None:
    """Like :func:`canonicalize` but returns None for a URL that cannot be crawled."""
    try:
        return canonicalize(url)
    except InvalidURL:
        return None


def host_of(url: CanonicalURL) -> str:
    """The host key of a canonical URL (``host[:port]``), the unit of politeness.

    A slice, not a parse: a canonical URL has no user-info and no default port, so its
    authority's ``netloc`` is the text between ``://`` and the first ``/`` or ``?``.
    """
    start = url.index("://") + 3
    end = len(url)
    for stop in "/?":
        i = url.find(stop, start)
        if i != -1 and i < end:
            end = i
    return url[start:end]
