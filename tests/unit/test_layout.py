"""The package's shape: each package names its public face, and each module's ``__all__`` is true.

As httpx checks its exported members: a package's ``__all__`` must list exactly the public
names its ``__init__`` binds (a name imported there and left out is a public name nobody
chose; a name listed and missing breaks ``from package import *``).
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from types import ModuleType

import pytest

import crawlfleet

#: Packages whose ``__init__`` imports its public face.
PACKAGES = (
    "crawlfleet",
    "crawlfleet.crawler",
    "crawlfleet.fleet",
    "crawlfleet.frontier",
    "crawlfleet.testsite",
)
#: Packages that name their public face but import it on first use (``crawlfleet._exports``).
LAZY_PACKAGES = ("crawlfleet.local", "crawlfleet.operator")


def _modules() -> list[str]:
    names = ["crawlfleet"]
    for info in pkgutil.walk_packages(crawlfleet.__path__, "crawlfleet."):
        if not info.name.endswith("__main__"):
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", PACKAGES)
def test_a_package_names_exactly_its_public_face(name: str) -> None:
    package = importlib.import_module(name)
    exported = getattr(package, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    bound = {
        member
        for member, value in vars(package).items()
        if not member.startswith("_") and not isinstance(value, ModuleType)
    }
    assert set(exported) - {"__version__"} == bound, f"{name}.__all__ differs from its imports"


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_a_lazy_package_names_its_face_and_imports_it_only_when_used(name: str) -> None:
    probe = (
        f"import sys, {name} as package; "
        "print(sorted(m for m in sys.modules if m.startswith(package.__name__ + '.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]", f"importing {name} imported its modules"
    package = importlib.import_module(name)
    assert sorted(package.__all__) == list(package.__all__)
    for member in package.__all__:
        value = getattr(package, member)
        assert value.__module__.startswith(name + "."), (member, value.__module__)
    assert not hasattr(package, "no_such_name")


@pytest.mark.parametrize("name", _modules())
def test_every_module_names_only_what_it_has(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    missing = [member for member in exported if not hasattr(module, member)]
    assert missing == [], f"{name}.__all__ names what it does not have"


def test_the_zygote_starts_before_anything_heavy() -> None:
    """``crawlfleet run`` starts the zygote first so it imports while the runner does: the
    module it runs must import nothing heavy itself (nor through its package)."""
    heavy = ("redis", "pydantic", "httpx", "aiohttp", "yaml", "crawlfleet.crawljob")
    probe = (
        "import sys, crawlfleet.local.zygote; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r} or m in {heavy!r}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"
