"""seedsFrom: a seed list outside the CrawlJob, checked as spec.seeds are, gzip or text;
streamed within its bounds, and never quoted."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from pathlib import Path

import pytest

from crawlfleet.cli import main
from crawlfleet.config import Config
from crawlfleet.crawljob import (
    CrawlJobSpec,
    SeedListBounds,
    load_crawljob,
    parse_seed_list,
    read_seed_file,
)
from crawlfleet.crawljob.seed_list import MAX_LINE_BYTES, MAX_SEED_LIST_BYTES, MAX_SEED_LIST_LINES
from crawlfleet.errors import ConfigError

MIB = 1024 * 1024

WHERE = "spec.seedsFrom.file (seeds.txt)"


def _job_file(folder: Path, seeds_from: str) -> Path:
    """A CrawlJob file in ``folder`` whose spec is ``seeds_from`` alone (a YAML line)."""
    job_file = folder / "job.yaml"
    job_file.write_text(
        "apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: big}\n"
        f"spec:\n  {seeds_from}\n"
    )
    return job_file


def test_one_url_a_line_with_blanks_comments_and_repeats_skipped() -> None:
    data = b"# the shop\nhttps://a.example/\n\n  https://b.example/x  \nhttps://a.example/\n"
    assert parse_seed_list(data, WHERE) == ("https://a.example/", "https://b.example/x")


def test_a_gzip_list_is_read_as_its_text() -> None:
    urls = [f"https://h{k % 3}.example/p/{k}" for k in range(1000)]
    data = gzip.compress("\n".join(urls).encode())
    assert parse_seed_list(data, WHERE) == tuple(urls)


def test_bad_lines_are_named_by_number_and_reason_and_never_quoted() -> None:
    data = (
        b"https://a.example/\nftp://b.example/\nhttps://user:secret@c.example/\n"
        b"DB_PASSWORD=hunter2\n\xffhunter3\n"
    )
    with pytest.raises(ConfigError) as raised:
        parse_seed_list(data, WHERE)
    message = str(raised.value)
    assert message.splitlines()[1:] == [
        f"  {WHERE}: line 2: must be an absolute http(s) URL with a host, at most 2048 characters",
        f"  {WHERE}: line 3: must not hold a user name or password: a crawl sends no"
        " credentials, and the spec is readable by anyone who can read the CrawlJob",
        f"  {WHERE}: line 4: must be an absolute http(s) URL with a host, at most 2048 characters",
        f"  {WHERE}: line 5: is not UTF-8 text",
    ]
    for quoted in ("b.example", "secret", "DB_PASSWORD", "hunter"):
        assert quoted not in message


def test_a_line_past_the_line_bound_is_refused_unread_and_the_next_one_counted() -> None:
    data = b"https://a.example/\n#" + b"x" * (3 * MAX_LINE_BYTES) + b"\nnot a url\n"
    with pytest.raises(ConfigError) as raised:
        parse_seed_list(data, WHERE)
    assert raised.value.args[0].splitlines()[1:] == [
        f"  {WHERE}: line 2: is longer than {MAX_LINE_BYTES} bytes",
        f"  {WHERE}: line 3: must be an absolute http(s) URL with a host, at most 2048 characters",
    ]
    long_seed = b"https://a.example/" + b"p" * (MAX_LINE_BYTES - 19) + b"\n"
    assert len(long_seed) == MAX_LINE_BYTES  # at the bound: read, and judged as a seed
    with pytest.raises(ConfigError, match="line 1: must be an absolute http"):
        parse_seed_list(long_seed, WHERE)


def test_an_empty_list_a_binary_one_and_a_broken_gzip_are_refused_without_their_bytes() -> None:
    with pytest.raises(ConfigError, match="holds no seed URL"):
        parse_seed_list(b"# nothing yet\n\n", WHERE)
    with pytest.raises(ConfigError, match="line 1: is not UTF-8 text"):
        parse_seed_list(b"\xff\xfe\x00", WHERE)
    for broken in (
        b"\x1f\x8bDB_PASSWORD=hunter2",  # gzip's own error quotes the bytes after the magic
        gzip.compress(b"https://a.example/\n")[:-6],  # cut short
        gzip.compress(b"https://a.example/\n") + b"DB_PASSWORD=hunter2",  # trailing bytes
    ):
        with pytest.raises(ConfigError) as raised:
            parse_seed_list(broken, WHERE)
        assert str(raised.value) == (
            f"{WHERE}: starts as gzip but does not decompress (corrupt or cut short)"
        )


def _bomb(line: bytes, decompressed_bytes: int) -> bytes:
    """``line`` repeated to ``decompressed_bytes``, gzip-compressed a chunk at a time (the
    test never holds the expanded list either)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = line * (MIB // len(line))
    parts = [packer.compress(chunk) for _ in range(decompressed_bytes // len(chunk))]
    return b"".join([*parts, packer.flush()])


def test_a_gzip_bomb_is_refused_at_the_byte_bound_in_a_buffer_of_memory() -> None:
    # 128 MiB of long comment lines in 172 KiB: the bound is met at 64 MiB, the lines are few.
    bomb = _bomb(b"#" + b"x" * 4094 + b"\n", 128 * MIB)
    assert len(bomb) < 512 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as raised:
            parse_seed_list(bomb, WHERE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(raised.value) == (
        f"{WHERE}: is larger than {MAX_SEED_LIST_BYTES // MIB} MiB once decompressed, the most a"
        " seed list may hold (its administrator sets the bound: CRAWLFLEET_SEED_LIST_MAX_BYTES,"
        " chart value policy.seedList.maxBytes)"
    )
    # The reader's buffers, not the 64 MiB it read nor the 128 MiB the bomb holds.
    assert peak < 1 * MIB, peak


def test_a_bomb_of_empty_lines_is_refused_at_the_line_bound() -> None:
    bomb = _bomb(b"\n", 64 * MIB)
    with pytest.raises(ConfigError, match=r"has more than 1,000,000 lines, the most a seed list"):
        parse_seed_list(bomb, WHERE)
    plain = b"https://a.example/\n" * 11
    bounds = SeedListBounds(max_bytes=MAX_SEED_LIST_BYTES, max_lines=10)
    with pytest.raises(ConfigError, match=r"has more than 10 lines"):
        parse_seed_list(plain, WHERE, bounds)
    assert parse_seed_list(plain, WHERE, SeedListBounds(max_lines=11)) == ("https://a.example/",)
    with pytest.raises(ConfigError, match=r"is larger than 100 bytes, the most"):
        parse_seed_list(plain, WHERE, SeedListBounds(max_bytes=100))


def test_the_bounds_are_the_administrators_to_move() -> None:
    config = Config.from_env(
        {"CRAWLFLEET_SEED_LIST_MAX_BYTES": "1048576", "CRAWLFLEET_SEED_LIST_MAX_LINES": "5"}
    )
    assert config.seed_list.bounds() == SeedListBounds(max_bytes=MIB, max_lines=5)
    assert Config.from_env({}).seed_list.bounds() == SeedListBounds(
        MAX_SEED_LIST_BYTES, MAX_SEED_LIST_LINES
    )
    with pytest.raises(ConfigError, match="CRAWLFLEET_SEED_LIST_MAX_LINES: must be at least 1"):
        Config.from_env({"CRAWLFLEET_SEED_LIST_MAX_LINES": "0"}).seed_list.bounds()


def test_validate_reads_a_file_with_the_same_reader_bounds_and_sentences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = b"https://a.example/\nDB_PASSWORD=hunter2\n" + b"https://b.example/\n" * 3
    (tmp_path / "seeds.txt.gz").write_bytes(gzip.compress(listed))
    job_file = _job_file(tmp_path, "seedsFrom: {file: seeds.txt.gz}")
    assert main(["validate", str(job_file)]) == 2
    err = capsys.readouterr().err
    where = f"spec.seedsFrom.file ({tmp_path / 'seeds.txt.gz'})"
    with pytest.raises(ConfigError) as as_a_config_map:
        parse_seed_list(gzip.compress(listed), where)
    assert str(as_a_config_map.value) in err
    assert "line 2: must be an absolute http(s) URL" in err
    assert "hunter2" not in err
    monkeypatch.setenv("CRAWLFLEET_SEED_LIST_MAX_LINES", "4")
    assert main(["validate", str(job_file)]) == 2
    assert f"{where}: has more than 4 lines" in capsys.readouterr().err


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
    job_file = _job_file(tmp_path, "seedsFrom: {file: seeds.txt}")
    job = load_crawljob(job_file)
    assert job.spec.scope.allowed_domains == ("a.example", "b.example")
    assert read_seed_file(job.spec, job_file) == ("https://a.example/", "https://b.example/")


def test_a_bad_list_makes_the_job_file_invalid_and_a_missing_one_says_so(tmp_path: Path) -> None:
    job_file = _job_file(tmp_path, "seedsFrom: {file: seeds.txt}")
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


def test_validate_says_a_config_map_list_is_the_operators_and_needs_its_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_file = _job_file(tmp_path, "seedsFrom: {configMapKeyRef: {name: seeds, key: seeds.txt.gz}}")
    assert main(["validate", str(job_file)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "  its seedsFrom list (ConfigMap seeds, key seeds.txt.gz) is checked by the operator"
        " when the job starts, which reads it only labelled crawlfleet.io/crawljob-seeds=true"
    )
