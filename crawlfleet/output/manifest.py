"""The files that close a crawl's output: ``dead-letters.jsonl`` and ``manifest.json``.

Both are written once, at completion, by one writer, from the frontier: the worker that wins
:meth:`~crawlfleet.frontier.Frontier.claim_output_finish` in :func:`finish_output_once` (the
first idle or draining worker once nothing is left to crawl, in a cluster and under
``crawlfleet run`` alike), which then marks them written
(:meth:`~crawlfleet.frontier.Frontier.mark_output_finished`). The steering tick reports the job
Succeeded only after that mark (``FrontierStats.output_finished``), keeping a worker to write
them meanwhile, so whoever sees Succeeded finds the manifest:

* ``dead-letters.jsonl``: every URL that will not be tried again, with its last failure class
  and message, one JSON line each. They live in the frontier's dead set (requeued leases of dead
  workers included, which no worker's file would hold), and an object store cannot append, so
  a file per worker would need merging anyway.
* ``manifest.json``: the job, the spec's SHA-256, the counts, and every file with its size,
  SHA-256 and record count. A job with ``spec.files`` counts its file records
  (``fileRecords``), the distinct files stored (``storedFiles``) and their bytes
  (``fileBytes``); the stored files themselves (``files/sha256/...``) are not listed: each file
  record names its own, with size and SHA-256, and ``crawlfleet output verify`` checks them.
  The workers recorded each file in the frontier before acking its pages, so the manifest
  lists every file that holds an acknowledged record, without reading the destination back;
  ``crawlfleet output verify`` checks the destination against it.

A file can be durable and not listed: one whose pages were acked by no one (its worker lost the
leases, and another crawled the pages again). Readers treat it as the duplicate it is.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from crawlfleet.crawljob import CrawlJobSpec
    from crawlfleet.frontier import Frontier, FrontierStats
    from crawlfleet.output.stores import OutputStore

__all__ = [
    "DEAD_LETTERS",
    "FINISH_CLAIM_SECONDS",
    "MANIFEST",
    "MANIFEST_VERSION",
    "finish_output",
    "finish_output_once",
    "spec_sha256",
    "written_counts",
]

MANIFEST: Final = "manifest.json"
DEAD_LETTERS: Final = "dead-letters.jsonl"
#: Bumped when a reader of an older manifest would misread a newer one.
MANIFEST_VERSION: Final = 1
#: How long a writer's claim on the closing files lasts: one that dies while writing leaves
#: them to another after this.
FINISH_CLAIM_SECONDS: Final = 120.0


def spec_sha256(spec: CrawlJobSpec) -> str:
    """SHA-256 of the spec with every default filled, as canonical JSON (sorted keys)."""
    text = json.dumps(spec.to_mapping(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def finish_output(
    frontier: Frontier,
    store: OutputStore,
    job_id: str,
    spec: CrawlJobSpec,
    stats: FrontierStats,
    *,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Write ``dead-letters.jsonl``, then ``manifest.json`` (last: its presence says the set is
    whole); returns the manifest. ``run_id``: the run of a scheduled job whose files these are
    (``store`` is then the run's, ``runs/<run-id>/``); the manifest names it."""
    lines = []
    async for letter in frontier.dead_letters():
        lines.append(
            json.dumps(
                {
                    "url": letter.url,
                    "failure_class": letter.failure_class,
                    "message": letter.message,
                    "attempts": letter.attempts,
                    "depth": letter.depth,
                    "parent": letter.parent,
                    "failed_at": letter.at,
                },
                ensure_ascii=False,
                separators=(",", ":"),
            )
        )
    dead = "".join(line + "\n" for line in sorted(lines)).encode("utf-8")
    await store.put(DEAD_LETTERS, dead)
    files = await frontier.output_files()
    files.append(
        {
            "path": DEAD_LETTERS,
            "size": len(dead),
            "sha256": hashlib.sha256(dead).hexdigest(),
            "records": len(lines),
        }
    )
    records = sum(int(f["records"]) for f in files if str(f["path"]).startswith("pages/"))
    items = sum(int(f["records"]) for f in files if str(f["path"]).startswith("items/"))
    file_counts: dict[str, int] = {}
    if spec.files is not None:
        # Stored files are counted in the frontier as they are stored (once per content, across
        # the runs of a scheduled job): one O(1) read, nothing read back from the destination.
        stored = await frontier.file_stats()
        file_counts = {
            "fileRecords": sum(
                int(f["records"]) for f in files if str(f["path"]).startswith("files/")
            ),
            "storedFiles": stored.stored,
            "fileBytes": stored.bytes,
        }
    manifest: dict[str, Any] = {
        "manifestVersion": MANIFEST_VERSION,
        "job": job_id,
        **({"run": run_id} if run_id is not None else {}),
        "specSha256": spec_sha256(spec),
        "format": spec.output.format,
        "destination": store.destination.url,
        "completedAt": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "counts": {
            "crawled": stats.crawled,
            "failedAttempts": stats.failed,
            "deadLettered": stats.dead,
            "seen": stats.seen,
            "pageRecords": records,
            "itemRecords": items,
            **file_counts,
            "files": len(files),
        },
        "files": sorted(files, key=lambda entry: str(entry["path"])),
    }
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    await store.put(MANIFEST, text.encode("utf-8"))
    return manifest


async def finish_output_once(
    frontier: Frontier,
    store: OutputStore,
    job_id: str,
    spec: CrawlJobSpec,
    stats: FrontierStats,
    *,
    writer: str,
    run_id: str | None = None,
) -> dict[str, int] | None:
    """The closing files' counts once they are written: by ``writer`` now, if it wins the
    claim, or by whoever did before. None: another writer holds the claim (it writes them)."""
    written = await written_counts(frontier)
    if written is not None:
        return written
    if not await frontier.claim_output_finish(writer, FINISH_CLAIM_SECONDS):
        return None
    manifest = await finish_output(frontier, store, job_id, spec, stats, run_id=run_id)
    counts: dict[str, int] = manifest["counts"]
    await frontier.mark_output_finished(json.dumps(counts, separators=(",", ":")))
    return counts


async def written_counts(frontier: Frontier) -> dict[str, int] | None:
    """The manifest's counts once the closing files are written; None before."""
    written = await frontier.output_finished()
    if written is None:
        return None
    return {str(key): int(value) for key, value in json.loads(written).items()}
