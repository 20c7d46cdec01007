"""The CrawlJob CRD against the model it is generated from: same fields, defaults, rules.

The generator (crawlfleet/operator/crd.py) is checked from the outside: these tests walk the
pydantic models and the generated schema independently and compare them, so a generator bug
cannot hide behind itself. What needs the real API server (that CEL compiles and refuses what
Python refuses, that defaults are applied) is in tests/e2e/test_admission.py.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from crawlfleet import crawljob
from crawlfleet.crawljob import CrawlJob, CrawlJobSpec, CrawlJobStatus, ExtractSelector, Rule
from crawlfleet.errors import ConfigError
from crawlfleet.operator import crd

REPO = Path(__file__).resolve().parents[3]
SEED = "https://example.com/start"
# Filled by the models from other fields, so deliberately not CRD defaults (see
# crawlfleet/crawljob/spec.py).
DEPENDENT_DEFAULTS = {("scope", "allowedDomains"), ("redis", "managed")}


@pytest.fixture(scope="module")
def crd_doc() -> dict[str, Any]:
    return crd.crawljob_crd()


@pytest.fixture(scope="module")
def root(crd_doc: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd_doc["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


@pytest.fixture(scope="module")
def spec_schema(root: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = root["properties"]["spec"]
    return schema


@pytest.fixture(scope="module")
def status_schema(root: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = root["properties"]["status"]
    return schema


# --- helpers: walking models and schemas, independently of the generator ------------------------


def nested_model(annotation: object) -> type[BaseModel] | None:
    """The model inside ``X``, ``X | None`` or ``tuple[X, ...]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            found = nested_model(arg)
            if found is not None:
                return found
    return None


def model_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every field's camelCase path, nested models included (list items as ``[]``)."""
    fields = {info.alias or name: info.annotation for name, info in model.model_fields.items()}
    fields |= {
        info.alias or name: info.return_type for name, info in model.model_computed_fields.items()
    }
    for alias, annotation in fields.items():
        path = (*prefix, alias)
        yield path
        inner = nested_model(annotation)
        if inner is not None:
            is_list = typing.get_origin(annotation) is tuple
            yield from model_paths(inner, (*path, "[]") if is_list else path)


def schema_paths(schema: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, sub in schema.get("properties", {}).items():
        path = (*prefix, name)
        yield path
        yield from schema_paths(sub, path)
        if "items" in sub:
            yield from schema_paths(sub["items"], (*path, "[]"))
        if "additionalProperties" in sub:  # a map's values: model_paths walks them alike
            yield from schema_paths(sub["additionalProperties"], path)


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its dotted path."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")
    if "additionalProperties" in schema:
        yield from nodes(schema["additionalProperties"], f"{path}.*")


def at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["properties"][part]
    return node


def apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Structural defaulting as kube-apiserver does it: a missing field takes its default,
    then objects are walked (defaults of a default included)."""
    if isinstance(value, dict) and "properties" in schema:
        value = dict(value)
        for name, sub in schema["properties"].items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(value[name], sub)
    elif isinstance(value, list) and "items" in schema:
        value = [apply_defaults(item, schema["items"]) for item in value]
    return value


def without(mapping: dict[str, Any], paths: set[tuple[str, ...]]) -> dict[str, Any]:
    result = copy.deepcopy(mapping)
    for path in paths:
        parent = result
        for part in path[:-1]:
            parent = parent[part]
        parent.pop(path[-1], None)
    return result


def section_models() -> list[type[BaseModel]]:
    return [
        value
        for value in vars(crawljob).values()
        if isinstance(value, type)
        and issubclass(value, BaseModel)
        and value.__module__.startswith(f"{crawljob.__name__}.")
    ]


# --- the committed files ------------------------------------------------------------------------


def test_committed_crd_is_the_generated_one() -> None:
    committed = (REPO / crd.CRD_FILE).read_text(encoding="utf-8")
    assert committed == crd.crd_yaml(), "stale: run python -m crawlfleet.operator.crd --write"


def test_docs_field_reference_is_the_generated_one() -> None:
    docs = (REPO / crd.DOCS_FILE).read_text(encoding="utf-8")
    expected = crd.splice_generated_section(docs, crd.field_reference_markdown())
    assert docs == expected, "stale: run python -m crawlfleet.operator.crd --write"


def test_the_yaml_starts_with_the_do_not_edit_header_and_parses_back(
    crd_doc: dict[str, Any],
) -> None:
    text = crd.crd_yaml()
    assert text.startswith("# generated by python -m crawlfleet.operator.crd; do not edit\n")
    assert yaml.safe_load(text) == crd_doc
    assert crd.crd_yaml() == text  # stable: no set or dict order leaks in


def test_main_prints_the_crd_and_the_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert crd.main([]) == 0
    assert capsys.readouterr().out == crd.crd_yaml()
    assert crd.main(["--markdown"]) == 0
    assert capsys.readouterr().out == crd.field_reference_markdown()


def test_check_fails_with_a_diff_until_write_fixes_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / crd.DOCS_FILE).write_text(
        "# CrawlJob\n\nintro\n\n"
        "<!-- generated by python -m crawlfleet.operator.crd --markdown; do not edit -->\n"
        "old table\n<!-- end of generated section -->\n\noutro\n"
    )

    assert crd.main(["--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "crds/crawljob.yaml (generated)" in out.out
    assert "-old table" in out.out
    assert "--write" in out.err

    assert crd.main(["--write", "--root", str(tmp_path)]) == 0
    assert crd.main(["--check", "--root", str(tmp_path)]) == 0
    docs = (tmp_path / crd.DOCS_FILE).read_text()
    assert docs.startswith("# CrawlJob\n\nintro\n\n")
    assert docs.endswith("<!-- end of generated section -->\n\noutro\n")
    assert "| `errorRate` | number | `0.01` |" in docs


def test_splicing_needs_both_markers() -> None:
    with pytest.raises(ValueError, match="markers"):
        crd.splice_generated_section("no markers here", "table")


# --- names, subresources, columns -----------------------------------------------------------


def test_names_and_version(crd_doc: dict[str, Any]) -> None:
    spec = crd_doc["spec"]
    assert crd_doc["metadata"]["name"] == "crawljobs.crawlfleet.io"
    assert spec["group"] == "crawlfleet.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "CrawlJob",
        "listKind": "CrawlJobList",
        "plural": "crawljobs",
        "singular": "crawljob",
        "shortNames": ["cjob"],  # "cj" is the built-in CronJob's; kubectl would pick that
        "categories": ["crawlfleet"],
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert f"{spec['group']}/{version['name']}" == crawljob.API_VERSION


def test_scale_subresource_points_at_fields_of_the_schema(
    crd_doc: dict[str, Any], root: dict[str, Any]
) -> None:
    (version,) = crd_doc["spec"]["versions"]
    scale = version["subresources"]["scale"]
    assert version["subresources"]["status"] == {}
    assert scale == {
        "specReplicasPath": ".spec.workers.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert at(root, "spec.workers.replicas")["type"] == "integer"
    assert at(root, "status.replicas")["type"] == "integer"
    assert at(root, "status.selector")["type"] == "string"  # a string selector: HPA/KEDA read it


def test_printer_columns(crd_doc: dict[str, Any], root: dict[str, Any]) -> None:
    (version,) = crd_doc["spec"]["versions"]
    columns = version["additionalPrinterColumns"]
    default = [c["name"].upper() for c in columns if not c.get("priority")]
    wide = [c["name"].upper() for c in columns if c.get("priority") == 1]
    assert default == [
        "PHASE", "WORKERS", "QUEUED", "CRAWLED", "FAILED", "WAITING", "NEXT-REVISIT", "NEXT-RUN",
        "AGE",
    ]  # fmt: skip
    assert wide == ["IN-FLIGHT", "SEEN", "RATE", "DUE", "MESSAGE"]
    for column in columns:
        path = column["jsonPath"].removeprefix(".")
        if path.startswith("metadata."):
            continue
        node = at(root, path)
        assert column["type"] == node["type"], column
        assert column["description"]


def test_a_scheduled_job_has_its_phase_history_and_next_run(root: dict[str, Any]) -> None:
    assert "Scheduled" in at(root, "status.phase")["enum"]
    assert at(root, "status.nextRunAt")["format"] == "date-time"
    runs = at(root, "status.runs")
    assert runs["type"] == "array"
    entry = runs["items"]["properties"]
    assert set(entry) >= {"id", "startedAt", "endedAt", "pages", "changed", "unchanged", "outcome"}
    assert entry["outcome"]["enum"] == ["Running", "Succeeded", "Failed", "Cancelled"]


def test_status_workers_is_ready_over_desired() -> None:
    status = CrawlJobStatus(ready_replicas=2, desired_replicas=3)
    assert status.workers == "2/3"
    assert status.to_mapping()["workers"] == "2/3"
    # The operator writes it; reading it back must not fail (it is derived, so ignored).
    parsed = CrawlJobStatus.model_validate({"readyReplicas": 1, "workers": "9/9"})
    assert parsed.workers == "1/0"


# --- the schema is the model ----------------------------------------------------------------


@pytest.mark.parametrize(("section", "model"), [("spec", CrawlJobSpec), ("status", CrawlJobStatus)])
def test_every_model_field_is_in_the_schema_and_nothing_else(
    root: dict[str, Any], section: str, model: type[BaseModel]
) -> None:
    in_model = set(model_paths(model))
    in_schema = set(schema_paths(root["properties"][section]))
    assert in_model - in_schema == set(), "fields missing from the CRD"
    assert in_schema - in_model == set(), "CRD fields the model does not have"


def test_the_envelope_matches_the_model(root: dict[str, Any]) -> None:
    aliases = {info.alias for info in CrawlJob.model_fields.values()}
    assert set(root["properties"]) == aliases
    assert root["required"] == ["spec"]
    assert root["properties"]["metadata"] == {"type": "object"}


def test_every_property_has_a_description(root: dict[str, Any]) -> None:
    missing = [
        path
        for path, node in nodes(root)
        if path and not path.endswith("[]") and path != ".metadata"
        if len(node.get("description", "").split()) < 3
    ]
    assert missing == []


def test_descriptions_are_one_line_per_paragraph_and_say_the_default(
    spec_schema: dict[str, Any],
) -> None:
    capacity = at(spec_schema, "dedup.capacity")
    assert "\n" not in capacity["description"]
    assert capacity["description"].endswith("Defaults to 1000000.")
    assert "Must be between 1 and 10000000000." in capacity["description"]
    assert at(spec_schema, "robots.obey")["description"].endswith("Defaults to true.")


def test_required_fields_are_the_models(
    spec_schema: dict[str, Any], status_schema: dict[str, Any]
) -> None:
    assert "required" not in spec_schema  # seeds, seedsFrom or both: a rule says it
    assert at(spec_schema, "seedsFrom.configMapKeyRef")["required"] == ["name", "key"]
    assert at(spec_schema, "redis.secretRef")["required"] == ["name"]
    assert "required" not in status_schema  # workers is computed, never required in a patch
    assert status_schema["properties"]["conditions"]["items"]["required"] == ["type"]


def test_seeds_are_bounded_so_the_api_server_can_afford_their_cel(
    spec_schema: dict[str, Any],
) -> None:
    seeds = spec_schema["properties"]["seeds"]
    assert (seeds["minItems"], seeds["maxItems"], seeds["items"]["maxLength"]) == (1, 10_000, 2048)
    rules = seeds["items"]["x-kubernetes-validations"]
    assert {rule["message"] for rule in rules} == {
        "must be an absolute http(s) URL with a host, at most 2048 characters"
    }
    assert any("getScheme() in ['http', 'https']" in rule["rule"] for rule in rules)
    assert any("getHostname() != ''" in rule["rule"] for rule in rules)


def test_python_enforces_the_same_seed_limits() -> None:
    long_seed = "https://example.com/" + "a" * (2048 - len("https://example.com/"))
    assert CrawlJobSpec.from_mapping({"seeds": [long_seed]}).seeds == (long_seed,)
    with pytest.raises(ConfigError, match=r"spec\.seeds\[0\]: must be an absolute http\(s\) URL"):
        CrawlJobSpec.from_mapping({"seeds": [long_seed + "a"]})
    many = [f"https://example.com/{index}" for index in range(10_001)]
    with pytest.raises(ConfigError, match=r"spec\.seeds: must hold at most 10000 items"):
        CrawlJobSpec.from_mapping({"seeds": many})


def test_free_form_kubernetes_structures_keep_their_fields(spec_schema: dict[str, Any]) -> None:
    for path in ("workers.resources", "output.volume"):
        assert at(spec_schema, path) | {"description": ""} == {
            "description": "",
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
        }


def test_conditions_are_a_map_keyed_by_type(status_schema: dict[str, Any]) -> None:
    conditions = status_schema["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    fields = set(conditions["items"]["properties"])
    assert fields == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }
    assert conditions["items"]["properties"]["lastTransitionTime"]["format"] == "date-time"


def test_the_status_is_pruned_not_preserved(status_schema: dict[str, Any]) -> None:
    # kopf must keep its progress in annotations: a status.kopf field would be dropped.
    assert "x-kubernetes-preserve-unknown-fields" not in status_schema
    assert "kopf" not in status_schema["properties"]


# --- structural -------------------------------------------------------------------------------

FORBIDDEN = {"$ref", "anyOf", "oneOf", "allOf", "not", "nullable", "title", "$defs", "readOnly"}
TYPES = {"object", "array", "string", "integer", "number", "boolean"}


def test_the_schema_is_structural(root: dict[str, Any]) -> None:
    for path, node in nodes(root):
        assert not FORBIDDEN & set(node), (path, FORBIDDEN & set(node))
        assert node.get("type") in TYPES or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert "items" in node, path
        if "properties" in node:
            assert node["type"] == "object", path
            assert set(node.get("required", ())) <= set(node["properties"]), path
        for exclusive in ("exclusiveMinimum", "exclusiveMaximum"):
            assert node.get(exclusive, True) is True, (path, "OpenAPI v3.0 wants a boolean")
        for bound in ("minimum", "maximum"):
            if bound in node:
                # kube-apiserver truncates fractional bounds for whole-number values.
                assert float(node[bound]).is_integer(), (path, bound)


# --- defaults -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"seeds": [SEED]},
        {"seeds": [SEED], "workers": {"minReplicas": 2}, "redis": {"managed": {}}},
        {"seeds": [SEED], "redis": {"url": "redis://redis:6379/0"}, "output": {"format": "warc"}},
        {"seeds": [SEED], "redis": {"managed": {"persistence": {"enabled": True}}}},
    ],
)
def test_schema_defaults_fill_in_what_the_model_fills_in(
    spec_schema: dict[str, Any], spec: dict[str, Any]
) -> None:
    by_api_server = apply_defaults(spec, spec_schema)
    by_model = CrawlJobSpec.from_mapping(spec).to_mapping()

    dependent = {path for path in DEPENDENT_DEFAULTS if path[-1] not in _given(spec, path)}
    assert by_api_server == without(by_model, dependent)
    # and what the API server stores is a spec the model reads back to the same thing
    assert CrawlJobSpec.from_mapping(by_api_server) == CrawlJobSpec.from_mapping(spec)


def _given(spec: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node: Any = spec
    for part in path[:-1]:
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node if isinstance(node, dict) else {}


def test_dependent_defaults_are_not_crd_defaults(spec_schema: dict[str, Any]) -> None:
    assert "default" not in at(spec_schema, "scope.allowedDomains")
    assert "default" not in at(spec_schema, "redis.managed")
    assert at(spec_schema, "redis")["default"] == {"onLoss": "Fail"}


def test_status_defaults_are_the_models(status_schema: dict[str, Any]) -> None:
    by_model = CrawlJobStatus().to_mapping()
    by_model.pop("workers")  # computed from the two replica counts
    assert apply_defaults({}, status_schema) == by_model


# --- rules ------------------------------------------------------------------------------------


def test_every_cross_field_rule_is_a_validation_with_its_message(
    spec_schema: dict[str, Any],
) -> None:
    emitted = [
        (path, rule)
        for path, node in nodes(spec_schema)
        for rule in node.get("x-kubernetes-validations", ())
    ]
    expected: list[tuple[type[BaseModel], Rule[Any]]] = [
        (model, rule)
        for model in section_models()
        for rule in vars(model).get("cross_field_rules", ())
    ]
    assert len(expected) == 37
    for model, rule in expected:
        wanted = {"rule": rule.cel, "message": rule.message}
        if rule.field:
            wanted["fieldPath"] = f".{rule.field}"
        places = [path for path, emitted_rule in emitted if emitted_rule == wanted]
        # once per section that has it: ExtractField inherits ExtractSelector's rule
        assert places, (model.__name__, rule.message)
        assert len(places) == len(set(places)), (model.__name__, rule.message, places)
        owners = {path: node for path, node in nodes(spec_schema)}
        aliases = {info.alias or name for name, info in model.model_fields.items()}
        for place in places:
            section = owners[place] if place else spec_schema
            assert aliases <= set(section["properties"])  # on a section the rule belongs to
            assert len(places) == 1 or model is ExtractSelector


def test_the_bloom_settings_are_immutable(spec_schema: dict[str, Any]) -> None:
    (rule,) = at(spec_schema, "dedup")["x-kubernetes-validations"]
    assert "oldSelf.capacity" in rule["rule"]
    assert "oldSelf.errorRate" in rule["rule"]
    assert rule["message"] == (
        "dedup.capacity and dedup.errorRate cannot change after creation:"
        " the Bloom filter is sized once"
    )


def test_the_frontiers_partitions_are_immutable(spec_schema: dict[str, Any]) -> None:
    shards = at(spec_schema, "frontier.shards")
    rules = {rule["rule"]: rule["message"] for rule in shards["x-kubernetes-validations"]}
    assert rules["self == oldSelf"].startswith("shards cannot change on a running job: ")
    assert rules["self >= 1 && self <= 256"] == "must be between 1 and 256"
    assert at(spec_schema, "frontier")["default"] == {"shards": 1, "waitReplicas": 0}


def test_error_rate_bounds_are_cel_in_the_words_crawlfleet_run_uses(
    spec_schema: dict[str, Any],
) -> None:
    error_rate = at(spec_schema, "dedup.errorRate")
    assert not {"minimum", "maximum"} & set(error_rate)
    (rule,) = error_rate["x-kubernetes-validations"]
    assert rule["rule"] == "self >= 1e-09 && self < 0.5"  # BloomParams' own floor
    with pytest.raises(ConfigError) as caught:
        CrawlJobSpec.from_mapping({"seeds": [SEED], "dedup": {"errorRate": 0}})
    assert f"spec.dedup.errorRate: {rule['message']} (got 0.0)" in str(caught.value)


def spec_rules(spec_schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(path, node, rule) of every single-value CEL rule in spec (sections' rules left out)."""
    for path, node in nodes(spec_schema):
        if node.get("type") in ("object", None):
            continue
        for rule in node.get("x-kubernetes-validations", ()):
            yield path, node, rule


