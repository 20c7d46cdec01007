"""Issue #13's queue of record: the frontier whose memory per queued URL is measured.

200,000 URLs of 76 characters on 1,000 hosts, parents of 61 characters on the host of their
links; ``links_per_page`` new links per parent page (50 is a site crawl's shape, 1 the worst
case for the compact layout: a parent entry per URL). Shared by the test that asserts the
figure and the benchmark that reports it.
"""

from __future__ import annotations

from crawlfleet.frontier import Link, canonicalize

__all__ = ["HOSTS", "URLS_PER_HOST", "queued_links"]

HOSTS = 1_000
URLS_PER_HOST = 200


def _url(host: int, number: int) -> str:
    base = f"https://www.site{host:04d}.example/articles/{number:07d}/"
    return base + "x" * (76 - len(base))


def _parent(host: int, page: int) -> str:
    base = f"https://www.site{host:04d}.example/index/{page:05d}/"
    return base + "p" * (61 - len(base))


def queued_links(links_per_page: int) -> list[Link]:
    """The 200,000 links, host after host, a page's links together."""
    return [
        Link(canonicalize(_url(host, i)), 1, _parent(host, i // links_per_page))
        for host in range(HOSTS)
        for i in range(URLS_PER_HOST)
    ]
