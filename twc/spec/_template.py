"""A worker's ``template`` (a PodTemplateSpec) merged with the shorthand fields.

Shorthand fills what the template leaves unset (``env`` by name); the more specific level
wins; the same thing set twice at one level differently is an error; twc's own parts cannot
be set. Tenants' templates are also held to a Pod Security Standard.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, Final, Literal

from twc.spec._names import check_label_key, check_label_value
from twc.spec.labels import STACK_LABEL

WORKER_CONTAINER_NAME: Final = "worker"
RESERVED_POD_LABELS: Final = frozenset(
    {"app.kubernetes.io/name", "app.kubernetes.io/component", "app.kubernetes.io/managed-by"}
    | {"temporal.io/task-queue", "twc.temporal.io/worker", STACK_LABEL}
)
"""Pod labels twc sets: its Deployments select on them."""
RESERVED_POD_SPEC_FIELDS: Final = dict.fromkeys(
    ("serviceAccountName", "serviceAccount"),
    "twc creates a ServiceAccount per worker (named like it): give it annotations with "
    "serviceAccount.annotations",
)
"""Pod spec fields twc owns, with what to do instead."""
CONTAINER_SHORTHAND: Final = frozenset(
    {"image", "imagePullPolicy", "resources", "lifecycle", "env"}
)
"""Shorthand fields that land in the worker container (the others in the pod spec)."""


def worker_container_index(containers: Sequence[Any]) -> int | None:
    """Index of the container named ``worker``, else of the only one; else None."""
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
    what = "label" if labels else "annotation"
    reserved = RESERVED_POD_LABELS if labels else {"temporal.io/connection-spec-hash"}
    for key, item in value.items():
        at = f'{where}["{key}"]'
        if not isinstance(key, str):
            problems.append(f"{where}: keys must be strings")
            continue
        if key in reserved:
            problems.append(f"{at}: twc sets this {what} itself")
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
    """What breaks twc's own rules in a pod template, one ``<path>: ...`` line each."""
    problems = [
        f"{key}: unknown field (a pod template has metadata and spec)"
        for key in template
        if key not in ("metadata", "spec")
    ]
    metadata = template.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        problems.append("metadata: expected a mapping")
    elif metadata is not None:
        problems += [
            f"metadata.{key}: a pod template's metadata takes only labels and annotations "
            "(twc names the pods)"
            for key in metadata
            if key not in ("labels", "annotations")
        ]
        _string_map(metadata.get("labels"), "metadata.labels", problems, labels=True)
        _string_map(metadata.get("annotations"), "metadata.annotations", problems, labels=False)
    spec = template.get("spec")
    if spec is None or not isinstance(spec, Mapping):
        return problems if spec is None else [*problems, "spec: expected a mapping"]
    problems += [
        f"spec.{key}: {why}" for key, why in RESERVED_POD_SPEC_FIELDS.items() if key in spec
    ]
    containers = _named_items(spec.get("containers"), "spec.containers", "containers", problems)
    index = worker_container_index(containers)
    if index is None and len(containers) > 1:
        problems.append(
            f"spec.containers: name the worker container {WORKER_CONTAINER_NAME!r}: with "
            "several containers twc must know which one runs the worker"
        )
    if index is not None:
        at = f"spec.containers[{index}]"
        env = _named_items(containers[index].get("env"), f"{at}.env", "variables", [])
        problems += [
            f"{at}.env[{j}].name: {item.get('name')} is set by twc (from the connection and "
            "the worker); it may not be set here"
            for j, item in enumerate(env)
            if item.get("name") in reserved_env
        ]
    owned = [
        ("initContainers", "containers", "wait-for-temporal", ""),
        ("volumes", "volumes", "temporal-tls", " (the mTLS secret)"),
    ]
    for key, what, own, why in owned:
        items = _named_items(spec.get(key), f"spec.{key}", what, problems)
        problems += [
            f"spec.{key}[{j}].name: {own!r} is twc's own{why}"
            for j, item in enumerate(items)
            if item.get("name") == own
        ]
    return problems


