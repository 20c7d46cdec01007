"""The package's shape: public faces, the one error tree, and who may speak Redis.

As httpx checks its exported members: a package's ``__all__`` must list exactly the public
names its ``__init__`` binds (a name imported there and left out is a public name nobody
chose; a name listed and missing breaks ``from package import *``). Errors raised on purpose
belong to ``CrawlfleetError``'s tree, documented in ``crawlfleet/errors.py``. Redis is spoken
by ``crawlfleet.frontier`` alone (DESIGN §3), which translates its errors once.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import crawlfleet
from crawlfleet import errors
from crawlfleet.errors import CrawlfleetError

PACKAGE_DIR = Path(crawlfleet.__file__).parent
#: Errors outside the tree, and why none of them reaches a user.
OUTSIDE_THE_TREE = {
    "crawlfleet.hosts.InvalidHost": "a ValueError of a pure helper; callers translate it",
    "crawlfleet.patterns.PatternError": "a ValueError of a pure helper; the model translates it",
    "crawlfleet.destinations.InvalidDestination": (
        "a ValueError of a pure helper; the model and the command line translate it"
    ),
    "crawlfleet.operator.crd.SchemaError": "a bug in the model, found by the CRD's tests",
    "crawlfleet.selection.SelectorError": "a ValueError of a pure helper; the model translates it",
    "crawlfleet.crawler.harvest.extract.ExtractionError": (
        "a page's extraction failed: the harvest turns it into the page's parser_error"
    ),
    "crawlfleet.crawler.links.sitemaps.SitemapRefused": (
        "a sitemap could not be read: the worker turns it into the sitemap's failure class"
    ),
    "crawlfleet.scrapy.payload.Unserializable": (
        "a Scrapy request the frontier cannot carry: the runtime counts it dropped and logs it"
    ),
}

#: The ground floor: pure helpers that import nothing of crawlfleet's but each other, so that
#: the CrawlJob model (``crawlfleet.crawljob``), which every layer reads, can stand on them.
GROUND_FLOOR = (
    "crawlfleet.destinations",
    "crawlfleet.errors",
    "crawlfleet.hosts",
    "crawlfleet.patterns",
    "crawlfleet.selection",
    "crawlfleet.urls",
    "crawlfleet.xpath_regexp",
)
#: Packages whose ``__init__`` imports its public face.
PACKAGES = (
    "crawlfleet",
    "crawlfleet.crawler",
    "crawlfleet.crawljob",
    "crawlfleet.fleet",
    "crawlfleet.frontier",
    "crawlfleet.testsite",
)
#: Packages that name their public face but import it on first use (``crawlfleet._exports``).
LAZY_PACKAGES = ("crawlfleet.local", "crawlfleet.operator", "crawlfleet.output")


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


def _error_classes() -> dict[str, type[BaseException]]:
    found = {}
    for name in _modules():
        module = importlib.import_module(name)
        for member, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found[f"{name}.{member}"] = value
    return found


def test_every_error_raised_on_purpose_is_in_the_one_tree() -> None:
    outside = {
        name for name, error in _error_classes().items() if not issubclass(error, CrawlfleetError)
    }
    assert outside == set(OUTSIDE_THE_TREE)


def test_the_tree_is_drawn_where_it_is_defined() -> None:
    tree = errors.__doc__ or ""
    defined = [
        name for name, error in _error_classes().items() if issubclass(error, CrawlfleetError)
    ]
    assert all(name.startswith("crawlfleet.errors.") for name in defined), defined
    block = tree.split("::", 1)[1].split("\n\n")[1]  # the drawing, one error a line
    drawn = set(re.findall(r"^[\s│├└─]*(\w+)", block, re.M))
    assert {name.rsplit(".", 1)[1] for name in defined} == drawn


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function, relative imports resolved;
    ``from package import name`` counts ``package.name`` too, in case the name is a module."""
    package = ".".join(path.relative_to(PACKAGE_DIR.parent).parts[:-1])  # where "." starts
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            imported.add(module)
            imported.update(f"{module}.{alias.name}" for alias in node.names)
    return imported


def test_nothing_outside_the_frontier_speaks_redis() -> None:
    speakers = sorted(
        str(path.relative_to(PACKAGE_DIR.parent))
        for path in PACKAGE_DIR.rglob("*.py")
        if "frontier" not in path.relative_to(PACKAGE_DIR).parts[:1]
        and any(m == "redis" or m.startswith("redis.") for m in _imported_modules(path))
    )
    assert speakers == []


def _within(module: str, places: tuple[str, ...]) -> bool:
    return any(module == place or module.startswith(f"{place}.") for place in places)


def test_the_model_stands_on_the_ground_floor_only() -> None:
    """The CrawlJob model is read by every layer, so it imports none of them (the frontier, the
    output stores, the crawler, the fleet, the operator, the local runner, the Scrapy runtime):
    only its own modules and the pure helpers of the ground floor, at the top or lazily."""
    for path in (PACKAGE_DIR / "crawljob").rglob("*.py"):
        ours = {m for m in _imported_modules(path) if _within(m, ("crawlfleet",))}
        above = {m for m in ours if not _within(m, ("crawlfleet.crawljob", *GROUND_FLOOR))}
        assert above == set(), path


def test_the_ground_floor_imports_nothing_above_it() -> None:
    for name in GROUND_FLOOR:
        path = PACKAGE_DIR.parent.joinpath(*name.split(".")).with_suffix(".py")
        ours = {m for m in _imported_modules(path) if _within(m, ("crawlfleet",))}
        assert {m for m in ours if not _within(m, GROUND_FLOOR)} == set(), path


def test_the_crawler_and_the_operator_never_import_each_other() -> None:
    """STYLE: crawler and operator depend on frontier and fleet, never on each other."""
    for side, other in (("crawler", "operator"), ("operator", "crawler")):
        for path in (PACKAGE_DIR / side).rglob("*.py"):
            imported = _imported_modules(path)
            assert not any(m.startswith(f"crawlfleet.{other}") for m in imported), path


def test_only_the_command_line_imports_the_command_line() -> None:
    """The zygote used to import cli.py to run a worker: the one import circle there was."""
    importers = sorted(
        str(path.relative_to(PACKAGE_DIR.parent))
        for path in PACKAGE_DIR.rglob("*.py")
        if path.name != "__main__.py" and "crawlfleet.cli" in _imported_modules(path)
    )
    assert importers == []
