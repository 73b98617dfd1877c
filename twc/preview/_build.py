"""Turn the engine events of ``stack.preview(diff=True, on_event=...)`` into a report.

Pure: reads the events it is given, never the engine. The steps:

1. *Ingest*: merge every resource event by URN (a replacement arrives as several steps),
   scrubbing secrets out of inputs and outputs as they are read.
2. *Group*: each resource belongs to its nearest twc component ancestor (found from the
   ``parent`` URN, or failing that from the URN's type chain and the child-naming
   convention); resources outside any component group under their top-level ancestor.
3. *Explain*: derive field changes from the detailed diff and reasons in words from the
   old and new state, following the conventions below.

Conventions the components follow, which the reasons rely on:

* worker pods carry the connection fingerprint in the pod-template annotation
  :data:`CONNECTION_SPEC_HASH_ANNOTATION`, equal to the ``fingerprint`` output of the
  connection's ``ConnectionFingerprint`` child (``<connection>-fingerprint``);
* a worker's Deployment says who sets its replica count in the annotation
  :data:`REPLICAS_SOURCE_ANNOTATION` (``autoscaling`` or ``spec``);
* optionally, a worker's Deployment names its connection component in
  :data:`CONNECTION_ANNOTATION`; without it the connection is found by fingerprint.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from twc.preview._model import (
    Diagnostic,
    FieldChange,
    Group,
    GroupKind,
    OpCounts,
    Operation,
    PreviewReport,
    Reason,
    ReasonCode,
    ResourceChange,
    Summary,
)
from twc.preview._paths import (
    Path,
    format_path,
    kind_label,
    parse_path,
    parse_urn,
    path_sort_key,
)
from twc.preview._redact import SECRET, SECRET_TYPES, UNKNOWN, lookup, scrub
from twc.preview._rollout import rollout_reasons, version_state
from twc.rollout import POLICY_ANNOTATION, TARGET_ANNOTATION

if TYPE_CHECKING:
    from pulumi.automation.events import EngineEvent, StepEventMetadata

__all__ = [
    "CLUSTER_CONNECTION_TYPE",
    "CONNECTION_ANNOTATION",
    "CONNECTION_SPEC_HASH_ANNOTATION",
    "CONNECTION_TYPE",
    "QUEUE_TYPE",
    "REPLICAS_SOURCE_ANNOTATION",
    "WORKER_TYPE",
    "build_report",
    "events_from_json",
]

WORKER_TYPE = "twc:temporal:TemporalWorker"
CLUSTER_CONNECTION_TYPE = "twc:temporal:ClusterConnection"
CONNECTION_TYPE = "twc:temporal:Connection"
QUEUE_TYPE = "twc:kmsvc:Queue"

CONNECTION_SPEC_HASH_ANNOTATION = "temporal.io/connection-spec-hash"
"""Pod-template annotation holding the connection fingerprint (changes → pods roll)."""
REPLICAS_SOURCE_ANNOTATION = "twc.temporal.io/replicas-source"
"""Deployment annotation: ``autoscaling`` when the daemon sets replicas, else ``spec``."""
CONNECTION_ANNOTATION = "twc.temporal.io/connection"
"""Optional Deployment annotation: the name of the worker's connection component."""

_GROUP_KINDS: Mapping[str, GroupKind] = {
    WORKER_TYPE: GroupKind.WORKER,
    CLUSTER_CONNECTION_TYPE: GroupKind.CONNECTION,
    CONNECTION_TYPE: GroupKind.CONNECTION,
    QUEUE_TYPE: GroupKind.QUEUE,
}
_GROUP_ORDER = (GroupKind.CONNECTION, GroupKind.QUEUE, GroupKind.WORKER, GroupKind.OTHER)
_STACK_TYPE = "pulumi:pulumi:Stack"
_WORKLOAD_TYPES = ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet")
# Longest first, so "-dlq-svc" is not mistaken for "-dlq".
_CHILD_SUFFIXES = (
    "-fingerprint",
    "-deployment",
    "-dlq-svc",
    "-queue",
    "-check",
    "-dlq",
    "-pdb",
    "-sa",
)

_REPLACE_OPS = frozenset(
    {
        "replace",
        "create-replacement",
        "delete-replaced",
        "read-replacement",
        "import-replacement",
        "discard-replaced",
    }
)
_CREATE_OPS = frozenset({"create", "import"})
_DELETE_OPS = frozenset({"delete", "discard", "remove-pending-replace"})

_COLOR_TAG = re.compile(r"<\{%[^%]*%\}>")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

JsonObject = dict[str, JsonValue]

_TEMPLATE: Path = ("spec", "template")
_POD_SPEC: Path = ("spec", "template", "spec")
_HASH_PATH: Path = ("spec", "template", "metadata", "annotations", CONNECTION_SPEC_HASH_ANNOTATION)
_SOURCE_PATH: Path = ("metadata", "annotations", REPLICAS_SOURCE_ANNOTATION)
_CONNECTION_PATH: Path = ("metadata", "annotations", CONNECTION_ANNOTATION)
_REPLICAS_PATH: Path = ("spec", "replicas")
_MAX_ENV_REASONS = 8


def events_from_json(items: Iterable[Mapping[str, Any]]) -> list[EngineEvent]:
    """Rebuild engine events from their JSON form (a recording, or ``--event-log`` lines).

    Args:
        items: Dicts shaped like the engine's JSON events (``resourcePreEvent``...).

    Returns:
        The events, as ``on_event`` would have received them.
    """
    # Imported here so that building a report from live events never loads the
    # Automation API machinery.
    from pulumi.automation.events import EngineEvent

    return [EngineEvent.from_json(dict(item)) for item in items]


