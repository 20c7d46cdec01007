"""The proxy list, its exceptions and which proxy a host uses (crawlfleet/proxies.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from crawlfleet.crawljob import CrawlJobSpec, ProxySpec, checked_proxies, proxy_plan
from crawlfleet.errors import ConfigError
from crawlfleet.proxies import (
    PROXY_ENV,
    InvalidProxy,
    ProxyChooser,
    matches_no_proxy,
    parse_no_proxy,
    parse_proxy,
    parse_proxy_list,
)

SECRET = "hunter2-pw"


def test_a_proxy_url_is_parsed_with_its_credentials_apart_and_a_label_without_them() -> None:
    proxy = parse_proxy(f"http://crawler:{SECRET}@Proxy.Example:3128")
    assert (proxy.scheme, proxy.host, proxy.port) == ("http", "proxy.example", 3128)
    assert (proxy.username, proxy.password) == ("crawler", SECRET)
    assert proxy.label == "http://proxy.example:3128"
    assert SECRET not in repr(proxy)
    assert SECRET not in str(proxy)
    assert parse_proxy("socks5h://10.0.0.5").port == 1080
    assert parse_proxy("https://[::1]").label == "https://[::1]:443"
    assert parse_proxy("http://u:p%40ss@h:1").password == "p@ss"  # percent-decoded


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ftp://proxy:21", "unknown scheme 'ftp'"),
        ("proxy.example:3128", "unknown scheme"),
        ("http://", "names no host"),
        ("http://proxy:3128/path", "no path, query or fragment"),
        ("http://proxy:99999", "valid port"),
    ],
)
def test_a_bad_proxy_url_is_refused_in_words(text: str, says: str) -> None:
    with pytest.raises(InvalidProxy, match=says):
        parse_proxy(text)


def test_a_list_names_the_line_of_a_mistake_and_never_its_credentials() -> None:
    listed = (
        "# the office's exits\n"
        f"http://a:{SECRET}@one.example:3128\n"
        "\n"
        f"socks5://b:{SECRET}@two.example, http://three.example:8080\n"
    )
    assert [p.label for p in parse_proxy_list(listed)] == [
        "http://one.example:3128",
        "socks5://two.example:1080",
        "http://three.example:8080",
    ]
    with pytest.raises(InvalidProxy) as refused:
        parse_proxy_list(f"http://one.example:3128\ngopher://c:{SECRET}@x.example:70\n")
    assert "line 2:" in str(refused.value)
    assert SECRET not in str(refused.value)
    with pytest.raises(InvalidProxy, match="listed twice"):
        parse_proxy_list("http://one.example:3128\nhttp://u:p@ONE.example:3128")
    with pytest.raises(InvalidProxy, match="names no proxy"):
        parse_proxy_list("# nothing here\n\n")


def test_no_proxy_matches_names_with_their_subdomains_addresses_in_blocks_and_star() -> None:
    rules = parse_no_proxy(["example.org", ".intranet.corp", "*.wiki.example", "10.0.0.0/8"])
    assert matches_no_proxy("example.org", rules)
    assert matches_no_proxy("www.example.org", rules)
    assert not matches_no_proxy("badexample.org", rules)
    assert matches_no_proxy("intranet.corp", rules)
    assert matches_no_proxy("a.b.intranet.corp", rules)
    assert matches_no_proxy("wiki.example", rules)
    assert matches_no_proxy("10.20.30.40", rules)
    assert not matches_no_proxy("11.0.0.1", rules)
    assert not matches_no_proxy("books.example", rules)
    assert matches_no_proxy("anything.example", parse_no_proxy(["*"]))
    assert not matches_no_proxy("anything.example", parse_no_proxy([]))
    with pytest.raises(InvalidProxy, match="not a host name"):
        parse_no_proxy(["intranet/wiki"])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def chooser_of(count: int, clock: Clock, max_failures: int = 3) -> ProxyChooser:
    proxies = tuple(parse_proxy(f"http://proxy{i}.example:3128") for i in range(count))
    return ProxyChooser(proxies, max_failures=max_failures, eject_seconds=60, clock=clock)


HOSTS = [f"site{i}.example" for i in range(400)]


def test_a_host_keeps_its_proxy_and_hosts_spread_over_all_of_them() -> None:
    chooser = chooser_of(4, Clock())
    first = {host: chooser.choose(host) for host in HOSTS}
    assert all(chooser.choose(host) == first[host] for host in HOSTS)  # affinity
    spread = Counter(proxy.label for proxy in first.values() if proxy is not None)
    assert len(spread) == 4
    assert min(spread.values()) > len(HOSTS) / 4 / 2  # no proxy starved


def test_a_proxy_failing_in_a_row_is_taken_out_and_only_its_hosts_move_until_it_is_back() -> None:
    clock = Clock()
    chooser = chooser_of(4, clock, max_failures=3)
    first = {host: chooser.choose(host) for host in HOSTS}
    victim = first[HOSTS[0]]
    assert victim is not None
    assert chooser.failed(victim) is False
    chooser.succeeded(victim)  # a success ends the run of failures
    assert [chooser.failed(victim) for _ in range(3)] == [False, False, True]
    assert [p.label for p, _ in chooser.out_of_service()] == [victim.label]
    assert chooser.failed(victim) is False  # already out: late failures change nothing
    moved = {host: chooser.choose(host) for host in HOSTS}
    for host in HOSTS:
        if first[host] == victim:
            assert moved[host] not in (None, victim)
        else:
            assert moved[host] == first[host]  # the others stay where they were
    clock.now += 61
    assert {host: chooser.choose(host) for host in HOSTS} == first  # back, and its hosts too


def test_with_every_proxy_out_no_proxy_is_chosen() -> None:
    clock = Clock()
    chooser = chooser_of(2, clock, max_failures=1)
    for proxy in chooser.proxies:
        assert chooser.failed(proxy)
    assert chooser.choose("books.example") is None
    clock.now += 60
    assert chooser.choose("books.example") is not None


def test_the_plan_reads_the_secrets_list_from_the_environment_and_says_what_is_missing() -> None:
    by_secret = ProxySpec.model_validate({"secretRef": {"name": "crawl-proxies"}})
    plan = proxy_plan(by_secret, {PROXY_ENV: f"http://u:{SECRET}@one.example:3128"})
    assert [p.password for p in plan.proxies] == [SECRET]
    assert plan.eject_seconds == 60.0
    assert plan.max_failures == 3
    with pytest.raises(InvalidProxy) as missing:
        proxy_plan(by_secret, {})
    assert "CRAWLFLEET_PROXIES is not set" in str(missing.value)
    assert "Secret crawl-proxies (key proxies)" in str(missing.value)
    with pytest.raises(InvalidProxy) as bad:
        proxy_plan(by_secret, {PROXY_ENV: f"ftp://u:{SECRET}@one.example"})
    assert str(bad.value).startswith("CRAWLFLEET_PROXIES (spec.proxy.secretRef): line 1:")
    assert SECRET not in str(bad.value)
    written = ProxySpec.model_validate(
        {"urls": ["http://proxy.corp.example:3128"], "noProxy": ["corp.example"]}
    )
    plan = proxy_plan(written, {})
    assert [p.label for p in plan.proxies] == ["http://proxy.corp.example:3128"]
    assert matches_no_proxy("wiki.corp.example", plan.no_proxy)


def test_checked_proxies_is_one_config_error_sentence() -> None:
    spec = CrawlJobSpec.model_validate(
        {"seeds": ["https://books.example/"], "proxy": {"secretRef": {"name": "p"}}}
    )
    with pytest.raises(ConfigError, match="CRAWLFLEET_PROXIES is not set"):
        checked_proxies(spec.proxy, {})
    assert (
        checked_proxies(CrawlJobSpec.model_validate({"seeds": ["https://b.example/"]}).proxy, {})
        is None
    )
