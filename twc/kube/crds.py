"""Installing twc's CRDs into a cluster without taking over anyone else's.

``connections.temporal.io`` is also the official worker controller's CRD. A CRD that
exists and does not carry twc's label (``app.kubernetes.io/managed-by: twc``) belongs to
someone else, most likely that controller: it is left exactly as it is (same
``resourceVersion``, same ``uid``) and twc uses it, since both serve the same
``temporal.io/v1alpha1`` Connection. twc's own CRDs are created or updated in place.

Moving twc's connection kinds from ``temporal.io/v1`` to ``v1alpha1`` is a clean switch:
the API server refuses to drop a version objects are stored at, so a twc-owned CRD whose
stored versions are not all in the new definition is deleted (with its objects) and
created again, and the outcome says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from twc.spec.crds import MANAGED_BY_LABEL

__all__ = ["CrdOutcome", "install_crds", "is_twc_crd"]

Action = Literal["created", "updated", "recreated", "kept"]


@dataclass(frozen=True, slots=True)
class CrdOutcome:
    """What installing one CRD did."""

    name: str
    """The CRD's name, e.g. ``connections.temporal.io``."""
    action: Action
    """``created``, ``updated``, ``recreated`` (a clean version switch) or ``kept``
    (someone else's CRD, left alone)."""
    note: str = ""
    """Why, for ``kept`` and ``recreated``; a warning when a kept CRD does not serve a
    version twc reads."""

    def __str__(self) -> str:
        return f"{self.name}: {self.action}" + (f" ({self.note})" if self.note else "")


def is_twc_crd(labels: Mapping[str, str] | None) -> bool:
    """Whether a CRD with these labels is twc's own."""
    return (labels or {}).get(MANAGED_BY_LABEL) == "twc"


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def install_crds(
    api_client: Any,
    crds: Iterable[Mapping[str, Any]],
    *,
    timeout: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[CrdOutcome]:
    """Create or update each of twc's CRDs, leaving CRDs that are not twc's alone.

    Args:
        api_client: A ``kubernetes.client.ApiClient``.
        crds: The CRDs to install (:func:`twc.spec.crds.all_crds` and the like).
        timeout: Seconds to wait for each created or updated CRD to be Established
            (and for a recreated one's old definition to go).
        clock: Monotonic time, for the waits.
        sleep: Pause between polls.

    Returns:
        One outcome per CRD, in order.

    Raises:
        kubernetes.client.ApiException: The API server refused a call.
        TimeoutError: A CRD was not Established (or not gone) in time.
    """
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api_client)
    outcomes: list[CrdOutcome] = []
    for crd in crds:
        name = str(crd["metadata"]["name"])
        body = dict(crd)
        try:
            current = ext.read_custom_resource_definition(name)
        except Exception as exc:
            if _status(exc) != 404:
                raise
            current = None
        wanted = {v["name"] for v in crd["spec"]["versions"]}
        if current is None:
            ext.create_custom_resource_definition(body)
            outcome = CrdOutcome(name, "created")
        elif not is_twc_crd(current.metadata.labels):
            served = {v.name for v in current.spec.versions or [] if v.served}
            missing = sorted(wanted - served)
            note = "not labelled as twc's (the official worker controller's?): left as it is"
            if missing:
                note += f"; it does not serve {', '.join(missing)}, which twc reads"
            outcomes.append(CrdOutcome(name, "kept", note))
            continue
        else:
            stored = set((current.status.stored_versions if current.status else None) or [])
            dropped = sorted(stored - wanted)
            if dropped:
                ext.delete_custom_resource_definition(name)
                _wait_gone(ext, name, timeout, clock, sleep)
                ext.create_custom_resource_definition(body)
                outcome = CrdOutcome(
                    name,
                    "recreated",
                    f"twc's {', '.join(dropped)} is gone: the CRD and its objects were "
                    f"deleted and it now serves {', '.join(sorted(wanted))}",
                )
            else:
                body["metadata"] = {
                    **crd["metadata"],
                    "resourceVersion": current.metadata.resource_version,
                }
                ext.replace_custom_resource_definition(name, body)
                outcome = CrdOutcome(name, "updated")
        _wait_established(ext, name, timeout, clock, sleep)
        outcomes.append(outcome)
    return outcomes


def _wait_gone(
    ext: Any, name: str, timeout: float, clock: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    deadline = clock() + timeout
    while clock() < deadline:
        try:
            ext.read_custom_resource_definition(name)
        except Exception as exc:
            if _status(exc) == 404:
                return
            raise
        sleep(0.2)
    raise TimeoutError(f"CRD {name} still exists {timeout:.0f} s after its deletion")


def _wait_established(
    ext: Any, name: str, timeout: float, clock: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    deadline = clock() + timeout
    while True:
        obj = ext.read_custom_resource_definition(name)
        conditions = (obj.status.conditions if obj.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        if clock() >= deadline:
            raise TimeoutError(f"CRD {name} not Established after {timeout:.0f} s")
        sleep(0.2)
