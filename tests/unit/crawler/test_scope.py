"""Unit tests for crawlfleet.crawler.links.scope: domains, ports, depth, include/exclude,
batches."""

from __future__ import annotations

import random
import time

import pytest

from crawlfleet.crawler.links.links import extract_links
from crawlfleet.crawler.links.scope import Scope, ScopeVerdict
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.errors import ConfigError
from crawlfleet.urls import canonicalize

V = ScopeVerdict


def scope(*domains: str, **kwargs: object) -> Scope:
    return Scope(allowed_domains=domains, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("domains", "url", "verdict"),
    [
        # a domain allows itself and its subdomains, at label boundaries only
        (("example.com",), "https://example.com/", None),
        (("example.com",), "https://www.example.com/a", None),
        (("example.com",), "https://a.b.example.com/a", None),
        (("example.com",), "https://EXAMPLE.COM./", None),
        (("example.com",), "https://badexample.com/", V.OUT_OF_DOMAIN),
        (("example.com",), "https://example.com.evil.net/", V.OUT_OF_DOMAIN),
        (("example.com",), "https://com/", V.OUT_OF_DOMAIN),
        (("www.example.com",), "https://example.com/", V.OUT_OF_DOMAIN),
        (("Example.COM.",), "http://www.example.com/", None),
        (("b\u00fccher.example",), "http://xn--bcher-kva.example/", None),
        (("b\u00fccher.example",), "http://shop.b\u00fccher.example/", None),
        # ports: an entry with a port allows only that port; without, any port
        (("127.0.0.2:8080",), "http://127.0.0.2:8080/", None),
        (("127.0.0.2:8080",), "http://127.0.0.2:8081/", V.OUT_OF_DOMAIN),
        (("127.0.0.2:8080",), "http://127.0.0.2/", V.OUT_OF_DOMAIN),
        (("127.0.0.2",), "http://127.0.0.2:9999/", None),
        (("example.com:443",), "https://example.com/", None),
        (("example.com:443",), "http://example.com/", V.OUT_OF_DOMAIN),
        (("example.com:8443",), "https://www.example.com:8443/", None),
        (("example.com:8443", "example.com:9443"), "https://example.com:9443/", None),
        (("example.com:8443", "example.com"), "https://example.com:1/", None),
        # IP hosts match exactly, never as a "parent domain"
        (("127.0.0.2",), "http://127.0.0.2/", None),
        (("127.0.0.2",), "http://127.0.0.3/", V.OUT_OF_DOMAIN),
        (("0.0.2",), "http://127.0.0.2/", V.OUT_OF_DOMAIN),
        (("::1",), "http://[::1]/", None),
        (("[::1]:8080",), "http://[::1]:8080/", None),
        (("[::1]:8080",), "http://[::1]:8081/", V.OUT_OF_DOMAIN),
        (("[0:0::0001]",), "http://[::1]/", None),
        (("2001:db8::1",), "http://[2001:db8:0::1]/x", None),
        # an empty list allows every host
        ((), "https://anything.example/", None),
    ],
)
def test_domains_and_ports(domains: tuple[str, ...], url: str, verdict: V | None) -> None:
    assert scope(*domains).check(url, 0) is verdict


@pytest.mark.parametrize(
    ("url", "verdict"),
    [
        ("ftp://example.com/", V.BAD_SCHEME),
        ("mailto:a@example.com", V.BAD_SCHEME),
        ("example.com/path", V.BAD_SCHEME),
        ("", V.BAD_SCHEME),
        ("http://[::1", V.INVALID_URL),
        ("http://example.com:99999/", V.INVALID_URL),
        ("http:///path", V.INVALID_URL),
    ],
)
def test_unusable_urls(url: str, verdict: V) -> None:
    assert scope("example.com").check(url, 0) is verdict


