"""The API server's validation of changed worker Deployments before anything is applied:
a dry run (``dryRun=All``, ``fieldValidation=Strict``) whose refusals are reported at the
field where the user wrote them. Nothing is persisted."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twc import builders
from twc.connections import CONNECTION_SPEC_HASH_ANNOTATION, Registry, default_registry
from twc.errors import SpecIssue, TwcConnectionError
from twc.spec import WORKER_API_VERSION, Fleet, ResolvedWorker

logger = logging.getLogger(__name__)

FIELD_MANAGER = "twc-dry-run"
_PLACEHOLDER_FINGERPRINT = "0" * 64
_TEMPLATE_PREFIX = "spec.template."
_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_NAMED_FIELD = re.compile(r'(unknown|duplicate) field "([^"]+)"')


@dataclass(frozen=True, slots=True)
class DryRunTarget:
    """One worker Deployment to check, and how to name its fields for the user."""

    worker: ResolvedWorker
    manifest: dict[str, Any]
    file: str | None = None
    """Where the worker is written when not in the fleet file (a cluster object)."""
    source: str | None = None
    """The worker's field path there, when not ``worker.source``."""
    template_source: str | None = None
    """Its template's field path there, when not ``worker.template_source``."""

    @property
    def key(self) -> str:
        return self.worker.stack_key

    @property
    def where(self) -> str:
        return self.source if self.source is not None else self.worker.source


def _naming(
    worker: ResolvedWorker, origin: str | None
) -> tuple[str | None, str | None, str | None]:
    # (file, source, template source) for a worker that is not the fleet file's own.
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
    checked: tuple[str, ...] = ()
    """Workers (``ns/name``) whose Deployment was sent."""
    unchanged: tuple[str, ...] = ()
    """Workers whose live Deployment already holds what twc would send."""
    skipped: tuple[str, ...] = ()
    """Workers that could not be checked, with the reason."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """Per worker refused, its issues in one line."""


def dry_run_fleet(
    fleet: Fleet,
    *,
    file: str,
    api_client: Any,
    registry: Registry | None = None,
    origins: Mapping[str, str] | None = None,
    only: Collection[str] | None = None,
) -> DryRunResult:
    """Have the API server validate each changed resolvable worker's Deployment, as the
    program builds it (``only``: of these workers), applying nothing; raises when it fails
    otherwise (unreachable, forbidden...). ``origins``: per worker, ``file``,
    ``TemporalWorker <ns>/<name>``, ``Queue <ns>/<name>``."""
    registry = registry or default_registry()
    targets = []
    for worker in fleet.resolved_workers():
        if only is not None and worker.stack_key not in only:
            continue
        try:
            connection = registry.resolve_worker(worker, fleet)
        except TwcConnectionError:
            continue
        manifest = builders.worker_deployment(worker, connection, _PLACEHOLDER_FINGERPRINT)
        origin_file, source, template = _naming(worker, (origins or {}).get(worker.stack_key))
        targets.append(DryRunTarget(worker, manifest, origin_file, source, template))
    live: dict[str, dict[str, Any]] = {}
    selector = f"{builders.LABEL_MANAGED_BY}={builders.MANAGED_BY}"
    for namespace in sorted({t.worker.namespace for t in targets}):
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
        status, text = _request(api_client, "GET", path, [("labelSelector", selector)])
        if not 200 <= status < 300:
            raise DryRunFailed(f"listing the Deployments of {namespace!r}: HTTP {status}: {text}")
        for obj in json.loads(text).get("items") or []:
            live[f"{namespace}/{obj['metadata']['name']}"] = obj
    issues: list[SpecIssue] = []
    checked, unchanged, skipped, refused = [], [], [], {}
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
        # An unconditional update: the live object's status moving on is no refusal.
        path += "" if current is None else f"/{target.worker.name}"
        method = "POST" if current is None else "PUT"
        status, text = _request(api_client, method, path, _DRY_RUN, body)
        if status == 404:
            skipped.append(f"{target.key}: namespace {target.worker.namespace!r} does not exist")
            continue
        checked.append(target.key)
        if status in (400, 409, 422):
            found = issues_from_status(text, target, file)
            issues.extend(found)
            refused[target.key] = "; ".join(map(str, found))
        elif not 200 <= status < 300:
            raise DryRunFailed(f"the dry run of {target.key} failed with HTTP {status}: {text}")
    return DryRunResult(tuple(issues), tuple(checked), tuple(unchanged), tuple(skipped), refused)


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
    # Raw JSON: the typed API would refuse an unknown field itself.
    method, url, headers, payload, post = api_client.param_serialize(
        method=method,
        resource_path=path,
        query_params=query,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=dict(body) if body is not None else None,
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(method, url, headers, payload, post)
    return int(response.status), (response.read() or b"").decode("utf-8", "replace")


def _comparable(manifest: Mapping[str, Any]) -> dict[str, Any]:
    # What must already be live: all but the type, replicas and fingerprint.
    out = json.loads(json.dumps(manifest))
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
    meta = live.get("spec", {}).get("template", {}).get("metadata") or {}
    fingerprint = (meta.get("annotations") or {}).get(CONNECTION_SPEC_HASH_ANNOTATION)
    if fingerprint:
        annotations = body["spec"]["template"]["metadata"]["annotations"]
        annotations[CONNECTION_SPEC_HASH_ANNOTATION] = fingerprint
    return body


def _difference(live: object, desired: object, path: str) -> str | None:
    # The first path where ``live`` lacks a value of ``desired`` (it may hold more).
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return path or "."
        found = (
            _difference(live[k], v, f"{path}.{k}") if k in live else f"{path}.{k}"
            for k, v in desired.items()
        )
        return next((f for f in found if f is not None), None)
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return path
        pairs = enumerate(zip(live, desired, strict=True))
        found = (_difference(a, b, f"{path}[{i}]") for i, (a, b) in pairs)
        return next((f for f in found if f is not None), None)
    if isinstance(desired, bool) or isinstance(live, bool):
        return None if live is desired else path
    if isinstance(desired, int | float) and isinstance(live, str | int | float):
        return None if str(live) == str(desired) else path
    return None if live == desired else path


def issues_from_status(body: str, target: DryRunTarget, file: str) -> list[SpecIssue]:
    """A refusal (``Status`` JSON) as issues at the user's fields, one per cause."""
    try:
        status = json.loads(body)
    except ValueError:
        status = {"message": body}
    if not isinstance(status, Mapping):
        status = {"message": str(status)}
    message = str(status.get("message") or "refused")
    causes = (status.get("details") or {}).get("causes") or []
    found = [
        (str(c["field"]), str(c.get("message") or message))
        for c in causes
        if isinstance(c, Mapping) and c.get("field")
    ] or [  # unknown fields first, then duplicates, each in the message's order
        (name, f"{kind} field")
        for kind, name in sorted(_NAMED_FIELD.findall(message), key=lambda m: m[0] == "duplicate")
    ]
    subject = f"worker {target.key}: the API server refuses its Deployment"
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
    """Where the user wrote a Deployment field under ``template`` (None: twc set it)."""
    template = target.template_source or target.worker.template_source
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
            named = (
                i for i, u in enumerate(user) if isinstance(u, Mapping) and u.get("name") == name
            )
            index = next(named, None) if name is not None else segment
            if index is None or index >= len(user):
                return None
            built, user = item, user[index]
            out += f"[{index}]"
            continue
        if not isinstance(built, Mapping) or not isinstance(user, Mapping):
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
    return (f"not checked by the API server: {line}" for line in result.skipped)
