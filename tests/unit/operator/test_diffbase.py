"""kopf's diff-base as the operator keeps it: the spec's digest, small whatever the spec."""

from __future__ import annotations

import json
from typing import Any

import kopf

from crawlfleet.operator.main import SpecDigestDiffBase


def body(seeds: list[str], **spec: Any) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": "crawlfleet.io/v1alpha1",
            "kind": "CrawlJob",
            "metadata": {"name": "books", "namespace": "crawl", "labels": {"team": "a"}},
            "spec": {"seeds": seeds, **spec},
            "status": {"phase": "Running"},
        }
    )


def test_the_essence_changes_with_any_spec_change_and_stays_small() -> None:
    storage = SpecDigestDiffBase(prefix="crawlfleet.io", key="last-handled-configuration")
    many = [f"https://books.example/{index:05d}".ljust(2048, "p") for index in range(600)]

    essence = storage.build(body=body(many))
    assert len(json.dumps(essence)) < 300  # the annotation holding it is capped at 256 kB
    assert essence == storage.build(body=body(list(many)))  # same spec, same essence
    assert essence != storage.build(body=body(many[:-1]))  # one seed fewer is a change
    assert essence != storage.build(body=body(many, suspend=True))
    assert essence["metadata"]["labels"] == {"team": "a"}  # the rest is kopf's, unchanged
    assert "status" not in essence


def test_a_seed_list_outside_the_job_is_named_in_the_essence_not_read_into_it() -> None:
    """seedsFrom: the essence changes when the job names another list, never with the list's
    content (read once, when the job starts: docs/crawljob.md), and stays as small."""
    storage = SpecDigestDiffBase(prefix="crawlfleet.io", key="last-handled-configuration")
    ref = {"configMapKeyRef": {"name": "seeds", "key": "seeds.txt.gz"}}
    other = {"configMapKeyRef": {"name": "seeds", "key": "more.txt.gz"}}
    essence = storage.build(body=body([], seedsFrom=ref))
    assert len(json.dumps(essence)) < 300
    assert essence == storage.build(body=body([], seedsFrom=dict(ref)))
    assert essence != storage.build(body=body([], seedsFrom=other))
