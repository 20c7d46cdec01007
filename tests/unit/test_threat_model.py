"""docs/security.md's threat model names, for each line, the test that proves it: a line whose
test was renamed or removed would promise what nothing checks any more."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECURITY = REPO / "docs" / "security.md"
#: ``tests/…py::name`` (a later ``::name`` in the same cell is of the file named before it).
CITED = re.compile(r"`(tests/[\w/]+\.py)((?:::\w+)?)`|`::(\w+)`")


def threat_model() -> str:
    text = SECURITY.read_text(encoding="utf-8")
    start = text.index("## Threat model")
    return text[start : text.index("\n## ", start + 1)]


def cited_tests(section: str) -> list[tuple[str, str | None]]:
    """(file, test name or None) for every test a table row cites."""
    cited: list[tuple[str, str | None]] = []
    for row in section.splitlines():
        if not row.startswith("| ") or row.startswith("| ---"):
            continue
        last: str | None = None
        for found in CITED.finditer(row):
            path, name, bare = found.groups()
            if path:
                last = path
                cited.append((path, name[2:] or None))
            else:
                assert last is not None, f"`::{bare}` with no file before it: {row[:80]}"
                cited.append((last, bare))
    return cited


def defined_tests(path: str) -> set[str]:
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def test_every_line_of_the_threat_model_names_tests_that_exist() -> None:
    section = threat_model()
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| ---")]
    cited = cited_tests(section)
    assert len(rows) > 15
    assert len(cited) >= len(rows)
    for row in rows[1:]:  # every promise cites at least one test
        assert CITED.search(row), f"a line of the threat model cites no test: {row[:100]}"
    missing = [
        f"{path}::{name}" if name else path
        for path, name in cited
        if not (REPO / path).is_file() or (name is not None and name not in defined_tests(path))
    ]
    assert missing == []


def test_a_renamed_test_would_be_noticed() -> None:
    here = "tests/unit/test_threat_model.py"
    row = f"| x | y | z | `{here}::test_that_is_not_here`, `::test_nor_this` |"
    cited = cited_tests(f"| who |\n| --- |\n{row}\n")
    defined = defined_tests(here)
    assert [name for _, name in cited] == ["test_that_is_not_here", "test_nor_this"]
    assert not any(name in defined for _, name in cited)
