"""The private redis-server's stop: what it wrote survives, however the stop is carried out."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from crawlfleet.local.redis_server import RedisServer


def _write_then_stop(data_dir: Path, password: str | None, stop_with: str | None) -> None:
    """Write one key, stop (authenticating with ``stop_with``), and check the clean exit."""
    server = RedisServer(data_dir, appendonly=True, password=password).start()
    with redis.Redis.from_url(server.url) as client:
        client.set("page", "crawled")
    server.password = stop_with
    server.stop()
    assert server.process is not None
    assert server.process.returncode == 0


def _read_back(data_dir: Path, password: str | None) -> bytes | None:
    again = RedisServer(data_dir, appendonly=True, password=password).start()
    try:
        with redis.Redis.from_url(again.url) as client:
            value: bytes | None = client.get("page")
            return value
    finally:
        again.stop()


@pytest.mark.parametrize("password", [None, "s3cret"])
def test_stop_syncs_the_aof_so_a_restart_finds_the_data(tmp_path: Path, password: str) -> None:
    _write_then_stop(tmp_path, password, stop_with=password)
    assert _read_back(tmp_path, password) == b"crawled"


def test_a_refused_shutdown_falls_back_to_sigterm(tmp_path: Path) -> None:
    _write_then_stop(tmp_path, "right", stop_with="wrong")  # AUTH fails, so SHUTDOWN does
    assert _read_back(tmp_path, "right") == b"crawled"
