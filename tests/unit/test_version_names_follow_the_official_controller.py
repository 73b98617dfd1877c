"""Build IDs, version Deployment names and gate IDs, as the official controller makes them.

A build ID is the image tag (else digest, else repository) plus a hash of what the pods
run; it is a valid label value and Temporal build ID; each version's Deployment is
``<worker>-<buildID>``, a DNS label of at most 63 characters that two versions never
share.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twc.rollout import (
    derive_build_id,
    gate_workflow_id,
    image_prefix,
    temporal_deployment_name,
    version_deployment_name,
)

LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


@pytest.mark.parametrize(
    ("image", "prefix"),
    [
        ("registry.example/worker:1.4.2", "1.4.2"),
        ("registry.example:5000/team/worker:2.0", "2.0"),
        ("worker", "worker"),
        ("registry.example/team/worker", "team/worker"),
        ("team/worker", "team/worker"),
        ("worker@sha256:" + "ab" * 32, "ab" * 32),
        ("worker:1.0@sha256:" + "cd" * 32, "1.0"),
    ],
)
def test_the_build_id_starts_with_the_image_tag(image: str, prefix: str) -> None:
    assert image_prefix(image) == prefix
    build = derive_build_id(image, {"image": image})
    assert build.startswith(re.sub(r"[^A-Za-z0-9._-]+", "-", prefix)[:54].strip("-._"))
    assert LABEL_VALUE.match(build)
    assert len(build) <= 63


def test_the_build_id_changes_with_the_pods_and_only_with_them() -> None:
    one = derive_build_id("w:1.5.0", {"image": "w:1.5.0", "env": {"A": "1"}})
    same = derive_build_id("w:1.5.0", {"env": {"A": "1"}, "image": "w:1.5.0"})
    other = derive_build_id("w:1.5.0", {"image": "w:1.5.0", "env": {"A": "2"}})
    assert one == same != other
    assert re.fullmatch(r"1\.5\.0-[0-9a-f]{8}", one)


def test_a_given_build_id_is_used_cleaned() -> None:
    assert derive_build_id("w:1", {}, given="release/2026.12") == "release-2026.12"
    assert derive_build_id("w:1", {}, given="x" * 80) == "x" * 63
    # Nothing usable left: the derived one.
    assert derive_build_id("w:1", {}, given="///").startswith("1-")


@given(
    worker=st.from_regex(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?", fullmatch=True),
    tag=st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", fullmatch=True),
)
def test_version_deployment_names_are_dns_labels_and_distinct(worker: str, tag: str) -> None:
    build = derive_build_id(f"img:{tag}", {"tag": tag})
    other = derive_build_id(f"img:{tag}", {"tag": tag, "x": 1})
    name = version_deployment_name(worker, build)
    assert DNS_LABEL.match(name), name
    assert len(name) <= 63, name
    assert name != version_deployment_name(worker, other)


def test_short_names_read_as_worker_dash_build_id() -> None:
    assert version_deployment_name("orders", "1.5.0-3f9a1c2b") == "orders-1-5-0-3f9a1c2b"
    assert temporal_deployment_name("apps", "orders") == "apps/orders"


def test_gate_ids_are_the_official_ones_plus_a_step_suffix() -> None:
    assert gate_workflow_id("apps/orders", "v2", "orders") == "test-apps/orders:v2-orders"
    assert gate_workflow_id("apps/orders", "v2", "orders", 2) == "test-apps/orders:v2-orders-step2"
