"""Worker Deployments, their ServiceAccounts and credential Secrets, as the daemon reads
and writes them outside the engine (only calls its ClusterRole grants); the versions of
versioned workers as the cluster runs them (Deployments labelled with worker and build ID,
annotated with their version spec, always read back), and gate inputs. Autoscaled workers'
replicas are a forced server-side apply of a ``Scale`` under :data:`AUTOSCALER_FIELD_MANAGER`,
whose ownership in ``managedFields`` keeps the engine's apply off the field and tells the
daemon which counts it claimed (:func:`scale_owner_of`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from twc.builders import (
    COMPONENT_WORKER,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_STACK,
    LABEL_WORKER,
    MANAGED_BY,
)
from twc.desired import QUEUE_PLURAL, object_key
from twc.kube.client import KubeClient, read_json, tolerating, unless_404
from twc.rollout import (
    BUILD_ID_LABEL,
    TARGET_ANNOTATION,
    VERSION_ANNOTATION,
    VersionDeployment,
)
from twc.spec import QUEUE_API_VERSION, QUEUE_KIND, label_value
from twc.spec.labels import owner_stack

WORKER_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_WORKER}"
VERSION_SELECTOR = f"{WORKER_SELECTOR},{BUILD_ID_LABEL}"
AUTOSCALER_FIELD_MANAGER = "twc-autoscaler"


def stack_selector(stack: str) -> str:
    """Labels of the worker Deployments of one stack."""
    return f"{WORKER_SELECTOR},{LABEL_STACK}={label_value(owner_stack(stack))}"


_TYPED = {"Deployment": ("apps", "deployment"), "ServiceAccount": ("core", "service_account")}
_APPLY = "application/apply-patch+yaml"
_OWNED = {
    **_TYPED,
    "StatefulSet": ("apps", "stateful_set"),
    "Service": ("core", "service"),
    "Secret": ("core", "secret"),
    "PodDisruptionBudget": ("policy", "pod_disruption_budget"),
}


_BY_PATH = {
    QUEUE_KIND: (*QUEUE_API_VERSION.split("/"), QUEUE_PLURAL),
    "HorizontalPodAutoscaler": ("autoscaling", "v2", "horizontalpodautoscalers"),
    "ScaledObject": ("keda.sh", "v1alpha1", "scaledobjects"),
}
"""Kinds read by group, version and plural: kmsvc Queues and per-version autoscalers."""


def read_object(kube: KubeClient, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """One object of a kind twc creates (a kmsvc ``Queue`` too), or ``None`` when absent."""
    if kind in _BY_PATH:
        group, version, plural = _BY_PATH[kind]
        get = kube.custom.get_namespaced_custom_object
        found = unless_404(get, group, version, namespace, plural, name)
        return dict(found) if found is not None else None
    api, resource = _OWNED[kind]
    return read_json(getattr(getattr(kube, api), f"read_namespaced_{resource}"), name, namespace)


@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """One object of a kind twc creates (:func:`read_object`); a worker's Deployment and
    ServiceAccount are named like the worker."""

    kind: str
    namespace: str
    name: str

    @property
    def worker(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def ref_of(obj: Mapping[str, Any]) -> ObjectRef:
    meta = obj["metadata"]
    return ObjectRef(str(obj["kind"]), str(meta["namespace"]), str(meta["name"]))


def read_secret_data(kube: KubeClient, namespace: str, name: str) -> dict[str, bytes]:
    """A Secret's decoded data (LookupError when it does not exist)."""
    secret = read_json(kube.core.read_namespaced_secret, name, namespace)
    if secret is None:
        raise LookupError(f"secret {namespace}/{name} not found")
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def ensure_namespace(kube: KubeClient, name: str) -> None:
    """Create a namespace unless it exists."""
    with tolerating(409):
        kube.core.create_namespace({"metadata": {"name": name}})


