"""robots.txt origins: the cached prefix path gives what a full parse of the URL gives."""

from __future__ import annotations

import pytest

from crawlfleet.errors import InvalidURL
from crawlfleet.urls import authority_of, origin_of


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://a.test/x", "http://a.test"),
        ("HTTP://A.test:80/x", "http://a.test"),
        ("https://a.test:443/", "https://a.test"),
        ("https://a.test:8443/x?y=/z", "https://a.test:8443"),
        ("http://[::1]:8080/x", "http://[::1]:8080"),
        ("http://user:pw@a.test/x", "http://a.test"),
        ("http://a.test", "http://a.test"),
        ("http://a.test?x=/y", "http://a.test"),
        ("http://a.test#f/g", "http://a.test"),
        ("http://a.t\test/x", "http://a.test"),
        ("  http://a.test/x", "http://a.test"),
    ],
)
def test_origin(url: str, origin: str) -> None:
    assert origin_of(url) == origin == authority_of(url).origin
    assert origin_of(url) == origin  # from the cache the second time


@pytest.mark.parametrize(
    "url", ["http:x//a.test/y", "ftp://a.test/x", "http://a.test:99999/x", "http:///x", "//a/b"]
)
def test_unusable_urls_are_refused_and_named(url: str) -> None:
    with pytest.raises(InvalidURL) as refused:
        origin_of(url)
    assert repr(url)[1:-1][:50] in str(refused.value)
