"""The validators of a conditional GET (crawlfleet/crawler/fetching/conditional.py)."""

from __future__ import annotations

from crawlfleet.crawler.fetching.conditional import MAX_VALIDATOR_CHARACTERS, Conditional

DATE = "Thu, 01 Jan 2026 00:00:00 GMT"


def test_both_validators_are_sent_when_both_exist() -> None:
    both = Conditional(etag='W/"abc"', last_modified=DATE)
    assert both.request_headers() == {"If-None-Match": 'W/"abc"', "If-Modified-Since": DATE}
    assert Conditional(etag='"x"').request_headers() == {"If-None-Match": '"x"'}
    assert Conditional(last_modified=DATE).request_headers() == {"If-Modified-Since": DATE}


def test_no_validator_makes_no_conditional_request() -> None:
    assert not Conditional()
    assert Conditional().request_headers() == {}


def test_a_response_offers_its_validators_verbatim() -> None:
    found = Conditional.from_response({"etag": ' "v1" ', "last-modified": DATE})
    assert found == Conditional('"v1"', DATE)
    assert Conditional.from_response({"content-type": "text/html"}) == Conditional()


def test_validators_that_could_not_be_sent_back_are_dropped() -> None:
    too_long = '"' + "a" * MAX_VALIDATOR_CHARACTERS + '"'
    assert Conditional.from_response({"etag": too_long}) == Conditional()
    assert Conditional.from_response({"etag": '"a\x01b"', "last-modified": ""}) == Conditional()


def test_a_304_updates_the_validators_it_carries_and_keeps_the_others() -> None:
    held = Conditional('"v1"', DATE)
    assert held.updated_by({"etag": '"v2"'}) == Conditional('"v2"', DATE)
    assert held.updated_by({}) == held
