"""The stack's record in the cluster: ConfigMap ``twc-stack-<stack>`` holds the last accepted specs
and fleet document (beyond :data:`CHUNK_BYTES`, in parts written before the head that names them,
digest-checked) and the deletion guard's annotations; ``-applied`` holds :class:`AppliedRecord`. It
lives in ``twc:controlNamespace``, else ``TWC_CONTROL_NAMESPACE``, else the one record found; a
record that exists and cannot be found or read is an error."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from twc.desired import OWN_STACK, ObjectList
from twc.kube.client import annotations_of, read_json, tolerating
from twc.spec import label_value
from twc.spec.labels import STACK_LABEL

logger = logging.getLogger(__name__)

RECORD_LABEL = STACK_LABEL
_ROLE_LABEL = "twc.temporal.io/record"
CONTROL_NAMESPACE = "controlNamespace"
APPROVE_ANNOTATION = "twc.temporal.io/approve-deletions"
"""Written by ``twc approve``: the digest of the held deletions the operator confirms."""
HELD_ANNOTATION = "twc.temporal.io/held-deletions"
_DIGEST_ANNOTATION = "twc.temporal.io/record-digest"
_PARTS_ANNOTATION = "twc.temporal.io/record-parts"
_KEY = "record.json.gz"
_APPLIED_KEY = "applied.json.gz"
_HELD_KEY = "held"
SELECTIONS = "twc-stack-selections"  # where stacks publish their ``select``
CHUNK_BYTES = 700 * 1024  # compressed bytes per ConfigMap (base64 adds a third of 1 MiB)


def record_name(stack: str) -> str:
    """``twc-stack-<stack>`` made a DNS name (with a short hash when it had to change)."""
    slug = re.sub(r"[^a-z0-9.-]+", "-", stack.lower()).strip("-.") or "stack"
    name = f"twc-stack-{slug}"
    if slug != stack or len(name) > 240:
        name = f"{name[:230]}-{hashlib.sha256(stack.encode()).hexdigest()[:8]}"
    return name


def control_namespace(
    config: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None
) -> str:
    """Where the daemon keeps the stack's record (config, env, pod namespace, default)."""
    env = os.environ if env is None else env
    return (
        (config or {}).get(CONTROL_NAMESPACE)
        or env.get("TWC_CONTROL_NAMESPACE")
        or env.get("POD_NAMESPACE")
        or "default"
    )


def record_for_stack(
    core_api: Any, stack: str, config: Mapping[str, str], env: Mapping[str, str] | None = None
) -> RecordStore:
    """The record of ``stack`` where it is kept (or would be written); LookupError when
    the config names no namespace and the cluster cannot tell (list failed, two found)."""
    env = os.environ if env is None else env
    named = (config or {}).get(CONTROL_NAMESPACE) or env.get("TWC_CONTROL_NAMESPACE")
    namespace = named or _find_record(core_api, stack) or control_namespace(config, env)
    return RecordStore(core_api, namespace=namespace, stack=stack)


def _find_record(core_api: Any, stack: str) -> str | None:
    name = record_name(stack)
    try:
        found = core_api.list_config_map_for_all_namespaces(
            label_selector=f"{RECORD_LABEL}={label_value(stack)},{_ROLE_LABEL}=accepted",
            field_selector=f"metadata.name={name}",
        )
    except Exception as exc:
        raise LookupError(
            f"the stack's config names no twc:{CONTROL_NAMESPACE} and the ConfigMap "
            f"{name} cannot be looked for in every namespace ({exc}); set it with "
            f"`pulumi config set twc:{CONTROL_NAMESPACE} <namespace> --stack {stack}`"
        ) from exc
    namespaces = sorted({item.metadata.namespace for item in found.items or ()})
    if len(namespaces) > 1:
        raise LookupError(
            f"ConfigMaps {name} in {', '.join(namespaces)} each claim to be the record of "
            f"stack {stack}: set twc:{CONTROL_NAMESPACE} to the daemon's namespace"
        )
    return namespaces[0] if namespaces else None


@dataclass(frozen=True, slots=True)
class HeldRecord:
    """Deletions the daemon holds, as it publishes them for ``twc approve``."""

    digest: str
    """Identifies exactly this set of deletions; an approval names it."""
    workers: tuple[str, ...]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class StackRecord:
    """What the record held when it was read."""

    accepted: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    """Per kind key, per object key, the last accepted spec."""
    fleet: Mapping[str, Any] | None = None
    held: HeldRecord | None = None
    approved: str | None = None


