"""Temporal Worker Versioning I/O for versioned rollouts (the pure part is
:mod:`twc.rollout`): :class:`WorkerVersioning`, :func:`observe_rollouts` and
:func:`carry_out_all`."""

from twc.versioning._temporal import ConflictError as ConflictError
from twc.versioning._temporal import GateInputReader as GateInputReader
from twc.versioning._temporal import VersionDetail as VersionDetail
from twc.versioning._temporal import WorkerClients as WorkerClients
from twc.versioning._temporal import WorkerVersioning as WorkerVersioning
from twc.versioning._temporal import carry_out_all as carry_out_all
from twc.versioning._temporal import gate_status as gate_status
from twc.versioning._temporal import observe_rollouts as observe_rollouts
from twc.versioning._temporal import routing_from_describe as routing_from_describe
