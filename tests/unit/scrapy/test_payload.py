"""A Scrapy request as a frontier task and back: what travels, and how compact it stays."""

from __future__ import annotations

from typing import Any

import pytest
import scrapy
from scrapy.http import FormRequest

from crawlfleet.scrapy.payload import (
    LEASE_KEY,
    MARK,
    PARENT_KEY,
    Unserializable,
    decode_request,
    encode_request,
    found_on,
)

PAGE = "https://shop.example/list"


class Books(scrapy.Spider):
    name = "books"

    def parse_book(self, response: Any, position: int = 0) -> None:
        return None

    def failed(self, failure: Any) -> None:
        return None


SPIDER = Books()


def round_trip(request: scrapy.Request) -> tuple[str, str, scrapy.Request]:
    encoded = encode_request(request, SPIDER, PAGE)
    assert encoded is not None
    url, parent = encoded
    return url, parent, decode_request(url, parent, SPIDER, **{LEASE_KEY: "7\tw"})


def test_a_plain_get_is_as_compact_as_a_crawlfleet_link() -> None:
    url, parent, back = round_trip(scrapy.Request("https://shop.example/book/1"))
    assert (url, parent) == ("https://shop.example/book/1", PAGE)
    assert back.url == url
    assert back.callback is None
    assert back.meta == {LEASE_KEY: "7\tw"}


def test_callbacks_meta_priority_and_cb_kwargs_travel_with_the_task() -> None:
    request = scrapy.Request(
        "https://shop.example/book/2",
        callback=SPIDER.parse_book,
        errback=SPIDER.failed,
        meta={"listed": "€3", "depth": 4, "download_slot": "x", PARENT_KEY: "1\tw"},
        cb_kwargs={"position": 3},
        priority=7,
        headers={"X-Token": "abc"},
    )
    _, parent, back = round_trip(request)
    assert parent.startswith(PAGE + MARK)
    assert found_on(parent) == PAGE
    assert back.callback == SPIDER.parse_book
    assert back.errback == SPIDER.failed
    assert back.meta == {"listed": "€3", LEASE_KEY: "7\tw"}  # per-download keys left out
    assert back.cb_kwargs == {"position": 3}
    assert back.priority == 7
    assert back.headers.get("X-Token") == b"abc"
    assert "\t" not in parent


def test_a_post_keeps_its_body_bytes_and_its_class() -> None:
    request = FormRequest("https://shop.example/search", formdata={"q": "thé"})
    _, _, back = round_trip(request)
    assert type(back) is FormRequest
    assert back.method == "POST"
    assert back.body == request.body


def test_a_url_the_frontier_spells_otherwise_is_fetched_as_scrapy_wrote_it() -> None:
    request = scrapy.Request("https://shop.example:443/book/3#reviews")
    url, _, back = round_trip(request)
    assert url == "https://shop.example/book/3"
    assert back.url == request.url


@pytest.mark.parametrize(
    "request_",
    [
        scrapy.Request("https://shop.example/a", callback=lambda response: None),
        scrapy.Request("https://shop.example/b", meta={"selector": object()}),
    ],
)
def test_what_cannot_travel_is_refused_by_name(request_: scrapy.Request) -> None:
    with pytest.raises(Unserializable, match=r"shop\.example"):
        encode_request(request_, SPIDER, PAGE)


def test_a_url_the_frontier_cannot_queue_is_none() -> None:
    assert encode_request(scrapy.Request("ftp://shop.example/file"), SPIDER, PAGE) is None