def build_report(
    events: Iterable[EngineEvent],
    project: str,
    stack: str,
    *,
    failure: str | None = None,
) -> PreviewReport:
    """Build the preview report from the events of one preview.

    Args:
        events: Every event ``on_event`` received during ``stack.preview(diff=True)``.
        project: The Pulumi project name, for the heading.
        stack: The stack name, for the heading.
        failure: The message of the exception ``stack.preview`` raised, if it failed;
            recorded as an error so the report (and exit code) says the preview failed.

    Returns:
        The report; building it never raises on odd events, it shows what it can.
    """
    resources, errors, warnings = _ingest(events)
    if failure:
        errors.append(Diagnostic(severity="error", message=_clean(failure)))
    groups = _build_groups(resources)
    counted = [r for r in resources.values() if not _skipped(r)]
    summary = Summary(
        resources=_count(r.op for r in counted),
        groups=_count(g.operation for g in groups),
        restarting_workers=sorted(
            g.name for g in groups if g.kind is GroupKind.WORKER and g.restarts
        ),
        has_changes=any(r.op is not Operation.SAME for r in counted),
    )
    return PreviewReport(
        project=project,
        stack=stack,
        summary=summary,
        groups=groups,
        errors=errors,
        warnings=warnings,
    )


# --- ingest ---------------------------------------------------------------------------


@dataclass
class _Res:
    """Everything the events said about one URN."""

    urn: str
    type: str
    name: str
    parent: str = ""
    ops: set[str] = field(default_factory=set)
    old_inputs: JsonObject | None = None
    old_outputs: JsonObject | None = None
    new_inputs: JsonObject | None = None
    new_outputs: JsonObject | None = None
    detailed: dict[str, tuple[str, bool]] = field(default_factory=dict)
    replace_keys: list[str] = field(default_factory=list)
    diffs: list[str] = field(default_factory=list)

    @property
    def op(self) -> Operation:
        ops = self.ops
        if ops & _REPLACE_OPS or (ops & _CREATE_OPS and ops & _DELETE_OPS):
            return Operation.REPLACE
        if ops & _CREATE_OPS:
            return Operation.CREATE
        if ops & _DELETE_OPS:
            return Operation.DELETE
        if "update" in ops:
            return Operation.UPDATE
        return Operation.SAME

    @property
    def old(self) -> JsonObject:
        """The old state, program inputs preferred (they are what the diff compares)."""
        return self.old_inputs or self.old_outputs or {}

    @property
    def new(self) -> JsonObject:
        """The new state, program inputs preferred."""
        return self.new_inputs or self.new_outputs or {}

    @property
    def label(self) -> str:
        """A short kind for messages: ``Deployment``, ``ConnectionFingerprint``..."""
        return kind_label(self.type, self.name)


def _ingest(
    events: Iterable[EngineEvent],
) -> tuple[dict[str, _Res], list[Diagnostic], list[Diagnostic]]:
    resources: dict[str, _Res] = {}
    errors: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    seen: set[tuple[str, str, str | None]] = set()

    def diagnose(severity: str, message: str, urn: str | None) -> None:
        # "info" and "info#err" are progress chatter, not findings.
        if severity not in ("error", "warning"):
            return
        text = _clean(message)
        if not text or (severity, text, urn) in seen:
            return
        seen.add((severity, text, urn))
        if severity == "error":
            errors.append(Diagnostic(severity="error", message=text, urn=urn or None))
        else:
            warnings.append(Diagnostic(severity="warning", message=text, urn=urn or None))

    for event in events:
        diag = event.diagnostic_event
        if diag is not None:
            diagnose(diag.severity, diag.message, diag.urn)
            continue
        failed = event.res_op_failed_event
        if failed is not None:
            md = failed.metadata
            diagnose("error", f"{_op_text(md.op)} failed", md.urn)
            continue
        step = event.resource_pre_event or event.res_outputs_event
        if step is not None:
            _merge(resources, step.metadata)
    return resources, errors, warnings


def _merge(resources: dict[str, _Res], md: StepEventMetadata) -> None:
    urn = md.urn
    res = resources.get(urn)
    if res is None:
        parsed = parse_urn(urn)
        res = _Res(
            urn=urn,
            type=md.type or (parsed.type if parsed else ""),
            name=parsed.name if parsed else urn,
        )
        resources[urn] = res
    res.ops.add(_op_text(md.op))
    secret = res.type in SECRET_TYPES
    if md.old is not None:
        res.parent = res.parent or md.old.parent or ""
        if res.old_inputs is None and md.old.inputs is not None:
            res.old_inputs = _scrub_object(md.old.inputs, secret)
        if res.old_outputs is None and md.old.outputs is not None:
            res.old_outputs = _scrub_object(md.old.outputs, secret)
    if md.new is not None:
        # The new parent wins: a resource re-parented in this update belongs where it goes.
        res.parent = md.new.parent or res.parent
        if res.new_inputs is None and md.new.inputs is not None:
            res.new_inputs = _scrub_object(md.new.inputs, secret)
        # A step's pre-event carries no outputs yet ({}); its outputs event does.
        if not res.new_outputs and md.new.outputs is not None:
            res.new_outputs = _scrub_object(md.new.outputs, secret)
    for path, diff in (md.detailed_diff or {}).items():
        res.detailed[path] = (_op_text(diff.diff_kind), bool(diff.input_diff))
    for key in md.keys or ():
        if key not in res.replace_keys:
            res.replace_keys.append(key)
    for key in md.diffs or ():
        if key not in res.diffs:
            res.diffs.append(key)


