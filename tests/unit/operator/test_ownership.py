"""Whose a child is, and the ChildConflict status: pure decisions, no cluster.

The e2e side (tests/e2e/test_ownership.py) proves the same rules on the real API server.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from crawlfleet.operator.ownership import (
    RECHECK_SECONDS,
    ChildConflict,
    conflict_message,
    ownership,
)
from crawlfleet.operator.status import (
    CONDITION_TYPES,
    child_conflict_resolved,
    child_conflict_status,
    invalid_spec_status,
    output_not_durable_status,
)

JOB_UID = "0b7c1d1e-1111-4a4a-9b9b-000000000001"
OTHER_UID = "0b7c1d1e-2222-4a4a-9b9b-000000000002"
T0 = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)


def reference(uid: str, *, controller: bool | None) -> dict[str, Any]:
    ref: dict[str, Any] = {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "name": "web",
        "uid": uid,
    }
    if controller is not None:
        ref["controller"] = controller
    return ref


@pytest.mark.parametrize(
    ("references", "expected"),
    [
        ([reference(JOB_UID, controller=True)], "owned"),
        # Beside other, non-controller owners (a user's own bookkeeping) it stays the job's.
        (
            [reference(OTHER_UID, controller=False), reference(JOB_UID, controller=True)],
            "owned",
        ),
        ([], "foreign"),  # made by hand, with the child's name
        ([reference(OTHER_UID, controller=True)], "foreign"),  # another CrawlJob's
        ([reference(JOB_UID, controller=False)], "foreign"),  # names the job, not as controller
        ([reference(JOB_UID, controller=None)], "foreign"),  # controller unset is not true
        (
            [reference(OTHER_UID, controller=True), reference(JOB_UID, controller=False)],
            "foreign",
        ),
    ],
)
def test_only_a_controller_reference_to_the_jobs_uid_makes_a_child_the_jobs(
    references: list[dict[str, Any]], expected: str
) -> None:
    metadata = {"name": "web-redis-auth", "namespace": "default", "ownerReferences": references}
    assert ownership(metadata, JOB_UID) == expected


def test_no_object_is_absent_and_no_references_at_all_is_foreign() -> None:
    assert ownership(None, JOB_UID) == "absent"
    assert ownership({"name": "web-config", "namespace": "default"}, JOB_UID) == "foreign"


def test_a_conflict_names_kind_and_name_and_why_and_nothing_of_the_object() -> None:
    manifest = {"kind": "Secret", "metadata": {"name": "web-redis-auth", "namespace": "default"}}
    found = {
        "name": "web-redis-auth",
        "namespace": "default",
        "labels": {"team": "payments"},
        "annotations": {"note": "DB_PASSWORD=hunter2"},
    }
    by_hand = ChildConflict.of(manifest, found)
    assert by_hand.sentence() == (
        "Secret default/web-redis-auth exists and is not owned by this CrawlJob (the operator"
        " did not make it for this job)"
    )
    held = ChildConflict.of(
        {"kind": "ConfigMap", "metadata": {"name": "web-config", "namespace": "default"}},
        {"ownerReferences": [reference(OTHER_UID, controller=True)]},
    )
    message = conflict_message([by_hand, held])
    assert message.startswith(
        "Secret default/web-redis-auth exists and is not owned by this CrawlJob (the operator"
        " did not make it for this job); ConfigMap default/web-config exists and is not owned"
        " by this CrawlJob (another object is its controller). The operator leaves it alone"
    )
    assert f"every {RECHECK_SECONDS:g} s" in message
    for content in ("payments", "hunter2", OTHER_UID):
        assert content not in message


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_a_held_job_is_pending_with_every_condition_and_the_conflict_named() -> None:
    message = "Secret default/web-redis-auth exists and is not owned by this CrawlJob (…)"
    status = child_conflict_status({}, message, generation=2, now=T0)
    assert status["phase"] == "Pending"
    assert status["message"] == message
    assert [c["type"] for c in status["conditions"]] == list(CONDITION_TYPES)
    by_type = conditions(status)
    assert by_type["ChildConflict"] == {
        "type": "ChildConflict",
        "status": "True",
        "reason": "NotOwned",
        "message": message,
        "lastTransitionTime": "2026-12-02T05:00:00Z",
        "observedGeneration": 2,
    }
    assert (by_type["Ready"]["status"], by_type["Ready"]["reason"]) == ("False", "ChildConflict")
    assert by_type["Progressing"]["status"] == "False"
    assert by_type["Failed"]["status"] == "False"  # held, not failed: it starts once free


def test_a_finished_job_keeps_its_phase_and_conditions_and_gets_only_the_conflict() -> None:
    done = {
        "phase": "Succeeded",
        "conditions": [
            {"type": "Complete", "status": "True", "reason": "Crawled", "message": "complete"},
            {"type": "ChildConflict", "status": "False", "reason": "NoConflict", "message": ""},
        ],
    }
    status = child_conflict_status(done, "ConfigMap default/web-config …", generation=4, now=T0)
    assert status["phase"] == "Succeeded"
    assert "message" not in status
    by_type = conditions(status)
    assert by_type["Complete"] == done["conditions"][0]
    assert by_type["ChildConflict"]["status"] == "True"


def test_the_conflict_clears_once_resolved_and_costs_nothing_when_there_was_none() -> None:
    held = child_conflict_status({}, "Service default/web-metrics …", generation=1, now=T0)
    later = T0 + timedelta(seconds=30)
    cleared = child_conflict_resolved(held, 1, later)
    by_type = conditions(cleared)
    assert (by_type["ChildConflict"]["status"], by_type["ChildConflict"]["reason"]) == (
        "False",
        "NoConflict",
    )
    assert by_type["ChildConflict"]["lastTransitionTime"] == "2026-12-02T05:00:30Z"
    assert by_type["Ready"] == conditions(held)["Ready"]  # the tick writes the others
    assert child_conflict_resolved({**held, **cleared}, 1, later) == {}
    assert child_conflict_resolved({}, 1, later) == {}


def test_the_other_holds_report_the_children_as_not_looked_at() -> None:
    for make in (invalid_spec_status, output_not_durable_status):
        status = make({}, "why", generation=1, now=T0)
        assert [c["type"] for c in status["conditions"]] == list(CONDITION_TYPES)
        assert conditions(status)["ChildConflict"]["status"] == "Unknown"
