"""The worker process: its own entry (``crawlfleet worker``) and its garbage-collector settings."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.cli import main as cli_main
from crawlfleet.crawler.worker.process import GC_YOUNG_THRESHOLD, _settle_garbage_collector, main

EXAMPLE = Path(__file__).parents[3] / "examples" / "crawljob.yaml"


def test_the_worker_entry_refuses_missing_settings_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRAWLFLEET_REDIS_URL", raising=False)
    assert main([str(EXAMPLE)]) == 2
    err = capsys.readouterr().err
    assert "no Redis given" in err
    assert "Traceback" not in err
    assert main(["--redis-url", "redis://127.0.0.1:9/0"]) == 2
    assert "no CrawlJob given" in capsys.readouterr().err


def test_a_worker_that_must_stop_writes_why_for_its_runner(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Exit 2, the sentence on stderr, and ``<Reason>: <sentence>`` in the termination log:
    a missing setting, and a destination refused at start (a folder under a file)."""
    monkeypatch.delenv("CRAWLFLEET_REDIS_URL", raising=False)
    why = tmp_path / "worker.exit"
    assert main([str(EXAMPLE), "--termination-log", str(why)]) == 2
    assert why.read_text() == (
        "InvalidConfig: no Redis given: pass --redis-url or set CRAWLFLEET_REDIS_URL\n"
    )
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = main(
        [
            str(EXAMPLE), "--redis-url", "redis://127.0.0.1:9/0", "--output",
            str(blocker / "out"), "--termination-log", str(why),
        ]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert why.read_text().startswith(f"OutputUnavailable: output folder {blocker / 'out'}:")
    assert why.read_text().removeprefix("OutputUnavailable: ").strip() in err
    assert "Traceback" not in err


def test_crawlfleet_worker_is_the_worker_entry(capsys: pytest.CaptureFixture[str]) -> None:
    """The command line hands `worker`'s arguments, --help included, to the worker's entry."""
    with pytest.raises(SystemExit) as exit_:
        cli_main(["worker", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: crawlfleet worker")
    assert "--grace-seconds" in out
    with pytest.raises(SystemExit) as refused:
        cli_main(["worker", str(EXAMPLE), "--no-such-flag"])
    assert refused.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_start_up_objects_are_frozen_and_the_young_generation_is_larger() -> None:
    _, middle, old = gc.get_threshold()
    built_at_start_up: list[list[int]] = [[] for _ in range(10)]
    _settle_garbage_collector()
    assert gc.get_freeze_count() >= len(built_at_start_up)
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, middle, old)
