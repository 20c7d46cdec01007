"""The output's closing files (manifest.json, dead-letters.jsonl) have one writer per job.

Whoever wins the frontier's claim writes them and marks them written; everyone after reads
the counts back instead of writing them again (a worker and ``crawlfleet run`` both used to
write them locally); a claim someone else holds means they are being written elsewhere.
Real redis-server, a real folder.
"""

from __future__ import annotations

from pathlib import Path

from crawlfleet.destinations import parse_destination
from crawlfleet.frontier import Frontier
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.output.manifest import MANIFEST, finish_output_once
from crawlfleet.output.stores import FolderStore
from tests.support.specs import frontier_settings, job_spec


async def complete_frontier(url: str, job_id: str) -> Frontier:
    """A job whose one seed was claimed and acked: complete."""
    frontier = await Frontier.connect(url, frontier_settings(job_id))
    await frontier.seed(["http://a.test/"])
    (lease,) = await frontier.claim("w-1", 1)
    await frontier.ack("w-1", [lease.lease_id])
    assert (await frontier.stats()).complete
    return frontier


async def test_the_first_writer_writes_and_the_next_reads_its_counts(
    redis_server: RedisServer, job_id: str, tmp_path: Path
) -> None:
    frontier = await complete_frontier(redis_server.url, job_id)
    store = FolderStore(parse_destination(str(tmp_path / "out")))
    await store.check()
    spec, stats = job_spec(), await frontier.stats()
    try:
        first = await finish_output_once(frontier, store, job_id, spec, stats, writer="w-1")
        assert first is not None
        assert first["crawled"] == 1
        written = (tmp_path / "out" / MANIFEST).stat()
        again = await finish_output_once(frontier, store, job_id, spec, stats, writer="run")
        assert again == first
        after = (tmp_path / "out" / MANIFEST).stat()
        assert (after.st_ino, after.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    finally:
        await frontier.aclose()


async def test_a_claim_held_elsewhere_writes_nothing_here(
    redis_server: RedisServer, job_id: str, tmp_path: Path
) -> None:
    frontier = await complete_frontier(redis_server.url, job_id)
    store = FolderStore(parse_destination(str(tmp_path / "out")))
    await store.check()
    try:
        assert await frontier.claim_output_finish("w-2", 60)
        spec, stats = job_spec(), await frontier.stats()
        assert await finish_output_once(frontier, store, job_id, spec, stats, writer="w-3") is None
        assert not (tmp_path / "out" / MANIFEST).exists()
    finally:
        await frontier.aclose()
