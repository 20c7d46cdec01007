"""The part of requirements.lock one install needs, printed as a requirements file.

requirements.lock is the project's one lock (scripts/lock writes it): every version the suite's
virtualenv and both images install, with hashes. The suite installs all of it; an image needs
only what its package extras pull in (the worker no pytest, no kopf). pip cannot install a subset
of a hashed requirements file (hashes in a constraints file are not enforced), so this walks the
lock's own `# via` annotations, from the requirements pyproject.toml declares for the chosen
extras, and prints those entries unchanged, hashes and markers included, for
`pip install --require-hashes --no-deps`. An annotation names every package that pulled a pin in,
so the walk cannot miss one; it may keep one the chosen extras do not need (a dependency that only
some extra of its parent asks for), which costs space, never correctness. The images run
`pip check` after installing to prove that.

Standard library only: it runs in the images' build stage before anything is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

# The project itself as uv names it in an annotation: never a package to install.
PROJECT_ANNOTATION = re.compile(r"\(pyproject\.toml\)$")
REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them: `backports.zstd` is `backports-zstd`."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    """One entry of the lock: its name, its text (pin, marker, hashes) and who pulled it in."""

    name: str
    text: str
    pulled_by: frozenset[str]


def read_lock(text: str) -> dict[str, Pin]:
    """The lock's entries by canonical name. An entry is its requirement line, its `--hash`
    continuation lines and the `# via` comment lines under it (uv's split annotation style)."""
    pins: dict[str, Pin] = {}
    name = ""
    lines: list[str] = []
    parents: set[str] = set()
    in_via = False

    def close() -> None:
        if name:
            pins[name] = Pin(name, "\n".join(lines).rstrip(" \\") + "\n", frozenset(parents))

    for line in text.splitlines():
        stripped = line.strip()
        if line and not line[0].isspace() and not line.startswith("#"):
            close()
            match = REQUIREMENT_NAME.match(line)
            if not match:
                raise ValueError(f"not a requirement line: {line!r}")
            name, lines, parents, in_via = canonical(match.group(1)), [line], set(), False
        elif stripped.startswith("--hash") and name:
            lines.append(line)
        elif stripped.startswith("# via") and name:
            in_via = True
            rest = stripped.removeprefix("# via").strip()
            if rest:
                parents.add(rest)
        elif in_via and stripped.startswith("#   "):
            parents.add(stripped.removeprefix("#").strip())
        elif not stripped or stripped.startswith("#"):
            in_via = False
    close()
    return {
        pin.name: Pin(
            pin.name,
            pin.text,
            frozenset(
                canonical(parent)
                for parent in pin.pulled_by
                if not PROJECT_ANNOTATION.search(parent) and not parent.startswith("-r")
            ),
        )
        for pin in pins.values()
    }


def declared(pyproject: dict[str, object], extras: list[str], build: bool) -> set[str]:
    """The names of the requirements pyproject.toml declares for these extras (and the build
    backend's, when the package is built from source beside them)."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    requirements: list[str] = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"lock_select: pyproject.toml has no extra {extra!r}")
        requirements += optional[extra]
    if build:
        build_system = pyproject["build-system"]
        assert isinstance(build_system, dict)
        requirements += build_system["requires"]
    names = set()
    for requirement in requirements:
        match = REQUIREMENT_NAME.match(requirement)
        assert match, requirement
        names.add(canonical(match.group(1)))
    return names


def select(pins: dict[str, Pin], roots: set[str]) -> list[Pin]:
    """The roots and everything the lock says they pulled in, in the lock's order."""
    missing = roots - set(pins)
    if missing:
        raise SystemExit(
            f"lock_select: requirements.lock lacks {sorted(missing)}: run scripts/lock"
        )
    chosen = set(roots)
    grew = True
    while grew:
        grew = False
        for pin in pins.values():
            if pin.name not in chosen and pin.pulled_by & chosen:
                chosen.add(pin.name)
                grew = True
    return [pin for pin in pins.values() if pin.name in chosen]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lock", type=Path, help="requirements.lock")
    parser.add_argument("pyproject", type=Path, help="pyproject.toml")
    parser.add_argument("--extra", action="append", default=[], help="a package extra")
    parser.add_argument(
        "--build", action="store_true", help="with the build backend pyproject.toml names"
    )
    args = parser.parse_args(argv)
    pins = read_lock(args.lock.read_text())
    roots = declared(tomllib.loads(args.pyproject.read_text()), args.extra, args.build)
    sys.stdout.write("".join(pin.text for pin in select(pins, roots)))


if __name__ == "__main__":
    main()
