"""The worker process's garbage-collector settings (crawler/worker/process.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from crawlfleet.crawler.worker.process import GC_YOUNG_THRESHOLD, _settle_garbage_collector


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