def read_deployment(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """A Deployment as the API returns it (camelCase JSON), or ``None`` when absent."""
    return read_json(kube.apps.read_namespaced_deployment, name, namespace)


@dataclass(frozen=True, slots=True)
class ObservedVersion:
    """One version's Deployment, as read from the cluster."""

    deployment: VersionDeployment
    spec: dict[str, Any] | None  # None when missing or unreadable
    target: bool  # the target when last applied


def parse_versions(items: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, ObservedVersion]]:
    """Per worker key (``<ns>/<worker>``), per build ID, its version Deployment."""
    out: dict[str, dict[str, ObservedVersion]] = {}
    for dep in items:
        meta = dep.get("metadata") or {}
        labels = meta.get("labels") or {}
        build, worker = labels.get(BUILD_ID_LABEL), labels.get(LABEL_WORKER)
        if not build or not worker:
            continue
        annotations = meta.get("annotations") or {}
        try:
            spec = json.loads(annotations.get(VERSION_ANNOTATION) or "null")
        except ValueError:
            spec = None
        replicas = (dep.get("spec") or {}).get("replicas")
        ready = int((dep.get("status") or {}).get("readyReplicas") or 0)
        name, count = str(meta.get("name")), int(1 if replicas is None else replicas)
        out.setdefault(f"{meta.get('namespace')}/{worker}", {})[str(build)] = ObservedVersion(
            VersionDeployment(str(build), name, count, ready),
            spec if isinstance(spec, dict) else None,
            annotations.get(TARGET_ANNOTATION) == "true",
        )
    return out


def list_json(call: Callable[..., Any], selector: str) -> list[dict[str, Any]]:
    """A typed ``list_*`` call's objects matching ``selector``, as the API's own JSON."""
    response = call(label_selector=selector, _preload_content=False)
    return [d for d in json.loads(response.data).get("items") or [] if isinstance(d, dict)]


def versions(kube: KubeClient) -> dict[str, dict[str, ObservedVersion]]:
    """Every version Deployment, per worker and build ID (raises when the list fails)."""
    return parse_versions(list_json(kube.apps.list_deployment_for_all_namespaces, VERSION_SELECTOR))


def read_gate_input(kube: KubeClient, namespace: str, source: Mapping[str, Any]) -> Any:
    """A gate's ``inputFrom``: the JSON in a ConfigMap or Secret key (LookupError when
    missing and not ``optional``; ValueError when not JSON)."""
    ref = source.get("configMapKeyRef") or source.get("secretKeyRef") or {}
    name, key = str(ref.get("name", "")), str(ref.get("key", ""))
    secret = "secretKeyRef" in source
    what = f"{'Secret' if secret else 'ConfigMap'} {namespace}/{name} key {key!r}"
    read = kube.core.read_namespaced_secret if secret else kube.core.read_namespaced_config_map
    obj = read_json(read, name, namespace) or {}
    raw = None if secret else (obj.get("data") or {}).get(key)
    encoded = (obj.get("data") if secret else obj.get("binaryData")) or {}
    if raw is None and key in encoded:
        raw = base64.b64decode(encoded[key]).decode()
    if raw is None:
        if ref.get("optional"):
            return None
        raise LookupError(f"gate input {what} not found")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"gate input {what} is not JSON: {exc}") from exc


_DEPLOYMENT_LABELS = (LABEL_STACK, LABEL_WORKER, BUILD_ID_LABEL)


def scale_owner_of(deployment: Mapping[str, Any]) -> list[str]:
    """The field managers that own a Deployment's ``spec.replicas`` (usually one)."""
    entries = (deployment.get("metadata") or {}).get("managedFields") or ()
    return sorted(
        {
            str(entry.get("manager"))
            for entry in entries
            if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
        }
    )


