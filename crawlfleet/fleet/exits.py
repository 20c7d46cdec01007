"""How a worker ended, as whatever runs it learns it: the termination message and its reading.

A worker that cannot go on -- its output destination refuses the start-up test write, its Redis
cannot be reached, its job is invalid -- prints one sentence and exits 2. So that whatever runs
it can say *why* without anyone reading logs, it also writes that sentence, after the error's
reason (:attr:`crawlfleet.errors.CrawlfleetError.reason`), to its *termination message* file
(``crawlfleet worker --termination-log``, ``CRAWLFLEET_TERMINATION_LOG``), on one line::

    OutputUnavailable: output destination s3://crawls/books/ at http://store:7070: ...

In a pod that file is the container's ``terminationMessagePath`` (``/dev/termination-log``),
which the kubelet copies into the container status (``state.terminated.message``, then
``lastState.terminated.message`` once it restarts); locally it is ``logs/<worker>.exit``
beside the worker's log, read by the local backend. A worker that dies without writing it (a
traceback, an import error) leaves the tail of its log instead: the pod's
``terminationMessagePolicy: FallbackToLogsOnError`` has the kubelet use that, and the local
backend reads the same tail. :func:`parse_exit` reads either into a :class:`UnitExit`, which a
backend's ``observe()`` carries in :class:`~crawlfleet.fleet.backend.Unit`; the tick's policy
turns repeated deaths at start into a decision (``WorkersFailing``).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "FALLBACK_REASON",
    "MAX_MESSAGE_BYTES",
    "UnitExit",
    "log_tail",
    "parse_exit",
    "termination_message",
    "write_termination_message",
]

#: The kubelet keeps at most this much of a container's termination message.
MAX_MESSAGE_BYTES: Final = 4096
#: What FallbackToLogsOnError hands over of a log: its last 2048 bytes (or 80 lines).
LOG_TAIL_BYTES: Final = 2048
#: The reason of an exit whose message names none (a traceback's tail, a killed process).
FALLBACK_REASON: Final = "WorkerExited"
_REASONED: Final = re.compile(r"([A-Z][A-Za-z0-9]{0,62}): (.+)")
_CLI_PREFIX: Final = "crawlfleet: "


@dataclass(frozen=True, slots=True)
class UnitExit:
    """The last time the worker of a unit ended: its code, why, and how long it had lived.

    ``reason`` is CamelCase (a condition's reason): the worker's own
    (``OutputUnavailable``, ``RedisUnavailable``, ``InvalidConfig``...), an exception's name
    read from a traceback's last line, or :data:`FALLBACK_REASON`. ``message`` is one line.
    """

    code: int
    reason: str
    message: str
    lived_seconds: float

    @property
    def failed(self) -> bool:
        """It exited on its own with an error: what a worker that cannot start does.

        A clean exit (0) is not one, nor a kill (a signal: a negative code from
        ``Popen.returncode``, or 128 + the signal from a container runtime): a worker killed
        by chaos, a node drain or a person was stopped, it did not fail to start.
        """
        return 0 < self.code < 128

    @property
    def error(self) -> tuple[str, str]:
        """What "the same error" compares: deaths with equal errors are one crash loop."""
        return self.reason, self.message


def termination_message(reason: str, sentence: str) -> str:
    """The text a worker writes to its termination message file: ``<Reason>: <sentence>``."""
    line = f"{reason}: {' '.join(sentence.split())}"
    encoded = line.encode("utf-8")
    if len(encoded) > MAX_MESSAGE_BYTES - 1:
        line = encoded[: MAX_MESSAGE_BYTES - 4].decode("utf-8", errors="ignore") + "..."
    return line + "\n"


def write_termination_message(path: Path | None, reason: str, sentence: str) -> None:
    """Best effort: a worker on its way out must not fail again because a file cannot be
    written; its sentence is on stderr (its log) either way."""
    if path is None:
        return
    with contextlib.suppress(OSError):
        path.write_text(termination_message(reason, sentence), encoding="utf-8")


def log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The end of a log, as FallbackToLogsOnError would hand it over ("" when unreadable)."""
    try:
        with path.open("rb") as log:
            log.seek(0, 2)
            size = log.tell()
            log.seek(max(0, size - limit))
            return log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def parse_exit(code: int, text: str, *, lived_seconds: float) -> UnitExit:
    """A worker's exit from what its runner read: a termination message, or a log's tail.

    The last non-empty line counts (a termination message has one; a log's tail ends with the
    sentence or the traceback's exception line). ``Reason: message`` gives its reason; the
    CLI's ``crawlfleet:`` prefix is dropped. Nothing to read: the exit code says it all.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return UnitExit(code, FALLBACK_REASON, f"exited with code {code}", lived_seconds)
    line = lines[-1].removeprefix(_CLI_PREFIX)
    reasoned = _REASONED.fullmatch(line)
    if reasoned is not None:
        return UnitExit(code, reasoned[1], reasoned[2], lived_seconds)
    return UnitExit(code, FALLBACK_REASON, line, lived_seconds)
