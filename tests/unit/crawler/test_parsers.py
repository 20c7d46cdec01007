"""What a user parser may return, and a parser that cannot be loaded
(crawler/harvest/parsers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlfleet.cli import main
from crawlfleet.crawler.harvest.parsers import ParseResult, _collect, load_parser
from crawlfleet.errors import ConfigError


def test_items_are_dicts_and_links_strs_in_any_iterable() -> None:
    result = _collect(iter([{"a": 1}, "/next", {"b": [1, None]}]))
    assert result == ParseResult(({"a": 1}, {"b": [1, None]}), ("/next",))
    assert _collect(None) == ParseResult()
    assert _collect([]) == ParseResult()


@pytest.mark.parametrize(
    ("returned", "reason"),
    [
        (42, "returned int"),
        ({"a": 1}, "returned dict"),  # one item must still come in an iterable
        ("http://a.test/", "returned str"),
        ([3.5], "gave float"),
        ([{1: "x"}], "gave dict"),
        ([{"when": object()}], "an item JSON cannot hold"),
    ],
)
def test_junk_is_named(returned: object, reason: str) -> None:
    error = _collect(returned).error
    assert error is not None
    assert reason in error


def test_a_missing_module_or_function_is_one_sentence() -> None:
    with pytest.raises(ConfigError, match="cannot import no_such_module: ModuleNotFoundError"):
        load_parser("no_such_module:parse")
    with pytest.raises(ConfigError, match=r"crawlfleet\.parsing has no function nothing_here"):
        load_parser("crawlfleet.parsing:nothing_here")
    assert callable(load_parser("tests.support.parsers:hostile"))


def test_validate_refuses_a_parser_it_cannot_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: p}\n"
        "spec: {seeds: ['https://a.test/'], parser: 'no_such_module.sub:parse'}\n"
    )
    assert main(["validate", str(job)]) == 2
    err = capsys.readouterr().err
    assert "spec.parser: cannot import no_such_module.sub: ModuleNotFoundError" in err
    assert "Traceback" not in err
