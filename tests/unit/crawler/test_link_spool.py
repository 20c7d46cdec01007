"""The worker's link spool (crawler/worker/spool.py): links kept on disk per partition, the
leases they hold released only when every partition they went to took them, a bound that
refuses an add whole, and a predecessor's leftovers never read."""

from __future__ import annotations

from pathlib import Path

from crawlfleet.crawler.worker.spool import (
    REPLAY_FIRST_SECONDS,
    REPLAY_MAX_SECONDS,
    LinkSpool,
    ReplayBackoff,
)
from crawlfleet.frontier import Link, canonicalize


def _links(host: str, count: int) -> list[Link]:
    return [Link(canonicalize(f"http://{host}/p{n}"), 2, f"http://{host}/") for n in range(count)]


def test_links_come_back_per_partition_in_order_with_depth_and_parent(tmp_path: Path) -> None:
    spool = LinkSpool(tmp_path / "spool")
    assert spool.add({3: _links("a.test", 3), 5: _links("b.test", 2)}, ["lease-1"])
    assert spool.add({3: _links("c.test", 1)}, ["lease-2"])
    assert spool.read(3) == _links("a.test", 3) + _links("c.test", 1)
    assert spool.read(5) == _links("b.test", 2)
    assert spool.read(7) == []
    assert (spool.links, spool.partitions) == (6, (3, 5))
    assert spool.bytes == sum(p.stat().st_size for p in (tmp_path / "spool").iterdir())


def test_a_lease_is_released_only_when_every_partition_it_waits_for_took_its_links(
    tmp_path: Path,
) -> None:
    spool = LinkSpool(tmp_path)
    spool.add({3: _links("a.test", 1), 5: _links("b.test", 1)}, ["both"])
    spool.add({3: _links("c.test", 1)}, ["three", "three-too"])
    assert spool.replayed(3) == ["three", "three-too"]
    assert spool.partitions == (5,)
    assert spool.replayed(5) == ["both"]
    assert (spool.links, spool.bytes, spool.partitions) == (0, 0, ())
    assert list(tmp_path.glob("partition-*.jsonl")) == []


def test_an_add_past_the_bound_is_refused_whole_until_a_replay_frees_room(
    tmp_path: Path,
) -> None:
    spool = LinkSpool(tmp_path, max_bytes=400)
    assert spool.add({1: _links("a.test", 4)}, ["first"])
    before = (spool.links, spool.bytes, spool.read(1))
    assert not spool.add({1: _links("b.test", 4), 2: _links("c.test", 4)}, ["second"])
    assert spool.full
    assert (spool.links, spool.bytes, spool.read(1)) == before  # nothing of it written
    assert spool.read(2) == []
    assert spool.replayed(1) == ["first"]
    assert not spool.full
    assert spool.add({1: _links("b.test", 4)}, ["second"])


def test_a_batch_larger_than_the_bound_waits_and_clears_full_once_through(
    tmp_path: Path,
) -> None:
    spool = LinkSpool(tmp_path, max_bytes=100)
    assert not spool.add({1: _links("a.test", 10)}, ["big"])
    assert spool.full
    assert (spool.links, spool.partitions) == (0, ())
    spool.passed()  # the batch went through once its partition answered
    assert not spool.full


def test_a_predecessors_leftovers_are_removed_not_replayed(tmp_path: Path) -> None:
    (tmp_path / "partition-4.jsonl").write_text('["http://old.test/",1,""]\n')
    spool = LinkSpool(tmp_path)
    assert spool.read(4) == []
    spool.add({4: _links("new.test", 1)}, ["lease"])
    assert spool.read(4) == _links("new.test", 1)


def test_a_private_folder_is_removed_at_close(tmp_path: Path) -> None:
    spool = LinkSpool()
    spool.add({2: _links("a.test", 2)}, ["lease"])
    folder = spool.directory
    assert folder.exists()
    spool.close()
    assert not folder.exists()
    given = LinkSpool(tmp_path / "given")
    given.add({2: _links("a.test", 2)}, ["lease"])
    given.close()
    assert (tmp_path / "given").exists()
    assert list((tmp_path / "given").iterdir()) == []


def test_replays_back_off_while_the_partition_stays_silent() -> None:
    backoff = ReplayBackoff()
    assert backoff.due(0.0)
    waits = [backoff.missed(0.0) for _ in range(5)]
    assert waits[0] == REPLAY_FIRST_SECONDS
    assert waits == sorted(waits)
    assert waits[-1] == REPLAY_MAX_SECONDS
    assert not backoff.due(REPLAY_MAX_SECONDS - 0.1)
    backoff.answered()
    assert backoff.due(0.0)
