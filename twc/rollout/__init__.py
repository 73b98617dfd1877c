"""Versioned rollouts, the pure part: names, the planner, the status record, the words.

A worker with ``rollout`` runs each build as its own Deployment (``<worker>-<buildID>``)
and Temporal's Worker Versioning routes new executions between them. This package
decides, from what Temporal and the cluster report, what happens next — no client, no
clock, no engine (the Temporal calls are in :mod:`twc.versioning`, the Deployments in
the program):

* :func:`derive_build_id`, :func:`version_deployment_name`, :func:`gate_workflow_id`:
  the official controller's naming;
* :func:`plan_rollout`: observed routing, Deployments, gates and time → one routing
  change, gates to start, the versions that stay (with replicas), the ones that go;
* :func:`rollout_status`: the official status record (target/current/ramping/deprecated);
* :func:`rollout_in_words`: the plan as a preview sentence.
"""

from twc.rollout._inputs import VersionInput, WorkerVersions, version_inputs
from twc.rollout._model import (
    GatePolicy,
    GateRun,
    GateStatus,
    RolloutPolicy,
    RolloutSettings,
    Routing,
    StepPolicy,
    Strategy,
    SunsetPolicy,
    TemporalVersion,
    VersionDeployment,
    VersionStatus,
)
from twc.rollout._names import (
    BUILD_ID_LABEL,
    DEPLOYMENT_NAME_LABEL,
    ENV_BUILD_ID,
    ENV_DEPLOYMENT_NAME,
    MAX_BUILD_ID,
    MAX_DEPLOYMENT_NAME,
    POLICY_ANNOTATION,
    TARGET_ANNOTATION,
    VERSION_ANNOTATION,
    derive_build_id,
    gate_workflow_id,
    image_prefix,
    temporal_deployment_name,
    version_deployment_name,
)
from twc.rollout._observed import RolloutObservation, plan_observed
from twc.rollout._planner import (
    MAX_STAGES,
    GateStart,
    Phase,
    RolloutPlan,
    RoutingChange,
    RoutingKind,
    VersionPlan,
    hold_versions,
    plan_rollout,
)
from twc.rollout._spec import (
    VERSION_FIELDS,
    build_id_of,
    deployment_name_of,
    policy_of,
    version_spec,
    version_spec_json,
    with_version_spec,
)
from twc.rollout._status import rollout_status, version_rows
from twc.rollout._words import duration_words, rollback_in_words, rollout_in_words

__all__ = [
    "BUILD_ID_LABEL",
    "DEPLOYMENT_NAME_LABEL",
    "ENV_BUILD_ID",
    "ENV_DEPLOYMENT_NAME",
    "MAX_BUILD_ID",
    "MAX_DEPLOYMENT_NAME",
    "MAX_STAGES",
    "POLICY_ANNOTATION",
    "TARGET_ANNOTATION",
    "VERSION_ANNOTATION",
    "VERSION_FIELDS",
    "GatePolicy",
    "GateRun",
    "GateStart",
    "GateStatus",
    "Phase",
    "RolloutObservation",
    "RolloutPlan",
    "RolloutPolicy",
    "RolloutSettings",
    "Routing",
    "RoutingChange",
    "RoutingKind",
    "StepPolicy",
    "Strategy",
    "SunsetPolicy",
    "TemporalVersion",
    "VersionDeployment",
    "VersionInput",
    "VersionPlan",
    "VersionStatus",
    "WorkerVersions",
    "build_id_of",
    "deployment_name_of",
    "derive_build_id",
    "duration_words",
    "gate_workflow_id",
    "hold_versions",
    "image_prefix",
    "plan_observed",
    "plan_rollout",
    "policy_of",
    "rollback_in_words",
    "rollout_in_words",
    "rollout_status",
    "temporal_deployment_name",
    "version_deployment_name",
    "version_inputs",
    "version_rows",
    "version_spec",
    "version_spec_json",
    "with_version_spec",
]
