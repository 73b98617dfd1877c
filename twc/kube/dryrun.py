"""The API server's own validation of worker Deployments, before anything is applied.

Whether Kubernetes accepts a worker's pod only the API server can say, so ``twc preview``
and ``twc up`` send each changed worker's Deployment as a dry run (``dryRun=All``,
``fieldValidation=Strict``) and report every refusal at the field where the user wrote
it (``workers[2].template.spec.containers[0].resources.requests``). A live Deployment
that already holds every field twc would send is skipped. Nothing is persisted.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twc import builders
from twc.connections import CONNECTION_SPEC_HASH_ANNOTATION, Registry, default_registry
from twc.errors import SpecIssue, TwcConnectionError
from twc.spec import WORKER_API_VERSION, Fleet, ResolvedWorker

__all__ = [
    "DryRunFailed",
    "DryRunResult",
    "DryRunTarget",
    "describe",
    "dry_run_fleet",
    "dry_run_targets",
    "issues_from_status",
    "template_field_path",
]

logger = logging.getLogger(__name__)

FIELD_MANAGER = "twc-dry-run"
"""Field manager named on the dry-run requests (nothing is persisted under it)."""
_PLACEHOLDER_FINGERPRINT = "0" * 64
_TEMPLATE_PREFIX = "spec.template."
_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')
_DUPLICATE_FIELD = re.compile(r'duplicate field "([^"]+)"')


@dataclass(frozen=True, slots=True)
class DryRunTarget:
    """One worker Deployment to check, and how to name its fields for the user."""

    worker: ResolvedWorker
    """The worker."""
    manifest: dict[str, Any]
    """Its Deployment as the program would apply it."""
    file: str | None = None
    """Where the worker is written, when not the fleet file: a cluster object, e.g.
    ``temporal.kmsvc.io/v1 TemporalWorker apps/orders``."""
    source: str | None = None
    """The worker's field path there (``spec``), when not ``worker.source``."""
    template_source: str | None = None
    """Its template's field path there (``spec.template``), when not
    ``worker.template_source``."""

    @property
    def key(self) -> str:
        """``<namespace>/<name>``."""
        return f"{self.worker.namespace}/{self.worker.name}"

    @property
    def where(self) -> str:
        """The worker's field path in the file or object it is written in."""
        return self.source if self.source is not None else self.worker.source

    @property
    def template_where(self) -> str | None:
        """The template's field path in the file or object it is written in."""
        if self.template_source is not None:
            return self.template_source
        return self.worker.template_source


def _naming(
    worker: ResolvedWorker, origin: str | None
) -> tuple[str | None, str | None, str | None]:
    """(file, source, template source) for a worker that is not the fleet file's own."""
    if origin is None or origin == "file":
        return None, None, None
    kind, _, key = origin.partition(" ")
    if kind == "TemporalWorker":
        template = worker.template_source
        if template is not None and not template.startswith("defaults."):
            template = "spec.template"
        return f"{WORKER_API_VERSION} TemporalWorker {key}", "spec", template
    return f"Queue {key}", "", None


@dataclass(frozen=True, slots=True)
class DryRunResult:
    """What the API server said about the fleet's Deployments."""

    issues: tuple[SpecIssue, ...] = ()
    """Every refusal, one per field, each naming file, worker and field."""
    checked: tuple[str, ...] = ()
    """Workers (``ns/name``) whose Deployment was sent."""
    unchanged: tuple[str, ...] = ()
    """Workers whose live Deployment already holds what twc would send."""
    skipped: tuple[str, ...] = field(default_factory=tuple)
    """Workers that could not be checked, with the reason (e.g. a missing namespace)."""


def dry_run_targets(
    fleet: Fleet,
    registry: Registry | None = None,
    origins: Mapping[str, str] | None = None,
) -> list[DryRunTarget]:
    """Every worker's Deployment, built as the program builds it (a placeholder
    fingerprint; a worker whose connection does not resolve is left out).

    Args:
        fleet: The fleet (the desired state's, cluster objects merged in).
        registry: The connection registry.
        origins: Per worker key, where it comes from (``file``, ``TemporalWorker
            <ns>/<name>``, ``Queue <ns>/<name>``), as the desired state says; refusals
            of a cluster object's worker are named in that object.
    """
    registry = registry or default_registry()
    targets = []
    for worker in fleet.resolved_workers():
        try:
            connection = registry.resolve_worker(worker, fleet)
        except TwcConnectionError:
            continue
        manifest = builders.worker_deployment(worker, connection, _PLACEHOLDER_FINGERPRINT)
        key = f"{worker.namespace}/{worker.name}"
        file, source, template = _naming(worker, (origins or {}).get(key))
        targets.append(DryRunTarget(worker, manifest, file, source, template))
    return targets


