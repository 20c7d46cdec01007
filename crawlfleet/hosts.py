"""Host names spelled one way, for the CrawlJob model and the crawl alike.

An ``allowedDomains`` entry is compared with the hosts of the links a crawl finds, so the model
(``crawlfleet/crawljob/``), URL canonicalisation (``crawlfleet/urls.py``), link extraction and
the scope must spell a host the same way, or an allowed domain would never match its own links.
This module is that one spelling: lower case, no trailing dot, an IP address in its canonical text
(``::0001`` is ``::1``), and an internationalised name as IDNA 2008 A-labels after UTS #46
mapping (the ``idna`` package), as browsers and httpx do. Python's own ``"idna"`` codec is
IDNA 2003, which turns ``faß.de`` into ``fass.de``: another domain, with another owner.

``normalize_host`` maps; ``strict=True`` also refuses what a person should not write in a
CrawlJob (an underscore, an empty label, a bad A-label), while the crawl keeps following links
to such hosts as servers name them. The mapping is the same either way.

It imports nothing of crawlfleet's, so every layer can use it without an import cycle.
"""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Final

import idna

if TYPE_CHECKING:
    import tldextract

__all__ = [
    "MAX_HOST_LENGTH",
    "InvalidHost",
    "normalize_host",
    "registrable_domain",
    "split_host_port",
]

#: RFC 1035: a name of at most 253 characters in its dotted form.
MAX_HOST_LENGTH: Final = 253
_LDH_LABEL: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_MAX_PORT: Final = 65535


class InvalidHost(ValueError):
    """A host (or ``host:port``) that cannot be spelled; the message says which rule it breaks."""


def normalize_host(host: str, *, strict: bool = False) -> str:
    """The one spelling of ``host`` (a name or an IP address, without brackets or port).

    Raises ``InvalidHost`` when ``host`` cannot be spelled so: empty, or an internationalised
    name that IDNA 2008 refuses; with ``strict``, also a name that is not letters, digits and
    hyphens in labels of 1-63 characters (253 in all), or whose ``xn--`` labels do not decode.
    """
    host = host.removesuffix(".")
    if not host:
        raise InvalidHost("empty host")
    if ":" in host or host[-1].isdigit():  # IPv6 has colons; IPv4 (and no name) ends in a digit
        try:
            return str(ipaddress.ip_address(host))
        except ValueError:
            if ":" in host:
                raise InvalidHost(f"{host}: not an IPv6 address") from None
    if host.isascii():
        host = host.lower()
        if strict:
            _check_ascii_name(host)
        return host
    try:
        return idna.encode(host, uts46=True, transitional=False).decode("ascii")
    except idna.IDNAError as error:
        raise InvalidHost(f"{host}: {error}") from None


def split_host_port(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, a bare IPv6 address or ``[IPv6]:port``, as (host, port).

    The host comes back from ``normalize_host(strict=True)``; a port must be 1-65535.
    Raises ``InvalidHost`` otherwise.
    """
    port_text: str | None = None
    if entry.startswith("["):  # [IPv6] or [IPv6]:port
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or ":" not in host or (rest and not rest.startswith(":")):
            raise InvalidHost(f"{entry}: not [IPv6] or [IPv6]:port")
        port_text = rest[1:] if rest else None
    elif entry.count(":") == 1:  # host:port; more colons make a bare IPv6 address
        host, port_text = entry.split(":")
    else:
        host = entry
    port: int | None = None
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit() and 1 <= int(port_text) <= _MAX_PORT):
            raise InvalidHost(f"{entry}: the port must be a number from 1 to {_MAX_PORT}")
        port = int(port_text)
    return normalize_host(host, strict=True), port


def _check_ascii_name(host: str) -> None:
    if len(host) > MAX_HOST_LENGTH:
        raise InvalidHost(f"{host}: longer than {MAX_HOST_LENGTH} characters")
    for label in host.split("."):
        if not _LDH_LABEL.fullmatch(label):
            raise InvalidHost(
                f"{host}: a label must be 1-63 letters, digits and inner hyphens, not {label!r}"
            )
        if label.startswith("xn--"):
            try:
                idna.decode(label)
            except idna.IDNAError as error:
                raise InvalidHost(f"{host}: {error}") from None


@lru_cache(maxsize=65_536)
def registrable_domain(host: str) -> str:
    """The registrable domain of a spelled ``host`` (eTLD+1 by the Public Suffix List):
    ``www.example.co.uk`` is ``example.co.uk``. A host without one (an IP address,
    ``localhost``, a bare public suffix) is its own domain. Cached: a crawl meets the same
    hosts again and again."""
    if ":" in host or host[-1:].isdigit():
        return host  # an IP address (a name never ends in a digit: its TLD is letters)
    return _public_suffixes()(host).top_domain_under_public_suffix or host


@lru_cache(maxsize=1)
def _public_suffixes() -> tldextract.TLDExtract:
    """The Public Suffix List as tldextract bundles it: never fetched (a worker makes no
    request but its crawl's), private suffixes included, so each github.io or blogspot.com
    site is a domain of its own, as browsers treat them for cookies. Imported on first use:
    tldextract brings requests with it, 60 ms of every process's start that most jobs, without
    a domain budget, never need."""
    import tldextract

    return tldextract.TLDExtract(
        suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True
    )
