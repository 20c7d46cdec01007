"""``FileRules``: which URLs are files, and by which rule, at each of the three moments.

The spec's bad inputs (each refused with its field by ``crawlfleet validate``, the API server or
the operator) are cases of the bad-spec corpus: tests/bad_specs/files-*.yaml; the model's
defaults and bounds are in tests/unit/test_crawljob_files.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from crawlfleet.crawler.files.rules import FileRule, FileRules, media_type
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.crawljob.files import DEFAULT_MAX_FILE_BYTES

SEED = "https://media.test/"


def rules(*specs: dict[str, Any]) -> FileRules:
    spec = CrawlJobSpec.from_mapping({"seeds": [SEED], "files": {"rules": list(specs)}})
    return FileRules.from_spec(spec.files)


def index(rule: FileRule | None) -> int | None:
    return None if rule is None else rule.index


# --- no rules -----------------------------------------------------------------------------------


def test_a_job_without_files_has_no_rules_and_every_url_is_a_page() -> None:
    none = FileRules.from_spec(CrawlJobSpec.from_mapping({"seeds": [SEED]}).files)
    assert not none
    assert len(none) == 0
    assert none.contexts == frozenset()
    assert not none.response_types_matter
    assert none.for_url("https://media.test/a.mp4", None) is None
    assert none.for_link("https://media.test/a.mp4", "img") is None
    assert none.for_response("video/mp4", None) is None


# --- building -----------------------------------------------------------------------------------


def test_a_rule_keeps_its_position_limits_and_lowercased_types() -> None:
    built = rules(
        {"match": r"\.pdf$"},
        {"context": ["img", "video"], "contentTypes": ["Image/*", "VIDEO/MP4"], "maxBytes": 1000,
         "minBytes": 10},
    )  # fmt: skip
    assert built
    assert len(built) == 2
    first, second = built.rules
    assert first == FileRule(
        index=0,
        max_bytes=DEFAULT_MAX_FILE_BYTES,
        min_bytes=None,
        content_types=(),
        match=r"\.pdf$",
        context=frozenset(),
    )
    assert (second.index, second.max_bytes, second.min_bytes) == (1, 1000, 10)
    assert second.content_types == ("image/*", "video/mp4")
    assert second.context == frozenset({"img", "video"})


def test_rules_out_of_their_places_are_refused() -> None:
    first, second = rules({"match": "a"}, {"match": "b"}).rules
    with pytest.raises(ValueError, match="at its index"):
        FileRules([second, first])
    with pytest.raises(ValueError, match="at its index"):
        FileRules([second])


def test_contexts_are_every_element_any_rule_names() -> None:
    built = rules(
        {"context": ["img"]},
        {"match": r"\.mp4$", "context": ["video", "source"]},
        {"match": r"\.zip$"},
        {"contentTypes": ["application/pdf"]},
    )
    assert built.contexts == frozenset({"img", "video", "source"})


# --- at claim: for_url --------------------------------------------------------------------------


def test_a_match_without_context_takes_any_url_it_matches_seeds_too() -> None:
    built = rules({"match": r"\.(mp4|webm)$"}, {"match": r"/downloads/"})
    assert index(built.for_url("https://media.test/v/a.mp4", None)) == 0
    assert index(built.for_url("https://media.test/downloads/a.webm", None)) == 0  # first wins
    assert index(built.for_url("https://media.test/downloads/a.iso", None)) == 1
    assert built.for_url("https://media.test/v/a.html", None) is None
    assert built.for_url("https://media.test/v/a.mp4?x=1", None) is None  # searched, anchored $


def test_a_rule_with_context_takes_no_unmarked_url_even_when_its_match_holds() -> None:
    built = rules({"match": r"\.jpg$", "context": ["img"]})
    assert built.for_url("https://media.test/a.jpg", None) is None
    assert index(built.for_url("https://media.test/a.jpg", 0)) == 0


def test_a_mark_names_its_rule_whatever_the_url() -> None:
    built = rules({"match": r"\.zip$"}, {"context": ["img"]})
    assert index(built.for_url("https://media.test/thumb", 1)) == 1
    # The mark wins over a pattern: the link was taken when its page was read.
    assert index(built.for_url("https://media.test/a.zip", 1)) == 1


@pytest.mark.parametrize("stale", [2, 99, -1])
def test_a_mark_no_rule_has_any_more_counts_as_none(stale: int) -> None:
    built = rules({"match": r"\.zip$"}, {"context": ["img"]})
    assert built.for_url("https://media.test/thumb", stale) is None
    assert index(built.for_url("https://media.test/a.zip", stale)) == 0


def test_only_type_rules_take_no_url_at_claim() -> None:
    built = rules({"contentTypes": ["application/pdf"]})
    assert built.for_url("https://media.test/a.pdf", None) is None


# --- at admission: for_link ---------------------------------------------------------------------


def test_a_context_rule_takes_links_of_its_elements_only() -> None:
    built = rules({"context": ["img", "source"]})
    assert index(built.for_link("https://media.test/a.png", "img")) == 0
    assert index(built.for_link("https://media.test/a.webm", "source")) == 0
    assert built.for_link("https://media.test/a.png", "video") is None
    assert built.for_link("https://media.test/a.png", "a") is None


def test_context_and_match_must_both_hold() -> None:
    built = rules({"match": r"\.pdf$", "context": ["a"]})
    assert index(built.for_link("https://media.test/paper.pdf", "a")) == 0
    assert built.for_link("https://media.test/paper.html", "a") is None
    assert built.for_link("https://media.test/paper.pdf", "img") is None


def test_a_match_rule_takes_links_from_any_element() -> None:
    built = rules({"match": r"\.zip$"})
    assert index(built.for_link("https://media.test/a.zip", "a")) == 0
    assert index(built.for_link("https://media.test/a.zip", "embed")) == 0
    assert built.for_link("https://media.test/a.tar", "a") is None


def test_the_first_rule_in_order_takes_a_link() -> None:
    built = rules(
        {"match": r"\.mp4$", "maxBytes": 100},
        {"context": ["video"], "maxBytes": 200},
        {"match": r"/big/", "context": ["video"]},
    )
    # An earlier rule that takes the URL alone wins over a later one naming the element.
    assert index(built.for_link("https://media.test/big/a.mp4", "video")) == 0
    assert index(built.for_link("https://media.test/big/a.webm", "video")) == 1
    assert index(built.for_link("https://media.test/a.webm", "video")) == 1


def test_a_type_rule_takes_no_link_it_waits_for_the_response() -> None:
    built = rules({"contentTypes": ["video/*"]}, {"context": ["img"], "contentTypes": ["image/*"]})
    assert built.for_link("https://media.test/a.mp4", "video") is None
    assert index(built.for_link("https://media.test/a.png", "img")) == 1


# --- at the response: for_response --------------------------------------------------------------


def test_a_candidate_with_types_is_a_file_only_for_one_of_them() -> None:
    built = rules({"match": r"/dl/", "contentTypes": ["application/pdf", "video/*"]})
    candidate = built.for_url("https://media.test/dl/x", None)
    assert candidate is not None
    assert built.needs_response_type(candidate)
    assert built.response_types_matter
    assert built.for_response("application/pdf", candidate) is candidate
    assert built.for_response("Application/PDF; charset=binary", candidate) is candidate
    assert built.for_response("video/webm", candidate) is candidate
    assert built.for_response("text/html; charset=utf-8", candidate) is None  # a page after all
    assert built.for_response(None, candidate) is None
    assert built.for_response("", candidate) is None


def test_a_candidate_without_types_stays_a_file_whatever_its_response() -> None:
    built = rules({"match": r"\.mp4$"})
    candidate = built.for_url("https://media.test/a.mp4", None)
    assert candidate is not None
    assert not built.needs_response_type(candidate)
    assert not built.response_types_matter
    assert built.for_response("text/html", candidate) is candidate


def test_a_type_rule_alone_makes_any_page_of_its_types_a_file() -> None:
    built = rules({"match": r"\.zip$"}, {"contentTypes": ["application/pdf"]}, {"contentTypes":
                  ["video/*"], "maxBytes": 10})  # fmt: skip
    assert built.response_types_matter
    assert index(built.for_response("application/pdf", None)) == 1
    assert index(built.for_response("video/mp4", None)) == 2
    assert built.for_response("text/html", None) is None
    assert built.for_response("application/zip", None) is None  # rule 0 is by URL, not type


def test_a_candidate_refused_by_its_types_may_still_be_a_file_by_a_type_rule() -> None:
    built = rules(
        {"context": ["img"], "contentTypes": ["image/*"]},
        {"contentTypes": ["application/pdf"]},
    )
    candidate = built.for_link("https://media.test/x", "img")
    assert candidate is not None
    assert built.for_response("image/png", candidate) is candidate
    assert index(built.for_response("application/pdf", candidate)) == 1
    assert built.for_response("text/html", candidate) is None


@pytest.mark.parametrize(
    ("accepted", "content_type", "takes"),
    [
        ("video/*", "video/mp4", True),
        ("video/*", "video/", True),
        ("video/*", "videos/mp4", False),
        ("video/*", "audio/mp4", False),
        ("video/mp4", "video/mp4", True),
        ("video/mp4", "video/mp4v", False),
        ("video/mp4", " VIDEO/MP4 ; codecs=avc1", True),
        ("application/pdf", "application/pdf", True),
        ("application/pdf", "pdf", False),
        ("application/pdf", ";application/pdf", False),
    ],
)
def test_a_type_or_a_type_with_any_subtype_accepts_a_content_type(
    accepted: str, content_type: str, takes: bool
) -> None:
    (rule,) = rules({"contentTypes": [accepted]}).rules
    assert rule.accepts_type(content_type) is takes


@pytest.mark.parametrize(
    ("header", "essence"),
    [
        ("text/html; charset=utf-8", "text/html"),
        ("  Video/MP4  ", "video/mp4"),
        ("application/octet-stream;", "application/octet-stream"),
        ("garbage", None),
        ("", None),
        (None, None),
    ],
)
def test_media_type_is_the_lowercased_essence(header: str | None, essence: str | None) -> None:
    assert media_type(header) == essence


# --- scale --------------------------------------------------------------------------------------


def test_many_rules_compile_into_one_set_and_each_keeps_its_place() -> None:
    specs: list[dict[str, Any]] = []
    for number in range(32):
        if number % 3 == 0:
            specs.append({"match": f"/m{number}/"})
        elif number % 3 == 1:
            specs.append({"match": f"/c{number}/", "context": ["img"]})
        else:
            specs.append({"contentTypes": [f"x-type/t{number}"]})
    built = rules(*specs)
    for number in range(32):
        if number % 3 == 0:
            assert index(built.for_url(f"https://media.test/m{number}/a", None)) == number
            assert index(built.for_link(f"https://media.test/m{number}/a", "img")) == number
        elif number % 3 == 1:
            assert built.for_url(f"https://media.test/c{number}/a", None) is None
            assert index(built.for_link(f"https://media.test/c{number}/a", "img")) == number
        else:
            assert index(built.for_response(f"x-type/t{number}", None)) == number
