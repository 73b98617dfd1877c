"""Installing twc's CRDs without taking over anyone else's: a CRD without twc's label is
left as it is; twc's are created or updated, or deleted (with their objects) and created
again when a stored version is dropped (the API server refuses that in place)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from twc.kube.client import unless_404
from twc.spec.crds import MANAGED_BY_LABEL

Action = Literal["created", "updated", "recreated", "kept"]
ESTABLISHED_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class CrdOutcome:
    """What installing one CRD did."""

    name: str
    action: Action
    note: str = ""  # why, for kept and recreated

    def __str__(self) -> str:
        return f"{self.name}: {self.action}" + (f" ({self.note})" if self.note else "")


def is_twc_crd(labels: Mapping[str, str] | None) -> bool:
    """Whether a CRD with these labels is twc's own."""
    return (labels or {}).get(MANAGED_BY_LABEL) == "twc"


def install_crds(api_client: Any, crds: Iterable[Mapping[str, Any]]) -> list[CrdOutcome]:
    """Create or update each of twc's CRDs, leaving others' alone, each waited up to
    :data:`ESTABLISHED_TIMEOUT` seconds to be Established (TimeoutError otherwise)."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api_client)
    outcomes: list[CrdOutcome] = []
    for crd in crds:
        name = str(crd["metadata"]["name"])
        body = dict(crd)
        current = unless_404(ext.read_custom_resource_definition, name)
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
                _wait(partial(_gone, ext, name), f"CRD {name} deleted")
                ext.create_custom_resource_definition(body)
                note = (
                    f"twc's {', '.join(dropped)} is gone: the CRD and its objects were "
                    f"deleted and it now serves {', '.join(sorted(wanted))}"
                )
                outcome = CrdOutcome(name, "recreated", note)
            else:
                version = current.metadata.resource_version
                body["metadata"] = {**crd["metadata"], "resourceVersion": version}
                ext.replace_custom_resource_definition(name, body)
                outcome = CrdOutcome(name, "updated")
        _wait(partial(_established, ext, name), f"CRD {name} Established")
        outcomes.append(outcome)
    return outcomes


def _gone(ext: Any, name: str) -> bool:
    return unless_404(ext.read_custom_resource_definition, name) is None


def _established(ext: Any, name: str) -> bool:
    obj = ext.read_custom_resource_definition(name)
    conditions = (obj.status.conditions if obj.status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def _wait(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + ESTABLISHED_TIMEOUT
    while not done():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not after {ESTABLISHED_TIMEOUT:.0f} s")
        time.sleep(0.2)
