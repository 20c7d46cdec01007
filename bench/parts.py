"""Local parts: what a download's checkpoints cost, with and without early writeback, one run.

    python -m bench.parts [--quick] [--json]

Why: a file download checkpoints its part every ``files.partSizeBytes`` (16 MiB by default):
the bytes are fsynced before the sidecar moves, and the download waits for that fsync
(crawlfleet/crawler/files/parts.py). Left alone, the kernel writes a part's dirty pages back
late, so each fsync waits for up to a whole part to reach the disk. ``LocalPart`` asks for the
writeback as each 1 MiB buffer is written (``posix_fadvise(POSIX_FADV_DONTNEED)``), so a
checkpoint waits only for the tail. This writes the same bytes through a ``LocalPart`` in 16 KiB
chunks (a network chunk), checkpointing every 16 MiB, both ways, alternately, in the output's
own folder (the disk a run writes to), and reports MiB/s and the seconds spent in checkpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from crawlfleet.crawler.files import parts

_MIB = 1 << 20
_CHUNK_BYTES = 16 * 1024
_PART_BYTES = 16 * _MIB
_URL = "https://bench.example/clip.mp4"


async def _write_part(store: parts.LocalParts, size: int) -> dict[str, float]:
    part = await store.open(_URL)
    chunk = os.urandom(_CHUNK_BYTES)
    pending, in_checkpoints = 0, 0.0
    started = time.perf_counter()
    for _ in range(size // _CHUNK_BYTES):
        await part.write(chunk)
        pending += _CHUNK_BYTES
        if pending >= _PART_BYTES:
            before = time.perf_counter()
            await part.checkpoint()
            in_checkpoints += time.perf_counter() - before
            pending = 0
    await part.checkpoint()
    seconds = time.perf_counter() - started
    await part.discard()
    return {
        "mib_per_second": round(size / _MIB / seconds, 1),
        "checkpoint_seconds": round(in_checkpoints, 3),
        "seconds": round(seconds, 3),
    }


async def _run(size: int, rounds: int, folder: Path) -> dict[str, Any]:
    results: dict[str, list[dict[str, float]]] = {"early_writeback": [], "fsync_only": []}
    for _ in range(rounds):
        for way, rows in results.items():
            root = Path(tempfile.mkdtemp(prefix="bench-parts-", dir=folder))
            try:
                store = parts.LocalParts(root, early_writeback=way == "early_writeback")
                rows.append(await _write_part(store, size))
            finally:
                shutil.rmtree(root, ignore_errors=True)
    return {
        "size_mib": size // _MIB,
        "part_mib": _PART_BYTES // _MIB,
        "rounds": results,
        "early_writeback_available": parts.EARLY_WRITEBACK,
        "machine": {
            "cpus": os.cpu_count(),
            "load": os.getloadavg(),
            "python": platform.python_version(),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.parts", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="256 MiB a round, not 1 GiB")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=Path.cwd(), help="where parts are written")
    args = parser.parse_args(argv)
    size = (256 if args.quick else 1024) * _MIB
    report = asyncio.run(_run(size, args.rounds, args.folder))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for way, rounds in report["rounds"].items():
            cells = ", ".join(
                f"{r['mib_per_second']} MiB/s ({r['checkpoint_seconds']} s in checkpoints)"
                for r in rounds
            )
            print(f"{way}: {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
