"""``crawlfleet validate`` on the bad-spec corpus and on generated junk: a sentence, never a trace.

The corpus (tests/bad_specs/, see tests/support/bad_specs.py) says what every door answers; this
is the first door, the command line. The API server and the operator: tests/e2e/test_bad_specs.py.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlfleet.cli import main
from tests.support.bad_specs import BadSpec, bad_specs

CASES = bad_specs()
EXAMPLE = Path(__file__).parents[2] / "examples" / "crawljob.yaml"
# "crawlfleet: <file>: <sentence>" or "crawlfleet: invalid CrawlJob in <file> (N problems):"
# followed by one "  <path>: <sentence>" line per problem.
_PROBLEM_LINE = re.compile(r"  \S+: \S.*")


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", str(path)])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def assert_one_clear_refusal(code: int, output: str) -> None:
    assert code == 2, output
    assert "Traceback" not in output
    first, *rest = output.rstrip("\n").split("\n")
    assert first.startswith("crawlfleet: "), output
    assert all(_PROBLEM_LINE.fullmatch(line) for line in rest), output


def test_the_corpus_covers_every_door() -> None:
    doors = {case.door for case in CASES}
    assert doors == {"cel", "schema", "operator"}
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_validate_refuses_each_bad_spec_with_its_field_and_sentence(
    case: BadSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    code, output = validate(case.path, capsys)
    assert_one_clear_refusal(code, output)
    assert f"\n  {case.expected}" in output, output


def test_the_installed_command_prints_the_sentence_and_exits_2() -> None:
    # The real entry point, in its own process: what a user's shell sees.
    cases = [CASES[0], *(case for case in CASES if case.door == "operator")][:3]
    for case in cases:
        result = subprocess.run(
            [sys.executable, "-m", "crawlfleet", "validate", str(case.path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        assert case.expected in result.stderr
        assert "Traceback" not in result.stderr + result.stdout


# --- files that are not a CrawlJob at all -------------------------------------------------------

_HEAD = "apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: x}\n"
_ALIASES = "".join(
    f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 10) if level else 'x'}]\n"
    for level in range(8)
)
FILES: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "holds no YAML documents"),
    "comments only": (b"# nothing here\n", "holds no YAML documents"),
    "binary junk": (bytes(range(256)) * 8, "is not UTF-8 text"),
    "latin-1": (_HEAD.encode() + b"spec: {seeds: ['http://a.test/\xe9']}\n", "is not UTF-8"),
    "utf-16": ((_HEAD + "spec: {}\n").encode("utf-16"), "is not UTF-8 text"),
    "bad yaml": (b"spec: [unclosed\n", "not valid YAML"),
    "tab indent": (b"apiVersion: x\n\tkind: y\n", "not valid YAML"),
    "python tag": (_HEAD.encode() + b"spec: !!python/object:os.system {}\n", "not valid YAML"),
    "deep list": ((_HEAD + "spec: " + "[" * 5000 + "]" * 5000).encode(), "nested more than"),
    "deep map": ((_HEAD + "spec: " + "{a: " * 3000 + "1" + "}" * 3000).encode(), "nested more"),
    "thousands of digits": ((_HEAD + "spec: {dedup: {capacity: " + "9" * 5000 + "}}").encode(),
                            "an integer of thousands of digits"),
    "lone surrogate": ((_HEAD + 'spec: {seeds: ["http://a.test/\\ud800"]}').encode(),
                       "lone surrogate"),
    "alias bomb": ((_HEAD + _ALIASES + "spec: {workers: {resources: {limits: *l7}}}").encode(),
                   "once its YAML aliases are expanded"),
    "recursive alias": ((_HEAD + "spec: &s {workers: {resources: *s}}").encode(), "not valid YAML"),
    "a list": (b"- a\n- b\n", "expected a mapping, got list"),
    "a scalar": (b"hello\n", "expected a mapping, got str"),
    "two documents": (_HEAD.encode() + b"spec: {seeds: ['http://a.test/']}\n---\na: 1\n",
                      "holds 2 YAML documents"),
    "duplicate key": (_HEAD.encode() + b"spec: {seeds: ['http://a.test/']}\nspec: {}\n",
                      "duplicate key"),
    "too large": (b"# " + b"x" * (9 * 1024 * 1024) + b"\n", "is larger than 8 MiB"),
}  # fmt: skip


@pytest.mark.parametrize(("data", "expected"), FILES.values(), ids=list(FILES))
def test_a_file_that_is_no_crawljob_gets_one_sentence(
    data: bytes, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(data)
    code, output = validate(path, capsys)
    assert_one_clear_refusal(code, output)
    assert expected in output


def test_what_is_not_a_regular_file_gets_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it would wait for a writer forever
    for path, expected in [
        (tmp_path, "is a directory, not a CrawlJob file"),
        (tmp_path / "missing.yaml", "No such file or directory"),
        (fifo, "is not a regular file"),
        (Path("/dev/zero"), "is not a regular file"),
    ]:
        code, output = validate(path, capsys)
        assert_one_clear_refusal(code, output)
        assert expected in output


# --- generated junk: a valid job, mutated ---------------------------------------------------------

_JUNK_VALUES: list[Any] = [
    None, True, 0, -1, 1.5, -0.0, 10**30, -(10**30), 1e308, float("nan"), float("inf"),
    "", " ", "x" * 5000, "\u00e9\u00df\U0001f4a9", "\x00\x07\t\n", "http://", "[", "{}", "a{99999}",
    "(a+)+$", "::1", "redis://", [], [None], [[[]]], {}, {"": None}, {"a": {"b": {"c": []}}},
    ["http://a.test/"] * 3, {"seeds": 1},
]  # fmt: skip


def _mutate(document: Any, rng: random.Random) -> Any:
    """The document with one value somewhere replaced, a key added or a key dropped."""
    if isinstance(document, dict) and document and rng.random() < 0.7:
        key = rng.choice(list(document))
        action = rng.random()
        if action < 0.15:
            return {k: v for k, v in document.items() if k != key}
        if action < 0.3:
            return {
                **document,
                rng.choice(["x", "seed", "Spec", key + "s"]): rng.choice(_JUNK_VALUES),
            }
        return {**document, key: _mutate(document[key], rng)}
    if isinstance(document, list) and document and rng.random() < 0.7:
        index = rng.randrange(len(document))
        return [*document[:index], _mutate(document[index], rng), *document[index + 1 :]]
    return rng.choice(_JUNK_VALUES)


def test_generated_junk_gets_a_verdict_never_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(2026)
    example = yaml.safe_load(EXAMPLE.read_text())
    refused = 0
    path = tmp_path / "junk.yaml"
    for round_ in range(400):
        mutated = example
        for _ in range(rng.randint(1, 4)):
            mutated = _mutate(mutated, rng)
        text = json.dumps(mutated) if round_ % 2 else yaml.safe_dump(mutated)
        if round_ % 7 == 0:  # and raw text damage too
            cut = rng.randrange(len(text) + 1)
            text = (
                text[:cut]
                + rng.choice(["\n  - ", ": ", "'", "&a ", "*a", "\t", "\ufffe"])
                + text[cut:]
            )
        path.write_text(text, encoding="utf-8")
        code, output = validate(path, capsys)
        if code == 0:
            assert output.endswith("is valid\n"), output
            continue
        assert_one_clear_refusal(code, output)
        refused += 1
    assert refused >= 300  # the junk is junk: most of it must be refused