def deployment_kept(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the daemon keeps of a worker Deployment: names, labels, replicas, owners."""
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
    """``spec.replicas`` per worker of :func:`deployment_kept` Deployments (a versioned
    worker's summed: a new version is no deletion of the old)."""
    out: dict[str, int] = {}
    for key, dep in found.items():
        meta = dep["metadata"]
        labels = meta.get("labels") or {}
        count = _replicas(dep)
        worker = labels.get(LABEL_WORKER)
        if labels.get(BUILD_ID_LABEL) and worker:
            versioned = f"{meta.get('namespace')}/{worker}"
            out[versioned] = out.get(versioned, 0) + count
        else:
            out[key] = count
    return out


def worker_deployments(found: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """``(spec.replicas, status.readyReplicas)`` per :func:`deployment_kept` Deployment."""
    return {key: (_replicas(dep), int(dep["readyReplicas"] or 0)) for key, dep in found.items()}


def _replicas(dep: Mapping[str, Any]) -> int:
    return int(1 if dep["replicas"] is None else dep["replicas"])


def of_stack(dep: Mapping[str, Any], label: str) -> bool:
    """Whether a worker Deployment's stack label is ``label``, or it has none."""
    return ((dep.get("metadata") or {}).get("labels") or {}).get(LABEL_STACK) in (label, None)


class Workloads:
    """Worker Deployments and ServiceAccounts of one stack in one cluster."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        stack: str | None = None,
        namespaces: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        """Objects of ``stack`` (``None``: every worker's; reads also see unlabelled ones)
        in ``namespaces()`` (``None``: all), read at each list."""
        self.kube = kube
        self.stack = stack
        self.namespaces = namespaces

    def _worker_deployments(self, *, strict: bool = False) -> list[dict[str, Any]]:
        selector = WORKER_SELECTOR
        if self.stack is not None and strict:
            selector = stack_selector(self.stack)
        apps = self.kube.apps
        if self.namespaces is None:
            calls = [partial(apps.list_deployment_for_all_namespaces)]
        else:
            calls = [partial(apps.list_namespaced_deployment, ns) for ns in self.namespaces()]
        found = [dep for call in calls for dep in list_json(call, selector)]
        if self.stack is None:
            return found
        ours = label_value(owner_stack(self.stack))
        return [d for d in found if of_stack(d, ours)]

    def worker_replicas(self) -> dict[str, int]:
        found = self._worker_deployments()
        return worker_replicas({object_key(d): deployment_kept(d) for d in found})

    def read_secret(self, namespace: str, name: str) -> dict[str, bytes]:
        return read_secret_data(self.kube, namespace, name)

    def _call(self, verb: str, kind: str) -> Callable[..., Any]:
        api, resource = _TYPED[kind]
        return getattr(getattr(self.kube, api), f"{verb}_namespaced_{resource}")  # type: ignore[no-any-return]

    def apply(self, obj: Mapping[str, Any], field_manager: str) -> None:
        """Server-side apply a worker's Deployment or ServiceAccount (never forced)."""
        patch, meta = self._call("patch", obj["kind"]), obj["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        patch(name, namespace, dict(obj), field_manager=field_manager, _content_type=_APPLY)

    def exists(self, ref: ObjectRef) -> bool:
        return self.read(ref) is not None

    def release(self, ref: ObjectRef, field_manager: str) -> bool:
        """Drop ``field_manager``'s fields (an empty apply); False when the object is gone."""
        current = self.read(ref)
        if current is None:
            return False
        managers = {m.get("manager") for m in current["metadata"].get("managedFields") or []}
        if field_manager not in managers:
            return True
        body = {
            "apiVersion": current["apiVersion"],  # the API server names it in every answer
            "kind": ref.kind,
            "metadata": {"name": ref.name, "namespace": ref.namespace},
        }
        self.apply(body, field_manager)
        return True

    def delete(self, ref: ObjectRef) -> None:
        """Delete the object; already gone is fine."""
        with tolerating(404):
            self._call("delete", ref.kind)(ref.name, ref.namespace)

    def managed_by(self, field_manager: str) -> list[ObjectRef]:
        """This stack's worker objects ``field_manager`` still owns fields of."""
        found: list[ObjectRef] = []
        for dep in self._worker_deployments(strict=True):
            meta = dep.get("metadata") or {}
            managers = {m.get("manager") for m in meta.get("managedFields") or []}
            if field_manager in managers:
                ns, name = str(meta.get("namespace")), str(meta.get("name"))
                found += [ObjectRef("ServiceAccount", ns, name), ObjectRef("Deployment", ns, name)]
        return found

    def read(self, ref: ObjectRef) -> dict[str, Any] | None:
        return read_object(self.kube, ref.kind, ref.namespace, ref.name)


class ReplicaScaler:
    """Writes worker replicas through the scale subresource."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Apply ``replicas`` to the Deployment (raises when gone or refused)."""
        body = {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": int(replicas)},
        }
        self.kube.apps.patch_namespaced_deployment_scale(
            name,
            namespace,
            body,
            field_manager=AUTOSCALER_FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
