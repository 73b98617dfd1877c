"""The engine events of ``stack.preview(diff=True)`` as a :class:`PreviewReport`, pure.

Resources merge by URN (secrets scrubbed as read) and group under their nearest twc
component (else top-level) ancestor; reasons in words come from the diff and the old and
new state. A sharded stack's previews merge into one report."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from twc.preview._model import (
    Diagnostic,
    FieldChange,
    Group,
    GroupKind,
    HeldDeletions,
    OpCounts,
    Operation,
    PreviewReport,
    Reason,
    ReasonCode,
    ResourceChange,
    Summary,
)
from twc.preview._values import (
    SECRET,
    SECRET_TYPES,
    UNKNOWN,
    Path,
    format_path,
    kind_label,
    lookup,
    parse_path,
    parse_urn,
    path_sort_key,
    scrub,
)
from twc.rollout import (
    BUILD_ID_LABEL,
    POLICY_ANNOTATION,
    TARGET_ANNOTATION,
    RolloutPolicy,
    duration_words,
    rollback_in_words,
    rollout_in_words,
)
from twc.spec import Autoscaling

if TYPE_CHECKING:
    from pulumi.automation.events import EngineEvent, StepEventMetadata

# What the components write on a worker's pod template and Deployment.
_HASH = "temporal.io/connection-spec-hash"
_REPLICAS_SOURCE, _CONNECTION = "twc.temporal.io/replicas-source", "twc.temporal.io/connection"
_AUTOSCALING = "twc.temporal.io/autoscaling"
_GROUP_KINDS: Mapping[str, GroupKind] = {
    "twc:temporal:TemporalWorker": GroupKind.WORKER,
    "twc:temporal:ClusterConnection": GroupKind.CONNECTION,
    "twc:temporal:Connection": GroupKind.CONNECTION,
    "twc:kmsvc:Queue": GroupKind.QUEUE,
}
GROUP_ORDER = (GroupKind.CONNECTION, GroupKind.QUEUE, GroupKind.WORKER, GroupKind.OTHER)
_STACK_TYPE = "pulumi:pulumi:Stack"
_WORKLOAD_TYPES = ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet")
_REPLACE_OPS = frozenset(
    {"replace", "create-replacement", "delete-replaced", "read-replacement"}
    | {"import-replacement", "discard-replaced"}
)
_CREATE_OPS = frozenset({"create", "import"})
_DELETE_OPS = frozenset({"delete", "discard", "remove-pending-replace"})
_CHANGED = (Operation.UPDATE, Operation.REPLACE)
_BORN_OR_GONE = (Operation.CREATE, Operation.DELETE)

_COLOR_TAG = re.compile(r"<\{%[^%]*%\}>")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

JsonObject = dict[str, JsonValue]
Changes = Sequence[tuple[Path, FieldChange]]

_TEMPLATE: Path = ("spec", "template")
_POD_SPEC: Path = ("spec", "template", "spec")
_IMAGE: Path = (*_POD_SPEC, "containers", 0, "image")
_HASH_PATH: Path = ("spec", "template", "metadata", "annotations", _HASH)
_SOURCE_PATH: Path = ("metadata", "annotations", _REPLICAS_SOURCE)
_CONNECTION_PATH: Path = ("metadata", "annotations", _CONNECTION)
_REPLICAS_PATH: Path = ("spec", "replicas")
_TARGET_PATH: Path = ("metadata", "annotations", TARGET_ANNOTATION)
_POLICY_PATH: Path = ("metadata", "annotations", POLICY_ANNOTATION)
_AUTOSCALING_PATH: Path = ("metadata", "annotations", _AUTOSCALING)
_MAX_ENV_REASONS = 8
_ENV_REFS = {
    "secretKeyRef": "from secret `{name}` key `{key}`",
    "configMapKeyRef": "from configmap `{name}` key `{key}`",
    "fieldRef": "from field `{fieldPath}`",
    "resourceFieldRef": "from resource `{resource}`",
}


def build_report(
    events: Iterable[EngineEvent], project: str, stack: str, *, failure: str | None = None
) -> PreviewReport:
    """The report of one preview's events; ``failure`` (what ``stack.preview`` raised) is
    an error only when the engine's own diagnostics, which say it better, name none."""
    resources: dict[str, _Res] = {}
    errors: list[Diagnostic] = []
    warnings: list[Diagnostic] = []

    def diagnose(severity: str, message: str, urn: str | None) -> None:
        # "info" and "info#err" are progress chatter, not findings.
        if severity in ("error", "warning") and (text := _clean(message)):
            found = errors if severity == "error" else warnings
            parts = {"severity": severity, "message": text, "urn": urn or None}
            if (new := Diagnostic.model_validate(parts)) not in found:
                found.append(new)

    for event in events:
        if (diag := event.diagnostic_event) is not None:
            diagnose(diag.severity, diag.message, diag.urn)
        elif event.res_op_failed_event is not None:
            md = event.res_op_failed_event.metadata
            diagnose("error", f"{_text(md.op)} failed", md.urn)
        elif (step := event.resource_pre_event or event.res_outputs_event) is not None:
            _absorb(resources, step.metadata)
    if failure and not errors:
        errors.append(Diagnostic(severity="error", message=_clean(failure)))
    counted = {urn: r for urn, r in resources.items() if not _skipped(r)}
    ops = count_ops(r.op for r in counted.values())
    found = {"errors": errors, "warnings": warnings}
    return _report(ops, _build_groups(counted), project=project, stack=stack, **found)


