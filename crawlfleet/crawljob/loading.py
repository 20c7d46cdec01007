"""Reading a CrawlJob: from a mapping, or from a YAML file with its seedsFrom list.

Whatever a file holds (not YAML, not UTF-8, nested thousands deep, numbers of thousands of
digits, duplicate keys, a directory, a FIFO), the answer is a ConfigError with a sentence, never
another exception.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import yaml

from crawlfleet.crawljob.fields import MIB
from crawlfleet.crawljob.resource import CrawlJob
from crawlfleet.crawljob.seed_list import (
    DEFAULT_SEED_LIST_BOUNDS,
    SeedListBounds,
    parse_seed_list,
)
from crawlfleet.crawljob.spec import CrawlJobSpec
from crawlfleet.crawljob.validation import MAX_DOCUMENT_DEPTH, validate
from crawlfleet.errors import ConfigError

__all__ = ["load_crawljob", "parse_crawljob", "read_seed_file"]


def parse_crawljob(doc: Mapping[str, object]) -> CrawlJob:
    """Validate a whole CrawlJob document (apiVersion, kind, metadata, spec, status)."""
    return validate(CrawlJob, doc, prefix=(), what="CrawlJob")


# A file is read whole; the API server stores at most ~1.5 MB per object, so a CrawlJob file
# many times that is a mistake (or /dev/zero), not a job.
_MAX_FILE_BYTES: Final = 8 * MIB


def load_crawljob(
    path: str | Path, seed_list: SeedListBounds = DEFAULT_SEED_LIST_BOUNDS
) -> CrawlJob:
    """Read one CrawlJob from a YAML file; every problem is a ConfigError naming the file.

    A ``seedsFrom.file`` list is read too (relative to the file), and checked: the job comes
    back with its scope resolved (:meth:`CrawlJobSpec.with_listed_seeds`), the list itself is
    :func:`read_seed_file`'s to give whoever seeds. ``seed_list`` bounds it.

    Whatever the file holds (not YAML, not UTF-8, nested thousands deep, numbers of thousands of
    digits, a directory, a FIFO), the answer is a ConfigError with a sentence, never another
    exception: ``crawlfleet validate`` prints it and exits 2.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode  # before opening: opening a FIFO would wait for a writer
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{path}: is a directory, not a CrawlJob file")
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{path}: is not a regular file")
        with path.open("rb") as file:
            data = file.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read CrawlJob file: {exc.strerror or exc}") from exc
    if len(data) > _MAX_FILE_BYTES:
        raise ConfigError(
            f"{path}: is larger than {_MAX_FILE_BYTES // MIB} MiB; the API server stores at most"
            " about 1.5 MB for one CrawlJob"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: is not UTF-8 text") from exc
    try:
        documents = [doc for doc in yaml.load_all(text, Loader=_YamlLoader) if doc is not None]
    except RecursionError:
        raise ConfigError(
            f"{path}: not valid YAML: nested more than {MAX_DOCUMENT_DEPTH} levels deep"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {exc.problem or exc}") from exc
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, such as U+FFFE
        raise ConfigError(
            f"{path}: not valid YAML: character {exc.character!r} at offset {exc.position}"
            " is not allowed in YAML"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from exc
    if len(documents) != 1:
        count = "no" if not documents else str(len(documents))
        raise ConfigError(
            f"{path}: holds {count} YAML documents; a CrawlJob file holds exactly one"
        )
    job = validate(CrawlJob, documents[0], prefix=(), what=f"CrawlJob in {path}")
    if job.spec.seeds_from is not None and job.spec.seeds_from.file is not None:
        # Read here, beside the file that names it: validate checks every listed URL, and the
        # scope's default (every seed host) is whole before anyone crawls.
        spec = job.spec.with_listed_seeds(read_seed_file(job.spec, path, seed_list))
        job = job.model_copy(update={"spec": spec})
    return job


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: PyYAML keeps the last one silently, the API
    server refuses the document, and a silently dropped ``scope:`` would widen a crawl."""


def _construct_int(loader: _YamlLoader, node: yaml.ScalarNode) -> int:
    try:
        return int(yaml.constructor.SafeConstructor.construct_yaml_int(loader, node))
    except ValueError:  # past Python's 4300-digit limit on int("...")
        raise yaml.constructor.ConstructorError(
            None, None, "an integer of thousands of digits", node.start_mark
        ) from None


def _construct_str(loader: _YamlLoader, node: yaml.ScalarNode) -> str:
    text = loader.construct_scalar(node)
    assert isinstance(text, str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # "\ud800" in a double-quoted string: not a character
        raise yaml.constructor.ConstructorError(
            None, None, "a lone surrogate escape, which is no character", node.start_mark
        ) from None
    return text


def _construct_mapping(loader: _YamlLoader, node: yaml.MappingNode) -> dict[object, object]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = loader.construct_scalar(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
    return loader.construct_mapping(node, deep=True)


_YamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_YamlLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_YamlLoader.add_constructor("tag:yaml.org,2002:str", _construct_str)


def read_seed_file(
    spec: CrawlJobSpec, job_file: str | Path, bounds: SeedListBounds = DEFAULT_SEED_LIST_BOUNDS
) -> tuple[str, ...]:
    """The seeds of ``spec.seedsFrom.file`` (relative to ``job_file``'s folder); () without one.

    Read as the operator reads a ConfigMap (:func:`parse_seed_list`: streamed, within
    ``bounds``, the same sentences). A ConfigMap is the operator's to read: outside a cluster it
    is a ConfigError that says so.
    """
    source = spec.seeds_from
    if source is None:
        return ()
    if source.file is None:
        raise ConfigError(
            "spec.seedsFrom.configMapKeyRef: a ConfigMap is read by the operator in a cluster;"
            " to run this job here, give the list as seedsFrom.file"
        )
    path = Path(job_file).parent / source.file
    where = f"spec.seedsFrom.file ({path})"
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise ConfigError(f"{where}: is not a regular file")
        file = path.open("rb")
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise ConfigError(
            f"{where}: cannot read it: {getattr(exc, 'strerror', None) or exc}"
        ) from exc
    with file:
        return parse_seed_list(file, where, bounds)
