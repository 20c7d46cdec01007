"""crawlfleet.hosts: the one spelling of a host, shared by the model and the crawl."""

from __future__ import annotations

import pytest

from crawlfleet.hosts import InvalidHost, normalize_host, registrable_domain, split_host_port


@pytest.mark.parametrize(
    ("host", "spelled"),
    [
        ("example.com", "example.com"),
        ("Example.COM.", "example.com"),
        ("fa\u00df.de", "xn--fa-hia.de"),  # IDNA 2003 (Python's codec) says fass.de
        ("B\u00fccher.Example", "xn--bcher-kva.example"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45\uff0e\uff43\uff4f\uff4d", "example.com"),
        ("127.0.0.1", "127.0.0.1"),
        ("0:0::0001", "::1"),
        ("2001:DB8::1", "2001:db8::1"),
        ("1.2", "1.2"),  # not an address: a name whose labels are digits
    ],
)
def test_one_spelling_strict_or_not(host: str, spelled: str) -> None:
    assert normalize_host(host) == spelled
    assert normalize_host(host, strict=True) == spelled


@pytest.mark.parametrize(
    "host", ["a_b.example", "a..b.example", "-a.example", "xn--zz.example", "a" * 64 + ".example"]
)
def test_strict_refuses_what_a_person_should_not_write_but_links_may_name(host: str) -> None:
    with pytest.raises(InvalidHost):
        normalize_host(host, strict=True)
    assert normalize_host(host) == host  # a server may link to it; the crawl keeps the name


def test_strict_refuses_a_name_longer_than_dns_allows() -> None:
    host = ".".join(["a" * 63] * 4)  # 255 characters
    with pytest.raises(ValueError, match="253"):
        normalize_host(host, strict=True)


@pytest.mark.parametrize("host", ["", ".", "\U0001f4a9.la", "exa mple.\u00e9", "::1::2"])
def test_unspellable_hosts_are_refused_either_way(host: str) -> None:
    for strict in (False, True):
        with pytest.raises(InvalidHost):
            normalize_host(host, strict=strict)


@pytest.mark.parametrize(
    ("entry", "parts"),
    [
        ("example.com", ("example.com", None)),
        ("Example.com:8080", ("example.com", 8080)),
        ("fa\u00df.de:443", ("xn--fa-hia.de", 443)),
        ("::1", ("::1", None)),
        ("[::1]", ("::1", None)),
        ("[0::1]:8080", ("::1", 8080)),
        ("10.0.0.1:1", ("10.0.0.1", 1)),
    ],
)
def test_split_host_port(entry: str, parts: tuple[str, int | None]) -> None:
    assert split_host_port(entry) == parts


@pytest.mark.parametrize(
    "entry",
    ["", "example.com:0", "example.com:65536", "example.com:", "host:port", "[::1", "[::1]x",
     "[example.com]", "a/b", "u@example.com", "example.com:\u0661"],
)  # fmt: skip
def test_split_host_port_refuses(entry: str) -> None:
    with pytest.raises(InvalidHost):
        split_host_port(entry)


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("www.example.co.uk", "example.co.uk"),
        ("a.b.example.com", "example.com"),
        ("example.com", "example.com"),
        ("alice.github.io", "alice.github.io"),  # a private suffix: each site its own domain
        ("xn--fa-hia.de", "xn--fa-hia.de"),
        ("127.0.0.2", "127.0.0.2"),
        ("::1", "::1"),
        ("localhost", "localhost"),  # no public suffix: its own domain
        ("co.uk", "co.uk"),
    ],
)
def test_the_registrable_domain_is_the_public_suffix_plus_one(host: str, domain: str) -> None:
    assert registrable_domain(host) == domain
