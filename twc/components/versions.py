"""The Deployments of a worker with versioned rollouts: one per live version.

The target version (the worker's spec as it is now) and every other version the desired
state's inputs name (rebuilt from its recorded version spec, so a draining version keeps
running exactly what its pinned workflows started on). Each is a child of the worker
component named ``<component>-version-<buildID>``; the Kubernetes name is
``<worker>-<buildID>``. Replicas: 0 when the inputs say so (sunset), the autoscaler's
decision for this version when the worker autoscales, else the worker's count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s

from twc import builders, rollout
from twc.rollout._spec import build_id_of, policy_of, version_spec_json, with_version_spec

if TYPE_CHECKING:
    from twc.components.worker import WorkerArgs

__all__ = ["VersionDeployments", "version_deployments"]


@dataclass
class VersionDeployments:
    """What the component made of a versioned worker."""

    target: k8s.apps.v1.Deployment
    """The target version's Deployment."""
    target_spec: dict[str, Any]
    """Its spec, as built."""
    all: list[pulumi.Resource] = field(default_factory=list)
    """Every version's Deployment."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """What the worker's status record adds: its versions as applied, and the rollout
    as the caller observed it."""


def _replicas(worker_autoscaled: bool, given: int | None) -> int | None:
    if given == 0:
        return 0
    return given if worker_autoscaled else None


def version_deployments(
    name: str,
    args: WorkerArgs,
    options: builders.PodTemplateOptions,
    *,
    opts: pulumi.ResourceOptions,
) -> VersionDeployments:
    """Declare a versioned worker's Deployments.

    Raises:
        ValueError: A version other than the target has no readable version spec (its
            Deployment's annotation is missing or from another twc): rebuilding it from
            the current spec would run new code under old workflows, so nothing is
            applied.
    """
    worker, conn = args.worker, args.connection
    policy = policy_of(worker)
    assert policy is not None, "only versioned workers have versions"
    policy_json = json.dumps(policy.to_json(), sort_keys=True, separators=(",", ":"))
    target = build_id_of(worker)
    given = dict(args.versions.versions) if args.versions is not None else {}
    given.setdefault(target, rollout.VersionInput())
    autoscaled = worker.autoscaling is not None
    made: dict[str, tuple[k8s.apps.v1.Deployment, dict[str, Any]]] = {}
    for build, version in sorted(given.items()):
        if build == target:
            at_version, spec_json = worker, version_spec_json(worker)
        else:
            if version.spec is None:
                raise ValueError(
                    f"{worker.stack_key}: version {build} has no version spec on its "
                    f"Deployment (annotation {rollout.VERSION_ANNOTATION}); cannot rebuild it"
                )
            at_version = with_version_spec(worker, dict(version.spec))
            spec_json = json.dumps(version.spec, sort_keys=True, separators=(",", ":"))
        count = _replicas(autoscaled, version.replicas)
        if build == target and count is None and autoscaled:
            count = args.replicas
        manifest = builders.versioned_deployment(
            at_version,
            conn.resolved,
            conn.fingerprint,
            build_id=build,
            version_spec=spec_json,
            policy=policy_json,
            target=build == target,
            replicas=count,
            options=options,
            connection_name=args.connection_name,
            stack=args.stack,
        )
        resource = k8s.apps.v1.Deployment(
            f"{name}-version-{build}",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=opts,
        )
        made[build] = (resource, manifest)
    resource, manifest = made[target]
    outputs: dict[str, Any] = {
        "targetBuildID": target,
        "versions": {
            build: {
                "deployment": m["metadata"]["name"],
                "replicas": m["spec"]["replicas"],
            }
            for build, (_, m) in sorted(made.items())
        },
    }
    if args.versions is not None and args.versions.status is not None:
        outputs["rollout"] = dict(args.versions.status)
    return VersionDeployments(
        target=resource,
        target_spec=manifest["spec"],
        all=[r for r, _ in made.values()],
        outputs=outputs,
    )
