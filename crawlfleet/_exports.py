"""Public names of a package imported on first use (PEP 562), for packages that must stay light.

``crawlfleet.local`` is imported by the zygote before anything heavy, and
``crawlfleet.operator`` holds modules that work without kopf (the CRD generator, the
manifests): their ``__init__`` names the public face without importing it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module) when ``name`` is used."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
