"""Deterministic link graph and HTML rendering for the crawler test site.

Everything here is a pure function of ``(SiteConfig, netlocs)``: two graphs built from the same
config and the same netlocs render byte-identical pages.  That is what lets integration tests
compute, *before* crawling, exactly which URLs a correct crawler must fetch
(:meth:`SiteGraph.expected_pages`) and which hostile URLs it will meet
(:meth:`SiteGraph.specials`).

The graph is kept apart from the HTTP server so it can be unit-tested without sockets and so
the server stays a thin, fast byte-pusher over bodies rendered here.

Shape of the graph
------------------
* Host ``h`` (``0 <= h < hosts``) has ``pages_per_host`` normal pages.  Page 0 is ``/``,
  page ``i > 0`` is ``/d{i % 7}/p{i}.html`` (several directories so that ``../x`` links mean
  something).  Any other path is not a normal page (the server answers 404 unless it is a
  special path).
* Page ``i`` links to its children ``B*i+1 .. B*i+B`` in a ``B``-ary tree
  (``B = min(4, links_per_page)``) -- this spanning tree is what guarantees every page is
  reachable from ``/`` with a depth of about ``log_B(pages_per_host)`` -- and fills the rest of
  its ``links_per_page`` slots with seeded random links: with probability
  ``cross_host_link_ratio`` to a random page of another in-scope host, otherwise to a random
  page of its own host.
* The out-of-scope host (index ``hosts``) has the same shape but only links to itself.  In
  hostile mode some in-scope pages link to it; a correct crawler never requests it.
* With ``navigation_links = N`` every normal page also links pages ``1..N`` of its own host
  from its ``<nav>``, always spelled the same (root-relative paths): a site menu, which makes
  most of a crawl's links repeats.
* Nofollow links in normal pages always point at the host root ``/`` (a depth-0 seed), so
  whether a crawler honours ``rel="nofollow"`` never changes :meth:`expected_pages`.  A
  dedicated ``/nofollow/only`` page (hostile mode) is linked *only* with ``rel="nofollow"``.
"""

from __future__ import annotations

import posixpath
import random
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields

from crawlfleet.testsite.feeds import FEED_HEAD_LINKS

__all__ = [
    "DIRECTORIES",
    "MAX_TREE_BRANCHING",
    "METADATA_URL",
    "REFUSED_PREFIX",
    "PageRef",
    "SiteConfig",
    "SiteGraph",
    "SpecialUrls",
    "page_path",
]

#: Number of ``/dN/`` directories normal pages are spread over.
DIRECTORIES = 7
#: Upper bound on the spanning-tree fan-out (keeps depth small but not trivial).
MAX_TREE_BRANCHING = 4

#: Where ``refusal_links_per_page`` links lead: a path every host's robots.txt then disallows,
#: and a cloud metadata address (the address guard refuses it even with allowPrivateNetworks).
REFUSED_PREFIX = "/search/"
METADATA_URL = "http://169.254.169.254/latest/meta-data/"

#: (host index, page index).  Host index ``config.hosts`` is the out-of-scope host.
PageRef = tuple[int, int]

_POOL_SIZE = 97  # prime, so index arithmetic below cycles through the whole pool

# One string split at import: a 50-line tuple literal would drown the module.
_WORDS_TEXT = """
    crawler frontier politeness robots fetch parse queue worker redis shard lease
    backoff retry latency throughput bandwidth archive snapshot canonical fragment
    anchor sitemap scheduler budget depth breadth host domain scope filter dedupe
    bloom fingerprint content charset encoding café naïve résumé document paragraph
    hyperlink navigation footer header article section sidebar index catalogue
"""
_WORDS = tuple(_WORDS_TEXT.split())