def _report(resources: OpCounts, groups: Iterable[Group], **fields: Any) -> PreviewReport:
    """A report of ``groups`` (sorted) with its summary, read from them and ``resources``."""
    ordered = sorted(groups, key=lambda g: (GROUP_ORDER.index(g.kind), g.name, g.type))
    summary = Summary(
        resources=resources,
        groups=count_ops(g.operation for g in ordered),
        restarting_workers=sorted(g.name for g in ordered if g.restarts),  # only workers restart
        has_changes=resources != OpCounts(same=resources.same),
    )
    return PreviewReport(summary=summary, groups=ordered, **fields)


@dataclass
class _Res:
    """Everything the events said about one URN (states scrubbed)."""

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
        return Operation.UPDATE if "update" in ops else Operation.SAME

    @property
    def old(self) -> JsonObject:
        """The old state, program inputs preferred (they are what the diff compares)."""
        return self.old_inputs or self.old_outputs or {}

    @property
    def new(self) -> JsonObject:
        return self.new_inputs or self.new_outputs or {}

    @property
    def label(self) -> str:
        return kind_label(self.type, self.name)


def _absorb(resources: dict[str, _Res], md: StepEventMetadata) -> None:
    if (res := resources.get(md.urn)) is None:
        parsed = parse_urn(md.urn)
        rtype, name = (parsed.type, parsed.name) if parsed else ("", md.urn)
        res = resources[md.urn] = _Res(md.urn, md.type or rtype, name)
    res.ops.add(_text(md.op))
    for side in ("old", "new"):
        state = getattr(md, side)
        if state is None:
            continue
        for part in ("inputs", "outputs"):
            value = getattr(state, part)
            if value is not None and not getattr(res, attr := f"{side}_{part}"):
                scrubbed = scrub(value, secret_resource=res.type in SECRET_TYPES)
                setattr(res, attr, scrubbed if isinstance(scrubbed, dict) else {})
        if side == "new" or not res.parent:
            res.parent = state.parent or res.parent
    for path, diff in (md.detailed_diff or {}).items():
        res.detailed[path] = (_text(diff.diff_kind), bool(diff.input_diff))
    res.replace_keys = list(dict.fromkeys([*res.replace_keys, *(md.keys or ())]))
    res.diffs = list(dict.fromkeys([*res.diffs, *(md.diffs or ())]))


def _text(op: object) -> str:
    return str(getattr(op, "value", op))


def _clean(message: str) -> str:
    return _ANSI.sub("", _COLOR_TAG.sub("", message)).strip()


def _skipped(res: _Res) -> bool:
    """The stack and default providers are bookkeeping; Pulumi's own display hides them."""
    provider = res.type.startswith("pulumi:providers:") and res.name.startswith("default")
    return res.type == _STACK_TYPE or provider


def count_ops(ops: Iterable[Operation]) -> OpCounts:
    return OpCounts(**Counter(op.value for op in ops))


@dataclass(eq=False)
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

    @property
    def operation(self) -> Operation:
        comp = next((m for m in self.members if m.urn == self.urn), None)
        ops = {m.op for m in self.members}
        if comp is not None and comp.op in _BORN_OR_GONE:
            return comp.op
        if comp is None and ops in ({Operation.CREATE}, {Operation.DELETE}):
            return ops.pop()
        if Operation.REPLACE in ops:
            return Operation.REPLACE
        return Operation.UPDATE if ops - {Operation.SAME} else Operation.SAME

    def add(self, code: ReasonCode, message: str) -> None:
        if all(r.message != message for r in self.reasons):
            self.reasons.append(Reason(code=code, message=message))


