"""The desired state: one pure function (:func:`desired_fleet`) over the fleet file and the
cluster's objects, the same for the daemon, ``twc up``/``preview`` and the program. An invalid
object keeps its last accepted spec, an unknown kind keeps all of its objects, only a successful
observation removes one, and deleting more than a share of the workers needs a person
(:func:`judge_deletions`). :class:`DesiredInputs` carries the inputs into the program's process."""

from twc.desired._deletions import GuardVerdict as GuardVerdict
from twc.desired._deletions import Hold as Hold
from twc.desired._deletions import deletion_digest as deletion_digest
from twc.desired._deletions import deletion_verdict as deletion_verdict
from twc.desired._deletions import deletions_beyond_share as deletions_beyond_share
from twc.desired._deletions import held_objects as held_objects
from twc.desired._deletions import judge_deletions as judge_deletions
from twc.desired._deletions import object_groups as object_groups
from twc.desired._deletions import refusal as refusal
from twc.desired._inputs import INPUTS_ENV as INPUTS_ENV
from twc.desired._inputs import QUEUE_KIND_KEY as QUEUE_KIND_KEY
from twc.desired._inputs import WORKER_KIND_KEY as WORKER_KIND_KEY
from twc.desired._inputs import BuildScope as BuildScope
from twc.desired._inputs import DesiredInputs as DesiredInputs
from twc.desired._inputs import ObjectList as ObjectList
from twc.desired._inputs import kind_key as kind_key
from twc.desired._inputs import object_key as object_key
from twc.desired._inputs import trimmed as trimmed
from twc.desired._merge import OWN_STACK as OWN_STACK
from twc.desired._merge import QUEUE_PLURAL as QUEUE_PLURAL
from twc.desired._merge import STACKS_KEY as STACKS_KEY
from twc.desired._merge import KindMerge as KindMerge
from twc.desired._merge import Rejection as Rejection
from twc.desired._merge import connection_native as connection_native
from twc.desired._merge import queue_key as queue_key
from twc.desired._state import DesiredFleet as DesiredFleet
from twc.desired._state import HoldFailed as HoldFailed
from twc.desired._state import ObjectsUnknown as ObjectsUnknown
from twc.desired._state import desired_fleet as desired_fleet
from twc.native.objects import worker_native as worker_native
