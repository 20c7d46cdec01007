"""Unit tests for crawlfleet.crawler.fetching.safety (SSRF guard).

No test sends traffic anywhere: IP literals are checked without DNS (a resolver that fails the
test if called proves it), "localhost" resolves from the hosts file, and everything else uses
an injected fake resolver.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from crawlfleet.crawler.fetching.safety import (
    METADATA_ADDRESSES,
    AddressGuard,
    Resolver,
    is_forbidden_address,
    is_metadata_address,
)
from crawlfleet.errors import FetchError

FORBIDDEN = [
    "0.0.0.0",
    "0.1.2.3",
    "10.0.0.1",
    "10.255.255.255",
    "100.64.0.1",
    "100.127.255.254",
    "100.100.100.200",
    "127.0.0.1",
    "127.255.255.254",
    "169.254.0.1",
    "169.254.169.254",
    "172.16.0.1",
    "172.31.255.255",
    "192.0.0.1",
    "192.0.2.1",
    "192.168.1.1",
    "198.18.0.1",
    "198.51.100.7",
    "203.0.113.9",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "::",
    "::1",
    "::127.0.0.1",
    "::ffff:127.0.0.1",
    "::ffff:10.1.2.3",
    "::ffff:169.254.169.254",
    "::ffff:0:7f00:1",  # SIIT/"IPv4-translated" form
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b:1::1",
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
    "2001::1",  # Teredo
    "2001:db8::1",
    "fc00::1",
    "fd00:ec2::254",
    "fe80::1",
    "fe80::1%eth0",
    "fec0::1",
    "ff02::1",
    "100::1",
]

PUBLIC = [
    "93.184.216.34",
    "8.8.8.8",
    "1.1.1.1",
    "100.63.255.255",
    "100.128.0.1",
    "172.15.255.255",
    "172.32.0.1",
    "192.169.0.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80e::200e",
    "::ffff:93.184.216.34",
    "64:ff9b::5db8:d822",  # NAT64 of 93.184.216.34
    "2002:5db8:d822::1",  # 6to4 of 93.184.216.34
]


@pytest.mark.parametrize("address", FORBIDDEN)
def test_forbidden_addresses(address: str) -> None:
    assert is_forbidden_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses(address: str) -> None:
    assert not is_forbidden_address(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    ("address", "metadata"),
    [
        ("169.254.169.254", True),
        ("fd00:ec2::254", True),
        ("100.100.100.200", True),
        ("168.63.129.16", True),  # Azure's WireServer: a public address, refused all the same
        ("168.63.129.17", False),
        ("::ffff:169.254.169.254", True),
        ("64:ff9b::a9fe:a9fe", True),
        ("169.254.169.253", False),
        ("127.0.0.1", False),
    ],
)
def test_metadata_addresses(address: str, metadata: bool) -> None:
    assert is_metadata_address(ipaddress.ip_address(address)) is metadata


def test_every_metadata_address_is_forbidden() -> None:
    assert all(is_forbidden_address(ip) for ip in METADATA_ADDRESSES)


async def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"DNS lookup of {host}:{port} where none was expected")


def fake_dns(table: dict[str, list[str]], calls: list[str] | None = None) -> Resolver:
    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    return resolve


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111", "[2606:4700::1]"])
async def test_public_literal_is_allowed_without_dns(address: str) -> None:
    guard = AddressGuard(resolver=no_dns)
    expected = str(ipaddress.ip_address(address.strip("[]")))
    assert await guard.check_host(address, 443) == [expected]


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "[::1]", "169.254.169.254", "10.1.2.3", "::ffff:127.0.0.1", "fd00:ec2::254"],
)
async def test_forbidden_literal_is_refused_without_dns(host: str) -> None:
    guard = AddressGuard(resolver=no_dns)
    with pytest.raises(FetchError) as caught:
        await guard.check_host(host, 80)
    assert caught.value.failure_class == "forbidden_address"


@pytest.mark.parametrize("host", ["127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "0x7f000001"])
async def test_legacy_ipv4_forms_are_seen_as_addresses(host: str) -> None:
    guard = AddressGuard(resolver=no_dns)
    with pytest.raises(FetchError, match="forbidden_address"):
        await guard.check_host(host, 80)


async def test_allow_private_permits_private_but_not_metadata() -> None:
    guard = AddressGuard(allow_private=True, resolver=no_dns)
    assert await guard.check_host("127.0.0.2", 8080) == ["127.0.0.2"]
    assert await guard.check_host("10.0.0.5", 80) == ["10.0.0.5"]
    for metadata in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "168.63.129.16"):
        with pytest.raises(FetchError, match="forbidden_address"):
            await guard.check_host(metadata, 80)


async def test_localhost_resolves_to_loopback_and_is_refused() -> None:
    guard = AddressGuard()  # the real getaddrinfo: "localhost" comes from the hosts file
    with pytest.raises(FetchError) as caught:
        await guard.check_host("localhost", 80)
    assert caught.value.failure_class == "forbidden_address"


async def test_localhost_allowed_with_allow_private() -> None:
    guard = AddressGuard(allow_private=True)
    addresses = await guard.check_host("localhost", 80)
    assert addresses
    assert all(ipaddress.ip_address(address).is_loopback for address in addresses)


async def test_any_forbidden_record_refuses_the_name() -> None:
    guard = AddressGuard(resolver=fake_dns({"mixed.test": ["93.184.216.34", "10.0.0.1"]}))
    with pytest.raises(FetchError, match=r"10\.0\.0\.1"):
        await guard.check_host("mixed.test", 80)


@pytest.mark.parametrize("host", ["", "  ", "[]"])
async def test_empty_host_is_invalid_without_dns(host: str) -> None:
    guard = AddressGuard(resolver=no_dns)
    with pytest.raises(FetchError, match="invalid_url"):
        await guard.check_host(host, 80)


async def test_returns_every_resolved_address() -> None:
    table = {"public.test": ["93.184.216.34", "2606:4700:4700::1111"]}
    guard = AddressGuard(resolver=fake_dns(table))
    assert await guard.check_host("Public.Test", 443) == table["public.test"]


async def test_resolution_failure_is_dns_error() -> None:
    guard = AddressGuard(resolver=fake_dns({}))
    with pytest.raises(FetchError) as caught:
        await guard.check_host("missing.test", 80)
    assert caught.value.failure_class == "dns_error"
    assert isinstance(caught.value.__cause__, socket.gaierror)


async def test_empty_resolution_is_dns_error() -> None:
    guard = AddressGuard(resolver=fake_dns({"empty.test": []}))
    with pytest.raises(FetchError, match="dns_error"):
        await guard.check_host("empty.test", 80)


async def test_slow_resolution_times_out_as_dns_error() -> None:
    async def slow(host: str, port: int) -> list[str]:
        await asyncio.sleep(10)
        return ["93.184.216.34"]

    guard = AddressGuard(resolver=slow, dns_timeout_seconds=0.01)
    with pytest.raises(FetchError, match="dns_error"):
        await guard.check_host("slow.test", 80)


async def test_allowed_results_are_cached_for_the_ttl() -> None:
    now = [1000.0]
    calls: list[str] = []
    guard = AddressGuard(
        resolver=fake_dns({"a.test": ["93.184.216.34"]}, calls),
        cache_ttl_seconds=60.0,
        clock=lambda: now[0],
    )
    assert await guard.check_host("a.test", 80) == ["93.184.216.34"]
    now[0] += 59.0
    assert await guard.check_host("a.test", 80) == ["93.184.216.34"]
    assert calls == ["a.test"]
    assert await guard.check_host("a.test", 8080) == ["93.184.216.34"]  # per (host, port)
    assert calls == ["a.test", "a.test"]
    now[0] += 1.0
    await guard.check_host("a.test", 80)
    assert calls == ["a.test", "a.test", "a.test"]


async def test_refusals_are_not_cached() -> None:
    table = {"flip.test": ["10.0.0.1"]}
    calls: list[str] = []
    guard = AddressGuard(resolver=fake_dns(table, calls))
    with pytest.raises(FetchError):
        await guard.check_host("flip.test", 80)
    table["flip.test"] = ["93.184.216.34"]
    assert await guard.check_host("flip.test", 80) == ["93.184.216.34"]
    assert calls == ["flip.test", "flip.test"]


async def test_cache_is_bounded() -> None:
    table = {f"h{index}.test": ["93.184.216.34"] for index in range(10)}
    calls: list[str] = []
    guard = AddressGuard(resolver=fake_dns(table, calls), cache_max_entries=3)
    for host in table:
        await guard.check_host(host, 80)
    await guard.check_host("h9.test", 80)  # still cached
    await guard.check_host("h0.test", 80)  # evicted long ago
    assert calls == [*table, "h0.test"]


@pytest.mark.parametrize(
    ("url", "failure_class"),
    [
        ("ftp://93.184.216.34/", "bad_scheme"),
        ("file:///etc/passwd", "bad_scheme"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "bad_scheme"),
        ("http://[::1", "invalid_url"),
        ("http:///nohost", "invalid_url"),
        ("http://93.184.216.34:99999/", "invalid_url"),
        ("http://127.0.0.1:6379/", "forbidden_address"),
        ("https://[::ffff:a9fe:a9fe]/latest/meta-data/", "forbidden_address"),
    ],
)
async def test_check_url_refusals(url: str, failure_class: str) -> None:
    guard = AddressGuard(resolver=no_dns)
    with pytest.raises(FetchError) as caught:
        await guard.check_url(url)
    assert caught.value.failure_class == failure_class


async def test_check_url_uses_the_scheme_default_port() -> None:
    seen: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[str]:
        seen.append((host, port))
        return ["93.184.216.34"]

    guard = AddressGuard(resolver=resolve)
    assert await guard.check_url("https://example.test/x") == ["93.184.216.34"]
    assert await guard.check_url("http://example.test/x") == ["93.184.216.34"]
    assert await guard.check_url("http://example.test:8080/x") == ["93.184.216.34"]
    assert seen == [("example.test", 443), ("example.test", 80), ("example.test", 8080)]
