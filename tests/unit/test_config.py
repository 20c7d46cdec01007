"""Process knobs: one default each, the environment read once, flags on top, all documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crawlfleet.config import Config, DrainConfig, OutputConfig, environment_variables
from crawlfleet.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_defaults_without_environment() -> None:
    config = Config.from_env({})
    assert config == Config()
    assert config.worker.drain.grace_seconds == 25
    assert config.operator.tick_seconds == 5
    assert config.run.poll_seconds == 0.05


def test_environment_overrides_the_defaults_by_type() -> None:
    config = Config.from_env(
        {
            "CRAWLFLEET_GRACE_SECONDS": "7.5",
            "CRAWLFLEET_METRICS_PORT": "9200",
            "CRAWLFLEET_INCARNATION": "true",
            "CRAWLFLEET_NAMESPACES": "a, b,,c",
            "CRAWLFLEET_OUTPUT_DIR": "/data/out",
            "CRAWLFLEET_RETRY_LEAD_SECONDS": "3",
            "UNRELATED": "x",
        }
    )
    assert config.worker.drain.grace_seconds == 7.5
    assert config.worker.drain.budget_seconds == 58  # 7.5 + 35 + 10 + 5, rounded up
    # One variable, the port of whichever process reads it.
    assert (config.worker.metrics_port, config.operator.metrics_port) == (9200, 9200)
    assert config.worker.incarnation is True
    assert config.operator.namespaces == ("a", "b", "c")
    assert config.worker.output_dir == Path("/data/out")
    assert config.steering.retry_lead_seconds == 3


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CRAWLFLEET_GRACE_SECONDS", "soon"),
        ("CRAWLFLEET_GRACE_SECONDS", "-1"),
        ("CRAWLFLEET_TICK_SECONDS", "nan"),
        ("CRAWLFLEET_METRICS_PORT", "9090.5"),
        ("CRAWLFLEET_INCARNATION", "maybe"),
    ],
)
def test_a_bad_variable_is_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Config.from_env({name: value})


def test_a_redis_url_never_shows_in_a_repr() -> None:
    secret = "redis://:hunter2@redis:6379/0"
    config = Config.from_env({"CRAWLFLEET_REDIS_URL": secret})
    assert config.worker.redis_url == secret
    assert "hunter2" not in repr(config)


def test_the_drain_budget_covers_every_step() -> None:
    drain = DrainConfig(grace_seconds=25.2)
    assert drain.budget_seconds == 76
    steps = drain.grace_seconds + drain.output_seconds + drain.settle_seconds + drain.exit_seconds
    assert drain.budget_seconds >= steps


def test_the_last_uploads_get_one_whole_attempt() -> None:
    """The drain's output step outlasts one upload attempt (connect + request timeouts), so
    a worker stopped mid-upload is not killed before the store could answer."""
    assert DrainConfig().output_seconds >= OutputConfig().upload_attempt_seconds


def test_every_variable_is_documented() -> None:
    docs = (REPO / "docs" / "steering.md").read_text()
    documented = set(re.findall(r"CRAWLFLEET_[A-Z_]+", docs))
    documented |= {f"CRAWLFLEET{short}" for short in re.findall(r"`(_[A-Z_]+)`", docs)}
    missing = {name for name, _, _ in environment_variables()} - documented
    assert not missing, f"docs/steering.md lacks {sorted(missing)}"


def test_the_command_line_reads_its_defaults_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from crawlfleet.cli import main

    monkeypatch.setenv("CRAWLFLEET_TICK_SECONDS", "oops")
    assert main(["validate", str(REPO / "examples" / "crawljob.yaml")]) == 2
    err = capsys.readouterr().err
    assert "CRAWLFLEET_TICK_SECONDS='oops'" in err
    assert "Traceback" not in err


def test_the_worker_s_link_cache_size_comes_from_the_environment_and_must_be_positive() -> None:
    from crawlfleet.crawler.worker.flow import WorkerOptions

    config = Config.from_env({"CRAWLFLEET_LINK_CACHE_GENERATION_SIZE": "1000"}).worker
    options = WorkerOptions.from_config("w1", config, exit_when_done=True)
    assert options.link_cache_generation_size == 1000
    zero = Config.from_env({"CRAWLFLEET_LINK_CACHE_GENERATION_SIZE": "0"}).worker
    with pytest.raises(ConfigError, match="CRAWLFLEET_LINK_CACHE_GENERATION_SIZE: must be at"):
        WorkerOptions.from_config("w1", zero, exit_when_done=True)
