"""seedsFrom: a seed list outside the CrawlJob, checked as spec.seeds are, gzip or text."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from crawlfleet.crawljob import CrawlJobSpec, load_crawljob, parse_seed_list, read_seed_file
from crawlfleet.errors import ConfigError

WHERE = "spec.seedsFrom.file (seeds.txt)"


def test_one_url_a_line_with_blanks_comments_and_repeats_skipped() -> None:
    data = b"# the shop\nhttps://a.example/\n\n  https://b.example/x  \nhttps://a.example/\n"
    assert parse_seed_list(data, WHERE) == ("https://a.example/", "https://b.example/x")


def test_a_gzip_list_is_read_as_its_text() -> None:
    urls = [f"https://h{k % 3}.example/p/{k}" for k in range(1000)]
    data = gzip.compress("\n".join(urls).encode())
    assert parse_seed_list(data, WHERE) == tuple(urls)


def test_bad_lines_are_named_by_number_and_a_password_is_never_echoed() -> None:
    data = b"https://a.example/\nftp://b.example/\nhttps://user:secret@c.example/\n"
    with pytest.raises(ConfigError) as raised:
        parse_seed_list(data, WHERE)
    message = str(raised.value)
    assert f"{WHERE}: line 2: must be an absolute http(s) URL" in message
    assert f"{WHERE}: line 3:" in message
    assert "secret" not in message


def test_an_empty_list_a_binary_one_and_a_gzip_bomb_are_refused_in_one_sentence() -> None:
    with pytest.raises(ConfigError, match="holds no seed URL"):
        parse_seed_list(b"# nothing yet\n\n", WHERE)
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        parse_seed_list(b"\xff\xfe\x00", WHERE)
    with pytest.raises(ConfigError, match="does not decompress"):
        parse_seed_list(b"\x1f\x8b\x08garbage", WHERE)
    bomb = gzip.compress(b"\n" * (300 * 1024 * 1024))
    with pytest.raises(ConfigError, match="larger than 256 MiB once decompressed"):
        parse_seed_list(bomb, WHERE)


def test_the_default_scope_waits_for_the_list_and_then_holds_every_seed_host() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": ["https://a.example/"],
            "seedsFrom": {"configMapKeyRef": {"name": "s", "key": "k"}},
        }
    )
    assert spec.scope_unresolved
    resolved = spec.with_listed_seeds(["https://B.example/1", "https://a.example/2"])
    assert resolved.scope.allowed_domains == ("a.example", "b.example")
    assert not resolved.scope_unresolved
    assert resolved.seeds == ("https://a.example/",)  # the list stays out of the spec
    given = CrawlJobSpec.from_mapping(
        {"seedsFrom": {"file": "x"}, "scope": {"allowedDomains": ["c.example"]}}
    )
    assert given.with_listed_seeds(["https://b.example/"]).scope.allowed_domains == ("c.example",)


def test_seeds_over_too_many_hosts_need_allowed_domains_given() -> None:
    spec = CrawlJobSpec.from_mapping({"seedsFrom": {"file": "x"}})
    with pytest.raises(ConfigError, match=r"spec\.scope\.allowedDomains: must be set"):
        spec.with_listed_seeds([f"https://h{k}.example/" for k in range(1001)])


def test_a_job_file_reads_its_list_beside_it(tmp_path: Path) -> None:
    (tmp_path / "seeds.txt").write_text("https://a.example/\nhttps://b.example/\n")
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        "apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: big}\n"
        "spec:\n  seedsFrom: {file: seeds.txt}\n"
    )
    job = load_crawljob(job_file)
    assert job.spec.scope.allowed_domains == ("a.example", "b.example")
    assert read_seed_file(job.spec, job_file) == ("https://a.example/", "https://b.example/")


def test_a_bad_list_makes_the_job_file_invalid_and_a_missing_one_says_so(tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        "apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: big}\n"
        "spec:\n  seedsFrom: {file: seeds.txt}\n"
    )
    with pytest.raises(ConfigError, match=r"spec\.seedsFrom\.file \(.*seeds\.txt\): cannot read"):
        load_crawljob(job_file)
    (tmp_path / "seeds.txt").write_text("https://a.example/\nnot a url\n")
    with pytest.raises(ConfigError, match=r"seeds\.txt\): line 2: must be an absolute"):
        load_crawljob(job_file)


def test_a_config_map_is_for_the_operator_to_read() -> None:
    spec = CrawlJobSpec.from_mapping({"seedsFrom": {"configMapKeyRef": {"name": "s", "key": "k"}}})
    with pytest.raises(ConfigError, match=r"spec\.seedsFrom\.configMapKeyRef: a ConfigMap is read"):
        read_seed_file(spec, "job.yaml")


def test_a_spec_of_listed_seeds_only_round_trips_as_the_workers_read_it() -> None:
    spec = CrawlJobSpec.from_mapping({"seedsFrom": {"file": "x"}}).with_listed_seeds(
        ["https://a.example/"]
    )
    again = CrawlJobSpec.from_mapping(spec.to_mapping())
    assert again == spec
    assert not again.scope_unresolved
