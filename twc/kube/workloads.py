"""Worker Deployments, their ServiceAccounts and credential Secrets, as the daemon reads
and writes them outside the engine: only calls its ClusterRole grants, each with the
client's timeout (:mod:`twc.kube.client`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twc.builders import (
    COMPONENT_WORKER,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_STACK,
    LABEL_WORKER,
    MANAGED_BY,
)
from twc.kube.client import KubeClient, read_json, status_of
from twc.kube.scale import scale_owner_of
from twc.rollout import BUILD_ID_LABEL
from twc.spec import label_value
from twc.spec.labels import owner_stack

__all__ = [
    "WORKER_SELECTOR",
    "ObjectRef",
    "Workloads",
    "deployment_kept",
    "ensure_namespace",
    "read_deployment",
    "read_secret_data",
    "ref_of",
    "stack_selector",
    "worker_deployments",
    "worker_replicas",
]

WORKER_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_WORKER}"
"""Labels of every worker Deployment twc creates (of any stack)."""


def stack_selector(stack: str) -> str:
    """Labels of the worker Deployments of one stack."""
    return f"{WORKER_SELECTOR},{LABEL_STACK}={label_value(owner_stack(stack))}"


_API_VERSION = {"Deployment": "apps/v1", "ServiceAccount": "v1"}
_APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """A worker's Deployment or ServiceAccount (both are named like the worker)."""

    kind: str
    """``Deployment`` or ``ServiceAccount``."""
    namespace: str
    """Namespace of the object (the worker's)."""
    name: str
    """Name of the object (the worker's)."""

    @property
    def worker(self) -> str:
        """The worker it belongs to, ``<namespace>/<name>``."""
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def ref_of(obj: Mapping[str, Any]) -> ObjectRef:
    """The reference of a manifest."""
    meta = obj["metadata"]
    return ObjectRef(str(obj["kind"]), str(meta["namespace"]), str(meta["name"]))


def read_secret_data(kube: KubeClient, namespace: str, name: str) -> dict[str, bytes]:
    """A Secret's decoded data.

    Raises:
        LookupError: The Secret does not exist.
    """
    try:
        secret = kube.core.read_namespaced_secret(name, namespace)
    except Exception as exc:
        if status_of(exc) == 404:
            raise LookupError(f"secret {namespace}/{name} not found") from exc
        raise
    return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}


def ensure_namespace(kube: KubeClient, name: str) -> None:
    """Create a namespace unless it exists."""
    try:
        kube.core.create_namespace({"metadata": {"name": name}})
    except Exception as exc:
        if status_of(exc) != 409:
            raise


def read_deployment(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """A Deployment as the API returns it (camelCase JSON), or ``None`` when absent."""
    return read_json(kube.apps.read_namespaced_deployment, name, namespace)


_DEPLOYMENT_LABELS = (LABEL_STACK, LABEL_WORKER, BUILD_ID_LABEL)
"""What of a worker Deployment's labels the daemon reads: its stack, worker and version."""


def deployment_kept(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the daemon reads of a worker Deployment: its name, namespace, stack, worker
    and build-ID labels, ``spec.replicas``, ``status.readyReplicas`` and the field
    managers that own ``spec.replicas``."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": {k: labels[k] for k in _DEPLOYMENT_LABELS if k in labels},
        },
        "replicas": (obj.get("spec") or {}).get("replicas"),
        "readyReplicas": (obj.get("status") or {}).get("readyReplicas"),
        "replicaOwners": tuple(scale_owner_of(obj)),
    }


