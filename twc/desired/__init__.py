"""The desired state: one pure function over the fleet file and the cluster's objects.

Every entry point computes what should run the same way — the daemon each iteration,
``twc up`` and ``twc preview``, and the program itself under plain ``pulumi up``::

    inputs = DesiredInputs(cluster={...}, replicas={...}, accepted={...})
    desired = desired_fleet(fleet, inputs, registry=default_registry(), file=path)
    desired.workers          # every worker to run, keyed <namespace>/<name>
    desired.rejected         # objects whose current spec is not used, and why
    desired.accepted         # the last accepted spec of each object (next inputs)

Safety is part of the function, not of its callers: an object that turns invalid keeps
its last accepted spec (its workers run on unchanged), a kind whose list failed keeps
all of its accepted objects, and only an observation that succeeded removes an object.
Deleting more than a share of the stack's workers at once needs a person
(:func:`judge_deletions`); workers whose deletion the daemon holds come back with the
inputs they last came from (:func:`held_objects` finds them, ``inputs.held`` carries
them), so the program keeps them too.

Pure: no client, no engine, no clock. :class:`DesiredInputs` is the one schema that
carries the inputs into the program's process.
"""

from twc.desired._deletions import (
    GuardVerdict,
    Hold,
    deletion_digest,
    deletion_verdict,
    judge_deletions,
    refusal,
)
from twc.desired._held import held_objects
from twc.desired._inputs import (
    INPUTS_ENV,
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    BuildScope,
    DesiredInputs,
    HeldObjects,
    ObjectList,
    kind_key,
    object_key,
    trimmed,
)
from twc.desired._merge import (
    QUEUE_PLURAL,
    KindMerge,
    Rejection,
    connection_native,
    queue_native,
    with_entries,
    worker_native,
)
from twc.desired._stacks import OWN_STACK, STACKS_KEY
from twc.desired._state import DesiredFleet, HoldFailed, ObjectsUnknown, desired_fleet

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
    "HeldObjects",
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
    "queue_native",
    "refusal",
    "trimmed",
    "with_entries",
    "worker_native",
]
