"""The termination message a worker writes, and how a backend reads it (or a log's tail)."""

from __future__ import annotations

from pathlib import Path

from crawlfleet.errors import ConfigError, FrontierUnavailable, OutputError, OutputUnavailable
from crawlfleet.fleet.exits import (
    FALLBACK_REASON,
    MAX_MESSAGE_BYTES,
    log_tail,
    parse_exit,
    termination_message,
    write_termination_message,
)


def test_a_message_is_its_reason_and_one_line() -> None:
    text = termination_message("OutputUnavailable", "output destination s3://b/\nat x: gone")
    assert text == "OutputUnavailable: output destination s3://b/ at x: gone\n"
    read = parse_exit(2, text, lived_seconds=0.4)
    assert (read.code, read.reason, read.message) == (2, "OutputUnavailable", text[19:-1])
    assert read.lived_seconds == 0.4
    assert read.error == ("OutputUnavailable", "output destination s3://b/ at x: gone")


def test_a_long_message_fits_the_kubelets_limit() -> None:
    text = termination_message("InvalidConfig", "é" * 5000)
    assert len(text.encode()) <= MAX_MESSAGE_BYTES
    assert text.endswith("...\n")


def test_each_error_names_its_reason() -> None:
    assert OutputError("x").reason == OutputUnavailable("x").reason == "OutputUnavailable"
    assert ConfigError("x").reason == "InvalidConfig"
    assert FrontierUnavailable("x").reason == "RedisUnavailable"


def test_a_log_tail_gives_its_last_line_and_a_tracebacks_exception() -> None:
    traceback = "Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'seeds'\n"
    read = parse_exit(1, traceback, lived_seconds=1.0)
    assert (read.reason, read.message) == ("KeyError", "'seeds'")
    cli = parse_exit(2, "some log line\ncrawlfleet: spec.seeds: required\n\n", lived_seconds=1)
    assert (cli.reason, cli.message) == (FALLBACK_REASON, "spec.seeds: required")
    assert parse_exit(137, "", lived_seconds=3).message == "exited with code 137"


def test_writing_is_best_effort(tmp_path: Path) -> None:
    target = tmp_path / "worker.exit"
    write_termination_message(target, "RedisUnavailable", "Redis unavailable: refused")
    assert target.read_text() == "RedisUnavailable: Redis unavailable: refused\n"
    write_termination_message(tmp_path / "missing" / "x.exit", "R", "s")  # no folder: no error
    write_termination_message(None, "R", "s")


def test_a_log_tail_reads_only_the_end(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("a" * 5000 + "\nlast line\n")
    tail = log_tail(log, limit=100)
    assert len(tail) == 100
    assert tail.endswith("last line\n")
    assert log_tail(tmp_path / "none.log") == ""


def test_only_an_exit_on_its_own_with_an_error_is_a_failure_to_start() -> None:
    assert parse_exit(2, "", lived_seconds=1).failed
    assert parse_exit(1, "", lived_seconds=1).failed
    assert not parse_exit(0, "", lived_seconds=1).failed
    assert not parse_exit(-9, "", lived_seconds=1).failed  # killed (Popen's returncode)
    assert not parse_exit(137, "", lived_seconds=1).failed  # killed (a container's code)