def _scrub_object(value: Mapping[str, Any], secret: bool) -> JsonObject:
    scrubbed = scrub(value, secret_resource=secret)
    return scrubbed if isinstance(scrubbed, dict) else {}


def _op_text(op: object) -> str:
    # OpType and DiffKind are str enums; tolerate plain strings too.
    value = getattr(op, "value", op)
    return str(value)


def _clean(message: str) -> str:
    return _ANSI.sub("", _COLOR_TAG.sub("", message)).strip()


def _skipped(res: _Res) -> bool:
    # The stack and default providers are bookkeeping; Pulumi's own display hides them.
    if res.type == _STACK_TYPE:
        return True
    return res.type.startswith("pulumi:providers:") and res.name.startswith("default")


def _count(ops: Iterable[Operation]) -> OpCounts:
    counts = dict.fromkeys(Operation, 0)
    for op in ops:
        counts[op] += 1
    return OpCounts(**{op.value: n for op, n in counts.items()})


# --- grouping -------------------------------------------------------------------------


@dataclass
class _Group:
    urn: str
    kind: GroupKind
    name: str
    type: str
    members: list[_Res] = field(default_factory=list)
    reasons: list[Reason] = field(default_factory=list)
    restarts: bool = False
    connection: str | None = None
    hash_changed: bool = False
    hashes: list[str] = field(default_factory=list)

    @property
    def component(self) -> _Res | None:
        return next((m for m in self.members if m.urn == self.urn), None)

    @property
    def operation(self) -> Operation:
        comp = self.component
        if comp is not None and comp.op in (Operation.CREATE, Operation.DELETE):
            return comp.op
        ops = [m.op for m in self.members]
        if comp is None and ops and all(op is Operation.CREATE for op in ops):
            return Operation.CREATE
        if comp is None and ops and all(op is Operation.DELETE for op in ops):
            return Operation.DELETE
        if Operation.REPLACE in ops:
            return Operation.REPLACE
        if any(op is not Operation.SAME for op in ops):
            return Operation.UPDATE
        return Operation.SAME

    def add(self, code: ReasonCode, message: str) -> None:
        if all(r.message != message for r in self.reasons):
            self.reasons.append(Reason(code=code, message=message))


def _build_groups(resources: Mapping[str, _Res]) -> list[Group]:
    known: dict[str, list[_Res]] = {}
    for res in resources.values():
        if res.type in _GROUP_KINDS:
            known.setdefault(res.type, []).append(res)

    groups: dict[str, _Group] = {}
    for res in resources.values():
        if _skipped(res):
            continue
        root = _root_of(res, resources, known)
        group = groups.get(root)
        if group is None:
            parsed = parse_urn(root)
            gtype = parsed.type if parsed else res.type
            group = _Group(
                urn=root,
                kind=_GROUP_KINDS.get(gtype, GroupKind.OTHER),
                name=parsed.name if parsed else res.name,
                type=gtype,
            )
            groups[root] = group
        group.members.append(res)

    fields = {urn: _fields(res) for urn, res in resources.items()}
    _explain(list(groups.values()), fields)

    out = []
    for g in groups.values():
        changed = sorted(
            (m for m in g.members if m.op is not Operation.SAME),
            key=lambda m: (m.urn != g.urn, m.name, m.type),
        )
        out.append(
            Group(
                kind=g.kind,
                name=g.name,
                type=g.type,
                urn=g.urn,
                operation=g.operation,
                restarts=g.restarts,
                connection=g.connection,
                reasons=g.reasons,
                resources=[
                    ResourceChange(
                        urn=m.urn,
                        type=m.type,
                        name=m.name,
                        operation=m.op,
                        replace_keys=list(m.replace_keys) if m.op is Operation.REPLACE else [],
                        fields=[fc for _, fc in fields[m.urn]],
                    )
                    for m in changed
                ],
            )
        )
    out.sort(key=lambda g: (_GROUP_ORDER.index(g.kind), g.name, g.type))
    return out


def _root_of(res: _Res, resources: Mapping[str, _Res], known: Mapping[str, list[_Res]]) -> str:
    """The URN of the group ``res`` belongs to."""
    if res.type in _GROUP_KINDS:
        return res.urn
    top, parent, seen = res.urn, res.parent, set()
    while parent and parent not in seen:
        seen.add(parent)
        parsed = parse_urn(parent)
        if parsed is None:
            break
        if parsed.type in _GROUP_KINDS:
            return parent
        if parsed.type == _STACK_TYPE:
            return top
        top = parent
        ancestor = resources.get(parent)
        parent = ancestor.parent if ancestor else ""
    # No usable parent links (an older or trimmed recording): read the URN's type chain.
    parsed = parse_urn(res.urn)
    if parsed is not None:
        for index in range(len(parsed.type_chain) - 2, -1, -1):
            ctype = parsed.type_chain[index]
            if ctype not in _GROUP_KINDS:
                continue
            candidates = [c for c in known.get(ctype, ()) if parsed.name.startswith(c.name + "-")]
            if candidates:
                return max(candidates, key=lambda c: len(c.name)).urn
            chain = "$".join(parsed.type_chain[: index + 1])
            name = _strip_child_suffix(parsed.name)
            return f"urn:pulumi:{parsed.stack}::{parsed.project}::{chain}::{name}"
    return top


def _strip_child_suffix(name: str) -> str:
    for suffix in _CHILD_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


# --- field changes --------------------------------------------------------------------