def dry_run_fleet(
    fleet: Fleet,
    *,
    file: str,
    api_client: Any,
    registry: Registry | None = None,
    origins: Mapping[str, str] | None = None,
) -> DryRunResult:
    """Have the API server validate each changed worker's Deployment, applying nothing.

    Args:
        fleet: The validated fleet (the desired state's).
        file: Its file name, for the issues.
        api_client: A ``kubernetes.client.ApiClient`` for the stack's cluster.
        registry: The connection registry (the process-wide one by default).
        origins: Where each worker comes from (see :func:`dry_run_targets`).

    Returns:
        The refusals, and which workers were checked, unchanged or skipped.

    Raises:
        kubernetes.client.ApiException: The API server failed otherwise (unreachable,
            forbidden to list Deployments...): the caller decides whether to go on.
    """
    targets = dry_run_targets(fleet, registry, origins)
    live: dict[str, dict[str, Any]] = {}
    selector = f"{builders.LABEL_MANAGED_BY}={builders.MANAGED_BY}"
    for namespace in sorted({t.worker.namespace for t in targets}):
        status, text = _request(
            api_client,
            "GET",
            f"/apis/apps/v1/namespaces/{namespace}/deployments",
            [("labelSelector", selector)],
        )
        if not 200 <= status < 300:
            raise DryRunFailed(f"listing the Deployments of {namespace!r}: HTTP {status}: {text}")
        for obj in json.loads(text).get("items") or []:
            live[f"{namespace}/{obj['metadata']['name']}"] = obj
    issues: list[SpecIssue] = []
    checked: list[str] = []
    unchanged: list[str] = []
    skipped: list[str] = []
    for target in targets:
        current = live.get(target.key)
        if current is not None:
            differs = _difference(current, _comparable(target.manifest), "")
            if differs is None:
                unchanged.append(target.key)
                continue
            logger.debug("dry run of %s: the live Deployment differs at %s", target.key, differs)
        body = _with_live_fingerprint(target.manifest, current)
        path = f"/apis/apps/v1/namespaces/{target.worker.namespace}/deployments"
        if current is None:
            status, text = _request(api_client, "POST", path, _DRY_RUN, body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            status, text = _request(
                api_client, "PUT", f"{path}/{target.worker.name}", _DRY_RUN, body
            )
        if status == 404:
            skipped.append(f"{target.key}: namespace {target.worker.namespace!r} does not exist")
            continue
        checked.append(target.key)
        if status in (400, 409, 422):
            issues.extend(issues_from_status(text, target, file))
        elif not 200 <= status < 300:
            raise DryRunFailed(f"the dry run of {target.key} failed with HTTP {status}: {text}")
    return DryRunResult(
        issues=tuple(issues),
        checked=tuple(checked),
        unchanged=tuple(unchanged),
        skipped=tuple(skipped),
    )


class DryRunFailed(RuntimeError):
    """The API server answered a dry run with something other than a verdict."""


_DRY_RUN = [("dryRun", "All"), ("fieldValidation", "Strict"), ("fieldManager", FIELD_MANAGER)]


def _request(
    api_client: Any,
    method: str,
    path: str,
    query: list[tuple[str, str]],
    body: Mapping[str, Any] | None = None,
) -> tuple[int, str]:
    """One request with JSON in and out, exactly as written (the typed API would refuse
    an unknown field itself, hiding what the API server says)."""
    method, url, headers, payload, post = api_client.param_serialize(
        method=method,
        resource_path=path,
        query_params=query,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=dict(body) if body is not None else None,
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(method, url, headers, payload, post)
    data = response.read() if hasattr(response, "read") else response.data
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
    return int(response.status), text


def _comparable(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What of the manifest must already be live for the worker to count as unchanged:
    everything but the type, the replicas (the autoscaler's) and the fingerprint (a
    placeholder)."""
    out = json.loads(json.dumps(manifest))
    # Items of a list carry no apiVersion/kind; the list was of Deployments already.
    out.pop("apiVersion", None)
    out.pop("kind", None)
    out["spec"].pop("replicas", None)
    annotations = out["spec"]["template"].get("metadata", {}).get("annotations", {})
    annotations.pop(CONNECTION_SPEC_HASH_ANNOTATION, None)
    return dict(out)


def _with_live_fingerprint(
    manifest: Mapping[str, Any], live: Mapping[str, Any] | None
) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(json.dumps(manifest))
    if live is None:
        return body
    annotations = (live.get("spec", {}).get("template", {}).get("metadata") or {}).get(
        "annotations"
    ) or {}
    fingerprint = annotations.get(CONNECTION_SPEC_HASH_ANNOTATION)
    if fingerprint:
        body["spec"]["template"]["metadata"]["annotations"][CONNECTION_SPEC_HASH_ANNOTATION] = (
            fingerprint
        )
    return body


def _difference(live: object, desired: object, path: str) -> str | None:
    """The first path where ``live`` lacks a value of ``desired``, or None (``live`` may
    hold more: the server adds defaults)."""
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return path or "."
        for key, value in desired.items():
            if key not in live:
                return f"{path}.{key}"
            found = _difference(live[key], value, f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return path
        for index, (a, b) in enumerate(zip(live, desired, strict=True)):
            found = _difference(a, b, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if isinstance(desired, bool) or isinstance(live, bool):
        return None if live is desired else path
    if isinstance(desired, int | float) and isinstance(live, str | int | float):
        return None if str(live) == str(desired) else path
    return None if live == desired else path


def issues_from_status(body: str, target: DryRunTarget, file: str) -> list[SpecIssue]:
    """The API server's refusal (a ``Status`` JSON body) as issues naming the user's fields.

    Args:
        body: The response body.
        target: The worker whose Deployment was refused.
        file: The fleet file, for the issues.

    Returns:
        One issue per cause (one for the whole refusal when it names no field).
    """
    try:
        status = json.loads(body)
    except ValueError:
        status = {"message": body}
    if not isinstance(status, Mapping):
        status = {"message": str(status)}
    message = str(status.get("message") or "refused")
    causes = (status.get("details") or {}).get("causes") or []
    found: list[tuple[str, str]] = []
    for cause in causes:
        if isinstance(cause, Mapping) and cause.get("field"):
            found.append((str(cause["field"]), str(cause.get("message") or message)))
    if not found:
        for pattern, text in (
            (_UNKNOWN_FIELD, "unknown field"),
            (_DUPLICATE_FIELD, "duplicate field"),
        ):
            for name in pattern.findall(message):
                found.append((name, text))
    subject = f"worker {target.key}: the API server refuses its Deployment"
    # A cluster object's worker is named in its object, except for what it inherits
    # from the fleet file's defaults.
    own = target.file or file
    if not found:
        return [SpecIssue(own, target.where, f"{subject}: {message}")]
    issues = []
    for api_field, reason in found:
        path = template_field_path(api_field, target)
        if path is None:
            issues.append(SpecIssue(own, target.where, f"{subject}: {api_field}: {reason}"))
        else:
            where = file if path.startswith("defaults.") else own
            issues.append(SpecIssue(where, path, f"{subject}: {reason}"))
    return issues


def template_field_path(api_field: str, target: DryRunTarget) -> str | None:
    """Where the user wrote a Deployment field: a path under the worker's ``template``
    (list items matched by ``name``), or None when twc set the field."""
    template = target.template_where
    if template is None or not api_field.startswith(_TEMPLATE_PREFIX):
        return None
    segments: list[str | int] = [
        int(index) if index else str(key)
        for key, index in _SEGMENT.findall(api_field[len(_TEMPLATE_PREFIX) :])
    ]
    built: object = target.manifest["spec"]["template"]
    user: object = target.worker.pod_template
    out = template
    for position, segment in enumerate(segments):
        if isinstance(segment, int):
            if not isinstance(built, list) or not isinstance(user, list) or segment >= len(built):
                return None
            item = built[segment]
            name = item.get("name") if isinstance(item, Mapping) else None
            if name is not None:
                matches = [
                    i
                    for i, u in enumerate(user)
                    if isinstance(u, Mapping) and u.get("name") == name
                ]
                if not matches:
                    return None
                index = matches[0]
            elif segment < len(user):
                index = segment
            else:
                return None
            built, user = item, user[index]
            out += f"[{index}]"
            continue
        if not isinstance(built, Mapping) or not isinstance(user, Mapping):
            # Below a value the user wrote (a field inside a free-form quantity, say):
            # name the rest as the API server did.
            return out + "".join(
                f"[{s}]" if isinstance(s, int) else f".{s}" for s in segments[position:]
            )
        if segment not in user:
            return None
        built, user = built.get(segment), user[segment]
        out += f".{segment}"
    return out


def describe(result: DryRunResult) -> Iterable[str]:
    """Lines for the user about what was not checked."""
    for line in result.skipped:
        yield f"not checked by the API server: {line}"