_RANGE = re.compile(
    r"(?:self (?P<low_op>>=?) (?P<low>[-0-9.e]+))?(?: && )?"
    r"(?:self (?P<high_op><=?) (?P<high>[-0-9.e]+))?"
)


def test_schema_bounds_are_left_to_cel_in_spec(spec_schema: dict[str, Any]) -> None:
    # A schema bound is checked before CEL and refused in the API server's words, which are not
    # crawlfleet validate's: in spec every bound is a CEL rule, but for the lengths that the
    # API server needs to estimate the cost of other rules on the same value.
    for path, node in nodes(spec_schema):
        assert not {"minimum", "maximum", "enum", "pattern"} & set(node), path
        if "maxLength" in node or "maxItems" in node:
            # rules on the value, on its items, or somewhere inside its items (extract's rules)
            items = node.get("items", {})
            assert node.get("x-kubernetes-validations") or any(
                sub.get("x-kubernetes-validations") for _, sub in nodes(items)
            ), path


def test_python_refuses_just_outside_every_range_with_the_cel_message(
    spec_schema: dict[str, Any],
) -> None:
    checked = 0
    for path, node, rule in spec_rules(spec_schema):
        if not rule["rule"].startswith("self >") and not rule["rule"].startswith("self <"):
            continue
        bounds = _RANGE.fullmatch(rule["rule"])
        assert bounds is not None, rule
        step = 1 if node["type"] == "integer" else 0.5
        number = int if node["type"] == "integer" else float
        outside = []
        if bounds["low"] is not None:
            low = number(bounds["low"])
            outside.append(low if bounds["low_op"] == ">" else low - step)
        if bounds["high"] is not None:
            high = number(bounds["high"])
            outside.append(high if bounds["high_op"] == "<" else high + step)
        for value in outside:
            with pytest.raises(ConfigError) as caught:
                CrawlJobSpec.from_mapping(_spec_with(path.removeprefix("."), value))
            where = f"spec{path}".replace("[]", "[0]")
            assert f"{where}: {rule['message']} (got" in str(caught.value), (path, value)
            checked += 1
    assert checked >= 50


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ("output.format", "csv"),
        ("workers.autoscale", "hpa"),
        ("workers.image", "has spaces"),
        ("redis.managed.image", "has spaces"),
        ("redis.managed.persistence.size", "lots"),
        ("redis.managed.persistence.storageClassName", "Not_A_Name"),
        ("redis.secretRef.key", "no spaces"),
        ("scope.allowedDomains", ["a" * 260]),
        ("scope.allowedDomains", ["a.test"] * 1001),
        ("userAgent", "My Bot/1.0"),
        ("redis.url", "http://redis:6379"),
    ],
)
def test_python_refuses_what_each_cel_shape_rule_refuses_in_the_same_words(
    spec_schema: dict[str, Any], path: str, bad: Any
) -> None:
    spec = _spec_with(path, bad)
    if path.startswith("redis.secretRef"):
        spec["redis"]["secretRef"]["name"] = "redis"
    node = at(spec_schema, path)
    if isinstance(bad, list) and len(bad) == 1:
        node = node["items"]
    messages = [rule["message"] for rule in node["x-kubernetes-validations"]]
    with pytest.raises(ConfigError) as caught:
        CrawlJobSpec.from_mapping(spec)
    where = f"spec.{path}[0]" if isinstance(bad, list) and len(bad) == 1 else f"spec.{path}"
    assert any(f"{where}: {message}" in str(caught.value) for message in messages), (
        str(caught.value),
        messages,
    )