@dataclass(frozen=True)
class SiteConfig:
    """Parameters of a test site; frozen so a running site can never drift from its graph."""

    #: Number of in-scope virtual hosts (127.0.0.2, 127.0.0.3, ...).
    hosts: int = 3
    #: Normal pages per host (the out-of-scope host gets the same number).
    pages_per_host: int = 60
    #: Normal-page links per page (tree children + random links; decorations come on top).
    links_per_page: int = 8
    #: Seed of the random part of the graph.
    seed: int = 1
    #: Probability that a random link goes to another in-scope host.
    cross_host_link_ratio: float = 0.2
    #: Link hostile/special URLs from normal pages, link the out-of-scope host, add mailto:
    #: and javascript: links, and serve the restrictive robots.txt files.  Off = a plain
    #: benchmark site where every link leads to a normal page and robots allow everything.
    hostile: bool = True
    #: With ``hostile``: also link ``/slow`` and ``/hang`` (costs crawlers a timeout).
    hostile_slow: bool = True
    #: With ``hostile``: also link ``/big`` and ``/bomb`` (costs crawlers bandwidth/CPU).
    hostile_heavy: bool = True
    #: Every in-scope host serves an RSS and an Atom feed listing pages no page links, and
    #: every normal page announces both with ``<link rel="alternate">`` (testsite/feeds.py).
    feeds: bool = False
    #: ``Crawl-delay`` advertised in host 1's robots.txt (``None`` = no Crawl-delay line).
    crawl_delay_seconds: float | None = None
    #: Extra latency added before every response (simulates a slow origin).
    latency_seconds: float = 0.0
    #: Serve a request to its end even when its client hangs up (an origin behind a proxy
    #: does): the concurrency gauges then count a killed crawler's requests as long as the
    #: site works on them. Off: a hang-up cancels the handler at once.
    finish_abandoned_requests: bool = False
    #: ``/flaky/<n>`` answers 500 this many times per path before healing.
    flaky_failures: int = 2
    #: ``/ratelimited`` answers 429 this many times before serving a page.
    ratelimit_failures: int = 2
    #: ``Retry-After`` value sent with the 429s of ``/ratelimited``.
    retry_after_seconds: int = 1
    #: Delay before ``/slow`` answers.
    slow_seconds: float = 1.5
    #: Size of the ``/big`` body.
    big_bytes: int = 32 * 1024 * 1024
    #: Pause after each 64 KiB write of ``/big`` and ``/big.bin`` (0: as fast as the socket).
    big_write_delay_seconds: float = 0.0
    #: Inflated size of the ``/bomb`` body; must be a multiple of 1 MiB.
    bomb_inflated_bytes: int = 1 << 30
    #: Every host's robots.txt answers 503 this many times before its real answer.
    robots_failures: int = 0
    #: ``Retry-After`` (seconds) sent with those 503s; None: no header.
    robots_retry_after_seconds: int | None = None
    #: Every host's robots.txt never answers (the request hangs until the client gives up).
    robots_hang: bool = False
    #: ``/trickle`` sends one body byte this often, forever.
    trickle_interval_seconds: float = 15.0
    #: Links every normal page of every in-scope host has into paths that the host's
    #: robots.txt disallows (``/search/<page>-<k>``, as real sites disallow their search,
    #: login and edit links), plus, when above 0, one link to a cloud metadata address that
    #: the address guard refuses whatever the job allows: refusals decided before any request.
    refusal_links_per_page: int = 0
    #: Hosts whose robots.txt answers 503 for ever (unavailable: their pages are given up).
    robots_down_hosts: tuple[int, ...] = ()
    #: Hosts whose normal pages send an ``ETag`` and answer a matching ``If-None-Match`` with
    #: 304; and those that do the same with ``Last-Modified`` (crawlfleet/testsite/revisions.py).
    etag_hosts: tuple[int, ...] = ()
    last_modified_hosts: tuple[int, ...] = ()
    #: Every normal page links, in its ``<nav>``, the same pages ``1..navigation_links`` of its
    #: own host by their root-relative paths, as a site's menu does: the site on which a
    #: worker's local layer of dedup answers most link checks (issue #25). 0: no menu.
    navigation_links: int = 0

    def __post_init__(self) -> None:
        # Fail at construction, not half-way through a test with a confusing server error.
        if not 1 <= self.hosts <= 200:
            raise ValueError("hosts must be in 1..200")
        if self.pages_per_host < 1:
            raise ValueError("pages_per_host must be >= 1")
        if self.links_per_page < 1:
            raise ValueError("links_per_page must be >= 1 (pages must stay reachable)")
        if not 0.0 <= self.cross_host_link_ratio <= 1.0:
            raise ValueError("cross_host_link_ratio must be in [0, 1]")
        if self.crawl_delay_seconds is not None and self.crawl_delay_seconds < 0:
            raise ValueError("crawl_delay_seconds must be >= 0")
        if self.latency_seconds < 0 or self.slow_seconds < 0:
            raise ValueError("latencies must be >= 0")
        if self.flaky_failures < 0 or self.ratelimit_failures < 0:
            raise ValueError("failure counts must be >= 0")
        if self.big_bytes < 0:
            raise ValueError("big_bytes must be >= 0")
        if self.bomb_inflated_bytes <= 0 or self.bomb_inflated_bytes % (1 << 20):
            raise ValueError("bomb_inflated_bytes must be a positive multiple of 1 MiB")
        if self.robots_failures < 0 or self.trickle_interval_seconds <= 0:
            raise ValueError("robots_failures must be >= 0, trickle_interval_seconds > 0")
        if self.refusal_links_per_page < 0:
            raise ValueError("refusal_links_per_page must be >= 0")
        if any(not 0 <= host < self.hosts for host in self.robots_down_hosts):
            raise ValueError("robots_down_hosts must name in-scope hosts (0..hosts-1)")
        if any(
            not 0 <= host < self.hosts for host in (*self.etag_hosts, *self.last_modified_hosts)
        ):
            raise ValueError("etag_hosts and last_modified_hosts must name in-scope hosts")
        if self.robots_retry_after_seconds is not None and self.robots_retry_after_seconds < 0:
            raise ValueError("robots_retry_after_seconds must be >= 0")
        if not 0 <= self.navigation_links < self.pages_per_host:
            raise ValueError("navigation_links must be in 0..pages_per_host-1")