def _fields(res: _Res) -> list[tuple[Path, FieldChange]]:
    if res.op not in (Operation.UPDATE, Operation.REPLACE):
        return []
    replace_keys = {parse_path(k) for k in res.replace_keys}
    items: list[tuple[Path, FieldChange]] = []
    if res.detailed:
        for text, (kind, input_diff) in res.detailed.items():
            path = parse_path(text)
            base = kind.removesuffix("-replace")
            if base not in ("add", "delete", "update"):
                base = "update"
            olds = (
                (res.old_inputs, res.old_outputs)
                if input_diff
                else (res.old_outputs, res.old_inputs)
            )
            old = None if base == "add" else _first(olds, path)
            new = None if base == "delete" else _first((res.new_inputs, res.new_outputs), path)
            # The detailed diff marks exactly what forces the replacement; the coarse
            # replace keys would flag every sibling under "spec".
            items.append((path, _field(path, base, kind.endswith("-replace"), old, new)))
    else:
        # No detailed diff (dynamic providers give none): diff the inputs ourselves.
        old_state: JsonObject = res.old_inputs or {}
        new_state: JsonObject = res.new_inputs or {}
        if res.diffs:
            wanted = {parse_path(d)[0] for d in res.diffs}
            old_state = {k: v for k, v in old_state.items() if k in wanted}
            new_state = {k: v for k, v in new_state.items() if k in wanted}
        for path, base, old, new in _deep_diff(old_state, new_state, ()):
            items.append((path, _field(path, base, _under_any(path, replace_keys), old, new)))
    items.sort(key=lambda item: path_sort_key(item[0]))
    return items


def _field(path: Path, kind: str, replace: bool, old: JsonValue, new: JsonValue) -> FieldChange:
    return FieldChange.model_validate(
        {"path": format_path(path), "kind": kind, "replace": replace, "old": old, "new": new}
    )


def _first(roots: Sequence[JsonObject | None], path: Path) -> JsonValue:
    for root in roots:
        if root is not None:
            found, value = lookup(root, path)
            if found:
                return value
    return None


def _under_any(path: Path, prefixes: Iterable[Path]) -> bool:
    return any(path[: len(p)] == p for p in prefixes)


def _deep_diff(
    old: JsonValue, new: JsonValue, at: Path
) -> Iterator[tuple[Path, str, JsonValue, JsonValue]]:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if key not in old:
                yield (*at, key), "add", None, new[key]
            elif key not in new:
                yield (*at, key), "delete", old[key], None
            else:
                yield from _deep_diff(old[key], new[key], (*at, key))
    elif isinstance(old, list) and isinstance(new, list):
        for index in range(max(len(old), len(new))):
            if index >= len(old):
                yield (*at, index), "add", None, new[index]
            elif index >= len(new):
                yield (*at, index), "delete", old[index], None
            else:
                yield from _deep_diff(old[index], new[index], (*at, index))
    elif old != new or type(old) is not type(new):
        yield at, "update", old, new


def _leaves(path: Path, change: FieldChange) -> list[Path]:
    """The leaf paths a (possibly coarse) field change covers."""
    if change.kind == "update" and isinstance(change.old, dict | list):
        leaves = [p for p, _, _, _ in _deep_diff(change.old, change.new, path)]
        return leaves or [path]
    return [path]


# --- reasons --------------------------------------------------------------------------


def _explain(groups: list[_Group], fields: Mapping[str, list[tuple[Path, FieldChange]]]) -> None:
    connections = [g for g in groups if g.kind is GroupKind.CONNECTION]
    # Two connections with the same spec (a ClusterConnection and a namespaced
    # Connection to one endpoint) share a fingerprint: a hash may name several.
    by_hash: dict[str, list[_Group]] = {}
    for conn in connections:
        for member in conn.members:
            if member.label != "ConnectionFingerprint":
                continue
            for state in (member.old_outputs, member.new_outputs):
                value = (state or {}).get("fingerprint")
                if isinstance(value, str) and value not in (SECRET, UNKNOWN):
                    owners = by_hash.setdefault(value, [])
                    if not any(o is conn for o in owners):
                        owners.append(conn)
    changed_connections = [
        c
        for c in connections
        if any(
            m.label == "ConnectionFingerprint" and m.op in (Operation.UPDATE, Operation.REPLACE)
            for m in c.members
        )
    ]
    deferred: dict[str, list[Reason]] = {}
    for group in groups:
        # Workers first learn their connection, so a new worker can name it.
        if group.kind is GroupKind.WORKER:
            _worker(group, fields, connections, by_hash, changed_connections)
        _lifecycle(group)
        deferred[group.urn] = _members(group, fields)
    for conn in connections:
        _connection(conn, groups, changed_connections)
    for group in groups:
        if group.operation is not Operation.SAME and not group.reasons:
            for reason in deferred[group.urn]:
                group.add(reason.code, reason.message)
            if not group.reasons:
                group.add(
                    ReasonCode.FIELDS_CHANGED, f"{kind_label(group.type, group.name)} changes"
                )


_LIFECYCLE: Mapping[GroupKind, tuple[ReasonCode, str, ReasonCode, str]] = {
    GroupKind.WORKER: (
        ReasonCode.NEW_WORKER,
        "new worker",
        ReasonCode.WORKER_REMOVED,
        "worker removed",
    ),
    GroupKind.CONNECTION: (
        ReasonCode.NEW_CONNECTION,
        "new connection",
        ReasonCode.CONNECTION_REMOVED,
        "connection removed",
    ),
    GroupKind.QUEUE: (ReasonCode.NEW_QUEUE, "new queue", ReasonCode.QUEUE_REMOVED, "queue removed"),
}


