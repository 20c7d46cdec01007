"""The package's shape: public faces, the one error tree, who may speak Redis, and who may
import whom.

As httpx checks its exported members: a package's ``__all__`` must list exactly the public
names its ``__init__`` binds (a name imported there and left out is a public name nobody
chose; a name listed and missing breaks ``from package import *``). Errors raised on purpose
belong to ``CrawlfleetError``'s tree, documented in ``crawlfleet/errors.py``. Redis is spoken
by ``crawlfleet.frontier`` alone (DESIGN §3), which translates its errors once. Imports run
down the floors of docs/architecture.md (:data:`FLOORS`, :data:`CRAWLER_ROOMS`), never up, and
no package's parts import each other in a circle.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
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
    "crawlfleet.proxies.InvalidProxy": (
        "a ValueError of a pure helper; the model and checked_proxies translate it"
    ),
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
    "crawlfleet.crawler.links.feeds.FeedRefused": (
        "a feed could not be read: the worker turns it into the feed's failure class"
    ),
    "crawlfleet.crawler.links.xml_input.DocumentRefused": (
        "the base of SitemapRefused and FeedRefused, which the worker handles alike"
    ),
    "crawlfleet.crawler.links.xml_input.DocumentTooLarge": (
        "a hostile XML document past its bound: each reader turns it into its own refusal"
    ),
    "crawlfleet.crawler.links.xml_input.MalformedDocument": (
        "a hostile XML document not well-formed: each reader turns it into its own refusal"
    ),
    "crawlfleet.scrapy.payload.Unserializable": (
        "a Scrapy request the frontier cannot carry: the runtime counts it dropped and logs it"
    ),
}

#: Who may import whom (docs/architecture.md draws it): every module of crawlfleet stands on
#: one floor, and imports only modules on its own floor or below -- at the top of a file, inside
#: a function, or under ``TYPE_CHECKING`` alike (a type named is a dependency on its meaning, and
#: a circle through annotations is still a circle). Lowest first; a new module is placed here.
FLOORS: tuple[tuple[str, ...], ...] = (
    # The ground floor: pure helpers that import nothing of crawlfleet's but each other, so
    # that the model, which every layer reads, can stand on them.
    (
        "crawlfleet",  # the package's own __init__: its version, nothing else
        "crawlfleet._exports",
        "crawlfleet.destinations",
        "crawlfleet.errors",
        "crawlfleet.hosts",
        "crawlfleet.networks",
        "crawlfleet.parsing",
        "crawlfleet.patterns",
        "crawlfleet.proxies",
        "crawlfleet.selection",
        "crawlfleet.startup",
        "crawlfleet.urls",
        "crawlfleet.xpath_regexp",
    ),
    # What a crawl does (the CrawlJob model) and how a process runs (its knobs).
    ("crawlfleet.crawljob", "crawlfleet.config"),
    # The one place Redis is spoken.
    ("crawlfleet.frontier",),
    # Where output goes: stores, the manifest, the reader.
    ("crawlfleet.output",),
    # The worker and the brain, side by side: they meet only in Redis.
    ("crawlfleet.crawler", "crawlfleet.fleet"),
    # The Scrapy kind of worker, built on the crawler's lease lifecycle.
    ("crawlfleet.scrapy",),
    # One worker process: picks the kind of worker a job needs.
    ("crawlfleet.launch",),
    # The two backends that run a fleet (processes here, pods in a cluster), and the operator's
    # tenancy policy.
    ("crawlfleet.local", "crawlfleet.operator", "crawlfleet.tenancy"),
    # Commands and tools.
    (
        "crawlfleet.__main__",
        "crawlfleet.cli",
        "crawlfleet.enqueue",
        "crawlfleet.inspection",
        "crawlfleet.testsite",
    ),
)
#: The ground floor, which the model stands on alone.
GROUND_FLOOR = FLOORS[0]
#: The crawler's rooms (crawlfleet/crawler/__init__.py), on floors of their own, lowest first.
CRAWLER_ROOMS: tuple[tuple[str, ...], ...] = (
    ("crawlfleet.crawler.fetching", "crawlfleet.crawler.links"),
    ("crawlfleet.crawler.politeness", "crawlfleet.crawler.harvest", "crawlfleet.crawler.files"),
    ("crawlfleet.crawler.worker",),
)
#: Every package whose parts stand on floors: the package and its table.
LAYERS = {"crawlfleet": FLOORS, "crawlfleet.crawler": CRAWLER_ROOMS}
#: Packages that never import each other, either way, whatever their floors, and why.
STRANGERS = {
    ("crawlfleet.crawler", "crawlfleet.operator"): (
        "STYLE: both stand on the frontier and the model, never on each other"
    ),
    ("crawlfleet.crawler", "crawlfleet.fleet"): "the worker and the brain meet only in Redis",
    ("crawlfleet.local", "crawlfleet.operator"): (
        "two backends of one Protocol (crawlfleet/fleet/backend.py)"
    ),
}
#: Packages whose ``__init__`` imports its public face.
PACKAGES = (
    "crawlfleet",
    "crawlfleet.crawler",
    "crawlfleet.crawler.fetching",
    "crawlfleet.crawler.files",
    "crawlfleet.crawler.harvest",
    "crawlfleet.crawler.links",
    "crawlfleet.crawler.politeness",
    "crawlfleet.crawler.worker",
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


def _import_statements(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Every import of a file, at the top or inside a function, as the module it names and the
    names it takes from it (none for ``import module``); relative imports resolved."""
    package = ".".join(path.relative_to(PACKAGE_DIR.parent).parts[:-1])  # where "." starts
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            yield module, [alias.name for alias in node.names]


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports; ``from package import name`` counts ``package.name`` too,
    in case the name is a module."""
    imported = set()
    for module, names in _import_statements(path):
        imported.add(module)
        imported.update(f"{module}.{name}" for name in names)
    return imported


def test_nothing_outside_the_frontier_speaks_redis() -> None:
    speakers = sorted(
        str(path.relative_to(PACKAGE_DIR.parent))
        for path in PACKAGE_DIR.rglob("*.py")
        if "frontier" not in path.relative_to(PACKAGE_DIR).parts[:1]
        and any(m == "redis" or m.startswith("redis.") for m in _imported_modules(path))
    )
    assert speakers == []


def _module_files() -> dict[str, Path]:
    """Every module of crawlfleet by name (a package by its ``__init__``), from the files."""
    files = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


MODULES = _module_files()


def _imports(path: Path) -> set[str]:
    """The modules of crawlfleet a file's imports name, wherever they stand (the top, a
    function, ``TYPE_CHECKING``): ``from package import name`` names ``package.name`` when that
    is a module, else ``package`` itself (its face); ``from module import name``, the module."""
    named = set()
    for module, names in _import_statements(path):
        for name in names or [None]:
            taken = f"{module}.{name}"
            named.add(taken if name is not None and taken in MODULES else module)
    return named & MODULES.keys()


def _within(module: str, place: str, package: str) -> bool:
    """``place`` holds ``module``: it is the module, or a package above it -- except the table's
    own package, which stands on its floor as its ``__init__`` alone."""
    return module == place or (place != package and module.startswith(f"{place}."))


def _floor(module: str, package: str) -> int | None:
    """The floor of ``module`` in ``package``'s table; None when no floor holds it."""
    for number, floor in enumerate(LAYERS[package]):
        if any(_within(module, place, package) for place in floor):
            return number
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def _upward_imports(package: str) -> list[str]:
    """Every import of a module of ``package`` that reaches a floor above its own (or a module
    inside ``package`` that no floor holds, such as the package's own face from one of its
    rooms), as ``importer -> imported``."""
    found = []
    for name, path in sorted(MODULES.items()):
        if not _inside(name, package) or (name == package and _floor(name, package) is None):
            continue  # a module outside, or the face, which imports its rooms to show them
        own = _floor(name, package)
        assert own is not None, f"{name} stands on no floor of {package}: place it in LAYERS"
        for imported in sorted(_imports(path)):
            if not _inside(imported, package):
                continue  # the table above this one rules it
            floor = _floor(imported, package)
            if floor is None or floor > own:
                found.append(f"{name} -> {imported}")
    return found


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_module_imports_a_floor_above_its_own(package: str) -> None:
    """docs/architecture.md: imports run down the floors, never up, not even lazily or for a
    type. A module that needs one above it belongs on a higher floor, or what it needs lower."""
    upward = _upward_imports(package)
    assert not upward, "\n".join(upward)