# What a list item or an optional section needs besides the value under test.
_REQUIRED_SIBLINGS: dict[str, dict[str, Any]] = {
    "recrawl[]": {"kind": "feed"},
    "schedule": {"cron": "@daily"},
}


def _spec_with(path: str, value: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"seeds": [SEED]}
    node = spec
    parts = path.split(".")
    for part in parts[:-1]:
        fresh = dict(_REQUIRED_SIBLINGS.get(part, {}))
        if part.endswith("[]"):
            node = node.setdefault(part.removesuffix("[]"), [fresh])[0]
        else:
            node = node.setdefault(part, fresh)
    node[parts[-1]] = value
    return spec


def test_enums_are_the_models_literals(
    spec_schema: dict[str, Any], status_schema: dict[str, Any]
) -> None:
    (output_format,) = at(spec_schema, "output.format")["x-kubernetes-validations"]
    assert output_format["rule"] == "self in ['jsonl', 'warc', 'none']"
    (autoscale,) = at(spec_schema, "workers.autoscale")["x-kubernetes-validations"]
    assert autoscale["rule"] == "self in ['internal', 'external']"
    assert at(status_schema, "phase")["enum"] == list(typing.get_args(crawljob.Phase))


# --- the generator's guards -------------------------------------------------------------------


class _Undocumented(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)

    documented: int = 1
    """Says what it is."""
    bare: int = 2


class _Union(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)

    either: int | str = 1
    """An int or a string: not structural."""


@pytest.mark.parametrize(
    ("model", "message"),
    [(_Undocumented, r"spec\.bare: no description"), (_Union, r"spec\.either: a union")],
)
def test_the_generator_refuses_what_a_crd_cannot_say(model: type[BaseModel], message: str) -> None:
    with pytest.raises(crd.SchemaError, match=message):
        crd._Converter(model, root=("spec",), mention_defaults=True).schema()
