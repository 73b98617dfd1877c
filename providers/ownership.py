"""``ObjectOwnership``: twc never takes over an object it did not create, nor deletes more of a kind
at once than the deletion guard allows.

``objects`` maps each owner (a worker, a connection's users in one namespace, ``""`` for the fleet's
Queue objects) to what it creates, ``Kind namespace/name``. ``check`` refuses new ones that exist
and twc did not create for this stack (``ObjectExists``, :func:`twc.builders.foreign_owner`), and a
run deleting beyond the share (:func:`twc.desired.deletions_beyond_share`; ``DeletionsHeld``) until
``twc approve`` names that set on the stack's record (a real run puts it there; the run it lets
through spends it) or :data:`CONFIRM_ENV` is set (``twc up --yes``). Unjudgeable deletions hold.
"""

from __future__ import annotations

import os
from typing import Any

from pulumi import Input, ResourceOptions, dynamic
from pulumi.runtime import is_dry_run

from twc.desired import deletion_digest, deletions_beyond_share, object_groups

OBJECT_EXISTS = "ObjectExists"
"""The reason of a refused adoption."""
DELETIONS_HELD = "DeletionsHeld"
"""The reason of a run refused for deleting beyond the share."""
CONFIRM_ENV = "TWC_CONFIRM_DELETIONS"
"""Set in the engine's environment (``twc up --yes``): deletions beyond the share go."""


def _read(kube: Any, entry: str) -> dict[str, Any] | None:
    from twc.kube.workloads import read_object

    kind, _, key = entry.partition(" ")
    namespace, _, name = key.partition("/")
    return read_object(kube, kind, namespace, name)


def _foreign(kube: Any, stack: str, objects: list[str]) -> str | None:
    from twc.builders import foreign_owner

    taken = [
        f"{entry} exists and was {why}"
        for entry in objects
        if (obj := _read(kube, entry)) is not None and (why := foreign_owner(obj, stack))
    ]
    return (
        f"{OBJECT_EXISTS}: {'; '.join(taken)}; twc does not take over objects it did not "
        "create: rename the worker or queue, or delete or relabel the object"
        if taken
        else None
    )


def _held(kube: Any, olds: dict[str, Any], news: dict[str, Any]) -> str | None:
    """Why the run is refused for its deletions, or ``None`` when they may go."""
    from twc.kube.record import CONTROL_NAMESPACE, HeldRecord, record_for_stack

    held, reason = deletions_beyond_share(olds["objects"], news, lambda o: bool(_read(kube, o)))
    if not held or os.environ.get(CONFIRM_ENV):
        return None
    stack, digest = str(news["stack"]), deletion_digest(held)
    config = {CONTROL_NAMESPACE: news.get("controlNamespace") or ""}
    record = record_for_stack(kube.core, stack, config)
    approved = record.approved() == digest
    if not news["preview"]:  # an approval is spent by the run it lets through
        record.publish_held(None if approved else HeldRecord(digest, tuple(held), reason))
    if approved:
        return None
    return (
        f"{DELETIONS_HELD}: {reason}: {', '.join(held)}; nothing was applied. To delete "
        f"them: `twc up --stack {stack} --yes`, or `twc approve --stack {stack}` "
        f"(approves {digest}) and apply again"
    )


class ObjectOwnershipProvider(dynamic.ResourceProvider):
    """Dynamic provider behind :class:`ObjectOwnership`."""

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.CheckResult:
        before = object_groups(olds.get("objects"))
        added = sorted(
            set().union(*object_groups(news["objects"]).values()).difference(*before.values())
        )
        beyond = bool(olds.get("objects")) and bool(
            deletions_beyond_share(olds["objects"], news, None)[0]
        )
        if not added and not beyond:
            return dynamic.CheckResult(news, [])
        from twc.kube.client import kube_client

        with kube_client() as kube:
            failure = _foreign(kube, str(news["stack"]), added)
            try:
                failure = failure or (_held(kube, olds, news) if beyond else None)
            except Exception as exc:  # noqa: BLE001 - a guard that cannot judge holds
                failure = f"{DELETIONS_HELD}: cannot tell if this run's deletions may go ({exc})"
        return dynamic.CheckResult(
            news, [dynamic.CheckFailure("objects", failure)] if failure else []
        )

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(id_="ownership", outs=dict(props))

    def diff(self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]) -> dynamic.DiffResult:
        # Nothing outside ever changes: a "same" step records the new list anyway.
        return dynamic.DiffResult(changes=False, replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult(outs=dict(news))

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        inputs = {"stack": props.get("stack"), "objects": props.get("objects")}
        return dynamic.ReadResult(id_=id_, outs=dict(props), inputs=inputs)


class ObjectOwnership(dynamic.Resource, module="twc", name="ObjectOwnership"):
    """The objects the stack creates, by worker; refuses new ones someone else made, and
    deletions beyond ``max_share`` of a kind (``preview``: without touching the record)."""

    def __init__(
        self,
        name: str,
        *,
        stack: Input[str],
        objects: Input[dict[str, list[str]]],
        retiring: Input[list[str]],
        max_share: float,
        control_namespace: str | None,
        opts: ResourceOptions | None = None,
    ) -> None:
        props = {
            "stack": stack,
            "objects": objects,
            "retiring": retiring,
            "maxShare": max_share,
            "controlNamespace": control_namespace,
            "preview": is_dry_run(),
        }
        super().__init__(ObjectOwnershipProvider(), name, props, opts)
