"""The stack's record in the cluster: one ConfigMap per stack, written by its daemon.

The desired state keeps the last accepted spec of every cluster object (an object that
turns invalid keeps running on it; a kind whose list fails keeps all of its objects).
That store must outlive the daemon's process, and every entry point must see the same
one: a restarted daemon, ``twc up`` and ``twc preview`` on a laptop, and the program
under plain ``pulumi up``. So the daemon writes it to a ConfigMap,
``twc-stack-<stack>`` in the stack's *control namespace*, and the others read it.

The record is readable with the credentials that read the cluster objects it
summarises, and the daemon's RBAC for it is one namespaced Role on ConfigMaps.

What it holds (``binaryData``, gzip-compressed JSON):

* ``accepted``: per kind key, per object key, the last accepted spec (trimmed);
* ``fleet``: the fleet document the daemon last planned with, so a restarted daemon can
  hold the deletion of workers removed from the file (see the deletion guard).

Beyond :data:`CHUNK_BYTES` the compressed record is split into part ConfigMaps named
after its digest, written before the head that names them, so a reader never sees a
half-written record (it checks the digest).

A second ConfigMap, ``twc-stack-<stack>-applied``, holds what the daemon's last
successful ``up`` applied (:class:`AppliedRecord`: the desired state's hashes, that
update's identity in the stack's history, and the build of twc that rendered it), so a
restarted daemon whose stack nobody changed since runs no ``up`` at all.

Annotations carry the deletion guard's conversation with the operator:
:data:`HELD_ANNOTATION` (the digest of the deletions the daemon holds, with the workers
in ``data.held``) and :data:`APPROVE_ANNOTATION` (``twc approve`` writes the digest it
approves). The daemon writes with JSON merge patches, so it never overwrites the
approval.

Where the record lives is part of the stack: the stack config ``twc:controlNamespace``.
The daemon writes it there when it first applies the stack (its choice,
:func:`control_namespace`: ``TWC_CONTROL_NAMESPACE``, else its pod's namespace, else
``default``), and every entry point finds the record through :func:`record_for_stack`:
the config, else ``TWC_CONTROL_NAMESPACE``, else the one ConfigMap in the cluster that is
this stack's record (a working copy whose stack settings file lacks the key). None of
them guesses: a record that exists and cannot be found or read is an error.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from twc.desired import OWN_STACK, ObjectList
from twc.kube.client import read_json, status_of
from twc.spec import label_value
from twc.spec.labels import STACK_LABEL

__all__ = [
    "APPROVE_ANNOTATION",
    "CHUNK_BYTES",
    "CONTROL_NAMESPACE",
    "HELD_ANNOTATION",
    "RECORD_LABEL",
    "SELECTIONS",
    "AppliedRecord",
    "HeldRecord",
    "RecordStore",
    "StackRecord",
    "control_namespace",
    "record_for_stack",
    "record_name",
]

logger = logging.getLogger(__name__)

RECORD_LABEL = STACK_LABEL
"""The stack a record (like everything twc creates) belongs to."""
_ROLE_LABEL = "twc.temporal.io/record"
CONTROL_NAMESPACE = "controlNamespace"
"""The stack config key (``twc:controlNamespace``) naming the namespace of its record."""
APPROVE_ANNOTATION = "twc.temporal.io/approve-deletions"
"""Written by ``twc approve``: the digest of the held deletions the operator confirms."""
HELD_ANNOTATION = "twc.temporal.io/held-deletions"
"""Written by the daemon: the digest of the deletions it holds (empty when none)."""
_DIGEST_ANNOTATION = "twc.temporal.io/record-digest"
_PARTS_ANNOTATION = "twc.temporal.io/record-parts"
_KEY = "record.json.gz"
_HELD_KEY = "held"
SELECTIONS = "twc-stack-selections"
"""The ConfigMap (in the control namespace) where stacks publish their ``select``."""
CHUNK_BYTES = 700 * 1024
"""Most compressed bytes in one ConfigMap (base64 makes them a third larger; the API
server's limit is 1 MiB per object)."""


def record_name(stack: str) -> str:
    """The ConfigMap's name: ``twc-stack-<stack>`` made a DNS name (with a short hash
    when the stack's name had to be changed for that)."""
    slug = re.sub(r"[^a-z0-9.-]+", "-", stack.lower()).strip("-.") or "stack"
    name = f"twc-stack-{slug}"
    if slug != stack or len(name) > 240:
        digest = hashlib.sha256(stack.encode()).hexdigest()[:8]
        name = f"{name[:230]}-{digest}"
    return name


def control_namespace(
    config: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None
) -> str:
    """Where the daemon keeps the stack's record: the stack's config, else its choice
    when it first applies the stack (which it then writes to that config).

    Args:
        config: The stack's ``twc:`` config, keys without the prefix.
        env: The environment (``os.environ`` by default).
    """
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
    """The record of ``stack`` where the stack keeps it (see the module docstring).

    A stack no daemon has written a record for yet gets the store where one would be
    written; its :meth:`RecordStore.load` finds nothing.

    Args:
        core_api: A ``kubernetes.client.CoreV1Api``.
        stack: The stack's name (a shard's stack name for a shard).
        config: The stack's ``twc:`` config, keys without the prefix.
        env: The environment (``os.environ`` by default).

    Raises:
        LookupError: The config names no namespace and the cluster cannot tell where
            the record is (the list was refused or failed, or two records claim it).
    """
    env = os.environ if env is None else env
    namespace = (config or {}).get(CONTROL_NAMESPACE) or env.get("TWC_CONTROL_NAMESPACE")
    if not namespace:
        namespace = _find_record(core_api, stack) or control_namespace(config, env)
    return RecordStore(core_api, namespace=namespace, stack=stack)


def _find_record(core_api: Any, stack: str) -> str | None:
    """The namespace of the one ConfigMap that is ``stack``'s record; ``None`` if none."""
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
    """The workers whose deletion is held, ``<namespace>/<name>``."""
    reason: str = ""
    """Why, in words (how many of how many, the share allowed)."""


@dataclass(frozen=True, slots=True)
class StackRecord:
    """What the record held when it was read."""

    accepted: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    """Per kind key, per object key, the last accepted spec."""
    fleet: Mapping[str, Any] | None = None
    """The fleet document the daemon last planned with."""
    held: HeldRecord | None = None
    """The deletions the daemon holds now, if any."""
    approved: str | None = None
    """The digest of deletions an operator approved (``twc approve``), if any."""


@dataclass(frozen=True, slots=True)
class AppliedRecord:
    """What the daemon's last successful ``up`` applied, and where it left the stack."""

    fleet: str
    """The desired state's hash (equal hashes: the same desired fleet)."""
    shared: str
    """The hash of its part no single worker owns."""
    workers: Mapping[str, str]
    """Per worker key, its hash."""
    update: str
    """The identity of the stack's last update after it (or after a refresh that found
    no drift since): another one means someone else changed the stack."""
    build: str
    """The build of twc that rendered it: another build may render the same desired
    state differently."""

    def to_json(self) -> dict[str, Any]:
        """The record as JSON data."""
        return {
            "fleet": self.fleet,
            "shared": self.shared,
            "workers": dict(self.workers),
            "update": self.update,
            "build": self.build,
        }

    @classmethod
    def from_json(cls, data: Any) -> AppliedRecord | None:
        """Read it back; ``None`` for anything that is not one (a restart then applies
        the stack as if nothing were recorded)."""
        try:
            workers = data["workers"]
            if not isinstance(workers, dict):
                return None
            return cls(
                fleet=str(data["fleet"]),
                shared=str(data["shared"]),
                workers={str(k): str(v) for k, v in workers.items()},
                update=str(data["update"]),
                build=str(data["build"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


_APPLIED_KEY = "applied.json.gz"


def _payload(accepted: Mapping[str, Any], fleet: Mapping[str, Any] | None) -> bytes:
    doc = {"version": 1, "accepted": accepted, "fleet": fleet}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


class RecordStore:
    """Reads and writes one stack's record through a ``CoreV1Api``."""

    def __init__(
        self, core_api: Any, *, namespace: str, stack: str, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        """Address the record of ``stack`` in ``namespace``.

        Args:
            core_api: A ``kubernetes.client.CoreV1Api``.
            namespace: The control namespace.
            stack: The stack's name.
            chunk_bytes: Most compressed bytes per ConfigMap (tests make it small).
        """
        self._core = core_api
        self.namespace = namespace
        self.stack = stack
        self.name = record_name(stack)
        self._chunk = max(1024, chunk_bytes)
        self._written: str | None = None
        self._held: str | None = None

    def __str__(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    # ----------------------------------------------------------------- read
    def load(self) -> StackRecord | None:
        """The record, or ``None`` when the stack has none yet.

        Raises:
            Exception: The API server failed, access was denied, or the record is
                damaged (a part missing, a digest that does not match).
        """
        head = self._read(self.name)
        if head is None:
            return None
        meta = head.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        blob = self._blob(head, annotations)
        self._written = annotations.get(_DIGEST_ANNOTATION)
        doc: dict[str, Any] = {}
        if blob is not None:
            doc = json.loads(gzip.decompress(blob))
        held = None
        held_text = (head.get("data") or {}).get(_HELD_KEY)
        if annotations.get(HELD_ANNOTATION) and held_text:
            found = json.loads(held_text)
            held = HeldRecord(
                digest=str(found.get("digest", "")),
                workers=tuple(found.get("workers") or ()),
                reason=str(found.get("reason", "")),
            )
        self._held = held.digest if held is not None else ""
        return StackRecord(
            accepted=doc.get("accepted") or {},
            fleet=doc.get("fleet"),
            held=held,
            approved=annotations.get(APPROVE_ANNOTATION) or None,
        )

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

    # ---------------------------------------------------------------- write
    def save(self, accepted: Mapping[str, Any], fleet: Mapping[str, Any] | None) -> bool:
        """Write the accepted specs (and the fleet document) unless unchanged.

        Returns:
            Whether anything was written.

        Raises:
            Exception: The API server failed or access was denied.
        """
        payload = _payload(accepted, fleet)
        digest = hashlib.sha256(payload).hexdigest()
        if digest == self._written:
            return False
        blob = gzip.compress(payload, mtime=0)
        chunks = [blob[i : i + self._chunk] for i in range(0, len(blob), self._chunk)] or [b""]
        old = self._read(self.name)
        old_parts = self._parts_of(old)
        annotations: dict[str, str | None] = {_DIGEST_ANNOTATION: digest}
        binary: dict[str, str | None]
        if len(chunks) == 1:
            binary = {_KEY: base64.b64encode(blob).decode()}
            annotations[_PARTS_ANNOTATION] = None
            parts: list[str] = []
        else:
            # Parts first, named after the digest: the head names them only once they
            # are all there, so a reader sees the old record or the new one.
            parts = [f"{self.name}-{digest[:10]}-{i}" for i in range(len(chunks))]
            for part, chunk in zip(parts, chunks, strict=True):
                self._put(part, {"binaryData": {_KEY: base64.b64encode(chunk).decode()}})
            binary = {_KEY: None}
            annotations[_PARTS_ANNOTATION] = ",".join(parts)
        body = {"metadata": {"annotations": annotations}, "binaryData": binary}
        if old is None:
            self._create(self.name, body)
        else:
            self._patch(self.name, body)
        for part in sorted(set(old_parts) - set(parts)):
            self._delete(part)
        self._written = digest
        logger.info(
            "[%s] accepted specs written to %s (%d bytes compressed%s)",
            self.stack,
            self,
            len(blob),
            f", {len(chunks)} parts" if len(chunks) > 1 else "",
        )
        return True

    def publish_held(self, held: HeldRecord | None) -> None:
        """Say which deletions the daemon holds (``None``: none), for ``twc approve``.

        Raises:
            Exception: The API server failed or access was denied.
        """
        digest = held.digest if held is not None else ""
        if digest == self._held:
            return
        text = (
            json.dumps(
                {"digest": held.digest, "workers": list(held.workers), "reason": held.reason},
                sort_keys=True,
            )
            if held is not None
            else None
        )
        annotations: dict[str, str | None] = {HELD_ANNOTATION: digest or None}
        if held is None:
            # A new hold needs a new approval: an old one must not carry over.
            annotations[APPROVE_ANNOTATION] = None
        body = {"metadata": {"annotations": annotations}, "data": {_HELD_KEY: text}}
        if self._read(self.name) is None:
            self._create(self.name, body)
        else:
            self._patch(self.name, body)
        self._held = digest

    def approved(self) -> str | None:
        """The digest an operator approved, read now (``None`` when none).

        Raises:
            Exception: The API server failed or access was denied.
        """
        head = self._read(self.name)
        annotations = ((head or {}).get("metadata") or {}).get("annotations") or {}
        return annotations.get(APPROVE_ANNOTATION) or None

    def approve(self, digest: str) -> None:
        """Approve the held deletions named by ``digest`` (what ``twc approve`` does).

        Raises:
            LookupError: The stack has no record (no daemon ever wrote one).
            Exception: The API server failed or access was denied.
        """
        if self._read(self.name) is None:
            raise LookupError(f"{self} does not exist")
        self._patch(self.name, {"metadata": {"annotations": {APPROVE_ANNOTATION: digest}}})

    # ------------------------------------------------------------ selections
    def selections(self, select: Mapping[str, Any] | None, *, publish: bool) -> ObjectList:
        """Every stack's ``select`` (:data:`~twc.desired.STACKS_KEY` objects, this
        stack's marked :data:`~twc.desired.OWN_STACK`), from the ConfigMap
        :data:`SELECTIONS` of the control namespace (a key per stack).

        Args:
            select: This stack's ``select`` (``None``: it selects nothing itself).
            publish: Write this stack's own entry there first (the daemon does).

        Raises:
            Exception: The API server failed, access was denied, or an entry is damaged.
        """
        found = self._read(SELECTIONS)
        data = dict((found or {}).get("data") or {})
        mine = json.dumps({"stack": self.stack, "select": select}) if select else None
        if publish and data.get(self.name) != mine:
            if found is None:
                body = {"metadata": {"name": SELECTIONS}, "data": {self.name: mine}}
                self._core.create_namespaced_config_map(self.namespace, body)
            else:
                self._patch(SELECTIONS, {"data": {self.name: mine}})
        entries = [json.loads(text) for key, text in sorted(data.items()) if key != self.name]
        objects = [{"metadata": {"name": e["stack"]}, "spec": e["select"]} for e in entries]
        if select:
            objects.append({"metadata": {"name": self.stack, "annotations": {OWN_STACK: "true"}}})
        return ObjectList.known(objects)

    # --------------------------------------------------------------- applied
    @property
    def applied_name(self) -> str:
        """The name of the ConfigMap that holds :class:`AppliedRecord`."""
        return f"{self.name}-applied"

    def load_applied(self) -> AppliedRecord | None:
        """What the last successful ``up`` applied; ``None`` when nothing (readable) is
        recorded.

        Raises:
            Exception: The API server failed or access was denied.
        """
        found = self._read(self.applied_name)
        text = ((found or {}).get("binaryData") or {}).get(_APPLIED_KEY)
        if not text:
            return None
        try:
            data = json.loads(gzip.decompress(base64.b64decode(text)))
        except (ValueError, OSError, EOFError) as exc:
            logger.warning("[%s] %s-applied is unreadable, ignored: %s", self.stack, self, exc)
            return None
        return AppliedRecord.from_json(data)

    def save_applied(self, applied: AppliedRecord) -> None:
        """Record what an ``up`` applied (replacing what was recorded).

        Raises:
            Exception: The API server failed or access was denied.
        """
        payload = json.dumps(applied.to_json(), sort_keys=True, separators=(",", ":"))
        blob = base64.b64encode(gzip.compress(payload.encode(), mtime=0)).decode()
        body = {"binaryData": {_APPLIED_KEY: blob}}
        if self._read(self.applied_name) is None:
            self._create(self.applied_name, body, role="applied")
        else:
            self._patch(self.applied_name, body)

    # -------------------------------------------------------------- helpers
    def _parts_of(self, head: Mapping[str, Any] | None) -> list[str]:
        annotations = ((head or {}).get("metadata") or {}).get("annotations") or {}
        text = annotations.get(_PARTS_ANNOTATION) or ""
        return [p for p in text.split(",") if p]

    def _read(self, name: str) -> dict[str, Any] | None:
        return read_json(self._core.read_namespaced_config_map, name, self.namespace)

    def _metadata(self, name: str, role: str = "accepted") -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": {
                RECORD_LABEL: label_value(self.stack),
                _ROLE_LABEL: role,
                "app.kubernetes.io/managed-by": "twc",
            },
        }

    def _create(self, name: str, body: Mapping[str, Any], role: str = "accepted") -> None:
        meta = {**self._metadata(name, role), **dict(body.get("metadata") or {})}
        meta["annotations"] = {
            k: v for k, v in (meta.get("annotations") or {}).items() if v is not None
        }
        full = {
            **{k: {kk: vv for kk, vv in v.items() if vv is not None} for k, v in body.items()},
            "metadata": meta,
        }
        self._core.create_namespaced_config_map(self.namespace, full)

    def _patch(self, name: str, body: Mapping[str, Any]) -> None:
        self._core.patch_namespaced_config_map(
            name, self.namespace, dict(body), _content_type="application/merge-patch+json"
        )

    def _put(self, name: str, body: Mapping[str, Any]) -> None:
        if self._read(name) is None:
            self._create(name, body)
        else:
            self._patch(name, body)

    def _delete(self, name: str) -> None:
        try:
            self._core.delete_namespaced_config_map(name, self.namespace)
        except Exception as exc:
            if status_of(exc) != 404:
                raise
