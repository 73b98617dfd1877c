"""A worker's ``template`` (a Kubernetes PodTemplateSpec) and the shorthand fields.

A worker may describe its pods with the official worker controller's ``template`` field,
with twc's shorthand fields (``image``, ``resources``, ``env``, ``nodeSelector``...), or
both. The rules, in one place:

* **The worker container** is the container named ``worker``, or the only container.
  A template with several containers and none named ``worker`` is rejected: twc would
  not know which one runs the worker.
* **Shorthand fills what the template leaves unset.** ``image: x`` next to a template
  whose worker container has no image sets it; a template value is never dropped.
  ``env`` merges by variable name.
* **The more specific level wins.** A worker's own fields beat ``defaults``, whichever
  form they take: a worker's ``image`` replaces the image of a template inherited from
  ``defaults``, and a worker's ``template`` keeps its image over ``defaults.image``.
  A worker's ``template`` replaces ``defaults.template`` whole, as every other field does.
* **A conflict is an error.** Setting one thing twice at the same level with different
  values (``image`` and the template's image, an ``env`` name in both) is rejected,
  naming both fields.
* **twc's own parts stay twc's.** The TEMPORAL_* and downward-API variables
  (:data:`~twc.spec.RESERVED_ENV_NAMES`) in the worker container, twc's labels, the
  connection annotation, the mTLS volume, the wait-for-frontend init container and the
  ServiceAccount (twc creates one per worker) cannot be set in a template.

Everything else in the template (command and args, ``valueFrom`` and ``envFrom``,
volumes and mounts, probes, ports, security contexts, labels and annotations, priority
class, topology spread, sidecars and native sidecars) is kept as written; the API server
validates it (``twc preview`` runs a server-side dry run of each changed Deployment).

Pure, like the rest of :mod:`twc.spec`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Any, Final

from twc.spec._names import check_label_key, check_label_value
from twc.spec.labels import STACK_LABEL

__all__ = [
    "CONTAINER_SHORTHAND",
    "POD_SHORTHAND",
    "RESERVED_ANNOTATIONS",
    "RESERVED_INIT_CONTAINERS",
    "RESERVED_POD_LABELS",
    "RESERVED_POD_SPEC_FIELDS",
    "RESERVED_VOLUMES",
    "WORKER_CONTAINER_NAME",
    "Level",
    "check_pod_template",
    "merge_pod_template",
    "same_level_conflicts",
    "worker_container_index",
]

WORKER_CONTAINER_NAME: Final = "worker"
"""Name that marks the worker container among several."""

RESERVED_POD_LABELS: Final = frozenset(
    {
        "app.kubernetes.io/name",
        "app.kubernetes.io/component",
        "app.kubernetes.io/managed-by",
        "temporal.io/task-queue",
        "twc.temporal.io/worker",
        STACK_LABEL,
    }
)
"""Pod labels twc sets: its Deployments select on them, so a template may not."""
RESERVED_ANNOTATIONS: Final = frozenset({"temporal.io/connection-spec-hash"})
"""Pod annotations twc sets (the connection fingerprint that rolls pods)."""
RESERVED_VOLUMES: Final = frozenset({"temporal-tls"})
"""Pod volumes twc adds (the connection's mTLS secret)."""
RESERVED_INIT_CONTAINERS: Final = frozenset({"wait-for-temporal"})
"""Init containers twc adds (it waits until the Temporal frontend accepts connections)."""
RESERVED_POD_SPEC_FIELDS: Final = {
    "serviceAccountName": "twc creates a ServiceAccount per worker (named like it): "
    "give it annotations with serviceAccount.annotations",
    "serviceAccount": "twc creates a ServiceAccount per worker (named like it): "
    "give it annotations with serviceAccount.annotations",
}
"""Pod spec fields twc owns, with what to do instead."""

CONTAINER_SHORTHAND: Final = {
    "image": "image",
    "imagePullPolicy": "imagePullPolicy",
    "resources": "resources",
    "lifecycle": "lifecycle",
    "env": "env",
}
"""Shorthand fields that land in the worker container: fleet name → container field."""
POD_SHORTHAND: Final = {
    "nodeSelector": "nodeSelector",
    "affinity": "affinity",
    "tolerations": "tolerations",
    "terminationGracePeriodSeconds": "terminationGracePeriodSeconds",
}
"""Shorthand fields that land in the pod spec: fleet name → pod spec field."""

_TEMPLATE_KEYS = frozenset({"metadata", "spec"})
_METADATA_KEYS = frozenset({"labels", "annotations"})


class Level(IntEnum):
    """Where a setting comes from; a higher level is more specific and wins."""

    NONE = 0
    """Not set anywhere."""
    DEFAULTS = 1
    """From the fleet's ``defaults``."""
    WORKER = 2
    """From the worker itself."""


def worker_container_index(containers: Sequence[Any]) -> int | None:
    """Index of the worker container: the one named ``worker``, else the only one.

    Returns:
        The index, or None when there is no container or several with none named
        ``worker``.
    """
    for index, container in enumerate(containers):
        if isinstance(container, Mapping) and container.get("name") == WORKER_CONTAINER_NAME:
            return index
    return 0 if len(containers) == 1 else None


def _named_items(
    items: object, where: str, what: str, problems: list[str]
) -> list[Mapping[str, Any]]:
    """The mappings of a list of named objects (containers, volumes, env), checked."""
    if items is None:
        return []
    if not isinstance(items, list):
        problems.append(f"{where}: expected a list of {what}")
        return []
    out: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        at = f"{where}[{index}]"
        if not isinstance(item, Mapping):
            problems.append(f"{at}: expected a mapping")
            continue
        name = item.get("name")
        if not isinstance(name, str) or not name:
            problems.append(f"{at}.name: every {what[:-1]} needs a name")
        elif name in seen:
            problems.append(f"{at}.name: duplicate {what[:-1]} name {name!r}")
        else:
            seen.add(name)
        out.append(item)
    return out


def _string_map(value: object, where: str, problems: list[str], *, labels: bool) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping):
        problems.append(f"{where}: expected a mapping of strings")
        return
    reserved = RESERVED_POD_LABELS if labels else RESERVED_ANNOTATIONS
    for key, item in value.items():
        at = f'{where}["{key}"]'
        if not isinstance(key, str):
            problems.append(f"{where}: keys must be strings")
            continue
        if key in reserved:
            problems.append(f"{at}: twc sets this {'label' if labels else 'annotation'} itself")
            continue
        try:
            check_label_key(key)
        except ValueError as err:
            problems.append(f"{at}: {err}")
        if not isinstance(item, str):
            problems.append(f"{at}: expected a string (quote numbers and booleans)")
        elif labels:
            try:
                check_label_value(item)
            except ValueError as err:
                problems.append(f"{at}: {err}")