def _lifecycle(group: _Group) -> None:
    op = group.operation
    if op not in (Operation.CREATE, Operation.DELETE):
        return
    if group.kind is GroupKind.OTHER:
        label = kind_label(group.type, group.name)
        if op is Operation.CREATE:
            group.add(ReasonCode.NEW_RESOURCE, f"new {label}")
        else:
            group.add(ReasonCode.RESOURCE_REMOVED, f"{label} removed")
        return
    new_code, new_text, gone_code, gone_text = _LIFECYCLE[group.kind]
    if op is Operation.DELETE:
        group.add(gone_code, gone_text)
        return
    details = _creation_details(group)
    group.add(new_code, f"{new_text}: {', '.join(details)}" if details else new_text)


def _creation_details(group: _Group) -> list[str]:
    details: list[str] = []
    if group.kind is GroupKind.WORKER:
        deployment = _main_workload(group)
        if deployment is None:
            return details
        state = deployment.new
        containers = _get(state, *_POD_SPEC, "containers")
        if isinstance(containers, list) and containers and isinstance(containers[0], dict):
            image = containers[0].get("image")
            if _known_str(image):
                details.append(f"image `{image}`")
        replicas = _get(state, *_REPLICAS_PATH)
        count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else None
        if _get(state, *_SOURCE_PATH) == "autoscaling":
            details.append(_autoscaled(count))
        elif count is not None:
            details.append(_plural(count, "replica"))
        queue = _get(state, "metadata", "labels", "temporal.io/task-queue")
        if _known_str(queue):
            details.append(f"task queue `{queue}`")
        if group.connection:
            details.append(f"connection `{group.connection}`")
    elif group.kind is GroupKind.CONNECTION:
        for member in group.members:
            host = _get(member.new, "spec", "hostPort")
            if member.label == "ConnectionFingerprint" and _known_str(host):
                details.append(f"hostPort `{host}`")
                break
    elif group.kind is GroupKind.QUEUE:
        for member in group.members:
            if member.urn == group.urn or not member.type.startswith("kubernetes:"):
                continue
            if _get(member.new, "spec", "fifo") is True:
                details.append("FIFO")
            partitions = _get(member.new, "spec", "partitions")
            if isinstance(partitions, int) and not isinstance(partitions, bool):
                details.append(_plural(partitions, "partition"))
            break
    return details


def _main_workload(group: _Group) -> _Res | None:
    workloads = [m for m in group.members if m.type in _WORKLOAD_TYPES]
    workloads.sort(
        key=lambda m: (m.type != _WORKLOAD_TYPES[0], not m.name.endswith("-deployment"), m.name)
    )
    return workloads[0] if workloads else None


def _worker(
    group: _Group,
    fields: Mapping[str, list[tuple[Path, FieldChange]]],
    connections: Sequence[_Group],
    by_hash: Mapping[str, Sequence[_Group]],
    changed_connections: Sequence[_Group],
) -> None:
    main = _main_workload(group)
    if main is None:
        return
    # Which connection: the annotation if the component wrote one, else the fingerprint.
    named = _get(main.new, *_CONNECTION_PATH) or _get(main.old, *_CONNECTION_PATH)
    conn: _Group | None = None
    if _known_str(named):
        conn = _find_connection(str(named), connections)
        group.connection = conn.name if conn else str(named)
    # The main workload's new fingerprint first: a worker moving to another connection
    # belongs to the new one.
    for member in sorted(group.members, key=lambda m: m is not main):
        if member.type not in _WORKLOAD_TYPES:
            continue
        old_found, old_hash = lookup(member.old, _HASH_PATH)
        new_found, new_hash = lookup(member.new, _HASH_PATH)
        for value in (new_hash, old_hash):
            if isinstance(value, str) and value not in group.hashes:
                group.hashes.append(value)
        if member.op in (Operation.UPDATE, Operation.REPLACE) and (old_found, old_hash) != (
            new_found,
            new_hash,
        ):
            group.hash_changed = True
    if group.connection is None:
        conn = _connection_by_hash(group, by_hash, changed_connections)
        if conn is None and group.hash_changed and len(changed_connections) == 1:
            conn = changed_connections[0]
        if conn is not None:
            group.connection = conn.name

    op = group.operation
    if op in (Operation.CREATE, Operation.DELETE):
        return
    _versions(group)
    if group.hash_changed:
        which = f"connection `{group.connection}`" if group.connection else "connection"
        group.add(
            ReasonCode.CONNECTION_FINGERPRINT_CHANGED,
            f"{which} fingerprint changed: pods will roll",
        )
    workloads = sorted(
        (m for m in group.members if m.type in _WORKLOAD_TYPES),
        key=lambda m: (m is not main, m.name),
    )
    base_messages: set[str] = set()
    for member in workloads:
        if member.op is Operation.REPLACE or (
            member.op is Operation.UPDATE and _template_changed(member, fields[member.urn])
        ):
            group.restarts = True
        if member.op in (Operation.UPDATE, Operation.REPLACE):
            prefix = (
                ""
                if member is main
                else "DLQ "
                if member.type.endswith("StatefulSet")
                else f"{member.label} `{member.name}` "
            )
            for code, base in _workload_reasons(member, fields[member.urn]):
                if base not in base_messages:
                    base_messages.add(base)
                    group.add(code, prefix + base)


