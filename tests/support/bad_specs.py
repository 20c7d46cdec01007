"""The corpus of bad CrawlJobs under tests/bad_specs/: one YAML per case, its verdict on top.

Each file is a whole CrawlJob, so ``crawlfleet validate`` and ``kubectl apply`` take it as it is;
its first lines are comments that say what every door must answer::

    # door: cel | schema | operator
    # field: spec.lease.ttlSeconds
    # message: must be between 1 and 86400

``field: message`` is what ``crawlfleet validate`` prints (exit 2). ``door`` says who refuses it
in a cluster: ``cel``, the API server, in the same words (a CEL rule with the model's message);
``schema``, the API server by its structural schema, naming the field in its own words (types,
unknown fields, the lengths the CEL cost estimator needs); ``operator``, nobody at admission
(CEL cannot say it, or cannot afford to), so the operator marks the job ``InvalidSpec`` with the
model's ``field: message``. tests/unit/test_bad_specs.py checks the first door,
tests/e2e/test_bad_specs.py the other two.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = ["CORPUS", "BadSpec", "bad_specs"]

CORPUS = Path(__file__).resolve().parents[1] / "bad_specs"
Door = Literal["cel", "schema", "operator"]


@dataclass(frozen=True, slots=True)
class BadSpec:
    path: Path
    door: Door
    field: str
    message: str

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def expected(self) -> str:
        """The line ``crawlfleet validate`` and the InvalidSpec condition carry."""
        return f"{self.field}: {self.message}"

    def document(self) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load(self.path.read_text(encoding="utf-8"))
        return loaded


def bad_specs(door: Door | None = None) -> list[BadSpec]:
    cases = []
    for path in sorted(CORPUS.glob("*.yaml")):
        header: dict[str, str] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("# "):
                break
            key, _, value = line[2:].partition(": ")
            header[key] = value
        case = BadSpec(path, header["door"], header["field"], header["message"])  # type: ignore[arg-type]
        if case.door not in ("cel", "schema", "operator"):
            raise ValueError(f"{path}: door must be cel, schema or operator")
        if door is None or case.door == door:
            cases.append(case)
    return cases
