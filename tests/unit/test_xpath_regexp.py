"""EXSLT regular expressions in extract XPath on RE2 (crawlfleet/xpath_regexp.py).

Evaluated as the worker and the model evaluate them (``selection.compile_selector``); the
expected values are EXSLT's own examples (https://exslt.github.io/regexp/) where it has them.
"""

from __future__ import annotations

import pytest
from lxml import etree

from crawlfleet.patterns import compile_regexp
from crawlfleet.selection import SelectorError, check_selector, compile_selector
from crawlfleet.xpath_regexp import literal_problem, xpath_string

DOCUMENT = etree.HTML("<html><body><p>Is this EXSLT? No. no</p><p>second</p></body></html>")


def evaluate(query: str, document: etree._Element = DOCUMENT) -> object:
    return compile_selector("xpath", query)(document)


def texts(query: str) -> list[str]:
    found = evaluate(query)
    assert isinstance(found, list)
    return [element.text or "" for element in found]


def test_test_searches_and_i_ignores_case() -> None:
    assert evaluate("re:test(//p, 'EXSLT')") is True
    assert evaluate("re:test(//p, 'exslt')") is False
    assert evaluate("re:test(//p, 'exslt', 'i')") is True
    assert evaluate("re:test(//p, 'exslt', 'g')") is False  # g means nothing to test
    assert evaluate("count(//p[re:test(., '^s')])") == 1.0


def test_match_without_g_gives_the_whole_match_then_every_group() -> None:
    url = "http://www.bayes.co.uk/xml/index.xml?/xml/utils/rechecker.xml"
    parts = texts(f"re:match('{url}', '(\\w+):\\/\\/([^/:]+)(:\\d*)?([^# ]*)')")
    assert parts == [url, "http", "www.bayes.co.uk", "", "/xml/index.xml?/xml/utils/rechecker.xml"]
    assert texts("re:match(//p, 'nothing like it')") == []


def test_match_with_g_gives_the_whole_text_of_every_match() -> None:
    assert texts("re:match('This is a test string', '(\\w+)', 'g')") == [
        "This",
        "is",
        "a",
        "test",
        "string",
    ]
    # The group is one letter: lxml's Python re (findall) would give the groups, EXSLT does not.
    assert texts("re:match('This is a test string', '([a-z])+ ', 'g')") == [
        "his ",
        "is ",
        "a ",
        "test ",
    ]
    assert texts("re:match('This is a test string', '([a-z])+ ', 'gi')") == [
        "This ",
        "is ",
        "a ",
        "test ",
    ]
    assert texts("re:match(//p, 'no', 'gi')") == ["No", "no"]


def test_replace_once_or_with_g_everywhere_with_groups_by_number() -> None:
    assert evaluate("re:replace('a-b-c', '-', '', '+')") == "a+b-c"
    assert evaluate("re:replace('a-b-c', '-', 'g', '+')") == "a+b+c"
    assert evaluate("re:replace('Ab ab', 'a(b)', 'gi', '[\\1]')") == "[b] [b]"
    assert evaluate("re:replace('abc', 'x*', 'g', '-')") == "-a-b-c-"  # empty matches too


def test_arguments_are_converted_as_xpath_string_does() -> None:
    assert evaluate("re:test(//p, '^Is')") is True  # the first node's text
    assert evaluate("re:test(//nothing, '^$')") is True  # an empty node-set: ''
    assert evaluate("re:test(count(//p), '^2$')") is True  # 2, not 2.0
    assert evaluate("re:test(1 div 0, '^Infinity$')") is True
    assert evaluate("re:test(boolean(//p), '^true$')") is True
    assert xpath_string(0.5) == "0.5"
    assert xpath_string(float("nan")) == "NaN"


def test_a_catastrophic_pattern_runs_on_re2() -> None:
    # Python's re takes about 2**n steps for ^(a+)+$ on n a's and a b: for 10,000 of them it
    # would never return. That this one does, with RE2's verdict, is the proof; the counter
    # says RE2 compiled the pattern once and every node reused it.
    body = "".join(f"<i>{'a' * 10_000}b</i>" for _ in range(3))
    document = etree.HTML(f"<html><body>{body}<i>aaa</i></body></html>")
    before = compile_regexp.cache_info()

    matched = evaluate("count(//i[re:test(., '^(a+)+$')])", document)

    after = compile_regexp.cache_info()
    assert matched == 1.0
    assert (after.misses - before.misses, after.hits - before.hits) in {(1, 3), (0, 4)}


def test_a_pattern_re2_refuses_fails_the_call_with_its_reason() -> None:
    with pytest.raises(ValueError, match=r"re:test\(\): '\(\?=a\)' is not a valid RE2 pattern"):
        evaluate("re:test(., concat('(?=', 'a)'))")  # computed: only the call can tell


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        (
            "//p[re:test(., '(?=a)b')]",
            "re:test(): '(?=a)b' is not a valid RE2 pattern: invalid perl operator: (?=",
        ),
        (
            '//p[re:match(., "(a)\\1", "g")]',
            "re:match(): '(a)\\\\1' is not a valid RE2 pattern: invalid escape sequence: \\1",
        ),
        ("re:replace(//p, 'a', 'b')", "re:replace() takes 4 arguments (got 3)"),
        ("//p[re:test(.)]", "re:test() takes 2 or 3 arguments (got 1)"),
        ("//p[re:tset(., 'a')]", "re:tset() is no EXSLT regular expression function"),
    ],
)
def test_a_literal_pattern_or_call_that_cannot_run_is_refused_by_the_model(
    query: str, problem: str
) -> None:
    found = literal_problem(query)
    assert found is not None
    assert found.startswith(problem)
    with pytest.raises(SelectorError) as refused:
        check_selector("xpath", query)
    assert refused.value.message == f"is not a valid XPath selector: {found}"


@pytest.mark.parametrize(
    "query",
    [
        "//p[re:test(., 'a(?i)b')]",
        "//p[re:test(., text())]",  # computed: compiled when the call runs
        "//p[contains(., \"re:test(., '(?=')\")]",  # a call inside a string is text
        "//p[re:test(re:replace(., '\\s+', 'g', ' '), '^a b$', 'i')]",
        "//p[re:test (., 'a')]",
        "//re:test",  # an element named test in that namespace, not a call
    ],
)
def test_what_can_run_is_accepted(query: str) -> None:
    assert literal_problem(query) is None
    check_selector("xpath", query)