def _versions(group: _Group) -> None:
    """A versioned worker's rollout in words (see :mod:`twc.preview._rollout`)."""
    states = []
    for member in group.members:
        if member.type != _WORKLOAD_TYPES[0]:
            continue
        state = version_state(member.op.value, member.old, member.new)
        if state is not None:
            states.append((member, state))
    if not states:
        return
    for code, message in rollout_reasons(group.name, [s for _, s in states]):
        group.add(ReasonCode(code), message)
    created = [m for m, s in states if s.is_target and m.op is Operation.CREATE]
    before = [m for m, s in states if s.was_target and not s.is_target]
    if created and before:
        image = _image_change(
            _get(before[0].old, *_POD_SPEC, "containers", 0, "image"),
            _get(created[0].new, *_POD_SPEC, "containers", 0, "image"),
        )
        if image:
            group.add(ReasonCode.IMAGE_CHANGED, f"{image} (a new version; running pods stay)")


def _connection_by_hash(
    group: _Group, by_hash: Mapping[str, Sequence[_Group]], changed: Sequence[_Group]
) -> _Group | None:
    """The connection whose fingerprint the worker carries, if that tells one apart.

    A worker whose fingerprint changes belongs, first, to a changing connection it
    carried the fingerprint of (a connection's new fingerprint is only known after
    apply, and may equal another connection's). Otherwise a fingerprint several
    connections share is narrowed down to those the worker can use (a namespaced
    Connection only serves its own namespace); still several is unknown, not a guess.
    """
    if group.hash_changed:
        for value in group.hashes:
            owners = [c for c in by_hash.get(value, ()) if any(c is x for x in changed)]
            if len(owners) == 1:
                return owners[0]
    namespace = group.name.split("/", 1)[0] if "/" in group.name else None
    for value in group.hashes:
        candidates = [
            c
            for c in by_hash.get(value, ())
            if c.type != CONNECTION_TYPE or c.name.split("/", 1)[0] == namespace
        ]
        if len(candidates) == 1:
            return candidates[0]
        if candidates:
            return None
    return None


def _autoscaled(count: int | None) -> str:
    """The line that says who owns an autoscaled worker's replicas."""
    return "replicas managed by autoscaling" + (f": {count}" if count is not None else "")


def _find_connection(named: str, connections: Sequence[_Group]) -> _Group | None:
    exact = [c for c in connections if c.name == named]
    if exact:
        return exact[0]
    tail = named.rsplit("/", 1)[-1]
    loose = [c for c in connections if c.name.rsplit("/", 1)[-1] == tail]
    return loose[0] if len(loose) == 1 else None


def _template_changed(member: _Res, changes: Sequence[tuple[Path, FieldChange]]) -> bool:
    if changes:
        return any(path[:2] == _TEMPLATE for path, _ in changes)
    return _get(member.old, *_TEMPLATE) != _get(member.new, *_TEMPLATE)


def _workload_reasons(
    member: _Res, changes: Sequence[tuple[Path, FieldChange]]
) -> list[tuple[ReasonCode, str]]:
    """Reasons read from a Deployment's or StatefulSet's old and new state."""
    old, new = member.old, member.new
    touched = _touched_env(member, changes)
    reasons: list[tuple[ReasonCode, str]] = []
    old_replicas, new_replicas = _get(old, *_REPLICAS_PATH), _get(new, *_REPLICAS_PATH)
    if _get(new, *_SOURCE_PATH) == "autoscaling":
        # The daemon scales it through the scale subresource, never the engine: the
        # count is information, not a change this update makes.
        shown = new_replicas if new_replicas is not None else old_replicas
        count = shown if isinstance(shown, int) and not isinstance(shown, bool) else None
        reasons.append((ReasonCode.REPLICAS_AUTOSCALED, _autoscaled(count)))
    elif old_replicas != new_replicas and old_replicas is not None and new_replicas is not None:
        reasons.append(
            (
                ReasonCode.REPLICAS_CHANGED,
                f"replicas {_show(old_replicas)} → {_show(new_replicas)}",
            )
        )
    old_source, new_source = _get(old, *_SOURCE_PATH), _get(new, *_SOURCE_PATH)
    if _known_str(old_source) and _known_str(new_source) and old_source != new_source:
        who = "autoscaling" if new_source == "autoscaling" else "the fleet file"
        reasons.append((ReasonCode.REPLICAS_SOURCE_CHANGED, f"replicas now set by {who}"))

    env_seen: set[str] = set()
    for list_key, label in (("containers", "container"), ("initContainers", "init container")):
        olds = _by_name(_get(old, *_POD_SPEC, list_key))
        news = _by_name(_get(new, *_POD_SPEC, list_key))
        first = next(iter(news or olds), None)
        for name in news:
            prefix = "" if list_key == "containers" and name == first else f"{label} `{name}` "
            if name not in olds:
                reasons.append((ReasonCode.FIELDS_CHANGED, f"{label} `{name}` added"))
                continue
            before, after = olds[name], news[name]
            image = _image_change(before.get("image"), after.get("image"))
            if image:
                reasons.append((ReasonCode.IMAGE_CHANGED, prefix + image))
            env_touched = touched.get((list_key, name), set())
            for text in _env_changes(before.get("env"), after.get("env"), env_touched):
                # The address reaches the init container too; saying so twice adds nothing.
                if text not in env_seen:
                    env_seen.add(text)
                    reasons.append((ReasonCode.ENV_CHANGED, prefix + text))
            compute = _compute_change(before.get("resources"), after.get("resources"))
            if compute:
                reasons.append((ReasonCode.COMPUTE_RESOURCES_CHANGED, prefix + compute))
        for name in olds:
            if name not in news:
                reasons.append((ReasonCode.FIELDS_CHANGED, f"{label} `{name}` removed"))
    return reasons