@dataclass(frozen=True, slots=True)
class AppliedRecord:
    """What the daemon's last successful ``up`` applied, and where it left the stack."""

    fleet: str
    """The desired state's hash."""
    shared: str
    """The hash of its part no single worker owns."""
    workers: Mapping[str, str]
    update: str
    """The stack's last update after it: another one means someone else changed it."""
    build: str

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "workers": dict(self.workers)}


class RecordStore:
    """Reads and writes one stack's record; every method raises when the API server fails."""

    def __init__(
        self, core_api: Any, *, namespace: str, stack: str, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        self._core = core_api
        self.namespace = namespace
        self.stack = stack
        self.name = record_name(stack)
        self.applied_name = f"{self.name}-applied"
        self._chunk = max(1024, chunk_bytes)
        self._written: str | None = None
        self._held: str | None = None

    def __str__(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def load(self) -> StackRecord | None:
        """The record, or ``None`` when none yet; raises when unreadable or damaged."""
        head = self._read(self.name)
        if head is None:
            return None
        annotations = annotations_of(head)
        blob = self._blob(head, annotations)
        self._written = annotations.get(_DIGEST_ANNOTATION)
        doc = json.loads(gzip.decompress(blob)) if blob is not None else {}
        held = None
        held_text = (head.get("data") or {}).get(_HELD_KEY)
        if annotations.get(HELD_ANNOTATION) and held_text:
            found = json.loads(held_text)
            workers = tuple(found.get("workers") or ())
            held = HeldRecord(str(found.get("digest", "")), workers, str(found.get("reason", "")))
        self._held = held.digest if held is not None else ""
        approved = annotations.get(APPROVE_ANNOTATION) or None
        return StackRecord(doc.get("accepted") or {}, doc.get("fleet"), held, approved)

    def _blob(self, head: Mapping[str, Any], annotations: Mapping[str, str]) -> bytes | None:
        binary = head.get("binaryData") or {}
        if _KEY in binary:
            blob = base64.b64decode(binary[_KEY])
        elif annotations.get(_PARTS_ANNOTATION):
            pieces = []
            for part in annotations[_PARTS_ANNOTATION].split(","):
                found = self._read(part)
                if found is None:
                    raise LookupError(f"{self}: part {part} is missing")
                pieces.append(base64.b64decode((found.get("binaryData") or {})[_KEY]))
            blob = b"".join(pieces)
        else:
            return None
        digest = annotations.get(_DIGEST_ANNOTATION)
        if digest and hashlib.sha256(gzip.decompress(blob)).hexdigest() != digest:
            raise ValueError(f"{self}: the record does not match its digest")
        return blob

    def save(self, accepted: Mapping[str, Any], fleet: Mapping[str, Any] | None) -> bool:
        """Write the accepted specs and fleet document unless unchanged; whether written."""
        doc = {"version": 1, "accepted": accepted, "fleet": fleet}
        payload = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        digest = hashlib.sha256(payload).hexdigest()
        if digest == self._written:
            return False
        blob = gzip.compress(payload, mtime=0)
        chunks = [blob[i : i + self._chunk] for i in range(0, len(blob), self._chunk)] or [b""]
        old = annotations_of(self._read(self.name)).get(_PARTS_ANNOTATION) or ""
        old_parts = [p for p in old.split(",") if p]
        annotations: dict[str, str | None] = {_DIGEST_ANNOTATION: digest, _PARTS_ANNOTATION: None}
        parts: list[str] = []
        if len(chunks) == 1:
            binary: dict[str, str | None] = {_KEY: base64.b64encode(blob).decode()}
        else:  # parts first: the head names them only once they are all there
            parts = [f"{self.name}-{digest[:10]}-{i}" for i in range(len(chunks))]
            for part, chunk in zip(parts, chunks, strict=True):
                self._put(part, {"binaryData": {_KEY: base64.b64encode(chunk).decode()}})
            binary = {_KEY: None}
            annotations[_PARTS_ANNOTATION] = ",".join(parts)
        self._put(self.name, {"metadata": {"annotations": annotations}, "binaryData": binary})
        for part in sorted(set(old_parts) - set(parts)):
            with tolerating(404):
                self._core.delete_namespaced_config_map(part, self.namespace)
        self._written = digest
        logger.info("[%s] accepted specs written to %s (%d parts)", self.stack, self, len(chunks))
        return True

    def publish_held(self, held: HeldRecord | None) -> None:
        """Publish the deletions the daemon holds (``None``: none) for ``twc approve``."""
        digest = held.digest if held is not None else ""
        if digest == self._held:
            return
        annotations: dict[str, str | None] = {HELD_ANNOTATION: digest or None}
        if held is None:  # a new hold needs a new approval
            annotations[APPROVE_ANNOTATION] = None
        text = json.dumps(asdict(held), sort_keys=True) if held is not None else None
        self._put(self.name, {"metadata": {"annotations": annotations}, "data": {_HELD_KEY: text}})
        self._held = digest

    def approved(self) -> str | None:
        """The digest an operator approved, read now (``None`` when none)."""
        return annotations_of(self._read(self.name)).get(APPROVE_ANNOTATION) or None

    def approve(self, digest: str) -> None:
        """Approve the held deletions ``digest`` names; LookupError without a record."""
        if self._read(self.name) is None:
            raise LookupError(f"{self} does not exist")
        self._patch(self.name, {"metadata": {"annotations": {APPROVE_ANNOTATION: digest}}})

    def selections(self, select: Mapping[str, Any] | None, *, publish: bool) -> ObjectList:
        """Every stack's ``select`` from :data:`SELECTIONS` as ``STACKS_KEY`` objects (this
        stack's marked ``OWN_STACK``); ``publish`` writes this stack's entry first."""
        data = dict((self._read(SELECTIONS) or {}).get("data") or {})
        mine = json.dumps({"stack": self.stack, "select": select}) if select else None
        if publish and data.get(self.name) != mine:
            self._put(SELECTIONS, {"data": {self.name: mine}}, role="selections")
        entries = [json.loads(text) for key, text in sorted(data.items()) if key != self.name]
        objects = [{"metadata": {"name": e["stack"]}, "spec": e["select"]} for e in entries]
        if select:
            objects.append({"metadata": {"name": self.stack, "annotations": {OWN_STACK: "true"}}})
        return ObjectList.known(objects)

    def load_applied(self) -> AppliedRecord | None:
        """What the last successful ``up`` applied; ``None`` when nothing readable is."""
        text = ((self._read(self.applied_name) or {}).get("binaryData") or {}).get(_APPLIED_KEY)
        if not text:
            return None
        try:
            data = json.loads(gzip.decompress(base64.b64decode(text)))
        except (ValueError, OSError, EOFError) as exc:
            logger.warning("[%s] %s-applied is unreadable, ignored: %s", self.stack, self, exc)
            return None
        try:  # anything that is not one (workers not a mapping, a field missing...): None
            fields = {k: str(data[k]) for k in ("fleet", "shared", "update", "build")}
            workers = {str(k): str(v) for k, v in data["workers"].items()}
            return AppliedRecord(workers=workers, **fields)
        except (AttributeError, KeyError, TypeError, ValueError):
            return None

    def save_applied(self, applied: AppliedRecord) -> None:
        """Record what an ``up`` applied."""
        payload = json.dumps(applied.to_json(), sort_keys=True, separators=(",", ":")).encode()
        blob = base64.b64encode(gzip.compress(payload, mtime=0)).decode()
        self._put(self.applied_name, {"binaryData": {_APPLIED_KEY: blob}}, role="applied")

    def _read(self, name: str) -> dict[str, Any] | None:
        return read_json(self._core.read_namespaced_config_map, name, self.namespace)

    def _patch(self, name: str, body: Mapping[str, Any]) -> None:
        self._core.patch_namespaced_config_map(
            name, self.namespace, dict(body), _content_type="application/merge-patch+json"
        )

    def _put(self, name: str, body: Mapping[str, Any], role: str = "accepted") -> None:
        """Merge-patch the ConfigMap, or create it (without the patch's ``None``s)."""
        if self._read(name) is not None:
            self._patch(name, body)
            return
        stack = label_value(self.stack)
        labels = {RECORD_LABEL: stack, _ROLE_LABEL: role, "app.kubernetes.io/managed-by": "twc"}
        full = {k: {kk: vv for kk, vv in v.items() if vv is not None} for k, v in body.items()}
        meta = full.pop("metadata", {})
        annotations = (meta.get("annotations") or {}).items()
        meta["annotations"] = {k: v for k, v in annotations if v is not None}
        full["metadata"] = {**meta, "name": name, "namespace": self.namespace, "labels": labels}
        self._core.create_namespaced_config_map(self.namespace, full)
