"""What every crawlfleet process does first: log as JSON lines, and import without cyclic GC.

Both entries use it: the ``crawlfleet`` command (``cli.py``) and the worker's own entry
(``launch.py:main``), which the zygote calls in a forked child without the command
line. It imports only the standard library, so either may use it before anything heavy.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import sys
from collections.abc import Iterator

__all__ = ["JsonFormatter", "setup_logging", "without_gc"]


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the structured fields (layer, worker, job) kept."""

    _FIELDS = ("layer", "worker", "job", "host")

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in self._FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(level: str) -> None:
    """JSON lines on stderr at ``level``; crawlfleet's own INFO still reaches file handlers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.setLevel(level.upper())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("crawlfleet").setLevel(min(logging.INFO, handler.level))
    # httpx logs every request at INFO: a JSON line per page is noise and CPU. Our own
    # request layer logs what matters (retries, failures) with its layer field.
    if handler.level > logging.DEBUG:
        logging.getLogger("httpx").setLevel(logging.WARNING)


@contextlib.contextmanager
def without_gc() -> Iterator[None]:
    """No cyclic GC while a process imports its modules and parses its job.

    Start-up builds only long-lived objects (modules, pydantic's validators), so the
    collections their allocations would trigger find nothing to free; a crawl run pays its
    start-up once per worker it starts (docs/benchmarks.md has the saving).
    """
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
