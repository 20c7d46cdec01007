"""crawlfleet.patterns: URL pattern lists compiled by RE2, alone and together."""

from __future__ import annotations

import pytest

from crawlfleet.patterns import PatternError, compile_patterns


def compiled(*patterns: str) -> object:
    result = compile_patterns(patterns)
    assert result is not None
    return result


def test_an_empty_list_compiles_to_nothing() -> None:
    assert compile_patterns(()) is None


def test_any_pattern_found_anywhere_in_the_url_is_a_match() -> None:
    patterns = compile_patterns([r"/catalogue/", r"\.pdf$"])
    assert patterns is not None
    assert patterns.search("https://a.test/catalogue/x.html")
    assert patterns.search("https://a.test/files/x.pdf")
    assert not patterns.search("https://a.test/files/x.pdf?download=1")
    assert not patterns.search("https://a.test/other")


def test_two_patterns_may_name_the_same_group_and_keep_their_own_flags() -> None:
    # Python's re refuses both once the patterns are joined into one alternation.
    patterns = compile_patterns([r"/(?P<id>\d+)/a", r"/(?P<id>[a-z]+)/b", "(?i)/LOGIN", "x(?i)Q"])
    assert patterns is not None
    for url in ("http://h/12/a", "http://h/ab/b", "http://h/login", "http://h/xq"):
        assert patterns.search(url), url
    assert not patterns.search("http://h/Xq")  # the flag starts where it is written
    assert not patterns.search("http://h/12/b")


@pytest.mark.parametrize(
    ("patterns", "index", "reason"),
    [
        (["(unclosed"], 0, "missing ): (unclosed"),
        (["ok", "[a-"], 1, "missing ]: [a-"),
        (["a{1001}"], 0, "invalid repetition size: {1001}"),
        # C++ RE2 would read it as text; Go's RE2 (CEL's) refuses it: the model says so
        (["a{99999999999}"], 0, "invalid repeat count: {99999999999}"),
        (["x{2,12345678901}"], 0, "invalid repeat count: {2,12345678901}"),
        # C++ RE2's byte escape; Go's RE2 refuses it
        ([r"a\C"], 0, r"invalid escape sequence: \C (CEL's RE2 has no byte escape)"),
        ([r"(?=look)ahead"], 0, "invalid perl operator: (?="),
        ([r"(a)\1"], 0, r"invalid escape sequence: \1"),
        ([r"end\Z"], 0, r"invalid escape sequence: \Z"),
    ],
)
def test_a_pattern_re2_refuses_is_named_with_re2s_reason(
    patterns: list[str], index: int, reason: str
) -> None:
    with pytest.raises(PatternError) as caught:
        compile_patterns(patterns)
    assert (caught.value.index, caught.value.reason) == (index, reason)
    assert caught.value.message == f"is not a valid RE2 pattern: {reason}"


@pytest.mark.parametrize(
    "pattern",
    [r"a\{99999999999}", r"[{99999999999}]", r"\Qa{99999999999}\E", "a{0123456789012}",
     r"a\\C", r"\Q\C\E"],
)  # fmt: skip
def test_text_that_only_looks_like_what_go_refuses_is_accepted(pattern: str) -> None:
    assert compile_patterns([pattern]) is not None


def test_patterns_valid_alone_can_be_too_large_together() -> None:
    patterns = [f"[a-z]{{1,1000}}x{index}" for index in range(100)]
    for pattern in patterns:
        assert compile_patterns([pattern]) is not None

    with pytest.raises(PatternError) as caught:
        compile_patterns(patterns)
    assert caught.value.index is None
    assert "too large to match together" in caught.value.message