@pytest.mark.parametrize(
    ("max_depth", "depth", "verdict"),
    [
        (3, 0, None),
        (3, 3, None),
        (3, 4, V.TOO_DEEP),
        (0, 0, None),
        (0, 1, V.TOO_DEEP),
        (None, 99, None),
    ],
)
def test_depth(max_depth: int | None, depth: int, verdict: V | None) -> None:
    assert scope("example.com", max_depth=max_depth).check("https://example.com/", depth) is verdict


def test_syntax_and_scheme_come_before_depth() -> None:
    assert scope("example.com", max_depth=1).check("ftp://example.com/", 5) is V.BAD_SCHEME
    assert scope("example.com", max_depth=1).check("https://other.example/", 5) is V.TOO_DEEP


@pytest.mark.parametrize(
    ("include", "exclude", "url", "verdict"),
    [
        ((), (), "https://example.com/a", None),
        ((r"/blog/",), (), "https://example.com/blog/post", None),
        ((r"/blog/",), (), "https://example.com/shop/item", V.NOT_INCLUDED),
        ((r"/blog/", r"/news/"), (), "https://example.com/news/1", None),
        ((), (r"\.pdf$",), "https://example.com/doc.pdf", V.EXCLUDED),
        ((), (r"\.pdf$", r"[?&]sessionid="), "https://example.com/a?x=1&sessionid=2", V.EXCLUDED),
        ((), (r"\.pdf$",), "https://example.com/doc.html", None),
        ((r"/blog/",), (r"/blog/drafts/",), "https://example.com/blog/drafts/x", V.EXCLUDED),
        ((r"(?i)/BLOG/",), (), "https://example.com/blog/x", None),
        ((r"(?i)/BLOG/", r"/News/"), (), "https://example.com/news/x", V.NOT_INCLUDED),
        ((r"a|b",), (), "https://example.com/b", None),
        ((), (), "https://other.example/blog/", V.OUT_OF_DOMAIN),
    ],
)
def test_include_exclude(
    include: tuple[str, ...], exclude: tuple[str, ...], url: str, verdict: V | None
) -> None:
    assert scope("example.com", include=include, exclude=exclude).check(url, 1) is verdict


def test_domain_is_checked_before_patterns() -> None:
    checked = scope("example.com", exclude=(r"evil",))
    assert checked.check("https://evil.example/", 0) is V.OUT_OF_DOMAIN


def test_filter_batch() -> None:
    checked = scope("example.com", exclude=(r"\.pdf$",), max_depth=2)
    urls = [
        "https://example.com/a",
        "https://other.example/b",
        "https://www.example.com/c",
        "https://example.com/d.pdf",
        "ftp://example.com/e",
        "https://example.com/a",
    ]
    assert checked.filter(urls, 2) == (
        ["https://example.com/a", "https://www.example.com/c", "https://example.com/a"],
        {V.OUT_OF_DOMAIN: 1, V.EXCLUDED: 1, V.BAD_SCHEME: 1},
    )
    assert checked.filter(urls, 3) == ([], {V.TOO_DEEP: 6})
    assert checked.filter(iter(urls), 3) == ([], {V.TOO_DEEP: 6})
    assert checked.filter([], 0) == ([], {})


@pytest.mark.parametrize(
    ("kwargs", "field_name"),
    [
        ({"allowed_domains": ("example.com:0",)}, "scope.allowedDomains[0]"),
        ({"allowed_domains": ("ok.example", "host:port")}, "scope.allowedDomains[1]"),
        ({"allowed_domains": ("",)}, "scope.allowedDomains[0]"),
        ({"allowed_domains": ("[::1",)}, "scope.allowedDomains[0]"),
        ({"allowed_domains": ("[::1]x",)}, "scope.allowedDomains[0]"),
        ({"allowed_domains": ("a/b",)}, "scope.allowedDomains[0]"),
        ({"allowed_domains": "example.com"}, "scope.allowedDomains"),
        ({"allowed_domains": (), "include": ("(",)}, "scope.include[0]"),
        ({"allowed_domains": (), "exclude": ("ok", "[")}, "scope.exclude[1]"),
        ({"allowed_domains": (), "max_depth": -1}, "scope.maxDepth"),
        ({"allowed_domains": (), "max_pages": -1}, "scope.maxPages"),
    ],
)
def test_invalid_configuration(kwargs: dict[str, object], field_name: str) -> None:
    with pytest.raises(ConfigError, match=field_name.replace("[", r"\[").replace("]", r"\]")):
        Scope(**kwargs)  # type: ignore[arg-type]