def _workload_explained(member: _Res) -> list[Path]:
    """Paths of a workload that :func:`_workload_reasons` puts in words."""
    explained: list[Path] = [
        _HASH_PATH,
        _REPLICAS_PATH,
        _SOURCE_PATH,
        _CONNECTION_PATH,
        # A versioned worker's bookkeeping, put in words by the rollout reasons.
        ("metadata", "annotations", TARGET_ANNOTATION),
        ("metadata", "annotations", POLICY_ANNOTATION),
    ]
    for list_key in ("containers", "initContainers"):
        olds = _by_name(_get(member.old, *_POD_SPEC, list_key))
        news = _by_name(_get(member.new, *_POD_SPEC, list_key))
        for mine, other in ((olds, news), (news, olds)):
            for index, name in enumerate(mine):
                at: Path = (*_POD_SPEC, list_key, index)
                if name not in other:
                    explained.append(at)  # the whole container was added or removed
                else:
                    explained.extend((*at, key) for key in ("image", "env", "resources"))
    return explained


def _by_name(items: JsonValue) -> dict[str, JsonObject]:
    out: dict[str, JsonObject] = {}
    if isinstance(items, list):
        for index, item in enumerate(items):
            if isinstance(item, dict):
                name = item.get("name")
                out[name if isinstance(name, str) else f"#{index}"] = item
    return out


def _image_change(old: JsonValue, new: JsonValue) -> str | None:
    if old == new or not isinstance(old, str) or not isinstance(new, str):
        return None
    if UNKNOWN in (old, new):
        return f"image {_show(old)} → {_show(new)}"
    old_repo, old_tag, old_digest = _split_image(old)
    new_repo, new_tag, new_digest = _split_image(new)
    if old_repo != new_repo:
        return f"image {old} → {new}"
    if old_tag != new_tag:
        return f"image tag {old_tag or 'latest'} → {new_tag or 'latest'}"
    return f"image digest {_short_digest(old_digest)} → {_short_digest(new_digest)}"


def _split_image(image: str) -> tuple[str, str, str]:
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :], digest
    return name, "", digest


def _short_digest(digest: str) -> str:
    if not digest:
        return "(none)"
    algo, _, hexpart = digest.partition(":")
    return f"{algo}:{hexpart[:12]}" if hexpart else digest[:19]


def _touched_env(
    member: _Res, changes: Sequence[tuple[Path, FieldChange]]
) -> dict[tuple[str, str], set[str]]:
    """Env vars the diff touches, by (container list, container name).

    Needed because two different secret values both read ``[secret]``: only the diff
    can tell that a hidden value changed.
    """
    touched: dict[tuple[str, str], set[str]] = {}
    for path, _ in changes:
        if len(path) < 7 or path[:3] != _POD_SPEC or path[5] != "env":
            continue
        list_key, c_index, e_index = path[3], path[4], path[6]
        if not (isinstance(list_key, str) and isinstance(c_index, int)):
            continue
        for state in (member.new, member.old):
            container = _get(state, *_POD_SPEC, list_key, c_index)
            env_name = _get(container, "env", e_index) if isinstance(e_index, int) else None
            if isinstance(container, dict) and isinstance(env_name, dict):
                c_name, e_name = container.get("name"), env_name.get("name")
                if isinstance(c_name, str) and isinstance(e_name, str):
                    touched.setdefault((list_key, c_name), set()).add(e_name)
    return touched


def _env_changes(old: JsonValue, new: JsonValue, touched: set[str]) -> list[str]:
    before, after = _env_values(old), _env_values(new)
    texts: list[str] = []
    for name, value in after.items():
        if name not in before:
            texts.append(
                f"env `{name}` added (value hidden)"
                if value == SECRET
                else f"env `{name}` added: {value}"
            )
        elif before[name] != value or (name in touched and value == SECRET):
            if SECRET in (before[name], value):
                texts.append(f"env `{name}` changed (value hidden)")
            else:
                texts.append(f"env `{name}`: {before[name]} → {value}")
    texts.extend(f"env `{name}` removed" for name in before if name not in after)
    if len(texts) > _MAX_ENV_REASONS:
        extra = len(texts) - _MAX_ENV_REASONS + 1
        texts = [*texts[: _MAX_ENV_REASONS - 1], f"{extra} more env changes"]
    return texts


def _env_values(env: JsonValue) -> dict[str, str]:
    out: dict[str, str] = {}
    if not isinstance(env, list):
        return out
    for item in env:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        out[str(item["name"])] = _env_value(item)
    return out


def _env_value(item: JsonObject) -> str:
    if "value" in item:
        value = item["value"]
        return value if value in (SECRET, UNKNOWN) else _show(value)
    ref = item.get("valueFrom")
    if isinstance(ref, dict):
        for key, label in (("secretKeyRef", "secret"), ("configMapKeyRef", "configmap")):
            target = ref.get(key)
            if isinstance(target, dict):
                return f"from {label} `{target.get('name')}` key `{target.get('key')}`"
        field_ref = ref.get("fieldRef")
        if isinstance(field_ref, dict):
            return f"from field `{field_ref.get('fieldPath')}`"
        resource_ref = ref.get("resourceFieldRef")
        if isinstance(resource_ref, dict):
            return f"from resource `{resource_ref.get('resource')}`"
    return '""'


