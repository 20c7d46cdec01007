"""Fixtures of the crawler's integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.crawls import kill_stray_workers


@pytest.fixture(autouse=True)
def _no_stray_workers() -> Iterator[None]:
    """A test that fails mid-crawl must not leave worker processes behind."""
    yield from kill_stray_workers()
