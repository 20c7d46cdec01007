"""``spec.scope``: which discovered links the crawl follows (domains, depth, budget, patterns).

An ``allowedDomains`` entry is spelled by ``crawlfleet.hosts``, as the crawl spells the hosts of
the links it compares them with; the URL patterns compile as the scope will compile them (RE2).
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import AfterValidator

from crawlfleet.crawljob.base import MaxLength, Range, Section
from crawlfleet.crawljob.dedup import MAX_CAPACITY
from crawlfleet.crawljob.fields import LIST_FROM_YAML, URLPatterns, unique
from crawlfleet.crawljob.validation import problem, show
from crawlfleet.hosts import split_host_port

__all__ = ["MAX_DOMAINS", "ScopeSpec"]

MAX_DOMAINS: Final = 1000
_MAX_DOMAIN_LENGTH: Final = 259  # a 253-character name and ":65535"
_MAX_DEPTH: Final = 1_000_000


def _allowed_domain(entry: str) -> str:
    """Normalise one allowedDomains entry: a host name or IP, optionally with ``:port``.

    ``crawlfleet.hosts`` spells it, as it spells the hosts of the links the scope compares it
    with (IDNA 2008: ``faß.de`` is ``xn--fa-hia.de``, never ``fass.de``).
    """
    try:
        host, port = split_host_port(entry)
    except ValueError:
        raise problem(
            f"must be a host name or IP address, optionally with :port (got {show(entry)})"
        ) from None
    if port is None:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_Domain = Annotated[str, MaxLength(_MAX_DOMAIN_LENGTH), AfterValidator(_allowed_domain)]


class ScopeSpec(Section):
    """Which links the crawl follows. Empty ``allowedDomains`` means the seed hosts."""

    allowed_domains: Annotated[
        tuple[_Domain, ...],
        LIST_FROM_YAML,
        MaxLength(MAX_DOMAINS),
        AfterValidator(unique),
    ] = ()
    """Hosts the crawl may visit. `example.com` allows it and every subdomain (`www.example.com`),
    not `badexample.com`; an IP address allows exactly that address; `host:port` allows only
    that port (a scheme's default port counts). Empty or unset: the hosts of the seeds."""
    max_depth: Annotated[int, Range(ge=0, le=_MAX_DEPTH)] = 3
    """How many links away from a seed the crawl goes: seeds are depth 0, the pages they link to
    depth 1, and so on. Links found on a page at this depth are not followed."""
    max_pages: Annotated[int, Range(ge=0, le=MAX_CAPACITY)] = 0
    """The most URLs the crawl admits, seeds included; each is fetched once (plus retries).
    0 means no limit: the crawl ends when scope runs out."""
    max_pages_per_host: Annotated[int, Range(ge=0, le=MAX_CAPACITY)] = 0
    """The most URLs the crawl admits of one host (``host[:port]``), seeds included; links
    past it are dropped with reason host_budget (counted, not queued), as Heritrix's queue
    budgets and Nutch's generate.max.count cap one site that would eat the crawl. 0 means no
    limit."""
    max_queued_per_host: Annotated[int, Range(ge=0, le=MAX_CAPACITY)] = 0
    """The most URLs queued for one host at a time: links past it are dropped with reason
    host_budget (counted, not added to the dedup filter), and admitted when they are met again
    after the host's queue has drained below it. Bounds what an endless calendar or forum
    can hold in the frontier. 0 means no limit."""
    max_pages_per_domain: Annotated[int, Range(ge=0, le=MAX_CAPACITY)] = 0
    """As maxPagesPerHost, for a registrable domain (eTLD+1 by the Public Suffix List):
    `www.example.co.uk`, `shop.example.co.uk` and `example.co.uk` share one budget of
    `example.co.uk`; an IP address is its own domain. 0 means no limit."""
    max_queued_per_domain: Annotated[int, Range(ge=0, le=MAX_CAPACITY)] = 0
    """As maxQueuedPerHost, for a registrable domain: bounds what a site spread over endless
    subdomains (a forum per user, a calendar per city) can hold in the frontier. 0 means no
    limit."""
    include: URLPatterns = ()
    """Regular expressions (RE2 syntax, as CEL's matches() uses) searched anywhere in a
    discovered URL: when any is given, a link must match one of them to be followed. Empty:
    every link in scope."""
    exclude: URLPatterns = ()
    """Regular expressions (RE2 syntax, as CEL's matches() uses) searched anywhere in a
    discovered URL: a link that matches any of them is dropped, even if it matches include."""
    allow_private_networks: bool = False
    """Allow fetching private, loopback and link-local addresses (checked after DNS and after
    every redirect). Off so that a crawl cannot reach services inside your network; cloud
    metadata addresses stay refused even when on."""
    respect_nofollow: bool = True
    """Skip links marked rel="nofollow", and every link of a page whose robots meta tag says
    nofollow or none."""
    max_links_per_page: Annotated[int, Range(ge=1, le=1_000_000)] = 6000
    """Most links taken from one page, in document order (Heritrix's default): a page of 200,000
    links must not flood the frontier. The rest are counted as dropped (reason link_cap)."""
    max_path_segments: Annotated[int, Range(ge=0, le=1000)] = 20
    """Longest URL path followed, in segments (/a/b/c has 3): deeper paths are nearly always a
    crawler trap. 0: no limit."""
    max_repeated_segments: Annotated[int, Range(ge=0, le=100)] = 2
    """Most times one path segment, or a run of them, may appear in a row (/a/a/ is 2): a link
    such as href="a/" on every page makes /a/a/a/... forever. 0: no limit."""
    sitemaps: bool = False
    """Also crawl what the seed hosts' sitemaps list: the Sitemap: lines of each seed host's
    robots.txt and its /sitemap.xml, sitemap indexes and gzip'd sitemaps included, within fixed
    bounds (docs/crawljob.md, Sitemaps). Listed URLs pass scope, robots and dedup like links;
    a listed URL's lastmod is kept on its page record."""