def check_pod_template(template: Mapping[str, Any], reserved_env: frozenset[str]) -> list[str]:
    """What is wrong with a user's pod template, as far as twc is concerned.

    Only twc's own rules are checked (the worker container, names twc reserves, the
    envelope); whether Kubernetes accepts the pod is the API server's to say.

    Args:
        template: The ``template`` value as written.
        reserved_env: Variable names the worker container may not set.

    Returns:
        One message per problem, each starting with the field path inside the template
        (``spec.containers[0].env[2].name: ...``); empty when the template is fine.
    """
    problems: list[str] = []
    for key in template:
        if key not in _TEMPLATE_KEYS:
            problems.append(f"{key}: unknown field (a pod template has metadata and spec)")
    metadata = template.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            problems.append("metadata: expected a mapping")
        else:
            for key in metadata:
                if key not in _METADATA_KEYS:
                    problems.append(
                        f"metadata.{key}: a pod template's metadata takes only labels and "
                        "annotations (twc names the pods)"
                    )
            _string_map(metadata.get("labels"), "metadata.labels", problems, labels=True)
            _string_map(metadata.get("annotations"), "metadata.annotations", problems, labels=False)
    spec = template.get("spec")
    if spec is None:
        return problems
    if not isinstance(spec, Mapping):
        problems.append("spec: expected a mapping")
        return problems
    for key, why in RESERVED_POD_SPEC_FIELDS.items():
        if key in spec:
            problems.append(f"spec.{key}: {why}")
    containers = _named_items(spec.get("containers"), "spec.containers", "containers", problems)
    index = worker_container_index(containers)
    if index is None and len(containers) > 1:
        problems.append(
            f"spec.containers: name the worker container {WORKER_CONTAINER_NAME!r}: with "
            "several containers twc must know which one runs the worker"
        )
    if index is not None:
        worker = containers[index]
        at = f"spec.containers[{index}]"
        for j, item in enumerate(_named_items(worker.get("env"), f"{at}.env", "variables", [])):
            if item.get("name") in reserved_env:
                problems.append(
                    f"{at}.env[{j}].name: {item.get('name')} is set by twc (from the "
                    "connection and the worker); it may not be set here"
                )
    inits = _named_items(spec.get("initContainers"), "spec.initContainers", "containers", problems)
    for j, item in enumerate(inits):
        if item.get("name") in RESERVED_INIT_CONTAINERS:
            problems.append(f"spec.initContainers[{j}].name: {item.get('name')!r} is twc's own")
    for j, item in enumerate(
        _named_items(spec.get("volumes"), "spec.volumes", "volumes", problems)
    ):
        if item.get("name") in RESERVED_VOLUMES:
            problems.append(
                f"spec.volumes[{j}].name: {item.get('name')!r} is twc's own (the mTLS secret)"
            )
    return problems


