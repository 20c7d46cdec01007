"""Static checks of the packaging: the two Dockerfiles, .dockerignore and the Helm chart's files.

No container runtime runs here, so the Dockerfile tests read the files as text and check the
invariants the images promise (multi-stage, a pinned base, a numeric non-root USER, no build
tools in the final stage, the `crawlfleet` entrypoint, bytecode compiled for a read-only root
filesystem). They are static checks, not builds: a Dockerfile that passes them can still fail
to build. The chart is checked further by `helm lint` and the real API server in
tests/e2e/test_chart.py; what jsonschema would check here (values.yaml against
values.schema.json) is left to `helm lint`, which validates with the same schema.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "crawlfleet"
DOCKERFILES = {
    "operator": REPO / "operator" / "Dockerfile",
    "worker": REPO / "crawler_image" / "Dockerfile",
}
# python:<exact x.y.z>-slim-<debian suite>: an exact release, no registry host, no floating tag.
PINNED_BASE = re.compile(r"^python:3\.11\.\d+-slim-(bookworm|trixie)$")
BUILD_TOOLS = re.compile(
    r"\b(apt-get|apt|apk|gcc|g\+\+|cc|make|build-essential|python3?-dev|pip3? install)\b"
)


# -- Dockerfile parsing ---------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


@dataclass(frozen=True)
class Stage:
    image: str
    name: str | None
    instructions: tuple[Instruction, ...]

    def all(self, keyword: str) -> list[str]:
        return [i.arguments for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """The stages of a Dockerfile: comments dropped, continuation lines joined."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "a continuation line runs off the end of the file"

    stages: list[Stage] = []
    global_args: dict[str, str] = {}  # ARGs before the first FROM, with their defaults
    for line in logical:
        keyword, _, arguments = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not stages:
            name, _, default = arguments.strip().partition("=")
            global_args[name] = default
            continue
        if keyword == "FROM":
            words = arguments.split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            image = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], words[0])
            stages.append(Stage(image, name, ()))
            continue
        assert stages, f"{keyword} before the first FROM"
        last = stages[-1]
        stages[-1] = Stage(
            last.image, last.name, (*last.instructions, Instruction(keyword, arguments.strip()))
        )
    return stages


def exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list), f"not the exec (JSON) form: {arguments}"
    return [str(item) for item in value]


