"""The Pod Security Standards' profiles, checked on a worker's pod template.

Workers that come from a tenant's objects (a TemporalWorker object, a labelled Queue)
run in the tenant's namespace, so their pods are held to the ``restricted`` profile
unless the fleet file (the platform team's) allows more (``podSecurity``). The check
refuses what a template *sets* against the profile; fields the profile wants set
(``runAsNonRoot: true``, a seccomp profile, ``drop: [ALL]``) are left to the
namespace's Pod Security Admission, which the cluster enforces at pod creation.

Pure, like the rest of :mod:`twc.spec`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

__all__ = ["PodSecurityLevel", "pod_security_problems"]

PodSecurityLevel = Literal["restricted", "baseline", "privileged"]
"""A Pod Security Standards profile."""

_BASELINE_CAPS = frozenset(
    [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ]
)
_RESTRICTED_CAPS = frozenset({"NET_BIND_SERVICE"})
_RESTRICTED_VOLUMES = frozenset(
    [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ]
)
_SAFE_SYSCTLS = frozenset(
    [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    ]
)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for section in ("initContainers", "containers", "ephemeralContainers"):
        items = spec.get(section)
        for i, container in enumerate(items if isinstance(items, list) else []):
            yield f"spec.{section}[{i}]", _map(container)


def _context_problems(ctx: Mapping[str, Any], restricted: bool) -> Iterator[tuple[str, str]]:
    caps = _map(ctx.get("capabilities")).get("add") or []
    allowed = _RESTRICTED_CAPS if restricted else _BASELINE_CAPS
    extra = sorted(str(c) for c in caps if str(c) not in allowed)
    checks: list[tuple[bool, str, str]] = [
        (ctx.get("privileged") is True, "privileged", "privileged containers"),
        (bool(extra), "capabilities.add", f"capabilities {', '.join(extra)}"),
        (ctx.get("procMount", "Default") != "Default", "procMount", "an unmasked /proc"),
        (
            _map(ctx.get("seccompProfile")).get("type") == "Unconfined",
            "seccompProfile.type",
            "an Unconfined seccomp profile",
        ),
        (
            _map(ctx.get("appArmorProfile")).get("type") == "Unconfined",
            "appArmorProfile.type",
            "an Unconfined AppArmor profile",
        ),
        (
            any(k in _map(ctx.get("seLinuxOptions")) for k in ("user", "role")),
            "seLinuxOptions",
            "a custom SELinux user or role",
        ),
        (
            restricted and ctx.get("allowPrivilegeEscalation") is True,
            "allowPrivilegeEscalation",
            "privilege escalation",
        ),
        (restricted and ctx.get("runAsNonRoot") is False, "runAsNonRoot", "running as root"),
        (restricted and ctx.get("runAsUser") == 0, "runAsUser", "running as root"),
    ]
    for bad, field, what in checks:
        if bad:
            yield field, what


def pod_security_problems(template: Mapping[str, Any], level: PodSecurityLevel) -> list[str]:
    """What ``template`` (a PodTemplateSpec) sets against the profile ``level``.

    Args:
        template: The pod template.
        level: The profile to hold it to; ``privileged`` allows everything.

    Returns:
        One ``<field path>: ...`` line per problem; empty when the template fits.
    """
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
    for where, container in _containers(spec):
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
