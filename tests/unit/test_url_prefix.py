"""authority_prefix: offered only where urlsplit reads the prefix as it reads the whole URL;
per_authority: answers cached by it."""

from __future__ import annotations

import random
from urllib.parse import urlsplit

import pytest

from crawlfleet.urls import authority_prefix, per_authority


def netloc_view(url: str) -> tuple[str, str | None, int | None] | str:
    """What the callers take from a URL, or the error urlsplit raises."""
    try:
        parts = urlsplit(url)
        return parts.scheme, parts.hostname, parts.port
    except ValueError as error:
        return type(error).__name__


@pytest.mark.parametrize(
    ("url", "prefix"),
    [
        ("http://a.test/x", "http://a.test"),
        ("https://u:p@A.test:8443/x?y", "https://u:p@A.test:8443"),
        ("http://[::1]:80/", "http://[::1]:80"),
        ("http://a.test", None),
        ("http://a.test?x=/y", None),
        ("http://a.test#x/y", None),
        ("http://a\\b.test/x", None),
        ("http://a.t\test/x", None),
        (" http://a.test/x", None),
        ("http://bücher.test/x", None),
        ("http:/a.test/x", None),
        ("mailto:a@b/c/d", None),
    ],
)
def test_prefixes(url: str, prefix: str | None) -> None:
    assert authority_prefix(url) == prefix


def test_a_prefix_reads_as_its_url_on_generated_urls() -> None:
    rng = random.Random(3)
    pieces = [
        "http:",
        "https:",
        "HTTP:",
        "//",
        "/",
        "a.test",
        "A",
        ":80",
        ":99999",
        ":x",
        "@",
        "u:p@",
        "[",
        "]",
        "::1",
        "?",
        "#",
        "\\",
        " ",
        "\t",
        "\n",
        "é",
        "%41",
    ]
    offered = 0
    for _ in range(20000):
        url = "".join(rng.choice(pieces) for _ in range(rng.randint(2, 9))) + "/p"
        prefix = authority_prefix(url)
        if prefix is not None:
            offered += 1
            assert netloc_view(prefix) == netloc_view(url), url
    assert offered > 100


def test_per_authority_computes_once_per_prefix_and_errors_name_the_url() -> None:
    seen: list[str] = []

    def host(url: str) -> str:
        seen.append(url)
        netloc = url.split("/")[2]
        if netloc.startswith("bad"):
            raise ValueError(f"bad host in {url}")
        return netloc

    per_host = per_authority(host, errors=ValueError, maxsize=16)
    assert per_host("http://a.test/x") == per_host("http://a.test/y?q") == "a.test"
    assert seen == ["http://a.test"]
    assert per_host("http://a.test") == "a.test"  # no path: no prefix, computed from the URL
    with pytest.raises(ValueError, match="/page"):
        per_host("http://bad.test/page")