@dataclass(frozen=True)
class SpecialUrls:
    """Absolute URLs of special pages that normal pages link to, grouped by what they test.

    Only URLs that are actually *linked* appear (so an empty set means "a crawl will not meet
    this"); every field is empty when ``SiteConfig.hostile`` is off.
    """

    #: ``/status/404``, ``/status/410`` -- must be fetched once, never retried.
    permanent_failures: frozenset[str] = frozenset()
    #: ``/ratelimited``, ``/flaky/<n>`` -- fail a few times, then serve a page.
    healing: frozenset[str] = frozenset()
    #: ``/calendar/2024/1``, ``/redirect/loop/a`` -- infinite spaces a crawler must bound.
    traps: frozenset[str] = frozenset()
    #: ``/redirect/chain/3`` -- a finite redirect chain ending at a page.
    redirects: frozenset[str] = frozenset()
    #: ``/slow``, ``/hang`` -- late or never answering.
    slow: frozenset[str] = frozenset()
    #: ``/empty`` -- 200 with an empty body.
    soft_blocks: frozenset[str] = frozenset()
    #: ``/big``, ``/bomb`` -- body-size limits.
    oversized: frozenset[str] = frozenset()
    #: ``/file.pdf`` -- non-HTML content.
    non_html: frozenset[str] = frozenset()
    #: ``/private/secret`` -- disallowed by host 0's robots.txt.
    robots_disallowed: frozenset[str] = frozenset()
    #: ``/nofollow/only`` -- linked only with ``rel="nofollow"``.
    nofollow_only: frozenset[str] = frozenset()
    #: Pages of the out-of-scope host.
    out_of_scope: frozenset[str] = frozenset()
    #: Link-local / private / non-HTTP URLs that must never be fetched.
    unsafe: frozenset[str] = frozenset()

    def all(self) -> frozenset[str]:
        """Union of every category (handy for "the crawl fetched nothing else" checks)."""
        out: set[str] = set()
        for f in fields(self):
            out |= getattr(self, f.name)
        return frozenset(out)


