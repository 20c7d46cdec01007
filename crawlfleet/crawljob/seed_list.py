"""Reading a seedsFrom list: streamed, bounded, and never quoted.

A seed list is the one input of a job that the operator reads in full, in its own process,
which every tenant of the cluster shares; so it is read as hostile input:

* **bounded**: at most :attr:`SeedListBounds.max_bytes` once decompressed and
  :attr:`SeedListBounds.max_lines` lines (blank and comment lines count: a list of a hundred
  million empty lines is a gzip bomb too, and costs a loop turn each). Past either bound the
  list is refused with the bound in the sentence; the administrator may move both
  (``CRAWLFLEET_SEED_LIST_MAX_BYTES``/``_LINES``, the chart's ``policy.seedList``);
* **streamed**: gzip is decompressed a buffer at a time (the ``gzip`` module asks zlib for at
  most what one read wants) and lines are read one at a time, each cut at
  :data:`MAX_LINE_BYTES`; so what the reader holds is the seeds kept, never the list, and a
  bomb costs one buffer, however far it would expand;
* **never quoted**: a problem names the line's number and the reason, never the line. The
  list may be a ConfigMap its job's author cannot read, and the sentence goes to the job's
  status and Events, which they can; ``crawlfleet validate`` and ``crawlfleet run`` say the
  same sentences (one reader, one rule).
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Final

from crawlfleet.crawljob.fields import MIB
from crawlfleet.crawljob.seeds import seed_problem
from crawlfleet.errors import ConfigError

__all__ = [
    "DEFAULT_SEED_LIST_BOUNDS",
    "MAX_LINE_BYTES",
    "MAX_SEED_LIST_BYTES",
    "MAX_SEED_LIST_LINES",
    "SeedListBounds",
    "parse_seed_list",
]

#: The largest seed list, in bytes once decompressed. A list in a ConfigMap is at most 1 MiB of
#: gzip (about 10 MiB of URLs, 300,000 of them); 64 MiB leaves room for a file of
#: ``crawlfleet run`` and keeps what the operator may hold for one job (the seeds it keeps) a
#: fraction of its 256 Mi limit.
MAX_SEED_LIST_BYTES: Final = 64 * MIB
#: The most lines a seed list may have, blank and comment lines included.
MAX_SEED_LIST_LINES: Final = 1_000_000
#: A line longer than this is refused unread (a seed is at most 2,048 characters; room is left
#: for a comment): a list of one endless line would otherwise be held whole.
MAX_LINE_BYTES: Final = 8192
#: Bad lines reported together before reading stops.
_MAX_PROBLEMS: Final = 10
_GZIP_MAGIC: Final = b"\x1f\x8b"
_BOM: Final = "\ufeff"
_SETTINGS: Final = {
    "max_bytes": ("CRAWLFLEET_SEED_LIST_MAX_BYTES", "policy.seedList.maxBytes"),
    "max_lines": ("CRAWLFLEET_SEED_LIST_MAX_LINES", "policy.seedList.maxLines"),
}


@dataclass(frozen=True, slots=True)
class SeedListBounds:
    """How large a seed list may be; the defaults are the named constants above."""

    max_bytes: int = MAX_SEED_LIST_BYTES
    max_lines: int = MAX_SEED_LIST_LINES

    @classmethod
    def of(cls, max_bytes: int | None = None, max_lines: int | None = None) -> SeedListBounds:
        """The bounds an administrator set (``config.SeedListConfig``); None keeps a default."""
        bounds = cls(
            MAX_SEED_LIST_BYTES if max_bytes is None else max_bytes,
            MAX_SEED_LIST_LINES if max_lines is None else max_lines,
        )
        for name, (variable, _) in _SETTINGS.items():
            if getattr(bounds, name) < 1:
                raise ConfigError(f"{variable}: must be at least 1 (got {getattr(bounds, name)})")
        return bounds


#: The bounds of whoever does not say otherwise (tests, ``crawlfleet enqueue``).
DEFAULT_SEED_LIST_BOUNDS: Final = SeedListBounds()


def _bound(name: str) -> str:
    variable, value = _SETTINGS[name]
    return f"(its administrator sets the bound: {variable}, chart value {value})"


def _size(count: int) -> str:
    return f"{count // MIB} MiB" if count % MIB == 0 else f"{count:,} bytes"


def parse_seed_list(
    source: bytes | BinaryIO, where: str, bounds: SeedListBounds = DEFAULT_SEED_LIST_BOUNDS
) -> tuple[str, ...]:
    """The seeds of a seedsFrom list, each refused or kept as an entry of spec.seeds is.

    ``source`` is the list as stored (gzip-compressed when it starts with gzip's magic bytes):
    bytes, or a binary file open at its start (read as a stream, never whole). ``where`` names
    it in every problem ("spec.seedsFrom.file (seeds.txt)"), which gives the line's number and
    the reason, never the line. The first ten bad lines are reported together; repeats are
    dropped.
    """
    stream: BinaryIO = io.BytesIO(source) if isinstance(source, bytes) else source
    head = stream.read(len(_GZIP_MAGIC))
    stream.seek(0)
    compressed = head == _GZIP_MAGIC
    lines: io.BufferedIOBase | BinaryIO = (
        gzip.GzipFile(fileobj=stream, mode="rb") if compressed else stream
    )
    seeds: dict[str, None] = {}  # in order, each once
    problems: list[str] = []
    try:
        for number, line in _numbered_lines(lines, where, bounds, compressed=compressed):
            reason = _line_problem(number, line, seeds)
            if reason is not None:
                problems.append(f"{where}: line {number}: {reason}")
                if len(problems) == _MAX_PROBLEMS:
                    break
    except (OSError, EOFError, zlib.error):
        # Never the library's words: gzip's name the bytes it found where a header should be.
        raise ConfigError(
            f"{where}: starts as gzip but does not decompress (corrupt or cut short)"
        ) from None
    if problems:
        count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
        raise ConfigError("\n  ".join([f"invalid seed list ({count}):", *problems]))
    if not seeds:
        raise ConfigError(f"{where}: holds no seed URL (one absolute http(s) URL per line)")
    return tuple(seeds)


def _line_problem(number: int, line: bytes | None, seeds: dict[str, None]) -> str | None:
    """Keep the line's seed in ``seeds``; or why it is refused, in words that quote nothing."""
    if line is None:
        return f"is longer than {MAX_LINE_BYTES} bytes"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text"
    url = (text.removeprefix(_BOM) if number == 1 else text).strip()
    if not url or url.startswith("#"):
        return None
    reason = seed_problem(url)
    if reason is None:
        seeds[url] = None
    return reason


def _numbered_lines(
    stream: io.BufferedIOBase | BinaryIO, where: str, bounds: SeedListBounds, *, compressed: bool
) -> Iterator[tuple[int, bytes | None]]:
    """Each line with its number (None for one past MAX_LINE_BYTES), within the bounds."""
    read = 0
    number = 0

    def counted(chunk: bytes) -> bytes:
        nonlocal read
        read += len(chunk)
        if read > bounds.max_bytes:
            once = " once decompressed" if compressed else ""
            raise ConfigError(
                f"{where}: is larger than {_size(bounds.max_bytes)}{once}, the most a seed"
                f" list may hold {_bound('max_bytes')}"
            )
        return chunk

    while line := counted(stream.readline(MAX_LINE_BYTES + 1)):
        number += 1
        if number > bounds.max_lines:
            raise ConfigError(
                f"{where}: has more than {bounds.max_lines:,} lines, the most a seed list may"
                f" have {_bound('max_lines')}"
            )
        if len(line) <= MAX_LINE_BYTES:
            yield number, line
            continue
        while not line.endswith(b"\n") and (line := counted(stream.readline(MAX_LINE_BYTES))):
            pass  # the rest of the line, counted, not kept
        yield number, None
