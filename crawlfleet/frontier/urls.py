"""URL canonicalisation: one spelling per page before anything is hashed or queued.

w3lib's ``canonicalize_url`` does the hard part (percent-encoding, sorted query, dropped
fragment); we add what it leaves: the default port and user-info are removed, the host is
spelled by ``crawlfleet.hosts`` (IDNA 2008, as the CrawlJob model spells ``allowedDomains``;
w3lib would use Python's IDNA 2003 codec), and anything that is not an absolute http(s) URL
with a host is refused with :class:`InvalidURL`.
Results are cached because a crawl meets the same navigation links on every page.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NewType
from urllib.parse import urlsplit, urlunsplit

from w3lib.url import canonicalize_url

from crawlfleet.errors import InvalidURL
from crawlfleet.hosts import normalize_host

__all__ = ["CanonicalURL", "canonicalize", "host_of", "try_canonicalize"]

CanonicalURL = NewType("CanonicalURL", str)

_DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_URL_LENGTH = 8192


@lru_cache(maxsize=65536)
def canonicalize(url: str) -> CanonicalURL:
    """Return the canonical form of an absolute http(s) URL, or raise :class:`InvalidURL`."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidURL(f"not a URL: {url!r}")
    if len(url) > _MAX_URL_LENGTH:
        raise InvalidURL(f"URL longer than {_MAX_URL_LENGTH} characters: {url[:80]!r}...")
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        port = parts.port
    except ValueError as exc:  # bad port, bad IPv6 literal
        raise InvalidURL(f"malformed URL {url[:200]!r}: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InvalidURL(f"only http and https URLs can be crawled, not {url[:200]!r}")
    if not host:
        raise InvalidURL(f"URL has no host: {url[:200]!r}")
    try:
        host = normalize_host(host)
    except ValueError as exc:
        raise InvalidURL(f"malformed host in URL {url[:200]!r}: {exc}") from exc
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    rebuilt = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
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
    """The host key of a canonical URL (``host[:port]``), the unit of politeness."""
    start = url.index("://") + 3
    end = len(url)
    for stop in "/?":
        i = url.find(stop, start)
        if i != -1 and i < end:
            end = i
    return url[start:end]