def _build_groups(resources: Mapping[str, _Res]) -> list[Group]:
    groups: dict[str, _Group] = {}
    for res in resources.values():
        root = _root_of(res, resources)
        if root not in groups:
            parsed = parse_urn(root)
            gtype, name = (parsed.type, parsed.name) if parsed else (res.type, res.name)
            groups[root] = _Group(root, _GROUP_KINDS.get(gtype, GroupKind.OTHER), name, gtype)
        groups[root].members.append(res)
    fields = {urn: _fields(res) for urn, res in resources.items()}
    _explain(list(groups.values()), fields)
    out = []
    for g in groups.values():
        changed = sorted(
            (m for m in g.members if m.op is not Operation.SAME),
            key=lambda m: (m.urn != g.urn, m.name, m.type),
        )
        resources_changed = [
            ResourceChange(
                urn=m.urn,
                type=m.type,
                name=m.name,
                operation=m.op,
                replace_keys=list(m.replace_keys) if m.op is Operation.REPLACE else [],
                fields=[fc for _, fc in fields[m.urn]],
            )
            for m in changed
        ]
        shared = ("kind", "name", "type", "urn", "operation", "restarts", "connection", "reasons")
        out.append(Group(**{key: getattr(g, key) for key in shared}, resources=resources_changed))
    return out


def _root_of(res: _Res, resources: Mapping[str, _Res]) -> str:
    """The URN of ``res``'s group: its nearest component, else its top-level ancestor."""
    if res.type in _GROUP_KINDS:
        return res.urn
    top, parent, seen = res.urn, res.parent, set()
    while parent and parent not in seen:
        seen.add(parent)
        parsed = parse_urn(parent)
        if parsed is None or parsed.type == _STACK_TYPE:
            break
        if parsed.type in _GROUP_KINDS:
            return parent
        top = parent
        ancestor = resources.get(parent)
        parent = ancestor.parent if ancestor else ""
    return top


def _fields(res: _Res) -> list[tuple[Path, FieldChange]]:
    if res.op not in _CHANGED:
        return []
    items: list[tuple[Path, FieldChange]] = []
    for text, (kind, input_diff) in res.detailed.items():
        path = parse_path(text)
        base = kind.removesuffix("-replace")
        base = base if base in ("add", "delete") else "update"
        olds = (res.old_inputs, res.old_outputs)
        old = None if base == "add" else _first(olds if input_diff else olds[::-1], path)
        new = None if base == "delete" else _first((res.new_inputs, res.new_outputs), path)
        items.append((path, _field(path, base, kind.endswith("-replace"), old, new)))
    if not res.detailed:
        # Dynamic providers give no detailed diff: diff the inputs ourselves.
        wanted = {parse_path(d)[0] for d in res.diffs}
        before, after = (
            {k: v for k, v in (state or {}).items() if not wanted or k in wanted}
            for state in (res.old_inputs, res.new_inputs)
        )
        forced = [parse_path(k) for k in res.replace_keys]
        for path, base, old, new in _deep_diff(before, after, ()):
            items.append((path, _field(path, base, _under_any(path, forced), old, new)))
    return sorted(items, key=lambda item: path_sort_key(item[0]))


def _field(path: Path, kind: str, replace: bool, old: JsonValue, new: JsonValue) -> FieldChange:
    return FieldChange.model_validate(
        {"path": format_path(path), "kind": kind, "replace": replace, "old": old, "new": new}
    )


def _first(roots: Iterable[JsonObject | None], path: Path) -> JsonValue:
    for root in roots:
        found, value = lookup(root, path)
        if root is not None and found:
            return value
    return None


def _under_any(path: Path, prefixes: Iterable[Path]) -> bool:
    return any(path[: len(p)] == p for p in prefixes)