@pytest.fixture(params=sorted(DOCKERFILES), ids=sorted(DOCKERFILES))
def image(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def stages(image: str) -> list[Stage]:
    return parse_dockerfile(DOCKERFILES[image].read_text())


def test_dockerfile_is_multi_stage_and_the_final_stage_takes_only_the_venv(
    stages: list[Stage],
) -> None:
    assert len(stages) >= 2
    builder, final = stages[0], stages[-1]
    assert builder.name == "builder"
    copies = final.all("COPY")
    assert copies == ["--from=builder /opt/venv /opt/venv"], copies


def test_every_stage_uses_the_same_exactly_pinned_base(stages: list[Stage]) -> None:
    images = {stage.image for stage in stages}
    assert len(images) == 1, f"stages differ in base image: {images}"
    (base,) = images
    assert PINNED_BASE.match(base), f"{base} is not python:3.11.<patch>-slim-<suite>"


def test_final_stage_runs_as_a_numeric_non_root_user(stages: list[Stage]) -> None:
    users = stages[-1].all("USER")
    assert users, "the final stage sets no USER"
    user, _, group = users[-1].partition(":")
    assert user.isdigit(), f"USER {users[-1]}: Kubernetes can only verify a numeric uid"
    assert int(user) != 0
    assert not group or (group.isdigit() and int(group) != 0)


def test_final_stage_installs_nothing(stages: list[Stage]) -> None:
    for command in stages[-1].all("RUN"):
        assert not BUILD_TOOLS.search(command), f"final stage installs or builds: {command}"


def test_final_stage_works_on_a_read_only_root_filesystem(stages: list[Stage]) -> None:
    env = " ".join(stages[-1].all("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert re.search(r"\bHOME=/tmp\b", env), "HOME must point at the writable /tmp volume"
    builder_runs = " ".join(stages[0].all("RUN"))
    assert "compileall" in builder_runs
    assert "/opt/venv" in builder_runs
    # unchecked-hash: the pycs stay valid whatever mtimes the copy into the final stage gives.
    assert "--invalidation-mode unchecked-hash" in builder_runs


def test_entrypoint_is_crawlfleet_and_cmd_the_subcommand(image: str, stages: list[Stage]) -> None:
    final = stages[-1]
    assert exec_form(final.all("ENTRYPOINT")[-1]) == ["crawlfleet"]
    assert exec_form(final.all("CMD")[-1])[0] == image


def test_only_the_operator_image_gets_the_operator_extra(image: str, stages: list[Stage]) -> None:
    selections = [run for run in stages[0].all("RUN") if "lock_select.py" in run]
    assert selections, "the builder installs nothing from requirements.lock"
    with_extra = any("--extra operator" in run for run in selections)
    assert with_extra == (image == "operator")


def test_the_builder_installs_only_locked_hashed_versions(stages: list[Stage]) -> None:
    """Dependencies from the lock with their hashes and no resolver; the package itself with
    --no-deps, so nothing the lock does not pin can come in; pip check proves nothing is missing."""
    installs = [run for run in stages[0].all("RUN") if "install" in run]
    locked = [run for run in installs if "-r image.lock" in run]
    assert locked
    assert all("--require-hashes" in run and "--no-deps" in run for run in locked)
    package = [run for run in installs if "install --no-deps --no-build-isolation ." in run]
    assert package
    assert all("pip --python /opt/venv/bin/python check" in run for run in package)
    for run in installs:
        for command in re.split(r"&&", run):
            if " install " in command:
                assert "--no-deps" in command, f"may resolve beyond the lock: {command}"


def test_the_base_is_a_build_argument_defaulting_to_the_official_image() -> None:
    for dockerfile in DOCKERFILES.values():
        text = dockerfile.read_text()
        assert re.search(r"^ARG BASE=python:3\.11\.\d+-slim-bookworm$", text, re.M)
        assert re.findall(r"^FROM (\S+)", text, re.M) == ["${BASE}", "${BASE}"]


# -- .dockerignore --------------------------------------------------------------------------


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex (Go filepath.Match plus `**`), matching a path or any
    of its parent directories, as Docker does."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out += pattern[i : end + 1]
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(f"^{out}(?:/.*)?$")


def dockerignored(path: str) -> bool:
    """Whether Docker leaves ``path`` out of the build context: the last matching rule wins."""
    ignored = False
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        rule = raw.strip()
        if not rule or rule.startswith("#"):
            continue
        negated = rule.startswith("!")
        rule = rule.lstrip("!").strip("/")
        if _dockerignore_regex(rule).match(path):
            ignored = not negated
    return ignored


@pytest.mark.parametrize(
    "path",
    [
        ".git/HEAD",
        "tests/unit/test_packaging.py",
        "bench/operator.py",
        "docs/worker.md",
        "charts/crawlfleet/values.yaml",
        ".mypy_cache/3.11/x.json",
        ".ruff_cache/content",
        ".pytest_cache/v/cache",
        ".venv/bin/python",
        "crawl-output/books/pages-0.jsonl",
        "crawlfleet/__pycache__/cli.cpython-311.pyc",
        "crawlfleet/frontier/__pycache__/keys.cpython-311.pyc",
        "crawlfleet.egg-info/PKG-INFO",
    ],
)
def test_dockerignore_keeps_out(path: str) -> None:
    assert dockerignored(path)


def test_dockerignore_lets_in_what_the_dockerfiles_copy() -> None:
    sources: set[str] = set()
    for dockerfile in DOCKERFILES.values():
        for stage in parse_dockerfile(dockerfile.read_text()):
            for copy in stage.all("COPY"):
                words = copy.split()
                if not any(w.startswith("--from") for w in words):
                    sources.update(w.rstrip("/") for w in words[:-1] if not w.startswith("--"))
    assert sources == {
        "pyproject.toml",
        "README.md",
        "crawlfleet",
        "requirements.lock",
        "scripts/lock_select.py",
    }
    package_files = [
        str(p.relative_to(REPO))
        for p in (REPO / "crawlfleet").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    for path in sorted(sources - {"crawlfleet"}) + package_files:
        assert not dockerignored(path), path
    # setuptools reads the readme that pyproject.toml names while it builds the wheel.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["readme"] in sources


# -- the chart ------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_chart_metadata_follows_pyproject() -> None:
    chart = load_yaml(CHART / "Chart.yaml")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == project["version"]
    assert chart["kubeVersion"] == ">=1.30.0-0"


def test_chart_carries_the_generated_crawljob_crd_unchanged() -> None:
    generated = REPO / "crds" / "crawljob.yaml"
    assert generated.is_file(), "crds/crawljob.yaml is missing (crawlfleet/operator/crd.py)"
    copy = CHART / "crds" / "crawljob.yaml"
    assert copy.is_file(), f"copy it: cp {generated.relative_to(REPO)} {copy.relative_to(REPO)}"
    assert copy.read_bytes() == generated.read_bytes(), (
        f"{copy.relative_to(REPO)} differs from {generated.relative_to(REPO)}: copy it again"
    )


def test_chart_carries_kopfs_peering_crds() -> None:
    documents = list(yaml.safe_load_all((CHART / "crds" / "kopf-peering.yaml").read_text()))
    scopes = {doc["spec"]["names"]["kind"]: doc["spec"]["scope"] for doc in documents}
    assert scopes == {"ClusterKopfPeering": "Cluster", "KopfPeering": "Namespaced"}
    for doc in documents:
        assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
        assert doc["spec"]["group"] == "kopf.dev"
        (version,) = doc["spec"]["versions"]
        assert version["name"] == "v1"
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert status["x-kubernetes-preserve-unknown-fields"] is True


def _undescribed(values: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Value keys the schema does not describe, and values of a type the schema does not allow.

    A partial check by hand (types and keys only); helm lint runs the full schema."""
    problems: list[str] = []
    types = schema.get("type")
    allowed = {types} if isinstance(types, str) else set(types or [])
    python_types = {
        "object": dict,
        "array": list,
        "string": str,
        "boolean": bool,
        "integer": int,
        "number": (int, float),
    }
    if allowed and not any(
        isinstance(values, python_types[t])
        and not (t in ("integer", "number") and isinstance(values, bool))
        for t in allowed
    ):
        problems.append(f"{path}: {values!r} is not {types}")
    if isinstance(values, dict) and "properties" in schema:
        for key, value in values.items():
            child = schema["properties"].get(key)
            if child is None:
                problems.append(f"{path}.{key}: not in the schema")
                continue
            if not child.get("description"):
                problems.append(f"{path}.{key}: no description")
            problems += _undescribed(value, child, f"{path}.{key}")
    return problems


def test_values_schema_is_draft_07_and_describes_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["additionalProperties"] is False
    values = load_yaml(CHART / "values.yaml")
    assert _undescribed(values, schema, "values") == []
    # Every key the schema describes has a default in values.yaml (bar `global`, a parent's).
    assert set(schema["properties"]) - {"global"} == set(values)


DASHBOARD_METRICS = (
    "crawlfleet_jobs",
    "crawlfleet_job_queued",
    "crawlfleet_job_desired_replicas",
    "crawlfleet_job_ready_replicas",
    "crawlfleet_requeued_leases_total",
    "crawlfleet_reconcile_duration_seconds_bucket",
    "crawlfleet_reconcile_errors_total",
    "crawlfleet_worker_pages_fetched_total",
    "crawlfleet_frontier_memory_used_bytes",
    "crawlfleet_frontier_memory_max_bytes",
    "crawlfleet_frontier_pressure_level",
    "crawlfleet_bloom_fill_ratio",
    "crawlfleet_bloom_layer_fill_ratio",
    "crawlfleet_bloom_false_positive_rate",
    "crawlfleet_job_revisits_tracked",
    "crawlfleet_job_revisits_due",
    "crawlfleet_job_revisit_lag_seconds",
    "crawlfleet_job_revisits_total",
)


def test_grafana_dashboard_is_valid_and_plots_every_metric() -> None:
    dashboard = json.loads((CHART / "dashboards" / "crawlfleet.json").read_text())
    assert dashboard["uid"] == "crawlfleet"
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    expressions = [target["expr"] for panel in panels for target in panel["targets"]]
    for metric in DASHBOARD_METRICS:
        assert any(re.search(rf"\b{metric}\b", expr) for expr in expressions), metric
    # Every query goes through the dashboard's data source variable, never a fixed one.
    for panel in panels:
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"


def test_worker_metric_on_the_dashboard_is_one_the_worker_exports() -> None:
    from crawlfleet.crawler.worker.metrics import WorkerMetrics

    exported = {metric.name for metric in WorkerMetrics().registry.collect()}
    # prometheus_client reports counters without their _total suffix.
    assert "crawlfleet_worker_pages_fetched" in exported


def test_dashboard_queries_only_labels_the_operator_exports() -> None:
    """Each operator metric on the dashboard is grouped and filtered by labels it carries."""
    from crawlfleet.operator.metrics import OperatorMetrics

    exported: dict[str, set[str]] = {}
    for metric in vars(OperatorMetrics()).values():
        name = getattr(metric, "_name", None)
        if isinstance(name, str):
            suffix = "_total" if type(metric).__name__ == "Counter" else ""
            exported[name + suffix] = set(metric._labelnames)
    dashboard = json.loads((CHART / "dashboards" / "crawlfleet.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            used = set(re.findall(r"by \(([^)]*)\)", expr))
            labels = {label.strip() for group in used for label in group.split(",")}
            labels |= set(re.findall(r"(\w+)=~?\"", expr))
            labels -= {"le"}  # the histogram's bucket label
            for metric, names in exported.items():
                if re.search(rf"\b{metric}(_bucket)?\b", expr):
                    assert labels <= names, f"{panel['title']}: {expr} uses {labels - names}"


# -- the README's cluster quickstart --------------------------------------------------------


def test_readme_cluster_quickstart_names_what_the_repository_builds() -> None:
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Run it on a cluster\n.*?```bash\n(.*?)```", readme, re.S)
    assert block, "README.md has no 'Run it on a cluster' command block"
    commands = block.group(1)
    values = load_yaml(CHART / "values.yaml")
    kind_config = load_yaml(REPO / "kind-config.yaml")

    built = dict(re.findall(r"docker build -f (\S+) -t (\S+):dev \.", commands))
    assert built == {
        "operator/Dockerfile": values["image"]["repository"],
        "crawler_image/Dockerfile": values["workerImage"]["repository"],
    }
    assert f"--name {kind_config['name']}" in commands
    assert "--config kind-config.yaml" in commands
    for key in re.findall(r"--set '?([\w.]+)=", commands):
        node: Any = values
        for part in key.split("."):
            assert isinstance(node, dict), key
            assert part in node, f"README sets {key}, which values.yaml does not have"
            node = node[part]
    example = load_yaml(REPO / "examples" / "crawljob.yaml")
    assert f"watchNamespaces={{{example['metadata']['namespace']}}}" in commands
