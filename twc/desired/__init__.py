"""The desired state: one pure function (:func:`desired_fleet`) over the fleet file and the
cluster's objects, the same for the daemon, ``twc up``/``preview`` and the program. An
invalid object keeps its last accepted spec, an unknown kind keeps all of its objects,
only a successful observation removes one, and deleting more than a share of the workers
needs a person (:func:`judge_deletions`). :class:`DesiredInputs` carries the inputs into
the program's process."""

from twc.desired._deletions import (
    GuardVerdict,
    Hold,
    deletion_digest,
    deletion_verdict,
    held_objects,
    judge_deletions,
    refusal,
)
from twc.desired._inputs import (
    INPUTS_ENV,
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    BuildScope,
    DesiredInputs,
    ObjectList,
    kind_key,
    object_key,
    trimmed,
)
from twc.desired._merge import (
    OWN_STACK,
    QUEUE_PLURAL,
    STACKS_KEY,
    KindMerge,
    Rejection,
    connection_native,
)
from twc.desired._state import DesiredFleet, HoldFailed, ObjectsUnknown, desired_fleet
from twc.native.objects import worker_native

__all__ = [
    "INPUTS_ENV",
    "OWN_STACK",
    "QUEUE_KIND_KEY",
    "QUEUE_PLURAL",
    "STACKS_KEY",
    "WORKER_KIND_KEY",
    "BuildScope",
    "DesiredFleet",
    "DesiredInputs",
    "GuardVerdict",
    "Hold",
    "HoldFailed",
    "KindMerge",
    "ObjectList",
    "ObjectsUnknown",
    "Rejection",
    "connection_native",
    "deletion_digest",
    "deletion_verdict",
    "desired_fleet",
    "held_objects",
    "judge_deletions",
    "kind_key",
    "object_key",
    "refusal",
    "trimmed",
    "worker_native",
]
