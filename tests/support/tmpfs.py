"""A small real file system that fills up: a tmpfs of a few hundred KiB, mounted for one test.

Mounting needs root (the suite runs as root here); a machine where it is refused fails the test
with the reason, never skips it: a full disk is a fault the output must survive, and only a
real file system says ENOSPC the way a real disk does (a partial write, then the error).
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["fill", "small_disk"]

#: The bytes a filler file writes at a time: a page of tmpfs, so the last one fills it exactly.
_FILL_CHUNK_BYTES = 4096


@contextmanager
def small_disk(path: Path, size_bytes: int, *, inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` (and at most ``inodes`` files and folders) mounted on
    ``path`` (created), unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size_bytes},mode=0755" + (f",nr_inodes={inodes}" if inodes else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.fail(
            f"cannot mount a {size_bytes}-byte tmpfs on {path} (this test needs root and a"
            f" kernel with tmpfs): {mounted.stderr.strip() or mounted.returncode}"
        )
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def fill(path: Path) -> int:
    """Write ``path`` until its file system is full; the bytes it took. Delete it to free them."""
    written = 0
    chunk = b"\0" * _FILL_CHUNK_BYTES
    with path.open("wb", buffering=0) as out:
        while True:
            try:
                taken = out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
            written += taken
    return written
