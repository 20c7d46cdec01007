"""bench.output's worker launcher: ``crawlfleet worker``, optionally with fsync turned off.

    python -m bench.output_worker [--no-fsync] --log-level warning worker job.yaml ...

Every crawl of bench.output starts its worker through this module, so the variants differ
only in what they are meant to differ in. ``--no-fsync`` makes ``os.fsync`` a no-op in this
process before crawlfleet is imported: the folder store then renames its files without
making their data or their folder entries durable, which is what the bench compares the
real store against (``file_fsync_vs_nofsync_rate``). A benchmark switch, never a product
one: a crawl that does not fsync may ack pages a power cut loses.
"""

from __future__ import annotations

import os
import sys


def _no_fsync(descriptor: int) -> None:
    """Skip the fsync (the bench's A/B only)."""


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--no-fsync"]:
        os.fsync = _no_fsync
        args = args[1:]
    sys.argv = ["crawlfleet", *args]
    from crawlfleet.cli import run

    run()


if __name__ == "__main__":
    main()
