"""``spec.files``: its defaults, its bounds, and what it says on the way to the workers.

The bad inputs (each refused with its field by ``crawlfleet validate``, the API server or the
operator) are cases of the bad-spec corpus: tests/bad_specs/files-*.yaml. The rules' policy is
tested in tests/unit/crawler/test_file_rules.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crawlfleet.crawler.files.rules import FileRules
from crawlfleet.crawljob import CrawlJobSpec, FilesSpec, load_crawljob
from crawlfleet.crawljob.files import (
    DEFAULT_BANDWIDTH_BYTES_PER_SECOND,
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_PART_SIZE_BYTES,
    DEFAULT_PER_HOST,
    FILE_ELEMENTS,
    MAX_FILE_BYTES,
    MAX_FILE_RULES,
    MAX_PART_SIZE_BYTES,
    MAX_TOTAL_BYTES,
    MIN_PART_SIZE_BYTES,
    files_characters,
)
from crawlfleet.errors import ConfigError

SEED = "https://media.test/"


def spec(files: Any, **more: Any) -> CrawlJobSpec:
    return CrawlJobSpec.from_mapping({"seeds": [SEED], "files": files, **more})


def refusal(files: Any, **more: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        spec(files, **more)
    return str(caught.value)


def test_files_are_off_unless_asked_for() -> None:
    assert CrawlJobSpec.from_mapping({"seeds": [SEED]}).files is None
    assert "files" not in CrawlJobSpec.from_mapping({"seeds": [SEED]}).to_mapping()


def test_a_rule_and_nothing_else_gets_every_default() -> None:
    files = spec({"rules": [{"match": r"\.mp4$"}]}).files
    assert files is not None
    (rule,) = files.rules
    assert (rule.match, rule.context, rule.content_types) == (r"\.mp4$", (), ())
    assert (rule.max_bytes, rule.min_bytes) == (DEFAULT_MAX_FILE_BYTES, None)
    assert rule.max_bytes == 4 * 1024**3
    assert files.max_total_bytes == DEFAULT_MAX_TOTAL_BYTES == 0
    assert files.per_host == DEFAULT_PER_HOST == 1
    assert files.bandwidth_bytes_per_second == DEFAULT_BANDWIDTH_BYTES_PER_SECOND == 0
    assert files.part_size_bytes == DEFAULT_PART_SIZE_BYTES == 16 * 1024**2
    assert files.verify_type is True


def test_the_workers_read_back_what_the_user_wrote() -> None:
    written = {
        "rules": [
            {"match": r"\.pdf$", "context": ["a"], "maxBytes": 10**9, "minBytes": 64},
            {"context": ["img", "video", "source"], "contentTypes": ["image/*", "video/mp4"]},
            {"contentTypes": ["application/zip"]},
        ],
        "maxTotalBytes": 10**12,
        "perHost": 2,
        "bandwidthBytesPerSecond": 10**7,
        "partSizeBytes": 8 * 1024**2,
        "verifyType": False,
    }
    mapping = spec(written).to_mapping()
    again = CrawlJobSpec.from_mapping(mapping)
    assert again.files == spec(written).files
    files = mapping["files"]
    assert isinstance(files, dict)
    assert files["perHost"] == 2
    assert files["rules"] == [
        {"match": r"\.pdf$", "context": ["a"], "contentTypes": [], "maxBytes": 10**9,
         "minBytes": 64},
        {"context": ["img", "video", "source"], "contentTypes": ["image/*", "video/mp4"],
         "maxBytes": DEFAULT_MAX_FILE_BYTES},
        {"context": [], "contentTypes": ["application/zip"], "maxBytes": DEFAULT_MAX_FILE_BYTES},
    ]  # fmt: skip


def test_a_repeated_element_or_type_counts_once() -> None:
    files = spec({"rules": [{"context": ["img", "img"], "contentTypes": ["a/b", "a/b"]}]}).files
    assert files is not None
    assert files.rules[0].context == ("img",)
    assert files.rules[0].content_types == ("a/b",)


def test_every_element_may_be_named_with_a_match() -> None:
    files = spec({"rules": [{"match": "/media/", "context": list(FILE_ELEMENTS)}]}).files
    assert files is not None
    assert set(files.rules[0].context) == {
        "a", "audio", "embed", "img", "link", "object", "source", "video"
    }  # fmt: skip


@pytest.mark.parametrize(
    "rule",
    [
        {"context": ["a"], "match": r"\.pdf$"},
        {"context": ["link", "img"], "contentTypes": ["image/*"]},
        {"context": ["img"]},
        {"contentTypes": ["video/*"]},
    ],
)
def test_a_or_link_is_accepted_when_something_narrows_it(rule: dict[str, Any]) -> None:
    assert spec({"rules": [rule]}).files is not None


@pytest.mark.parametrize(
    ("field", "inside", "outside"),
    [
        ("maxBytes", [1, MAX_FILE_BYTES], [0, MAX_FILE_BYTES + 1]),
        ("minBytes", [0, 1000], [-1]),
    ],
)
def test_a_rules_sizes_are_bounded(field: str, inside: list[int], outside: list[int]) -> None:
    for value in inside:
        spec({"rules": [{"match": "x", field: value, "maxBytes": MAX_FILE_BYTES}]})
    for value in outside:
        message = refusal({"rules": [{"match": "x", field: value}]})
        assert f"spec.files.rules[0].{field}: must be" in message


@pytest.mark.parametrize(
    ("field", "inside", "outside"),
    [
        ("maxTotalBytes", [0, MAX_TOTAL_BYTES], [-1, MAX_TOTAL_BYTES + 1]),
        ("perHost", [1, 16], [0, 17]),
        ("bandwidthBytesPerSecond", [0, 16 * 1024**3], [-1, 16 * 1024**3 + 1]),
        ("partSizeBytes", [MIN_PART_SIZE_BYTES, MAX_PART_SIZE_BYTES],
         [MIN_PART_SIZE_BYTES - 1, MAX_PART_SIZE_BYTES + 1]),
    ],
)  # fmt: skip
def test_the_sections_numbers_are_bounded(
    field: str, inside: list[int], outside: list[int]
) -> None:
    for value in inside:
        spec({"rules": [{"match": "x"}], field: value})
    for value in outside:
        assert f"spec.files.{field}: must be" in refusal({"rules": [{"match": "x"}], field: value})


def test_more_rules_than_the_bound_are_refused() -> None:
    many = [{"match": f"/r{number}/"} for number in range(MAX_FILE_RULES + 1)]
    assert f"must hold at most {MAX_FILE_RULES} items" in refusal({"rules": many})
    spec({"rules": many[:MAX_FILE_RULES]})


def test_min_bytes_over_max_bytes_is_refused_with_both_values() -> None:
    message = refusal({"rules": [{"match": "x", "minBytes": 11, "maxBytes": 10}]})
    assert "spec.files.rules[0].minBytes: must not be greater than maxBytes" in message
    assert "minBytes=11, maxBytes=10" in message


def test_every_problem_of_the_section_is_reported_at_once() -> None:
    message = refusal({"rules": [{"context": ["iframe"]}, {}, {"match": "(?=x)"}], "perHost": 0})
    assert "(4 problems)" in message
    assert "spec.files.rules[0].context[0]: must be one of" in message
    assert "spec.files.rules[1]: must set at least one of match, context and contentTypes" in (
        message
    )
    assert "spec.files.rules[2].match: is not a valid RE2 pattern" in message
    assert "spec.files.perHost: must be between 1 and 16" in message


def test_the_sections_strings_count_toward_the_workers_config_map() -> None:
    files = spec({"rules": [{"match": "abc", "contentTypes": ["a/b", "video/*"]}, {"context":
                 ["img"]}]}).files  # fmt: skip
    assert files_characters(files) == 3 + 3 + 7
    assert files_characters(None) == 0


def test_python_callers_may_build_the_section_by_name() -> None:
    files = FilesSpec.model_validate({"rules": [{"match": "x"}], "per_host": 3})
    assert files.per_host == 3


# --- the examples -------------------------------------------------------------------------------

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_the_batch_example_downloads_every_seed_and_reads_no_page() -> None:
    job = load_crawljob(EXAMPLES / "files-batch.yaml")
    assert job.spec.scope.max_depth == 0
    rules = FileRules.from_spec(job.spec.files)
    assert [rules.for_url(seed, None) is not None for seed in job.spec.seeds] == [True] * 3
    assert not rules.response_types_matter  # no page fetch needs to stop after the headers


def test_the_pdf_example_keeps_linked_pdfs_and_crawls_pages() -> None:
    job = load_crawljob(EXAMPLES / "files-pdfs.yaml")
    rules = FileRules.from_spec(job.spec.files)
    (seed,) = job.spec.seeds
    assert rules.for_url(seed, None) is None  # the seed is a page
    report = "https://www.example.org/publications/2026/annual.pdf"
    assert rules.for_link(report, "a") is not None
    assert rules.for_link("https://www.example.org/publications/2026/", "a") is None
    assert rules.response_types_matter
    assert rules.for_response("application/pdf", None) is not None
    assert rules.for_response("text/html", None) is None
