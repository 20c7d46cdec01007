"""Whose a child is: the operator changes only the objects it made for the job.

A job's children have fixed names (``<job>-redis-auth``, ``<job>-config``, …), and a name
proves nothing: any user of the namespace may have made an object by that name, before the
job or after it, and whoever may create a CrawlJob chooses the name. So an object is the job's
only when it carries an ownerReference with ``controller: true`` and the job's uid -- the test
of apimachinery's ``metav1.IsControlledBy``, which Kubernetes' own controllers apply before
they touch a pod, and which controller-runtime's ``SetControllerReference`` keeps
(``AlreadyOwnedError``). Unlike a ReplicaSet, which adopts orphans that match its selector,
the operator adopts nothing: an object of that name that is not the job's is a *conflict*. It
is neither patched, nor mounted, nor read, nor given an ownerReference (so the garbage
collector never deletes it with the job), and the job creates nothing until it is gone
(condition ``ChildConflict``, as the sample-controller's ``ErrResourceExists``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "RECHECK_SECONDS",
    "ChildConflict",
    "Ownership",
    "conflict_message",
    "ownership",
]

Ownership = Literal["absent", "owned", "foreign"]

#: How often a job held by a conflict looks at its children's names again: deleting the
#: conflicting object lets the job start within this long.
RECHECK_SECONDS: Final = 10.0


def _controller_uid(metadata: Mapping[str, Any]) -> str | None:
    for reference in metadata.get("ownerReferences") or ():
        if reference.get("controller") is True:
            uid = reference.get("uid")
            return str(uid) if uid else None
    return None


def ownership(metadata: Mapping[str, Any] | None, owner_uid: str) -> Ownership:
    """Whether an object (its ``metadata``; None: there is none) is the job's to change.

    Owned only with a controller reference to ``owner_uid``: a plain (non-controller)
    reference, a reference to another object, or none at all make it foreign.
    """
    if metadata is None:
        return "absent"
    return "owned" if _controller_uid(metadata) == owner_uid else "foreign"


@dataclass(frozen=True, slots=True)
class ChildConflict:
    """An object with one of the job's child names that is not the job's."""

    kind: str
    namespace: str
    name: str
    #: Another object is its controller (else it has none: someone made it by hand).
    controlled: bool

    @classmethod
    def of(cls, manifest: Mapping[str, Any], found: Mapping[str, Any]) -> ChildConflict:
        """The conflict between the child ``manifest`` and the object ``found`` (metadata)."""
        meta = manifest["metadata"]
        return cls(
            kind=str(manifest["kind"]),
            namespace=str(meta["namespace"]),
            name=str(meta["name"]),
            controlled=_controller_uid(found) is not None,
        )

    def sentence(self) -> str:
        """What is in the way, by kind and name only: nothing of the object's content."""
        why = (
            "another object is its controller"
            if self.controlled
            else "the operator did not make it for this job"
        )
        return (
            f"{self.kind} {self.namespace}/{self.name} exists and is not owned by this"
            f" CrawlJob ({why})"
        )


def conflict_message(conflicts: Sequence[ChildConflict]) -> str:
    """The ChildConflict condition's message (and its Event's): every object, and the fix."""
    named = "; ".join(conflict.sentence() for conflict in conflicts)
    return (
        f"{named}. The operator leaves it alone and creates nothing for this job while it is"
        f" there: delete or rename it, or name the CrawlJob differently (looked at again every"
        f" {RECHECK_SECONDS:g} s)"
    )