def _compute_change(old: JsonValue, new: JsonValue) -> str | None:
    parts = []
    for path, kind, before, after in _deep_diff(old or {}, new or {}, ()):
        was = "(none)" if kind == "add" else _show(before)
        now = "(none)" if kind == "delete" else _show(after)
        parts.append(f"{format_path(path)} {was} → {now}")
    return f"resources {', '.join(parts)}" if parts else None


def _members(group: _Group, fields: Mapping[str, list[tuple[Path, FieldChange]]]) -> list[Reason]:
    """Reasons from each changed member that is not a workload; returns deferred ones.

    Task-queue checks change whenever their worker does: their reasons are only used
    when nothing else explains the group.
    """
    deferred: list[Reason] = []
    op = group.operation
    for member in sorted(group.members, key=lambda m: m.name):
        if member.urn == group.urn or member.op is Operation.SAME:
            continue
        label = member.label
        if op not in (Operation.CREATE, Operation.DELETE):
            if member.op is Operation.CREATE:
                group.add(ReasonCode.CHILD_ADDED, f"{label} `{member.name}` added")
            elif member.op is Operation.DELETE:
                group.add(ReasonCode.CHILD_REMOVED, f"{label} `{member.name}` removed")
            elif member.op is Operation.REPLACE:
                keys = [fc.path for _, fc in fields[member.urn] if fc.replace]
                keys = keys or member.replace_keys
                why = f" (`{'`, `'.join(keys)}` cannot change in place)" if keys else ""
                group.add(
                    ReasonCode.CHILD_REPLACED, f"{label} `{member.name}` will be replaced{why}"
                )
        if member.op not in (Operation.UPDATE, Operation.REPLACE):
            continue
        changes = fields[member.urn]
        explained: list[Path] = []
        if member.type in _WORKLOAD_TYPES:
            explained = _workload_explained(member)
        elif member.type in SECRET_TYPES:
            if any(path[:1] in (("data",), ("stringData",)) for path, _ in changes):
                name = _get(member.new, "metadata", "name") or member.name
                group.add(
                    ReasonCode.CREDENTIALS_CHANGED, f"secret `{name}` changed (values hidden)"
                )
            explained = [("data",), ("stringData",)]
        elif label == "ConnectionFingerprint" and group.kind is GroupKind.CONNECTION:
            explained = _fingerprint_reasons(group, changes)
        if member.op is Operation.REPLACE:
            explained.extend(path for path, fc in changes if fc.replace)
        leftover = [
            leaf
            for path, fc in changes
            for leaf in _leaves(path, fc)
            if not _under_any(leaf, explained) and leaf[:1] != ("__provider",)
        ]
        if not leftover:
            continue
        shown = ", ".join(f"`{format_path(p)}`" for p in leftover[:3])
        more = f" and {len(leftover) - 3} more" if len(leftover) > 3 else ""
        reason = Reason(
            code=ReasonCode.FIELDS_CHANGED,
            message=f"{label} `{member.name}`: {shown}{more} changed",
        )
        if label == "TaskQueueCheck":
            deferred.append(reason)
        else:
            group.add(reason.code, reason.message)
    return deferred


def _fingerprint_reasons(group: _Group, changes: Sequence[tuple[Path, FieldChange]]) -> list[Path]:
    explained: list[Path] = [("fingerprint",)]
    for path, fc in changes:
        for leaf in _leaves(path, fc):
            found_old, old = (
                lookup(fc.old, leaf[len(path) :]) if fc.kind != "add" else (False, None)
            )
            found_new, new = (
                lookup(fc.new, leaf[len(path) :]) if fc.kind != "delete" else (False, None)
            )
            old_text = _show(old) if found_old else "(none)"
            new_text = _show(new) if found_new else "(none)"
            last = leaf[-1] if leaf else ""
            if last == "hostPort":
                group.add(ReasonCode.HOST_PORT_CHANGED, f"hostPort {old_text} → {new_text}")
            elif isinstance(last, str) and "digest" in last.lower():
                group.add(
                    ReasonCode.CREDENTIALS_CHANGED,
                    "credential secret changed (certificate or key rotated)",
                )
            elif leaf[:1] == ("spec",) and len(leaf) > 1:
                group.add(
                    ReasonCode.FIELDS_CHANGED,
                    f"connection `{format_path(leaf[1:])}`: {old_text} → {new_text}",
                )
            else:
                continue
            explained.append(leaf)
    return explained


def _connection(conn: _Group, groups: Sequence[_Group], changed: Sequence[_Group]) -> None:
    if conn.operation in (Operation.CREATE, Operation.DELETE):
        return
    rolling = sorted(
        g.name
        for g in groups
        if g.kind is GroupKind.WORKER
        and g.hash_changed
        and g.connection == conn.name
        and g.operation in (Operation.UPDATE, Operation.REPLACE)
    )
    if conn not in changed and not rolling:
        return
    workers = f" ({', '.join(f'`{w}`' for w in rolling)})" if rolling else ""
    message = f"connection fingerprint changed: every worker using `{conn.name}` will roll{workers}"
    conn.reasons.insert(0, Reason(code=ReasonCode.CONNECTION_FINGERPRINT_CHANGED, message=message))


# --- small helpers --------------------------------------------------------------------


def _get(root: JsonValue, *path: str | int) -> JsonValue:
    found, value = lookup(root, path)
    return value if found else None


def _known_str(value: JsonValue) -> bool:
    return isinstance(value, str) and value not in (SECRET, UNKNOWN, "")


def _show(value: JsonValue) -> str:
    """A value inside a sentence: bare strings, compact JSON otherwise."""
    if value == UNKNOWN:
        return "(known after apply)"
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