def _deep_diff(
    old: JsonValue, new: JsonValue, at: Path
) -> Iterator[tuple[Path, str, JsonValue, JsonValue]]:
    """``(path, add|delete|update, old, new)`` of every leaf that differs."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys: list[Any] = sorted(set(old) | set(new))
        before: Mapping[Any, JsonValue] = old
        after: Mapping[Any, JsonValue] = new
    elif isinstance(old, list) and isinstance(new, list):
        keys = list(range(max(len(old), len(new))))
        before, after = dict(enumerate(old)), dict(enumerate(new))
    else:
        if old != new or type(old) is not type(new):
            yield at, "update", old, new
        return
    for key in keys:
        if key not in before:
            yield (*at, key), "add", None, after[key]
        elif key not in after:
            yield (*at, key), "delete", before[key], None
        else:
            yield from _deep_diff(before[key], after[key], (*at, key))


def _leaves(path: Path, change: FieldChange) -> list[tuple[Path, str, JsonValue, JsonValue]]:
    whole = (path, change.kind, change.old, change.new)
    if change.kind == "update" and isinstance(change.old, dict | list):
        return list(_deep_diff(change.old, change.new, path)) or [whole]
    return [whole]


def _explain(groups: list[_Group], fields: Mapping[str, Changes]) -> None:
    deferred: dict[str, list[Reason]] = {}
    for group in groups:
        # Workers first learn their connection, so a new worker can name it.
        if group.kind is GroupKind.WORKER:
            _worker(group, fields)
        _lifecycle(group)
        deferred[group.urn] = _members(group, fields)
    for conn in (g for g in groups if g.kind is GroupKind.CONNECTION):
        _connection(conn, groups)
    for group in groups:
        if group.operation is not Operation.SAME and not group.reasons:
            for reason in deferred[group.urn]:
                group.add(reason.code, reason.message)
            if not group.reasons:
                label = kind_label(group.type, group.name)
                group.add(ReasonCode.FIELDS_CHANGED, f"{label} changes")


def _lifecycle(group: _Group) -> None:
    op = group.operation
    if op not in _BORN_OR_GONE:
        return
    other = group.kind is GroupKind.OTHER
    noun = "RESOURCE" if other else group.kind.name
    what = kind_label(group.type, group.name) if other else group.kind.value
    if op is Operation.DELETE:
        group.add(ReasonCode[f"{noun}_REMOVED"], f"{what} removed")
        return
    details = ", ".join([] if other else _creation_details(group))
    group.add(ReasonCode[f"NEW_{noun}"], f"new {what}" + (f": {details}" if details else ""))


def _creation_details(group: _Group) -> list[str]:
    if group.kind is GroupKind.CONNECTION:
        hosts = [
            _get(m.new, "spec", "hostPort")
            for m in group.members
            if m.label == "ConnectionFingerprint"
        ]
        own = [_get(m.new, "twcCredential") for m in group.members]
        return [f"hostPort `{host}`" for host in hosts if _known_str(host)][:1] + [
            f"twc calls with its own credential `{name}`" for name in own if _known_str(name)
        ][:1]
    if group.kind is GroupKind.QUEUE:
        kube = [m for m in group.members if m.urn != group.urn and m.type.startswith("kubernetes:")]
        spec = _get(kube[0].new, "spec") if kube else None
        partitions = int_or_none(_get(spec, "partitions"))
        fifo = ["FIFO"] if _get(spec, "fifo") is True else []
        return fifo + ([plural(partitions, "partition")] if partitions is not None else [])
    deployment = _main_workload(group)
    if deployment is None:
        return []
    state = deployment.new
    image = _get(state, *_IMAGE)
    details = [f"image `{image}`"] if _known_str(image) else []
    count = int_or_none(_get(state, *_REPLICAS_PATH))
    if _get(state, *_SOURCE_PATH) == "autoscaling":
        details.append(_autoscaled(count, state))
    elif count is not None:
        details.append(plural(count, "replica"))
    queue = _get(state, "metadata", "labels", "temporal.io/task-queue")
    details += [f"task queue `{queue}`"] if _known_str(queue) else []
    return details + ([f"connection `{group.connection}`"] if group.connection else [])


def _main_workload(group: _Group) -> _Res | None:
    workloads = [m for m in group.members if m.type in _WORKLOAD_TYPES]
    return min(
        workloads,
        key=lambda m: (m.type != _WORKLOAD_TYPES[0], not m.name.endswith("-deployment"), m.name),
        default=None,
    )


def _worker(group: _Group, fields: Mapping[str, Changes]) -> None:
    main = _main_workload(group)
    if main is None:
        return
    named = _get(main.new, *_CONNECTION_PATH) or _get(main.old, *_CONNECTION_PATH)
    group.connection = str(named) if _known_str(named) else None
    workloads = sorted(
        (m for m in group.members if m.type in _WORKLOAD_TYPES),
        key=lambda m: (m is not main, m.name),
    )
    for member in workloads:
        rolled = lookup(member.old, _HASH_PATH) != lookup(member.new, _HASH_PATH)
        group.hash_changed |= member.op in _CHANGED and rolled
    if group.operation in _BORN_OR_GONE:
        return
    _versions(group)
    if group.hash_changed:
        which = f"connection `{group.connection}`" if group.connection else "connection"
        message = f"{which} fingerprint changed: pods will roll"
        group.add(ReasonCode.CONNECTION_FINGERPRINT_CHANGED, message)
    said: set[str] = set()
    for member in (m for m in workloads if m.op in _CHANGED):
        changes = fields[member.urn]
        rolled = any(path[:2] == _TEMPLATE for path, _ in changes) or (
            not changes and _get(member.old, *_TEMPLATE) != _get(member.new, *_TEMPLATE)
        )
        if member.op is Operation.REPLACE or rolled:
            group.restarts = True
        prefix = f"{member.label} `{member.name}` "
        if member is main or member.type.endswith("StatefulSet"):
            prefix = "" if member is main else "DLQ "
        for code, base in _workload(member, changes)[0]:
            if base not in said:
                said.add(base)
                group.add(code, prefix + base)


def _versions(group: _Group) -> None:
    states = [
        (m, state)
        for m in group.members
        if m.type == _WORKLOAD_TYPES[0]
        and (state := version_state(m.op.value, m.old, m.new)) is not None
    ]
    for code, message in rollout_reasons(group.name, [s for _, s in states]):
        group.add(code, message)
    created = [m for m, s in states if s.is_target and m.op is Operation.CREATE]
    before = [m for m, s in states if s.was_target and not s.is_target]
    if not (created and before):
        return
    if image := _image_change(_get(before[0].old, *_IMAGE), _get(created[0].new, *_IMAGE)):
        group.add(ReasonCode.IMAGE_CHANGED, f"{image} (a new version; running pods stay)")


def _autoscaled(count: int | None, new: JsonValue, old: JsonValue = None) -> str:
    said = "replicas managed by autoscaling" + (f": {count}" if count is not None else "")
    now, before = (_autoscaling_words(_get(state, *_AUTOSCALING_PATH)) for state in (new, old))
    if now and before and now != before:
        return f"{said}; autoscaling {before} → {now}"
    return f"{said} ({now})" if now else said


def _autoscaling_words(text: JsonValue) -> str | None:
    """A Deployment's recorded ``autoscaling`` in words, e.g. ``0 to 10 replicas, 5 tasks of
    backlog each, to zero after 5 m without work, woken by the first task``."""
    if not isinstance(text, str):
        return None
    try:
        policy = Autoscaling.model_validate_json(text)
    except ValueError:
        return None
    said = f"{policy.min_replicas} to {policy.max_replicas} replicas, "
    said += f"{plural(policy.target_backlog_per_replica, 'task')} of backlog each"
    if policy.min_replicas > 0:
        return said
    idle = duration_words(policy.scale_down_stabilization_seconds)
    wake = (
        f"a backlog over {policy.activation_backlog}"
        if policy.activation_backlog
        else "the first task"
    )
    return f"{said}, to zero after {idle} without work, woken by {wake}"


def _workload(member: _Res, changes: Changes) -> tuple[list[tuple[ReasonCode, str]], list[Path]]:
    """Reasons read from a workload's old and new state, and the paths they explain."""
    old, new = member.old, member.new
    reasons: list[tuple[ReasonCode, str]] = []
    explained: list[Path] = [_HASH_PATH, _REPLICAS_PATH, _SOURCE_PATH, _CONNECTION_PATH]
    explained += [_TARGET_PATH, _POLICY_PATH, _AUTOSCALING_PATH]
    old_replicas, new_replicas = (_get(state, *_REPLICAS_PATH) for state in (old, new))
    if _get(new, *_SOURCE_PATH) == "autoscaling":
        # The daemon scales it, not the engine: the count is information, not a change.
        shown = new_replicas if new_replicas is not None else old_replicas
        reasons.append((ReasonCode.REPLICAS_AUTOSCALED, _autoscaled(int_or_none(shown), new, old)))
    elif old_replicas != new_replicas and None not in (old_replicas, new_replicas):
        change = f"replicas {_show(old_replicas)} → {_show(new_replicas)}"
        reasons.append((ReasonCode.REPLICAS_CHANGED, change))
    old_source, new_source = (_get(state, *_SOURCE_PATH) for state in (old, new))
    if _known_str(old_source) and _known_str(new_source) and old_source != new_source:
        who = "autoscaling" if new_source == "autoscaling" else "the fleet file"
        reasons.append((ReasonCode.REPLICAS_SOURCE_CHANGED, f"replicas now set by {who}"))
    touched = _touched_env(member, changes)
    env_said: set[str] = set()
    for list_key, label in (("containers", "container"), ("initContainers", "init container")):
        olds = _by_name(_get(old, *_POD_SPEC, list_key))
        news = _by_name(_get(new, *_POD_SPEC, list_key))
        for mine, other in ((olds, news), (news, olds)):
            for index, name in enumerate(mine):
                at: Path = (*_POD_SPEC, list_key, index)
                # A container added or removed is explained whole.
                keys = ("image", "env", "resources") if name in other else ()
                explained += [(*at, key) for key in keys] or [at]
        first = next(iter(news or olds), None)
        for name in news:
            prefix = "" if list_key == "containers" and name == first else f"{label} `{name}` "
            if name not in olds:
                reasons.append((ReasonCode.FIELDS_CHANGED, f"{label} `{name}` added"))
                continue
            before, after = olds[name], news[name]
            env = _env_changes(before.get("env"), after.get("env"), touched.get((list_key, name)))
            # The address reaches the init container too; saying so twice adds nothing.
            env = [text for text in env if text not in env_said]
            env_said.update(env)
            compute = _compute_change(before.get("resources"), after.get("resources"))
            found = [
                (ReasonCode.IMAGE_CHANGED, _image_change(before.get("image"), after.get("image"))),
                *((ReasonCode.ENV_CHANGED, text) for text in env),
                (ReasonCode.COMPUTE_RESOURCES_CHANGED, compute),
            ]
            reasons += [(code, prefix + text) for code, text in found if text]
        removed = [name for name in olds if name not in news]
        reasons += [(ReasonCode.FIELDS_CHANGED, f"{label} `{name}` removed") for name in removed]
    return reasons, explained


