"""The worker's own entry (``crawlfleet worker``, crawlfleet/launch.py): its flags, its refusals
in one line, and the termination message its runner reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlfleet.cli import main as cli_main
from crawlfleet.launch import main

EXAMPLE = Path(__file__).parents[2] / "examples" / "crawljob.yaml"


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