def test_is_a_frozen_hashable_value() -> None:
    first = Scope(allowed_domains=["example.com"], include=["/a/"])  # type: ignore[arg-type]
    second = Scope(allowed_domains=("example.com",), include=("/a/",))
    assert first == second
    assert hash(first) == hash(second)
    assert first.allowed_domains == ("example.com",)
    assert first.max_depth == 3
    assert first.max_pages == 0
    with pytest.raises(AttributeError):
        first.max_depth = 5  # type: ignore[misc]


def test_allows_host_directly() -> None:
    checked = scope("example.com", "10.0.0.1:80")
    assert checked.allows_host("www.example.com", 443)
    assert checked.allows_host("10.0.0.1", 80)
    assert not checked.allows_host("10.0.0.1", 81)
    assert not checked.allows_host("", 80)


def test_filter_agrees_with_check() -> None:
    checked = scope("example.com", "10.0.0.1:8080", include=(r"/in/",), exclude=(r"/in/no",))
    hosts = ["example.com", "www.example.com", "evil.com", "10.0.0.1:8080", "10.0.0.1", "[::1"]
    paths = ["/in/yes", "/in/no", "/out"]
    urls = [
        f"{scheme}://{host}{path}" for scheme in ("http", "ftp") for host in hosts for path in paths
    ]
    kept, refused = checked.filter(urls, 1)
    assert kept == [url for url in urls if checked.check(url, 1) is None]
    assert sum(refused.values()) == len(urls) - len(kept)
    assert kept == [
        "http://example.com/in/yes",
        "http://www.example.com/in/yes",
        "http://10.0.0.1:8080/in/yes",
    ]


def test_remembered_host_verdicts_agree_with_splitting_each_url() -> None:
    scope = Scope(allowed_domains=("a.test", "127.0.0.2:8080", "[::1]"), max_depth=None)
    rng = random.Random(11)
    pieces = ["http://", "https://", "ftp://", "HTTP://", "a.test", "b.a.test", "xa.test",
              "127.0.0.2", ":8080", ":80", ":99999", "[::1]", "[::1", "u@", "/p", "?q"]  # fmt: skip
    for _ in range(5000):
        url = "".join(rng.choice(pieces) for _ in range(rng.randint(2, 5))) + "/x"
        expected = scope._split_verdict(url, None)
        for _ in range(2):  # the second time from the cache
            assert scope.check(url, 0) == expected, url


def test_two_include_patterns_naming_the_same_group_both_work() -> None:
    # Joined into one Python alternation they fail to compile ("redefinition of group name"),
    # and a worker that cannot build its scope dies and is respawned forever.
    checked = scope("example.com", include=(r"/book/(?P<id>\d+)", r"/author/(?P<id>\w+)"))
    assert checked.check("https://example.com/book/12", 1) is None
    assert checked.check("https://example.com/author/ann", 1) is None
    assert checked.check("https://example.com/shelf/1", 1) is V.NOT_INCLUDED