def _by_name(items: JsonValue) -> dict[str, JsonObject]:
    out: dict[str, JsonObject] = {}
    for index, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict):
            name = item.get("name")
            out[name if isinstance(name, str) else f"#{index}"] = item
    return out


def _image_change(old: JsonValue, new: JsonValue) -> str | None:
    if old == new or not isinstance(old, str) or not isinstance(new, str):
        return None
    if UNKNOWN in (old, new):
        return f"image {_show(old)} → {_show(new)}"
    (old_repo, old_tag, old_digest), (new_repo, new_tag, new_digest) = map(_split_image, (old, new))
    if old_repo != new_repo:
        return f"image {old} → {new}"
    if old_tag != new_tag:
        return f"image tag {old_tag or 'latest'} → {new_tag or 'latest'}"
    return f"image digest {_short_digest(old_digest)} → {_short_digest(new_digest)}"


def _split_image(image: str) -> tuple[str, str, str]:
    name, _, digest = image.partition("@")
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        return name[:colon], name[colon + 1 :], digest
    return name, "", digest


def _short_digest(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    return f"{algo}:{hexpart[:12]}" if hexpart else digest[:19] or "(none)"


def _touched_env(member: _Res, changes: Changes) -> dict[tuple[str, str], set[str]]:
    """Env vars the diff touches, by (container list, container name): only the diff
    tells that a ``[secret]`` changed."""
    touched: dict[tuple[str, str], set[str]] = {}
    for path, _ in changes:
        if len(path) < 7 or path[:3] != _POD_SPEC or path[5] != "env":
            continue
        for state in (member.new, member.old):
            # Found only where the path's keys and indices fit the state.
            container, env = _get(state, *path[:5]), _get(state, *path[:7])
            if isinstance(container, dict) and isinstance(env, dict):
                c_name, e_name = container.get("name"), env.get("name")
                if isinstance(c_name, str) and isinstance(e_name, str):
                    touched.setdefault((str(path[3]), c_name), set()).add(e_name)
    return touched


def _env_changes(old: JsonValue, new: JsonValue, touched: set[str] | None) -> list[str]:
    before, after = _env_values(old), _env_values(new)
    texts: list[str] = []
    for name, value in after.items():
        if name not in before:
            shown = " (value hidden)" if value == SECRET else f": {value}"
            texts.append(f"env `{name}` added{shown}")
        elif before[name] != value or (name in (touched or ()) and value == SECRET):
            shown = f": {before[name]} → {value}"
            if SECRET in (before[name], value):
                shown = " changed (value hidden)"
            texts.append(f"env `{name}`{shown}")
    texts += [f"env `{name}` removed" for name in before if name not in after]
    if len(texts) > _MAX_ENV_REASONS:
        extra = len(texts) - _MAX_ENV_REASONS + 1
        texts = [*texts[: _MAX_ENV_REASONS - 1], f"{extra} more env changes"]
    return texts


def _env_values(env: JsonValue) -> dict[str, str]:
    items = env if isinstance(env, list) else []
    return {
        str(item["name"]): _env_value(item)
        for item in items
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    }


def _env_value(item: JsonObject) -> str:
    if "value" in item:
        value = item["value"]
        return value if isinstance(value, str) and value in (SECRET, UNKNOWN) else _show(value)
    ref = item.get("valueFrom")
    for key, text in _ENV_REFS.items():
        target = ref.get(key) if isinstance(ref, dict) else None
        if isinstance(target, dict):
            return text.format_map(defaultdict(lambda: None, target))
    return '""'


def _compute_change(old: JsonValue, new: JsonValue) -> str | None:
    parts = [
        f"{format_path(path)} {'(none)' if kind == 'add' else _show(before)}"
        f" → {'(none)' if kind == 'delete' else _show(after)}"
        for path, kind, before, after in _deep_diff(old or {}, new or {}, ())
    ]
    return f"resources {', '.join(parts)}" if parts else None


def _members(group: _Group, fields: Mapping[str, Changes]) -> list[Reason]:
    """Add each changed member's reasons; returns the task-queue checks' ones, used only
    when nothing else explains (they change whenever their worker does)."""
    deferred: list[Reason] = []
    whole = group.operation in _BORN_OR_GONE
    for member in sorted(group.members, key=lambda m: m.name):
        if member.urn == group.urn or member.op is Operation.SAME:
            continue
        label, changes = member.label, fields[member.urn]
        child = f"{label} `{member.name}`"
        if member.op in _BORN_OR_GONE and not whole:
            added = member.op is Operation.CREATE
            code = ReasonCode.CHILD_ADDED if added else ReasonCode.CHILD_REMOVED
            group.add(code, f"{child} {'added' if added else 'removed'}")
        elif member.op is Operation.REPLACE and not whole:
            keys = [fc.path for _, fc in changes if fc.replace] or member.replace_keys
            why = f" (`{'`, `'.join(keys)}` cannot change in place)" if keys else ""
            group.add(ReasonCode.CHILD_REPLACED, f"{child} will be replaced{why}")
        if member.op not in _CHANGED:
            continue
        replaced = member.op is Operation.REPLACE
        explained: list[Path] = [path for path, fc in changes if fc.replace and replaced]
        if member.type in _WORKLOAD_TYPES:
            explained += _workload(member, changes)[1]
        elif member.type in SECRET_TYPES:
            data: list[Path] = [("data",), ("stringData",)]
            if any(path[:1] in data for path, _ in changes):
                name = _get(member.new, "metadata", "name") or member.name
                hidden = f"secret `{name}` changed (values hidden)"
                group.add(ReasonCode.CREDENTIALS_CHANGED, hidden)
            explained += data
        elif label == "ConnectionFingerprint" and group.kind is GroupKind.CONNECTION:
            explained += _fingerprint_reasons(group, changes)
        leftover = [
            leaf
            for path, fc in changes
            for leaf, *_ in _leaves(path, fc)
            if not _under_any(leaf, explained) and leaf[:1] != ("__provider",)
        ]
        if leftover:
            shown = ", ".join(f"`{format_path(p)}`" for p in leftover[:3])
            more = f" and {len(leftover) - 3} more" if len(leftover) > 3 else ""
            message = f"{child}: {shown}{more} changed"
            if label == "TaskQueueCheck":
                deferred.append(Reason(code=ReasonCode.FIELDS_CHANGED, message=message))
            else:
                group.add(ReasonCode.FIELDS_CHANGED, message)
    return deferred


def _fingerprint_reasons(group: _Group, changes: Changes) -> list[Path]:
    explained: list[Path] = [("fingerprint",)]
    for path, fc in changes:
        for leaf, kind, old, new in _leaves(path, fc):
            before = "(none)" if kind == "add" else _show(old)
            change = f"{before} → {'(none)' if kind == 'delete' else _show(new)}"
            last = leaf[-1] if leaf else ""
            if last == "hostPort":
                group.add(ReasonCode.HOST_PORT_CHANGED, f"hostPort {change}")
            elif last == "twcCredential":
                said = f"twc's own credential {change} (the workers' stays: no pod rolls)"
                group.add(ReasonCode.TWC_CREDENTIAL_CHANGED, said)
            elif isinstance(last, str) and "digest" in last.lower():
                rotated = "credential secret changed (certificate or key rotated)"
                group.add(ReasonCode.CREDENTIALS_CHANGED, rotated)
            elif leaf[:1] == ("spec",) and len(leaf) > 1:
                group.add(
                    ReasonCode.FIELDS_CHANGED, f"connection `{format_path(leaf[1:])}`: {change}"
                )
            else:
                continue
            explained.append(leaf)
    return explained


def _connection(conn: _Group, groups: Sequence[_Group]) -> None:
    if conn.operation in _BORN_OR_GONE:
        return
    changed = any(m.label == "ConnectionFingerprint" and m.op in _CHANGED for m in conn.members)
    # twc's own credential is not in the fingerprint: changing only it rolls no worker.
    changed &= {r.code for r in conn.reasons} != {ReasonCode.TWC_CREDENTIAL_CHANGED}
    rolling = sorted(
        g.name
        for g in groups
        if g.hash_changed and g.connection == conn.name and g.operation in _CHANGED
    )
    if not changed and not rolling:
        return
    workers = f" ({', '.join(f'`{w}`' for w in rolling)})" if rolling else ""
    message = f"connection fingerprint changed: every worker using `{conn.name}` will roll{workers}"
    conn.reasons.insert(0, Reason(code=ReasonCode.CONNECTION_FINGERPRINT_CHANGED, message=message))


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
        return value or '""'
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class VersionState:
    """One version Deployment of a versioned worker in a preview."""

    build_id: str
    op: str  # an Operation's value
    was_target: bool
    is_target: bool
    old_replicas: int | None
    new_replicas: int | None
    policy: RolloutPolicy | None  # recorded in the new state, else the old


def int_or_none(value: JsonValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def version_state(op: str, old: JsonValue, new: JsonValue) -> VersionState | None:
    """The version a Deployment's states describe; ``None`` for other Deployments."""
    label = ("metadata", "labels", BUILD_ID_LABEL)
    build = _get(new, *label) or _get(old, *label)
    if not _known_str(build):
        return None
    return VersionState(
        build_id=str(build),
        op=op,
        was_target=_get(old, *_TARGET_PATH) == "true",
        is_target=_get(new, *_TARGET_PATH) == "true",
        old_replicas=int_or_none(_get(old, *_REPLICAS_PATH)) if op != "create" else None,
        new_replicas=int_or_none(_get(new, *_REPLICAS_PATH)) if op != "delete" else None,
        policy=RolloutPolicy.recorded(_get(new, *_POLICY_PATH))
        or RolloutPolicy.recorded(_get(old, *_POLICY_PATH)),
    )


def rollout_reasons(worker: str, versions: Sequence[VersionState]) -> list[tuple[ReasonCode, str]]:
    """``(code, message)`` reasons for a versioned worker's group, most important first."""
    reasons: list[tuple[ReasonCode, str]] = []
    target = next((v for v in versions if v.is_target and v.op != "delete"), None)
    previous = [v.build_id for v in versions if v.was_target and v is not target]
    if target is not None and target.policy is not None:
        policy, build = target.policy, target.build_id
        if target.op == "create":
            reasons.append(
                (ReasonCode.NEW_VERSION, rollout_in_words(worker, policy, build, previous))
            )
        elif not target.was_target and target.op != "same":
            words = rollback_in_words(worker, policy, build, previous)
            reasons.append((ReasonCode.VERSION_ROLLBACK, words))
    for version in (v for v in versions if not v.is_target):
        if version.op == "delete":
            words = f"version {version.build_id} is deleted (drained, sunset)"
        elif version.op == "update" and version.new_replicas == 0 and version.old_replicas:
            words = (
                f"version {version.build_id} is scaled to 0 "
                f"(drained, replicas {version.old_replicas} → 0)"
            )
        else:
            continue
        reasons.append((ReasonCode.VERSION_SUNSET, words))
    return reasons


# Across shards the heavier operation tells the reader what to look at.
_WEIGHT = {Operation.SAME: 0, Operation.UPDATE: 1, Operation.CREATE: 2, Operation.DELETE: 2}


def _merge_group(into: Group, other: Group) -> Group:
    return into.model_copy(
        update={
            "operation": max(into.operation, other.operation, key=lambda o: _WEIGHT.get(o, 3)),
            "restarts": into.restarts or other.restarts,
            "reasons": list(dict.fromkeys([*into.reasons, *other.reasons])),
            "resources": [*into.resources, *other.resources],
        }
    )


def _tagged(diagnostic: Diagnostic, stack: str) -> Diagnostic:
    return diagnostic.model_copy(update={"message": f"[{stack}] {diagnostic.message}"})


def merge_reports(stack: str, reports: Sequence[PreviewReport]) -> PreviewReport:
    """The shards' reports as one report of ``stack``: groups merged by kind and name,
    resources counted over every shard, diagnostics prefixed with their shard, every
    shard's held deletions."""
    if not reports:
        raise ValueError("no shard previewed")
    groups: dict[tuple[str, str, str], Group] = {}
    for group in (g for r in reports for g in r.groups):
        key = (group.kind.value, group.name, group.type)
        groups[key] = _merge_group(groups[key], group) if key in groups else group
    resources = sum((Counter(r.summary.resources.model_dump()) for r in reports), Counter())
    held = [r.held_deletions for r in reports if r.held_deletions is not None]
    return _report(
        OpCounts(**resources),
        groups.values(),
        project=reports[0].project,
        stack=f"{stack} ({plural(len(reports), 'shard')})",
        errors=[_tagged(d, r.stack) for r in reports for d in r.errors],
        warnings=[_tagged(d, r.stack) for r in reports for d in r.warnings],
        held_deletions=HeldDeletions(  # each shard's guard holds its own share
            workers=sorted(w for h in held for w in h.workers),
            running=sum(h.running for h in held),
            allowed=sum(h.allowed for h in held),
        )
        if held
        else None,
    )
