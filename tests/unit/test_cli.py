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


def test_examples_demo_is_the_packaged_demo() -> None:
    packaged = Path(__file__).parents[2] / "crawlfleet" / "local" / "demo.yaml"
    assert (EXAMPLE.parent / "demo.yaml").read_text() == packaged.read_text()


def test_the_readme_crawljob_is_valid(tmp_path: Path) -> None:
    import re

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = re.search(r"## A CrawlJob in 15 lines\n\n```yaml\n(.*?)```", readme, re.S)
    assert block is not None
    job = tmp_path / "readme.yaml"
    job.write_text(block.group(1))
    assert main(["validate", str(job)]) == 0