def test_a_pathological_pattern_costs_a_linear_scan() -> None:
    # (a+)+$ backtracks exponentially in Python's re on 'aaa…b': 2**n steps for n a's (n = 22 is
    # about a second, 8000 would never end). RE2 scans each URL once. The bound is relative to a
    # plain pattern's scan of the same URLs in the same run, and generous: a ratio near 1 is
    # expected, exponential time is millions.
    short = "https://example.com/" + "a" * 22 + "b"
    long = "https://example.com/" + "a" * 8000 + "b"
    pathological = scope("example.com", include=(r"(a+)+$",))
    plain = scope("example.com", include=(r"/zzz$",))

    def cost(checked: Scope, url: str) -> float:
        start = time.perf_counter()
        for _ in range(200):
            assert checked._check_url(url) is V.NOT_INCLUDED
        return time.perf_counter() - start

    for url in (short, long):  # the short one first: with backtracking it fails fast
        baseline = min(cost(plain, url) for _ in range(3))
        assert min(cost(pathological, url) for _ in range(3)) < 20 * baseline + 0.01


@pytest.mark.parametrize(
    ("domain", "link"),
    [
        ("fa\u00df.de", "http://fa\u00df.de/x"),
        ("fa\u00df.de", "http://shop.xn--fa-hia.de/x"),
        ("xn--fa-hia.de", "http://FA\u00df.de/x"),
        ("B\u00fccher.example", "http://b\u00fccher.example/x"),
    ],
)
def test_an_internationalised_allowed_domain_matches_its_own_links(domain: str, link: str) -> None:
    # The model, links and the scope spell hosts with crawlfleet.hosts (IDNA 2008): with
    # Python's IDNA 2003 codec, faß.de links became fass.de and never matched.
    spec = CrawlJobSpec.from_mapping({"seeds": ["http://seed.example/"], "scope": {
        "allowedDomains": [domain]}})  # fmt: skip
    checked = scope(*spec.scope.allowed_domains)
    extracted = extract_links(f'<a href="{link}">x</a>', "http://seed.example/").links
    assert len(extracted) == 1
    canonical = canonicalize(extracted[0])
    assert checked.check(canonical, 1) is None
    assert checked.check(link, 1) is None  # a raw URL (a redirect's Location) too


def test_idna_2003_spelling_is_another_domain() -> None:
    checked = scope("fa\u00df.de")
    assert checked.check("http://fass.de/", 1) is V.OUT_OF_DOMAIN


@pytest.mark.parametrize(
    ("path", "verdict"),
    [
        ("/a/b/c/d/e/f/page.html", None),  # 7 segments
        ("/a/b/c/d/e/f/g/h/", V.TOO_MANY_PATH_SEGMENTS),  # 9 (the trailing slash's empty one)
        ("/a/a/page.html", None),  # one segment twice in a row
        ("/a/a/a/page.html", V.REPEATED_PATH_SEGMENTS),  # three times
        ("/x/y/x/y/x/y/", V.REPEATED_PATH_SEGMENTS),  # a run of two, three times
        ("/x/y/x/y/", None),
        ("/a/b/a/b/a/", None),  # the last segment is a file, not a directory
        ("/a/a/?q=/b/b/b/b/", None),  # the query is not the path
        ("/cal/2024/1/cal/2024/2/", None),
    ],
)
def test_trap_rules(path: str, verdict: ScopeVerdict | None) -> None:
    checked = scope("example.com", max_path_segments=8, max_repeated_segments=2)
    assert checked.check("https://example.com" + path, 1) is verdict
    assert scope("example.com").check("https://example.com" + path, 1) is None  # rules off


def test_trap_rules_come_from_the_spec() -> None:
    spec = CrawlJobSpec.from_mapping({"seeds": ["https://example.com/"]})
    checked = Scope.from_spec(spec.scope)
    assert (checked.max_path_segments, checked.max_repeated_segments) == (20, 2)
    assert checked.check("https://example.com/s/s/s/", 1) is V.REPEATED_PATH_SEGMENTS
    assert checked.check("https://example.com" + "/s1/s2" * 11, 1) is V.TOO_MANY_PATH_SEGMENTS
