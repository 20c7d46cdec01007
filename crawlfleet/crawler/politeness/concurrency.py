"""Adaptive concurrency (AIMD): back off fast when a site struggles, creep up when it copes.

Halve the limit after ``failures_to_halve`` failures in a row, add one after
``successes_to_grow`` successes in a row, always within ``1..maximum`` (DESIGN §4). Pure
state: the worker feeds it outcomes and reads ``limit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AdaptiveLimit"]


@dataclass(slots=True)
class AdaptiveLimit:
    maximum: int
    failures_to_halve: int = 5
    successes_to_grow: int = 20
    limit: int = field(init=False)
    _failures: int = field(default=0, init=False)
    _successes: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.maximum < 1:
            raise ValueError(f"maximum concurrency must be at least 1 (got {self.maximum})")
        self.limit = self.maximum

    def record(self, ok: bool) -> int:
        """Feed one outcome; returns the limit after it."""
        if ok:
            self._failures = 0
            self._successes += 1
            if self._successes >= self.successes_to_grow:
                self._successes = 0
                self.limit = min(self.maximum, self.limit + 1)
        else:
            self._successes = 0
            self._failures += 1
            if self._failures >= self.failures_to_halve:
                self._failures = 0
                self.limit = max(1, self.limit // 2)
        return self.limit
