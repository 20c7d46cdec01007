"""The pure parts of ``crawlfleet enqueue``: which target, which URLs, what is refused and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlfleet.crawler.links.scope import Scope
from crawlfleet.enqueue import EnqueueReport, admit, is_job_reference, stdin_urls
from tests.support.specs import job_spec


def test_a_target_is_a_job_reference_unless_it_is_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert is_job_reference("default/books")
    assert is_job_reference("team-a/books.v2")
    assert not is_job_reference("job.yaml")
    assert not is_job_reference("jobs/job.yaml")  # named as a job file is: even when missing
    assert not is_job_reference("Default/Books")  # not how Kubernetes spells names
    assert not is_job_reference("a/b/c")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ns").mkdir()
    (tmp_path / "ns" / "job").write_text("")
    assert not is_job_reference("ns/job")  # a file here is the file


def test_admit_canonicalises_scopes_at_depth_zero_and_reports_each_refusal() -> None:
    spec = job_spec(
        {"scope": {"allowedDomains": ["a.test"], "exclude": ["/private/"], "maxDepth": 0}}
    )
    report = EnqueueReport()
    kept = admit(
        [
            "HTTP://A.test:80/x#frag",
            "http://a.test/x",  # the same URL once canonical: kept once
            "http://b.test/",
            "http://a.test/private/1",
            "ftp://a.test/file",
            "not a url",
        ],
        Scope.from_spec(spec.scope),
        report,
    )
    assert kept == ["http://a.test/x"]  # maxDepth 0 still admits depth 0
    assert sorted(report.refused) == ["excluded", "invalid_url", "out_of_domain"]
    assert report.refused["out_of_domain"] == [
        ("http://b.test/", "not in spec.scope.allowedDomains")
    ]
    assert [url for url, _ in report.refused["invalid_url"]] == ["ftp://a.test/file", "not a url"]
    assert report.refused_count == 4


def test_the_report_reads_as_counts_then_each_refused_url() -> None:
    report = EnqueueReport(new=["http://a.test/1"], seen=["http://a.test/"])
    report.refuse("out_of_domain", "http://b.test/", "not in spec.scope.allowedDomains")
    assert report.lines() == [
        "1 new, 1 already seen, 1 refused",
        "  refused (out_of_domain): http://b.test/: not in spec.scope.allowedDomains",
    ]


def test_stdin_urls_skip_blanks_and_comments() -> None:
    assert stdin_urls(["http://a.test/\n", "\n", "  # note\n", " http://b.test/ \n"]) == [
        "http://a.test/",
        "http://b.test/",
    ]


def test_a_cluster_target_without_credentials_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from crawlfleet.cli import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert main(["enqueue", "default/books", "http://a.example/"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crawlfleet: default/books: cannot log in to the cluster (")
    assert "Traceback" not in err
