"""requirements.lock, the one lock of exact versions, against what it must cover.

The suite's virtualenv (scripts/bootstrap) installs all of it; each image installs the part
scripts/lock_select.py picks. A requirement added to pyproject.toml, or a floor raised, without
running scripts/lock would otherwise go unnoticed: bootstrap and the images install with
--no-deps, so nothing would resolve the new requirement, and it would be missing at run time.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
#: The extras the lock is written for: the suite's (bootstrap) and the operator image's.
LOCKED_EXTRAS = ("operator", "test")


def _lock_select() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_select", REPO / "scripts/lock_select.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building the class
    spec.loader.exec_module(module)
    return module


lock_select = _lock_select()


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> dict[str, str]:
    """The lock's versions by canonical name."""
    versions = {}
    for line in LOCK.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if match:
            versions[canonical(match.group(1))] = match.group(2)
    return versions


def declared() -> list[Requirement]:
    project = PYPROJECT["project"]
    texts = list(project["dependencies"])
    for extra in LOCKED_EXTRAS:
        texts += project["optional-dependencies"][extra]
    texts += PYPROJECT["build-system"]["requires"]
    return [Requirement(text) for text in texts]


def applies_here(requirement: Requirement) -> bool:
    """Whether the requirement's marker holds on a Python 3.11 the images or the suite run."""
    if requirement.marker is None:
        return True
    return any(
        requirement.marker.evaluate({**default_environment(), **python})
        for python in (
            {"python_version": "3.11", "python_full_version": "3.11.2"},  # the stand-in base
            {"python_version": "3.11", "python_full_version": "3.11.14"},  # the official base
        )
    )


def test_every_declared_requirement_is_pinned_within_its_range() -> None:
    versions = pinned()
    for requirement in declared():
        if not applies_here(requirement):
            continue
        name = canonical(requirement.name)
        assert name in versions, f"{requirement} is not in requirements.lock: run scripts/lock"
        assert requirement.specifier.contains(versions[name], prereleases=True), (
            f"requirements.lock pins {name}=={versions[name]}, outside {requirement}: "
            "run scripts/lock"
        )


def test_every_entry_is_an_exact_version_with_hashes() -> None:
    pins = lock_select.read_lock(LOCK.read_text())
    assert len(pins) == len(pinned()) > 0
    for pin in pins.values():
        first = pin.text.splitlines()[0]
        assert re.match(r"^[A-Za-z0-9._-]+==[^ ;]+", first), first
        assert "--hash=sha256:" in pin.text, f"{pin.name} has no hash"


def test_the_virtualenv_runs_the_locked_versions() -> None:
    """bootstrap installed the lock into the virtualenv these tests run in."""
    versions = pinned()
    for requirement in declared():
        if applies_here(requirement) and requirement.name != "setuptools":
            name = canonical(requirement.name)
            assert metadata.version(requirement.name) == versions[name], name


def needs(roots: list[Requirement], extras: set[str]) -> set[str]:
    """Every distribution ``roots`` pull in, by the installed packages' own metadata: an account
    independent of the lock's annotations, which lock_select.py walks. (Markers are this
    interpreter's: what only an older patch release needs is the lock's own marker's business.)"""
    found: set[str] = set()
    todo = [(r, extras) for r in roots]
    while todo:
        requirement, wanted = todo.pop()
        environment = dict(default_environment())
        if requirement.marker is not None and not any(
            requirement.marker.evaluate({**environment, "extra": extra})
            for extra in (wanted or {""})
        ):
            continue
        name = canonical(requirement.name)
        if name in found and not requirement.extras:
            continue
        found.add(name)
        for text in metadata.requires(requirement.name) or ():
            todo.append((Requirement(text), set(requirement.extras)))
    return found


@pytest.mark.parametrize(
    ("image", "extras"), [("worker", []), ("operator", ["operator"])], ids=["worker", "operator"]
)
def test_an_images_part_of_the_lock_holds_all_it_needs_and_no_test_tools(
    image: str, extras: list[str]
) -> None:
    pins = lock_select.read_lock(LOCK.read_text())
    roots = lock_select.declared(PYPROJECT, extras, build=True)
    chosen = {pin.name for pin in lock_select.select(pins, roots)}
    project = PYPROJECT["project"]
    runtime = [Requirement(t) for t in project["dependencies"]]
    for extra in extras:
        runtime += [Requirement(t) for t in project["optional-dependencies"][extra]]
    missing = needs(runtime, set()) - chosen
    assert missing == set(), f"the {image} image would lack {sorted(missing)}"
    assert "setuptools" in chosen  # the build backend, removed after the package is built
    assert {"pytest", "mypy", "hypothesis", "scrapy"}.isdisjoint(chosen)
    assert ("kopf" in chosen) == (image == "operator")


def test_selecting_an_extra_the_project_lacks_is_refused() -> None:
    with pytest.raises(SystemExit, match="no extra 'nonesuch'"):
        lock_select.declared(PYPROJECT, ["nonesuch"], build=False)
