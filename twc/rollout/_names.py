"""Names of a worker's versions (build IDs, Deployments, labels, env, gate IDs), as the
official worker controller derives them."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

BUILD_ID_LABEL: Final = "temporal.io/build-id"
DEPLOYMENT_NAME_LABEL: Final = "temporal.io/deployment-name"
ENV_DEPLOYMENT_NAME: Final = "TEMPORAL_DEPLOYMENT_NAME"
ENV_BUILD_ID: Final = "TEMPORAL_WORKER_BUILD_ID"
VERSION_ANNOTATION: Final = "twc.temporal.io/version-spec"
"""On a version's Deployment: its version spec (JSON), to rebuild it exactly while it drains."""
POLICY_ANNOTATION: Final = "twc.temporal.io/rollout"
"""On a version's Deployment: the rollout policy in effect (JSON), for previews."""
TARGET_ANNOTATION: Final = "twc.temporal.io/target-version"
"""On the target version's Deployment only (``"true"``)."""
MAX_BUILD_ID: Final = 63
MAX_DEPLOYMENT_NAME: Final = 63
_HASH_LENGTH: Final = 8
_INVALID_BUILD_ID = re.compile(r"[^a-zA-Z0-9._-]+")
_INVALID_DNS = re.compile(r"[^a-z0-9-]+")


def _clean_build_id(text: str) -> str:
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
    """``<image tag>-<8 hex digits of version_fields>`` within 63 characters, or ``given``
    cleaned."""
    if given:
        cleaned = _clean_build_id(given)[:MAX_BUILD_ID].strip("-._")
        if cleaned:
            return cleaned
    suffix = _digest(version_fields)[:_HASH_LENGTH]
    prefix = _clean_build_id(image_prefix(image))[: MAX_BUILD_ID - _HASH_LENGTH - 1]
    prefix = prefix.strip("-._")
    return f"{prefix}-{suffix}" if prefix else suffix


def version_deployment_name(worker: str, build_id: str) -> str:
    """``<worker>-<buildID>`` as a DNS label; when too long, cut and ended with a hash."""
    full = _INVALID_DNS.sub("-", f"{worker}-{build_id}".lower()).strip("-")
    if len(full) <= MAX_DEPLOYMENT_NAME:
        return full
    digest = _digest(f"{worker}/{build_id}")[:_HASH_LENGTH]
    head = full[: MAX_DEPLOYMENT_NAME - _HASH_LENGTH - 1].rstrip("-")
    return f"{head}-{digest}"


def temporal_deployment_name(namespace: str, worker: str) -> str:
    """The worker's Temporal worker deployment: ``<namespace>/<worker>``."""
    return f"{namespace}/{worker}"


def gate_workflow_id(deployment: str, build_id: str, task_queue: str, stage: int = 0) -> str:
    """The deterministic workflow ID of a gate run (stage 0: before traffic, the official
    controller's ID; stage ``n``: step ``n``)."""
    base = f"test-{deployment}:{build_id}-{task_queue}"
    return base if stage == 0 else f"{base}-step{stage}"
