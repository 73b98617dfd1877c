"""A shard stack's objects belong to its base stack: moving a stack to shards changes no
object's owner (no label change, no ``ObjectExists`` for the Deployments it moved), and
another stack's objects stay foreign to every shard."""

from __future__ import annotations

import pytest

from twc.builders import LABEL_MANAGED_BY, LABEL_STACK, MANAGED_BY, foreign_owner, stack_labels
from twc.kube.workloads import stack_selector
from twc.shards import shard_stack
from twc.spec.labels import owner_stack

pytestmark = pytest.mark.unit


def _made_by(stack: str) -> dict[str, object]:
    return {"metadata": {"labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_STACK: stack}}}


def test_a_shard_stack_is_owned_by_its_base_and_any_other_stack_by_itself() -> None:
    assert owner_stack(shard_stack("prod", 3)) == "prod"
    assert owner_stack("prod") == "prod"
    assert owner_stack("prod.staging") == "prod.staging"


def test_a_shard_labels_its_objects_with_its_base_stack() -> None:
    assert stack_labels(shard_stack("prod", 1))[LABEL_STACK] == "prod"
    assert stack_selector(shard_stack("prod", 1)).endswith(f"{LABEL_STACK}=prod")


def test_the_unsharded_stacks_objects_are_a_shards_own_and_another_stacks_are_not() -> None:
    assert foreign_owner(_made_by("prod"), shard_stack("prod", 0)) is None
    assert foreign_owner(_made_by(shard_stack("prod", 2)), shard_stack("prod", 0)) is None
    assert foreign_owner(_made_by("prod"), "prod") is None
    assert foreign_owner(_made_by("staging"), shard_stack("prod", 0)) == (
        "created by another twc stack"
    )