def worker_replicas(found: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """``spec.replicas`` per worker, keyed ``<namespace>/<worker>``, of Deployments kept
    by :func:`deployment_kept`. A versioned worker's Deployments (one per version) count
    as that one worker, their replicas summed: a new version is no deletion of the old."""
    out: dict[str, int] = {}
    for key, dep in found.items():
        meta = dep["metadata"]
        labels = meta.get("labels") or {}
        count = int(1 if dep["replicas"] is None else dep["replicas"])
        worker = labels.get(LABEL_WORKER)
        if labels.get(BUILD_ID_LABEL) and worker:
            versioned = f"{meta.get('namespace')}/{worker}"
            out[versioned] = out.get(versioned, 0) + count
        else:
            out[key] = count
    return out


def worker_deployments(found: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """``(spec.replicas, status.readyReplicas)`` per Deployment kept by
    :func:`deployment_kept`."""
    return {
        key: (
            int(1 if dep["replicas"] is None else dep["replicas"]),
            int(dep["readyReplicas"] or 0),
        )
        for key, dep in found.items()
    }


def _stack_of(obj: Mapping[str, Any]) -> str | None:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    value = labels.get(LABEL_STACK)
    return str(value) if value is not None else None


class Workloads:
    """Worker Deployments and ServiceAccounts of one stack in one cluster."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        stack: str | None = None,
        namespaces: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        """Work through ``kube`` on the objects of ``stack``.

        Args:
            kube: The cluster.
            stack: The stack whose objects these are. Reads (replicas, readiness) also
                see worker Deployments without any stack label, which twc created
                before it labelled them (their next ``up`` labels them); writes (early
                apply's clean-up) touch only objects carrying this stack's label.
                ``None``: every twc worker Deployment.
            namespaces: A shard's namespaces (read at each list): its lists ask for
                those alone (a shard's Deployments carry its base stack's label).
        """
        self.kube = kube
        self.stack = stack
        self.namespaces = namespaces

    def _worker_deployments(self, *, strict: bool = False) -> list[dict[str, Any]]:
        selector = WORKER_SELECTOR
        if self.stack is not None and strict:
            selector = stack_selector(self.stack)
        found: list[dict[str, Any]] = []
        for namespace in (None,) if self.namespaces is None else self.namespaces():
            if namespace is None:
                response = self.kube.apps.list_deployment_for_all_namespaces(
                    label_selector=selector, _preload_content=False
                )
            else:
                response = self.kube.apps.list_namespaced_deployment(
                    namespace, label_selector=selector, _preload_content=False
                )
            items = json.loads(response.data).get("items") or []
            found += [dep for dep in items if isinstance(dep, dict)]
        if self.stack is None:
            return found
        ours = label_value(owner_stack(self.stack))
        return [d for d in found if _stack_of(d) in (ours, None)]

    def worker_replicas(self) -> dict[str, int]:
        """``spec.replicas`` of every running twc worker (see :func:`worker_replicas`)."""
        return worker_replicas(self._kept())

    def worker_deployments(self) -> dict[str, tuple[int, int]]:
        """``(spec.replicas, status.readyReplicas)`` of every twc worker Deployment."""
        return worker_deployments(self._kept())

    def _kept(self) -> dict[str, dict[str, Any]]:
        return {
            f"{d['metadata'].get('namespace')}/{d['metadata'].get('name')}": deployment_kept(d)
            for d in self._worker_deployments()
        }

    def read_secret(self, namespace: str, name: str) -> dict[str, bytes]:
        """A Secret's decoded data (see :func:`read_secret_data`)."""
        return read_secret_data(self.kube, namespace, name)

    # ------------------------------------------------------------ early apply
    def apply(self, obj: Mapping[str, Any], field_manager: str) -> None:
        """Server-side apply a worker's ``Deployment`` or ``ServiceAccount`` (no force: a
        field another manager set to another value is a conflict, not taken over)."""
        meta = obj["metadata"]
        kwargs = {"field_manager": field_manager, "_content_type": _APPLY}
        if obj["kind"] == "Deployment":
            self.kube.apps.patch_namespaced_deployment(
                meta["name"], meta["namespace"], dict(obj), **kwargs
            )
        elif obj["kind"] == "ServiceAccount":
            self.kube.core.patch_namespaced_service_account(
                meta["name"], meta["namespace"], dict(obj), **kwargs
            )
        else:  # pragma: no cover - early apply builds only these two kinds
            raise ValueError(f"cannot apply a {obj['kind']} early")

    def exists(self, ref: ObjectRef) -> bool:
        """Whether the object is in the API server."""
        return self.read(ref) is not None

    def release(self, ref: ObjectRef, field_manager: str) -> bool:
        """Drop ``field_manager``'s fields of the object: apply an empty body under it.

        Fields another manager (the engine's) also owns stay; the object is read first
        so that an object deleted meanwhile is not created again by the apply.

        Returns:
            False when the object is gone.
        """
        current = self.read(ref)
        if current is None:
            return False
        managers = {m.get("manager") for m in current["metadata"].get("managedFields") or []}
        if field_manager not in managers:
            return True
        body = {
            "apiVersion": current.get("apiVersion") or _API_VERSION[ref.kind],
            "kind": ref.kind,
            "metadata": {"name": ref.name, "namespace": ref.namespace},
        }
        self.apply(body, field_manager)
        return True

    def delete(self, ref: ObjectRef) -> None:
        """Delete the object; already gone is fine."""
        try:
            if ref.kind == "Deployment":
                self.kube.apps.delete_namespaced_deployment(ref.name, ref.namespace)
            else:
                self.kube.core.delete_namespaced_service_account(ref.name, ref.namespace)
        except Exception as exc:
            if status_of(exc) != 404:
                raise

    def managed_by(self, field_manager: str) -> list[ObjectRef]:
        """twc worker Deployments (and their ServiceAccounts) ``field_manager`` still
        owns fields of: what a daemon killed between an early apply and its ``up`` left."""
        found: list[ObjectRef] = []
        for dep in self._worker_deployments(strict=True):
            meta = dep.get("metadata") or {}
            managers = {m.get("manager") for m in meta.get("managedFields") or []}
            if field_manager in managers:
                ns, name = str(meta.get("namespace")), str(meta.get("name"))
                found += [ObjectRef("ServiceAccount", ns, name), ObjectRef("Deployment", ns, name)]
        return found

    def read(self, ref: ObjectRef) -> dict[str, Any] | None:
        """The object as the API returns it, or ``None`` when it does not exist."""
        try:
            if ref.kind == "Deployment":
                response = self.kube.apps.read_namespaced_deployment(
                    ref.name, ref.namespace, _preload_content=False
                )
            else:
                response = self.kube.core.read_namespaced_service_account(
                    ref.name, ref.namespace, _preload_content=False
                )
        except Exception as exc:
            if status_of(exc) == 404:
                return None
            raise
        data: dict[str, Any] = json.loads(response.data)
        return data
