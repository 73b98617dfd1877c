"""kmsvc.io/v1 Queue objects from the cluster become Queue models."""

from __future__ import annotations

from typing import Any

import pytest

from twc.errors import SpecError
from twc.spec import load_queue_object


def _queue(**overrides: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kmsvc.io/v1",
        "kind": "Queue",
        "metadata": {
            "name": "orders-fifo",
            "namespace": "sqs",
            "labels": {"temporal.io/worker-enabled": "true", "team": "orders"},
            "uid": "0d9c0f7e",
            "resourceVersion": "42",
        },
        "spec": {"fifo": True, "partitions": 6, "visibilityTimeoutSeconds": 30},
        "status": {"ready": True},
    }
    obj.update(overrides)
    return obj


def test_a_labelled_queue_is_worker_enabled() -> None:
    queue = load_queue_object(_queue())

    assert (queue.namespace, queue.name, queue.fifo, queue.partitions) == (
        "sqs",
        "orders-fifo",
        True,
        6,
    )
    assert queue.worker_enabled is True
    assert queue.labels["team"] == "orders"


def test_without_the_label_no_worker_is_derived() -> None:
    obj = _queue()
    obj["metadata"]["labels"] = {"temporal.io/worker-enabled": "false"}

    assert load_queue_object(obj).worker_enabled is False


def test_defaults_apply_when_spec_and_namespace_are_absent() -> None:
    queue = load_queue_object({"metadata": {"name": "plain"}})

    assert (queue.namespace, queue.fifo, queue.partitions) == ("default", False, None)


@pytest.mark.parametrize(
    ("obj", "line"),
    [
        (
            _queue(apiVersion="kmsvc.io/v2"),
            "kmsvc.io/v1 Queue sqs/orders-fifo: apiVersion: must be kmsvc.io/v1",
        ),
        (_queue(kind="Topic"), "kmsvc.io/v1 Queue sqs/orders-fifo: kind: must be Queue"),
        (
            _queue(spec={"partitions": 0}),
            "kmsvc.io/v1 Queue sqs/orders-fifo: spec.partitions: "
            "Input should be greater than or equal to 1",
        ),
        (_queue(spec=[1]), "kmsvc.io/v1 Queue sqs/orders-fifo: spec: expected a mapping"),
        (
            {"metadata": {"namespace": "sqs"}},
            "kmsvc.io/v1 Queue sqs/?: metadata.name: Input should be a valid string",
        ),
    ],
)
def test_unusable_objects_are_rejected_naming_the_object(obj: dict[str, Any], line: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_queue_object(obj)

    assert line in caught.value.lines()
