"""Destinations are normalised before anything checks where they lie (crawlfleet/destinations.py).

A folder that climbs with ``..`` (plainly or percent-encoded) could pass a check of "under
/data" as text and land elsewhere once the kernel resolves it; so the parser refuses it and
drops ``.`` and repeated slashes, and every later check compares plain names.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crawlfleet.destinations import (
    PARENT_SEGMENT,
    InvalidDestination,
    destination_flag,
    parse_destination,
)
from crawlfleet.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("crawls/./books//", "crawls/books"),
        ("./crawls", "crawls"),
        (".", "."),
        ("/data//./books/", "/data/books"),
        ("file:///data/./books", "/data/books"),
        ("file://localhost/data//books", "/data/books"),
        ("file:///data/%62ooks", "/data/books"),
        ("books..old", "books..old"),  # a name with dots in it is a name
    ],
)
def test_folders_lose_dot_segments_and_repeated_slashes(text: str, path: str) -> None:
    assert parse_destination(text).path == path


@pytest.mark.parametrize(
    "text",
    [
        "/data/../tmp/x",
        "../x",
        "crawls/..",
        "crawls/../../etc",
        "file:///data/../tmp",
        "file:///data/%2e%2e/tmp",
        "file:///data/%2E./tmp",
        "file:///data%2F..%2Ftmp",
    ],
)
def test_a_folder_that_climbs_is_refused_with_a_sentence(text: str) -> None:
    with pytest.raises(InvalidDestination) as refused:
        parse_destination(text)
    assert str(refused.value).startswith(PARENT_SEGMENT)


@pytest.mark.parametrize(
    "text",
    [
        "s3://crawls/a/../b/",
        "s3://crawls/a/./b/",
        "s3://crawls/a/%2e%2e/b/",
        "s3://crawls/a/%2E./b/",
        "s3://crawls/%2e/",
        "s3://crawls/team-a%2F..%2Fteam-b/",
    ],
)
def test_an_s3_prefix_with_dot_segments_plain_or_encoded_is_refused(text: str) -> None:
    with pytest.raises(InvalidDestination, match="plain or percent-encoded"):
        parse_destination(text)


def test_an_s3_prefix_keeps_other_escapes_as_key_characters() -> None:
    assert parse_destination("s3://crawls/a%20b/").prefix == "a%20b/"


def test_the_command_line_resolves_a_climbing_folder_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert destination_flag("../crawls", "--output").path == str(tmp_path / "crawls")
    assert destination_flag("crawls/./books", "--output").path == "crawls/books"
    with pytest.raises(ConfigError, match=r"^--output: must not climb"):
        destination_flag("file:///srv/%2e%2e/etc", "--output")
    assert os.getcwd() == str(work)


@pytest.mark.parametrize(
    ("text", "run"),
    [
        ("crawls/news", "crawls/news/runs/20261202T081500Z"),
        ("s3://bucket/news/", "s3://bucket/news/runs/20261202T081500Z/"),
        ("s3://bucket", "s3://bucket/runs/20261202T081500Z/"),
    ],
)
def test_a_run_writes_under_runs_and_its_id(text: str, run: str) -> None:
    destination = parse_destination(text).for_run("20261202T081500Z")
    assert destination.url == run
    assert parse_destination(destination.url) == destination  # what a worker is handed


@pytest.mark.parametrize("run", ["", "..", "a/b", ".hidden", "x" * 65])
def test_a_run_id_is_a_plain_name(run: str) -> None:
    with pytest.raises(ValueError, match="not a run id"):
        parse_destination("crawls/news").for_run(run)
