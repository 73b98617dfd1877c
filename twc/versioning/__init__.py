"""Temporal Worker Versioning I/O for versioned rollouts.

The pure part (names, planner, status) is :mod:`twc.rollout`; this package makes the
calls: :class:`WorkerVersioning` (describe, set current/ramping with the conflict
token, delete a version, gate workflows), :func:`observe_rollouts` (every versioned
worker as Temporal reports it) and :func:`carry_out` (one worker's plan, executed).
"""

from twc.versioning._client import ConflictError, VersionDetail, WorkerVersioning
from twc.versioning._convert import gate_status, routing_from_describe, version_status
from twc.versioning._driver import (
    GateInputReader,
    RolloutResult,
    SecretReader,
    WorkerClients,
    carry_out,
    carry_out_all,
    observe_rollout,
    observe_rollouts,
)

__all__ = [
    "ConflictError",
    "GateInputReader",
    "RolloutResult",
    "SecretReader",
    "VersionDetail",
    "WorkerClients",
    "WorkerVersioning",
    "carry_out",
    "carry_out_all",
    "gate_status",
    "observe_rollout",
    "observe_rollouts",
    "routing_from_describe",
    "version_status",
]