def _parts(package: str) -> dict[str, set[str]]:
    """The parts of ``package`` (its modules and sub-packages, and ``__init__``: its face) and,
    for each, the parts it imports."""
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        if not name.startswith(f"{package}.") and name != package:
            continue
        part = "__init__" if name == package else name[len(package) + 1 :].split(".")[0]
        targets = edges.setdefault(part, set())
        for imported in _imports(path):
            if imported == package:
                targets.add("__init__")
            elif imported.startswith(f"{package}."):
                targets.add(imported[len(package) + 1 :].split(".")[0])
        targets.discard(part)
    return edges


def _circle(edges: dict[str, set[str]]) -> list[str]:
    """One circle of the graph (its parts in order, the first repeated last), or []."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after
    path: list[str] = []

    def visit(part: str) -> list[str]:
        state[part] = "open"
        path.append(part)
        for target in sorted(edges.get(part, ())):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (circle := visit(target)):
                return circle
        state[part] = "done"
        path.pop()
        return []

    for part in sorted(edges):
        if part not in state and (circle := visit(part)):
            return circle
    return []


PACKAGE_NAMES = sorted(name for name, path in MODULES.items() if path.name == "__init__.py")


@pytest.mark.parametrize("package", PACKAGE_NAMES)
def test_no_package_has_an_import_circle_between_its_parts(package: str) -> None:
    """Within every package, its modules and sub-packages (and its face, ``__init__``) import
    each other in one direction only: a circle, even through ``TYPE_CHECKING``, means two parts
    are one idea, or one holds what the other should. Together with the floors, this leaves no
    circle anywhere in crawlfleet."""
    circle = _circle(_parts(package))
    assert not circle, " -> ".join(circle)


def test_the_floors_hold_every_module_once() -> None:
    placed = [place for floor in FLOORS for place in floor]
    assert len(placed) == len(set(placed))
    assert [name for name in MODULES if _floor(name, "crawlfleet") is None] == []
    rooms = [place for floor in CRAWLER_ROOMS for place in floor]
    inside = {
        ".".join(name.split(".")[:3]) for name in MODULES if _inside(name, "crawlfleet.crawler")
    }
    children = inside - {"crawlfleet.crawler"}
    assert sorted(rooms) == sorted(children), "every module of the crawler lives in a room"


def test_the_model_stands_on_the_ground_floor_only() -> None:
    """The CrawlJob model is read by every layer, so it imports none of them (the frontier, the
    output stores, the crawler, the fleet, the operator, the local runner, the Scrapy runtime),
    nor the process knobs beside it: only its own modules and the ground floor's helpers."""
    for name, path in MODULES.items():
        if _inside(name, "crawlfleet.crawljob"):
            above = {
                imported
                for imported in _imports(path)
                if not _inside(imported, "crawlfleet.crawljob")
                and _floor(imported, "crawlfleet") != 0
            }
            assert above == set(), name


@pytest.mark.parametrize("pair", sorted(STRANGERS), ids=" and ".join)
def test_strangers_never_import_each_other(pair: tuple[str, str]) -> None:
    why = STRANGERS[pair]
    for side, other in (pair, pair[::-1]):
        for name, path in MODULES.items():
            if _inside(name, side):
                assert not any(_inside(m, other) for m in _imports(path)), f"{name}: {why}"


def test_only_the_command_line_imports_the_command_line() -> None:
    """The zygote used to import cli.py to run a worker: the one import circle there was."""
    importers = sorted(
        str(path.relative_to(PACKAGE_DIR.parent))
        for path in PACKAGE_DIR.rglob("*.py")
        if path.name != "__main__.py" and "crawlfleet.cli" in _imported_modules(path)
    )
    assert importers == []
