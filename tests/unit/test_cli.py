"""The command line: validate reports like the CRD will; the worker refuses missing settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlfleet.cli import main
from crawlfleet.crawljob import CrawlJobSpec, load_crawljob

EXAMPLE = Path(__file__).parents[2] / "examples" / "crawljob.yaml"


def test_validate_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    assert "default/books is valid" in capsys.readouterr().out


def test_validate_names_the_bad_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("errorRate: 0.01", "errorRate: 0.7"))
    assert main(["validate", str(bad)]) == 2
    assert "spec.dedup.errorRate" in capsys.readouterr().err


def test_validate_with_the_policy_refuses_what_the_operator_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "hostpath.yaml"
    job.write_text(
        "apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: hp}\n"
        "spec:\n  seeds: ['https://books.example/']\n"
        "  workers: {image: 'evil.example/miner:1'}\n"
        "  output: {volume: {hostPath: {path: /}}}\n"
        "  redis: {url: 'redis://:pw@db.internal:6379/0'}\n"
    )
    assert main(["validate", str(job)]) == 0  # not a cluster's concern unless asked
    capsys.readouterr()
    assert main(["validate", "--policy", str(job)]) == 2
    err = capsys.readouterr().err
    assert "\n  spec.workers.image: is not an image this operator allows" in err
    assert "\n  spec.output.volume.hostPath: is not a volume type this operator allows" in err
    assert "\n  spec.redis.url: names a Redis on db.internal, which this operator does not" in err
    assert "pw" not in err
    # The administrator's policy, as the operator reads it.
    monkeypatch.setenv("CRAWLFLEET_ALLOWED_WORKER_IMAGES", "evil.example/")
    monkeypatch.setenv("CRAWLFLEET_ALLOWED_VOLUME_TYPES", "hostPath")
    monkeypatch.setenv("CRAWLFLEET_ALLOWED_REDIS_HOSTS", "db.internal")
    assert main(["validate", "--policy", str(job)]) == 0


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


def test_validate_accepts_scope_sitemaps_and_the_model_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "sitemaps.yaml"
    job.write_text(
        "apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: sm}\n"
        "spec:\n  seeds: ['https://books.example/']\n  scope: {sitemaps: true}\n"
    )
    assert main(["validate", str(job)]) == 0
    assert "default/sm is valid" in capsys.readouterr().out
    assert load_crawljob(job).spec.scope.sitemaps is True
    assert CrawlJobSpec.from_mapping({"seeds": ["https://books.example/"]}).scope.sitemaps is False
