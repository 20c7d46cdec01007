"""Canonicalisation gives one spelling per page and refuses what cannot be crawled."""

from __future__ import annotations

import pytest

from crawlfleet.errors import InvalidURL, UnsupportedScheme
from crawlfleet.frontier.keys import JobKeys
from crawlfleet.urls import authority_of, canonicalize, host_of


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("HTTP://Example.COM/a", "http://example.com/a"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/", "https://example.com/"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        ("http://example.com/a?b=2&a=1", "http://example.com/a?a=1&b=2"),
        ("http://example.com/a#frag", "http://example.com/a"),
        ("http://user:pw@example.com/", "http://example.com/"),
        ("http://example.com", "http://example.com/"),
        ("http://example.com/a b", "http://example.com/a%20b"),
        ("  http://example.com/x  ", "http://example.com/x"),
        ("http://[::1]:8080/", "http://[::1]:8080/"),
        ("http://[0:0::0001]/", "http://[::1]/"),
        # IDNA 2008 / UTS 46, as the model spells allowedDomains: never IDNA 2003's fass.de
        ("http://fa\u00df.de/", "http://xn--fa-hia.de/"),
        ("http://B\u00fccher.Example/x", "http://xn--bcher-kva.example/x"),
        ("http://example.com./x", "http://example.com/x"),
    ],
)
def test_canonical_form(raw: str, expected: str) -> None:
    assert canonicalize(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "ftp://example.com/",
        "mailto:a@example.com",
        "javascript:alert(1)",
        "//example.com/",
        "/relative/path",
        "http://",
        "http://[::1",
        "http://example.com:99999/",
        "http://example.com/" + "a" * 9000,
        "http://\U0001f4a9.la/",  # IDNA 2008 has no emoji
    ],
)
def test_uncrawlable_urls_refused(raw: str) -> None:
    with pytest.raises(InvalidURL):
        canonicalize(raw)


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://example.com/a", "example.com"),
        ("http://example.com:8080/a?x", "example.com:8080"),
        ("http://example.com?x=1", "example.com"),
        ("http://[::1]:8080/", "[::1]:8080"),
    ],
)
def test_host_of(url: str, host: str) -> None:
    assert host_of(canonicalize(url)) == host


def test_keys_share_one_hash_tag() -> None:
    keys = JobKeys("default.my-crawl")
    names = [
        *keys.script_keys(),
        keys.bloom_segment(0, 0),
        keys.bloom_segment(1, 2),
        keys.queue("a.com:81", 1),
        keys.native_bloom,
    ]
    assert all(name.startswith("cf:{default.my-crawl}:") for name in names)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("job_id", ["", "Bad.Name", "a{b}.c", "ns/name", "x" * 400])
def test_job_id_refused(job_id: str) -> None:
    with pytest.raises(ValueError, match="job id"):
        JobKeys(job_id)


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port", "netloc"),
    [
        ("http://a.test/x", "http", "a.test", 80, "a.test"),
        ("HTTPS://A.Test/x", "https", "a.test", 443, "a.test"),
        ("https://a.test:443/", "https", "a.test", 443, "a.test"),
        ("http://a.test:8080", "http", "a.test", 8080, "a.test:8080"),
        ("http://u:p@a.test:81/?q", "http", "a.test", 81, "a.test:81"),
        ("http://[::1]:8080/", "http", "::1", 8080, "[::1]:8080"),
    ],
)
def test_authority_fills_the_default_port(
    url: str, scheme: str, host: str, port: int, netloc: str
) -> None:
    authority = authority_of(url)
    assert (authority.scheme, authority.host, authority.port) == (scheme, host, port)
    assert authority.netloc == netloc
    assert authority.origin == f"{scheme}://{netloc}"


def test_host_of_a_canonical_url_is_its_authoritys_netloc() -> None:
    for raw in (
        "http://a.test:8080/x?y",
        "https://B.test:443/",
        "http://[::1]:81/",
        "http://c.test",
    ):
        canonical = canonicalize(raw)
        assert host_of(canonical) == authority_of(canonical).netloc


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://a.test/x", UnsupportedScheme),
        ("ftp://a.test:99999/x", UnsupportedScheme),  # the scheme is the more telling reason
        ("mailto:a@b.test", UnsupportedScheme),
        ("http:///x", InvalidURL),
        ("http://a.test:99999/", InvalidURL),
        ("http://a.test:x/", InvalidURL),
        ("http://[::1/", InvalidURL),
    ],
)
def test_authority_refuses_with_the_reason(url: str, error: type[InvalidURL]) -> None:
    with pytest.raises(error) as refused:
        authority_of(url)
    assert type(refused.value) is error