def page_path(index: int) -> str:
    """Path of normal page ``index`` (same scheme on every host)."""
    if index == 0:
        return "/"
    return f"/d{index % DIRECTORIES}/p{index}.html"


def _relative(target: str, base_dir: str) -> str:
    """Relative reference from directory ``base_dir`` (no trailing slash) to ``target``."""
    if base_dir == "/":
        return "./" if target == "/" else target[1:]
    if target == "/":
        return "../"
    head, _, name = target.rpartition("/")
    if head == base_dir:
        return name
    if base_dir.count("/") == 1:  # one level deep, which is all the site uses
        return ".." + target
    rel = posixpath.relpath(target, base_dir)
    return rel + "/" if target.endswith("/") else rel


def _filler(rng: random.Random, paragraphs: int, words: int) -> str:
    """Deterministic prose so bodies are realistic and comfortably above soft-block sizes."""
    out = []
    for _ in range(paragraphs):
        text = " ".join(rng.choices(_WORDS, k=words))
        out.append(f"<p>{text.capitalize()}.</p>\n")
    return "".join(out)


class SiteGraph:
    """The page graph of one site, bound to the netlocs the server actually listens on.

    ``netlocs[h]`` is the ``host:port`` of in-scope host ``h``; ``out_of_scope_netloc`` is the
    extra host.  Construction precomputes only the link structure (cheap); HTML is rendered on
    demand by :meth:`render_page` and cached by the server.
    """

    def __init__(
        self, config: SiteConfig, netlocs: Sequence[str], out_of_scope_netloc: str
    ) -> None:
        if len(netlocs) != config.hosts:
            raise ValueError(f"need {config.hosts} netlocs, got {len(netlocs)}")
        self.config = config
        self.netlocs: tuple[str, ...] = (*netlocs, out_of_scope_netloc)
        #: Host index of the out-of-scope host.
        self.out_of_scope_index = config.hosts
        #: In-scope host whose robots.txt is missing (404), or ``None``.
        self.robots_missing_host: int | None = (
            config.hosts - 1 if config.hostile and config.hosts >= 3 else None
        )
        self._links = self._build_links()
        # A pool of prose paragraphs picked per page by index arithmetic: rendering stays
        # deterministic and cheap (no per-page RNG), which matters for benchmark warm-up.
        pool_rng = random.Random(config.seed)
        self._paragraphs = tuple(_filler(pool_rng, 1, 30 + n % 17) for n in range(_POOL_SIZE))
        #: host-0 page index -> [(category, href, rel, absolute url)] of special links.
        self._special_links: dict[int, list[tuple[str, str, str, str]]] = {}
        #: (host, page index) -> out-of-scope page index it links to.
        self._oos_links: dict[PageRef, int] = {}
        if config.hostile:
            self._build_hostile_links()

    # ------------------------------------------------------------------ structure

    @property
    def pages_per_host(self) -> int:
        """Normal pages on each host (the out-of-scope host included)."""
        return self.config.pages_per_host

    @property
    def page_count(self) -> int:
        """Number of in-scope normal pages (all of them are reachable from the seeds)."""
        return self.config.hosts * self.config.pages_per_host

    def url(self, host: int, path: str) -> str:
        """Absolute URL of ``path`` on host index ``host`` (``hosts`` = out-of-scope host)."""
        return f"http://{self.netlocs[host]}{path}"

    def page_url(self, ref: PageRef) -> str:
        """Absolute URL of normal page ``ref``."""
        return self.url(ref[0], page_path(ref[1]))

    def seeds(self) -> list[str]:
        """The crawl seeds: ``/`` of every in-scope host, host 0 first."""
        return [self.url(h, "/") for h in range(self.config.hosts)]

    def links(self, ref: PageRef) -> tuple[PageRef, ...]:
        """Normal-page links of page ``ref`` (tree children first, then random links)."""
        return self._links[ref[0]][ref[1]]

    def navigation(self, host: int) -> tuple[PageRef, ...]:
        """The menu every normal page of ``host`` links (``SiteConfig.navigation_links``)."""
        return tuple((host, index) for index in range(1, self.config.navigation_links + 1))

    def _build_links(self) -> list[list[tuple[PageRef, ...]]]:
        cfg = self.config
        rng = random.Random(cfg.seed)
        n = cfg.pages_per_host
        branching = min(MAX_TREE_BRANCHING, cfg.links_per_page)
        others = cfg.hosts - 1
        out: list[list[tuple[PageRef, ...]]] = []
        for h in range(cfg.hosts + 1):
            in_scope = h < cfg.hosts
            per_host: list[tuple[PageRef, ...]] = []
            for i in range(n):
                first = branching * i + 1
                targets: list[PageRef] = [(h, c) for c in range(first, min(first + branching, n))]
                while len(targets) < cfg.links_per_page:
                    th = h
                    if in_scope and others and rng.random() < cfg.cross_host_link_ratio:
                        th = rng.randrange(others)
                        th += th >= h  # skip our own index
                    targets.append((th, rng.randrange(n)))
                per_host.append(tuple(targets))
            out.append(per_host)
        return out

    def _build_hostile_links(self) -> None:
        cfg = self.config
        n = cfg.pages_per_host
        h0 = self.netlocs[0]
        slots: dict[int, list[tuple[str, str, str, str]]] = {}

        def add(slot: int, category: str, href: str, rel: str = "") -> None:
            absolute = href if "://" in href else f"http://{h0}{href}"
            slots.setdefault(slot % n, []).append((category, href, rel, absolute))

        add(1, "permanent_failures", "/status/404")
        add(1, "permanent_failures", f"http://{h0}/status/410")
        add(1, "robots_disallowed", "/private/secret")
        add(1, "non_html", "/file.pdf")
        add(2, "healing", "/ratelimited")
        add(2, "healing", "/flaky/0")
        add(2, "healing", "/flaky/1")
        add(2, "soft_blocks", "/empty")
        add(3, "redirects", "/redirect/chain/3")
        add(3, "traps", "/redirect/loop/a")
        add(3, "traps", "/calendar/2024/1")
        add(3, "nofollow_only", "/nofollow/only", "nofollow")
        if cfg.hostile_slow:
            add(4, "slow", "/slow")
            add(4, "slow", "/hang")
        if cfg.hostile_heavy:
            add(4, "oversized", "/big")
            add(4, "oversized", "/bomb")
        add(4, "unsafe", "http://169.254.169.254/latest/meta-data/")
        add(4, "unsafe", "http://10.0.0.1/")
        add(4, "unsafe", f"ftp://{self.netlocs[0].split(':')[0]}/x")
        self._special_links = slots

        for h in range(cfg.hosts):
            for i in range(n):
                if (h + i) % 7 == 3 or (h == 0 and i == 1 % n):
                    self._oos_links[(h, i)] = (i * 7 + h) % n

    # ------------------------------------------------------------------ expectations

    def expected_refs(self, max_depth: int | None = None) -> dict[PageRef, int]:
        """BFS depth of every in-scope normal page within ``max_depth`` of the seeds."""
        depth: dict[PageRef, int] = {(h, 0): 0 for h in range(self.config.hosts)}
        queue: deque[PageRef] = deque(depth)
        while queue:
            ref = queue.popleft()
            d = depth[ref]
            if max_depth is not None and d >= max_depth:
                continue
            for target in (*self._links[ref[0]][ref[1]], *self.navigation(ref[0])):
                if target not in depth:
                    depth[target] = d + 1
                    queue.append(target)
        return depth

    def expected_pages(self, max_depth: int | None = None) -> dict[str, int]:
        """``{absolute url: BFS depth}`` of the normal pages a correct crawl must fetch.

        Seeds are depth 0; only links between normal in-scope pages count (special pages,
        nofollow-only pages and the out-of-scope host are excluded -- see :meth:`specials`).
        ``max_depth=None`` means unlimited, which yields every in-scope page.
        """
        return {self.page_url(ref): d for ref, d in self.expected_refs(max_depth).items()}

    def specials(self) -> SpecialUrls:
        """Special URLs linked from normal pages, by category (empty if not hostile)."""
        groups: dict[str, set[str]] = {}
        for entries in self._special_links.values():
            for category, _href, _rel, absolute in entries:
                groups.setdefault(category, set()).add(absolute)
        oos = self.out_of_scope_index
        groups["out_of_scope"] = {self.page_url((oos, t)) for t in self._oos_links.values()}
        return SpecialUrls(**{k: frozenset(v) for k, v in groups.items()})

    def permanent_failure_urls(self) -> frozenset[str]:
        return self.specials().permanent_failures

    def healing_urls(self) -> frozenset[str]:
        return self.specials().healing

    def trap_urls(self) -> frozenset[str]:
        return self.specials().traps

    # ------------------------------------------------------------------ rendering

    def _href(self, host: int, index: int, k: int, target: PageRef, base_dir: str) -> str:
        """One link in one of several syntactic forms, chosen deterministically."""
        th, ti = target
        path = page_path(ti)
        if th != host:
            netloc = self.netlocs[th]
            return f"http://{netloc}{path}" if (index + k) % 2 == 0 else f"//{netloc}{path}"
        form = (index + k) % 5
        if form == 0:
            return f"http://{self.netlocs[host]}{path}"
        if form == 1:
            return path
        if form == 2:
            return _relative(path, base_dir)
        if form == 3:
            return f"{path}#s{k}"
        rel = _relative(path, base_dir)
        if not rel.startswith("."):
            rel = "./" + rel
        return f"{rel}#s{k}"

    def render_page(self, host: int, index: int) -> bytes:
        """HTML of normal page ``index`` of host ``host`` (deterministic)."""
        cfg = self.config
        netloc = self.netlocs[host]
        path = page_path(index)
        pool = self._paragraphs
        prose = (
            pool[(index * 3 + host) % _POOL_SIZE],
            pool[(index * 5 + host * 7 + 1) % _POOL_SIZE],
        )
        doc_dir = posixpath.dirname(path)
        base_tag = ""
        base_dir = doc_dir
        if index % 6 == 5:
            # A <base> in a different directory than the document: crawlers that ignore it
            # resolve the relative links below to paths that 404.
            base_dir = f"/d{(index + 3) % DIRECTORIES}"
            href = f"http://{netloc}{base_dir}/" if index % 12 == 5 else f"{base_dir}/"
            base_tag = f'<base href="{href}">\n'
        site = "Out-of-scope site" if host == self.out_of_scope_index else f"Site {host}"
        title = f"{site} - page {index}"
        parts = [
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
            f"<title>{title}</title>\n",
            f'<meta name="crawlfleet-page" content="{host}:{index}">\n',
            base_tag,
            FEED_HEAD_LINKS if cfg.feeds else "",
            "</head>\n<body>\n<header><nav>",
            '<a href="/">Home</a> ',
            # Fragment-only links resolve against <base>, so only where there is none.
            "" if base_tag else '<a href="#main">Skip to content</a> ',
            "<a>No href</a>",
            *(
                f' <a href="{page_path(target)}">Section {target}</a>'
                for _host, target in self.navigation(host)
            ),
            "</nav></header>\n",
            f'<main id="main">\n<h1>{title}</h1>\n',
            prose[0],
            "<ul>\n",
        ]
        targets = self._links[host][index]
        hrefs = []
        for k, target in enumerate(targets):
            href = self._href(host, index, k, target, base_dir)
            hrefs.append(href)
            q = "'" if k % 4 == 3 else '"'
            parts.append(
                f"<li><a href={q}{href}{q}>Page {target[1]} of site {target[0]}</a></li>\n"
            )
        parts.append("</ul>\n")
        if cfg.refusal_links_per_page and host != self.out_of_scope_index:
            parts.append('<ul class="tools">\n')
            for k in range(cfg.refusal_links_per_page):
                parts.append(f'<li><a href="{REFUSED_PREFIX}{index}-{k}">Search {k}</a></li>\n')
            parts.append(f'<li><a href="{METADATA_URL}{host}-{index}">Instance</a></li>\n</ul>\n')
        parts.append(prose[1])
        # Duplicates: the first link again verbatim, and again with another fragment.
        parts.append(
            f'<p>See also <a href="{hrefs[0]}">the first link again</a> and '
            f'<a href="{hrefs[0].partition("#")[0]}#related">its related section</a>.</p>\n'
        )
        specials = self._special_links.get(index, []) if host == 0 else []
        if specials:
            parts.append('<section class="specials"><h2>Elsewhere</h2>\n<ul>\n')
            for _category, href, rel, _absolute in specials:
                rel_attr = f' rel="{rel}"' if rel else ""
                parts.append(f'<li><a href="{href}"{rel_attr}>{href}</a></li>\n')
            parts.append("</ul></section>\n")
        oos_target = self._oos_links.get((host, index))
        if oos_target is not None:
            oos_url = self.page_url((self.out_of_scope_index, oos_target))
            parts.append(f'<p>Visit our <a href="{oos_url}">partner site</a>.</p>\n')
        parts.append("</main>\n<footer>")
        if index % 4 == 1:
            parts.append('<a rel="nofollow" href="/">Sign in</a> ')
        if cfg.hostile:
            parts.append(
                '<a href="mailto:webmaster@example.invalid">Contact</a> '
                '<a href="javascript:void(0)">Print</a> '
            )
        parts.append("" if base_tag else '<a href="#main">Top</a>')
        parts.append("</footer>\n</body>\n</html>\n")
        return "".join(parts).encode()

    def render_leaf(self, host: int, path: str, title: str) -> bytes:
        """A normal-looking page with a single link home, for special paths that answer 200."""
        rng = random.Random(zlib.crc32(f"{self.config.seed}:{host}:{path}".encode()))
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n"
            f"{_filler(rng, 3, 40)}"
            '<p><a href="/">Back to the home page</a></p>\n</body>\n</html>\n'
        ).encode()

    def render_calendar(self, host: int, year: int, month: int) -> bytes:
        """An infinite-trap calendar page linking to the previous and next month."""
        prev_y, prev_m = (year - 1, 12) if month == 1 else (year, month - 1)
        next_y, next_m = (year + 1, 1) if month == 12 else (year, month + 1)
        title = f"Calendar {year:04d}-{month:02d}"
        rng = random.Random(year * 12 + month)
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n"
            f"{_filler(rng, 3, 40)}"
            f'<p><a href="/calendar/{prev_y}/{prev_m}">Previous month</a> | '
            f'<a href="/calendar/{next_y}/{next_m}">Next month</a> | '
            '<a href="/">Home</a></p>\n</body>\n</html>\n'
        ).encode()

    def robots_txt(self, host: int) -> bytes | None:
        """robots.txt body of ``host``, or ``None`` when that host has no robots (404)."""
        cfg = self.config
        if host == self.robots_missing_host:
            return None
        lines = ["User-agent: *"]
        if host == 1 and cfg.crawl_delay_seconds is not None:
            lines.append(f"Crawl-delay: {cfg.crawl_delay_seconds:g}")
        if host == 0 and cfg.hostile:
            lines.append("Disallow: /private/")
        elif not cfg.refusal_links_per_page:
            lines.append("Disallow:")
        if cfg.refusal_links_per_page:
            lines.append(f"Disallow: {REFUSED_PREFIX}")
        return ("\n".join(lines) + "\n").encode()

    def iter_refs(self) -> Iterator[PageRef]:
        """Every normal page of every host, out-of-scope host included."""
        for h in range(self.config.hosts + 1):
            for i in range(self.config.pages_per_host):
                yield (h, i)