def _normal(value: object) -> object:
    # YAML reads `cpu: 2` as a number, the shorthand keeps quantities as strings: compare
    # what the API server would store, not how it was typed.
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _template_parts(
    template: Mapping[str, Any] | None,
) -> tuple[Mapping[str, Any], Mapping[str, Any] | None, int | None]:
    """(pod spec, worker container, its index) of a template, tolerating bad shapes."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(spec, Mapping):
        return {}, None, None
    containers = spec.get("containers")
    if not isinstance(containers, list):
        return spec, None, None
    index = worker_container_index(containers)
    if index is None or not isinstance(containers[index], Mapping):
        return spec, None, None
    return spec, containers[index], index


def same_level_conflicts(
    template: Mapping[str, Any] | None, shorthand: Mapping[str, Any]
) -> list[str]:
    """Settings given twice at one level (one worker, or ``defaults``) with different values.

    Args:
        template: That level's ``template``.
        shorthand: That level's shorthand values in Kubernetes form, keyed by their
            fleet-file names (``image``, ``env``, ``nodeSelector``...); None or absent
            when unset.

    Returns:
        One message per conflict, naming the template's field and the shorthand field.
    """
    if not template:
        return []
    spec, container, index = _template_parts(template)
    problems: list[str] = []
    for name, value in shorthand.items():
        if value is None:
            continue
        if name in CONTAINER_SHORTHAND:
            if container is None:
                continue
            where = f"template.spec.containers[{index}]"
            target: Mapping[str, Any] = container
            key = CONTAINER_SHORTHAND[name]
        elif name in POD_SHORTHAND:
            where, target, key = "template.spec", spec, POD_SHORTHAND[name]
        else:  # pragma: no cover - callers pass only the fields above
            raise KeyError(name)
        if key not in target:
            continue
        if name == "env":
            entries = target.get("env")
            for j, entry in enumerate(entries if isinstance(entries, list) else []):
                if not isinstance(entry, Mapping) or entry.get("name") not in value:
                    continue
                var = entry["name"]
                if set(entry) != {"name", "value"} or str(entry.get("value")) != value[var]:
                    problems.append(
                        f"{where}.env[{j}] sets {var} and so does env.{var}: set it in one place"
                    )
            continue
        if _normal(target[key]) != _normal(value):
            problems.append(
                f"{where}.{key} ({_short(target[key])}) conflicts with {name} "
                f"({_short(value)}): set it in one place"
            )
    return problems


def _short(value: object) -> str:
    text = repr(value) if isinstance(value, str) else f"{_normal(value)}"
    return text if len(text) <= 80 else text[:77] + "..."


def merge_pod_template(
    template: Mapping[str, Any] | None,
    template_level: Level,
    shorthand: Mapping[str, tuple[Level, Any]],
) -> dict[str, Any]:
    """The user's side of the worker's pod: the template with the shorthand merged in.

    Args:
        template: The template in effect (the worker's, else the defaults'), or None.
        template_level: Where it comes from.
        shorthand: Each shorthand value in Kubernetes form with the level it comes from
            (``(Level.NONE, None)`` or absent when unset).

    Returns:
        A new PodTemplateSpec dict with a ``spec.containers`` list holding the worker
        container (added, named ``worker``, when the template has none). twc's own
        env, labels, volumes and init container are not in it: the builders add them.
    """
    out: dict[str, Any] = copy.deepcopy(dict(template)) if template else {}
    spec = out.setdefault("spec", {})
    containers = spec.setdefault("containers", [])
    index = worker_container_index(containers)
    if index is None:
        containers.insert(0, {"name": WORKER_CONTAINER_NAME})
        index = 0
    container = containers[index]
    for name, (level, value) in shorthand.items():
        if level is Level.NONE or value is None:
            continue
        if name in CONTAINER_SHORTHAND:
            target, key = container, CONTAINER_SHORTHAND[name]
        else:
            target, key = spec, POD_SHORTHAND[name]
        wins = level > template_level
        if name == "env":
            _merge_env(target, value, wins)
        elif wins or key not in target:
            target[key] = copy.deepcopy(value)
    return out


def _merge_env(container: dict[str, Any], env: Mapping[str, str], wins: bool) -> None:
    entries = container.get("env")
    entries = list(entries) if isinstance(entries, list) else []
    position = {
        e.get("name"): i for i, e in enumerate(entries) if isinstance(e, Mapping) and e.get("name")
    }
    for var in sorted(env):
        entry = {"name": var, "value": env[var]}
        if var not in position:
            entries.append(entry)
        elif wins:
            entries[position[var]] = entry
    if entries:
        container["env"] = entries
