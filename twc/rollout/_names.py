"""Names of a worker's versions: build IDs, Deployment names, labels, env, gate IDs.

As the official worker controller derives them: a version's build ID is the image tag
followed by a hash of what the version's pods run, its Deployment is
``<worker>-<buildID>``, its Temporal worker deployment is ``<namespace>/<worker>``, and
its pods learn both from ``TEMPORAL_DEPLOYMENT_NAME`` and ``TEMPORAL_WORKER_BUILD_ID``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "BUILD_ID_LABEL",
    "DEPLOYMENT_NAME_LABEL",
    "ENV_BUILD_ID",
    "ENV_DEPLOYMENT_NAME",
    "MAX_BUILD_ID",
    "MAX_DEPLOYMENT_NAME",
    "POLICY_ANNOTATION",
    "TARGET_ANNOTATION",
    "VERSION_ANNOTATION",
    "derive_build_id",
    "gate_workflow_id",
    "image_prefix",
    "temporal_deployment_name",
    "version_deployment_name",
]

BUILD_ID_LABEL: Final = "temporal.io/build-id"
"""Label of a version's Deployment and pods: its build ID (the official name)."""
DEPLOYMENT_NAME_LABEL: Final = "temporal.io/deployment-name"
"""Label of a version's Deployment and pods: the worker it belongs to (official name)."""
ENV_DEPLOYMENT_NAME: Final = "TEMPORAL_DEPLOYMENT_NAME"
"""Env of a version's worker container: the Temporal worker deployment name."""
ENV_BUILD_ID: Final = "TEMPORAL_WORKER_BUILD_ID"
"""Env of a version's worker container: the version's build ID."""
VERSION_ANNOTATION: Final = "twc.temporal.io/version-spec"
"""On a version's Deployment: what its pods run (the worker's version fields, JSON),
so the program rebuilds an older version exactly while it drains."""
POLICY_ANNOTATION: Final = "twc.temporal.io/rollout"
"""On a version's Deployment: the rollout policy in effect (JSON), for previews."""
TARGET_ANNOTATION: Final = "twc.temporal.io/target-version"
"""On the target version's Deployment only (``"true"``): the version the spec asks for."""

MAX_BUILD_ID: Final = 63
"""Build IDs are label values too: at most 63 characters."""
MAX_DEPLOYMENT_NAME: Final = 63
"""A Deployment name twc gives a version: a DNS label."""
_HASH_LENGTH: Final = 8
_INVALID_BUILD_ID = re.compile(r"[^a-zA-Z0-9._-]+")
_INVALID_DNS = re.compile(r"[^a-z0-9-]+")


def _clean_build_id(text: str) -> str:
    # Label values: alphanumerics, '-', '_', '.'; begin and end alphanumeric.
    return _INVALID_BUILD_ID.sub("-", text).strip("-._")


def image_prefix(image: str) -> str:
    """The part of an image reference a build ID starts with: the tag, else the digest,
    else the repository path (without the registry host)."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[colon + 1 :]
    if digest:
        return digest.partition(":")[2] or digest
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return rest
    return name


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def derive_build_id(image: str, version_fields: Mapping[str, Any], given: str | None = None) -> str:
    """A version's build ID.

    Args:
        image: The worker container's image.
        version_fields: What the version's pods run, as plain data; any change in it
            is a new version.
        given: A build ID from the spec; used (cleaned, cut to 63 characters) instead.

    Returns:
        ``<image tag>-<8 hex digits>`` (the tag cut so the whole fits 63 characters),
        e.g. ``1.5.0-3f9a1c2b``.
    """
    if given:
        cleaned = _clean_build_id(given)[:MAX_BUILD_ID].strip("-._")
        if cleaned:
            return cleaned
    suffix = _digest(version_fields)[:_HASH_LENGTH]
    prefix = _clean_build_id(image_prefix(image))[: MAX_BUILD_ID - _HASH_LENGTH - 1]
    prefix = prefix.strip("-._")
    return f"{prefix}-{suffix}" if prefix else suffix


def version_deployment_name(worker: str, build_id: str) -> str:
    """The Deployment of a worker's version: ``<worker>-<buildID>`` as a DNS label.

    Lowercase, every run of other characters a ``-``; when longer than 63 characters,
    cut and ended with a hash of the full name, so two versions never share a name.
    """
    full = _INVALID_DNS.sub("-", f"{worker}-{build_id}".lower()).strip("-")
    if len(full) <= MAX_DEPLOYMENT_NAME:
        return full
    digest = _digest(f"{worker}/{build_id}")[:_HASH_LENGTH]
    head = full[: MAX_DEPLOYMENT_NAME - _HASH_LENGTH - 1].rstrip("-")
    return f"{head}-{digest}"


def temporal_deployment_name(namespace: str, worker: str) -> str:
    """The worker's Temporal worker deployment: ``<namespace>/<worker>`` (as the
    official controller names it, so its docs and dashboards carry over)."""
    return f"{namespace}/{worker}"


def gate_workflow_id(deployment: str, build_id: str, task_queue: str, stage: int = 0) -> str:
    """The workflow ID of a gate run: deterministic, so a restarted daemon finds the run
    it started instead of starting another.

    Stage 0 is the gate before any traffic, with the official controller's ID
    (``test-<deployment>:<buildID>-<taskQueue>``); stage ``n`` is the gate of step
    ``n``.
    """
    base = f"test-{deployment}:{build_id}-{task_queue}"
    return base if stage == 0 else f"{base}-step{stage}"