def numbers_as_strings(value: object) -> object:
    """``value`` with its numbers as strings, as the API server stores quantities: YAML reads
    ``cpu: 2`` as a number, the shorthand keeps quantities as strings."""
    if isinstance(value, Mapping):
        return {k: numbers_as_strings(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [numbers_as_strings(v) for v in value]
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _short(value: object) -> str:
    text = repr(value) if isinstance(value, str) else f"{numbers_as_strings(value)}"
    return text if len(text) <= 80 else text[:77] + "..."


def same_level_conflicts(
    template: Mapping[str, Any] | None, shorthand: Mapping[str, Any]
) -> list[str]:
    """Settings given at one level both in ``template`` and ``shorthand`` with other values."""
    spec = template.get("spec") if template else None
    if not isinstance(spec, Mapping):
        return []
    containers = spec.get("containers")
    containers = containers if isinstance(containers, list) else []
    index = worker_container_index(containers)
    container = containers[index] if index is not None else None
    problems: list[str] = []
    for name, value in shorthand.items():
        if name in CONTAINER_SHORTHAND:
            where, target = f"template.spec.containers[{index}]", container
        else:
            where, target = "template.spec", spec
        if value is None or not isinstance(target, Mapping) or name not in target:
            continue
        if name != "env":
            if numbers_as_strings(target[name]) != numbers_as_strings(value):
                problems.append(
                    f"{where}.{name} ({_short(target[name])}) conflicts with {name} "
                    f"({_short(value)}): set it in one place"
                )
            continue
        entries = target["env"] if isinstance(target["env"], list) else []
        for j, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or entry.get("name") not in value:
                continue
            var = entry["name"]
            if set(entry) != {"name", "value"} or str(entry.get("value")) != value[var]:
                problems.append(
                    f"{where}.env[{j}] sets {var} and so does env.{var}: set it in one place"
                )
    return problems


def merge_pod_template(
    template: Mapping[str, Any] | None, shorthand: Mapping[str, Any], wins: Collection[str]
) -> dict[str, Any]:
    """``template`` with each shorthand value (None: nothing) merged in, always with a worker
    container: a value named in ``wins`` replaces the template's, the others fill its gaps."""
    out: dict[str, Any] = copy.deepcopy(dict(template)) if template else {}
    spec = out.setdefault("spec", {})
    containers = spec.setdefault("containers", [])
    index = worker_container_index(containers)
    if index is None:
        containers.insert(0, {"name": WORKER_CONTAINER_NAME})
        index = 0
    for name, value in shorthand.items():
        if value is None:
            continue
        target = containers[index] if name in CONTAINER_SHORTHAND else spec
        if name == "env":
            _merge_env(target, value, name in wins)
        elif name in wins or name not in target:
            target[name] = copy.deepcopy(value)
    return out


def _merge_env(container: dict[str, Any], env: Mapping[str, str], wins: bool) -> None:
    entries = list(container["env"]) if isinstance(container.get("env"), list) else []
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


PodSecurityLevel = Literal["restricted", "baseline", "privileged"]

_BASELINE_CAPS = frozenset(
    {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "SETFCAP"}
    | {"NET_BIND_SERVICE", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
)
_RESTRICTED_CAPS = frozenset({"NET_BIND_SERVICE"})
_RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "projected", "secret"}
    | {"persistentVolumeClaim"}
)
_SAFE_SYSCTLS = frozenset(
    {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies"}
    | {"net.ipv4.ip_unprivileged_port_start", "net.ipv4.ping_group_range"}
    | {"net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time"}
    | {"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _context_problems(ctx: Mapping[str, Any], restricted: bool) -> Iterator[tuple[str, str]]:
    caps = _map(ctx.get("capabilities")).get("add") or []
    allowed = _RESTRICTED_CAPS if restricted else _BASELINE_CAPS
    extra = sorted(str(c) for c in caps if str(c) not in allowed)
    seccomp, apparmor = (
        _map(ctx.get(k)).get("type") for k in ("seccompProfile", "appArmorProfile")
    )
    selinux = any(k in _map(ctx.get("seLinuxOptions")) for k in ("user", "role"))
    escalation = restricted and ctx.get("allowPrivilegeEscalation") is True
    checks = [
        (ctx.get("privileged") is True, "privileged", "privileged containers"),
        (bool(extra), "capabilities.add", f"capabilities {', '.join(extra)}"),
        (ctx.get("procMount", "Default") != "Default", "procMount", "an unmasked /proc"),
        (seccomp == "Unconfined", "seccompProfile.type", "an Unconfined seccomp profile"),
        (apparmor == "Unconfined", "appArmorProfile.type", "an Unconfined AppArmor profile"),
        (selinux, "seLinuxOptions", "a custom SELinux user or role"),
        (escalation, "allowPrivilegeEscalation", "privilege escalation"),
        (restricted and ctx.get("runAsNonRoot") is False, "runAsNonRoot", "running as root"),
        (restricted and ctx.get("runAsUser") == 0, "runAsUser", "running as root"),
    ]
    for bad, field, what in checks:
        if bad:
            yield field, what


def pod_security_problems(template: Mapping[str, Any], level: PodSecurityLevel) -> list[str]:
    """What ``template`` sets against the profile ``level``, one ``<path>: ...`` line each."""
    if level == "privileged":
        return []
    restricted = level == "restricted"
    spec = _map(template.get("spec"))
    found: list[tuple[str, str]] = [
        (f"spec.{key}", f"the host's {key[4:].lower()} namespace")
        for key in ("hostNetwork", "hostPID", "hostIPC")
        if spec.get(key) is True
    ]
    for i, volume in enumerate(spec.get("volumes") or []):
        kinds = sorted(set(_map(volume)) - {"name"})
        bad = [k for k in kinds if k == "hostPath" or (restricted and k not in _RESTRICTED_VOLUMES)]
        found.extend((f"spec.volumes[{i}].{k}", f"{k} volumes") for k in bad)
    sysctls = _map(spec.get("securityContext")).get("sysctls") or []
    for i, sysctl in enumerate(sysctls):
        if _map(sysctl).get("name") not in _SAFE_SYSCTLS:
            found.append((f"spec.securityContext.sysctls[{i}]", "unsafe sysctls"))
    contexts = [("spec.securityContext", _map(spec.get("securityContext")))]
    for section in ("initContainers", "containers", "ephemeralContainers"):
        items = spec.get(section)
        for i, item in enumerate(items if isinstance(items, list) else []):
            where, container = f"spec.{section}[{i}]", _map(item)
            ports = container.get("ports") or []
            found.extend(
                (f"{where}.ports[{j}].hostPort", "host ports")
                for j, port in enumerate(ports)
                if _map(port).get("hostPort")
            )
            contexts.append((f"{where}.securityContext", _map(container.get("securityContext"))))
    for where, ctx in contexts:
        found.extend(
            (f"{where}.{field}", what) for field, what in _context_problems(ctx, restricted)
        )
    return [
        f"{path}: {what} not allowed by the {level} Pod Security Standard" for path, what in found
    ]
