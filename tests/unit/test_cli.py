"""The command line: validate reports like the CRD will; the worker refuses missing settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlfleet.cli import main

EXAMPLE = Path(__file__).parents[2] / "examples" / "crawljob.yaml"


def test_validate_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    assert "default/books is valid" in capsys.readouterr().out


def test_validate_names_the_bad_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("errorRate: 0.01", "errorRate: 0.7"))
    assert main(["validate", str(bad)]) == 2
    assert "spec.dedup.errorRate" in capsys.readouterr().err


def test_worker_without_redis_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", str(EXAMPLE)]) == 2
    assert "--redis-url" in capsys.readouterr().err
