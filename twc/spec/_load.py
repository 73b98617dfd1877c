"""Fleet files and cluster objects turned into validated models; raises only SpecError."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
from collections.abc import Mapping, Sequence
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from twc.errors import SpecError, SpecIssue
from twc.spec._models import (
    API_GROUP,
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    CONNECTION_VERSION,
    ClusterConnection,
    Connection,
    CustomConnection,
    Queue,
    TemporalWorker,
)
from twc.spec._resolve import Fleet, resolve
from twc.spec._yaml import MAX_BYTES, YamlRejected, parse_yaml

QUEUE_API_VERSION = "kmsvc.io/v1"
QUEUE_KIND = "Queue"
WORKER_ENABLED_LABEL = "temporal.io/worker-enabled"
"""Label that, set to ``"true"`` on a cluster Queue, asks for a derived worker."""
WORKER_API_VERSION = "temporal.kmsvc.io/v1"
CONNECTION_API_VERSION = f"{API_GROUP}/{CONNECTION_VERSION}"

_M = TypeVar("_M", bound=BaseModel)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# pydantic messages that read poorly out of context, by error type.
_MESSAGES = dict.fromkeys(
    ("model_type", "model_attributes_type", "dict_type"), "expected a mapping"
)
_MESSAGES |= dict.fromkeys(("list_type", "tuple_type"), "expected a list")
_MESSAGES |= {"missing": "required field is missing", "invalid_key": "keys must be strings"}


def format_path(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a field path, e.g. ``workers[2].image``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            continue
        elif _IDENTIFIER.match(part):
            out += f".{part}" if out else part
        else:
            escaped = part.replace("\\", "\\\\").replace('"', '\\"')
            out += f'["{escaped}"]'
    return out


def _allowed_keys(loc: Sequence[int | str], root: type[BaseModel]) -> list[str] | None:
    """The keys accepted by the mapping that holds ``loc[-1]``, if it is a model."""
    tp: object = root
    for part in (*loc[:-1], None):
        # Strip Annotated and `X | None` down to the type that holds the data.
        while get_origin(tp) in (Annotated, Union, UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if get_origin(tp) is not Annotated and len(args) != 1:
                return None
            tp = args[0]
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {(f.alias or name): f.annotation for name, f in tp.model_fields.items()}
            if part is None:
                return list(fields)
            tp = fields.get(part) if isinstance(part, str) else None
        elif get_origin(tp) in (tuple, list, dict) and part is not None:
            tp = get_args(tp)[1 if get_origin(tp) is dict else 0]
        else:
            return None
    return None


def _reason(error: ErrorDetails, root: type[BaseModel]) -> str:
    kind, loc = error["type"], error["loc"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc, root)
        if not allowed or not isinstance(loc[-1], str):
            return "unknown field"
        close = difflib.get_close_matches(loc[-1], allowed, n=1, cutoff=0.6)
        if close:
            return f"unknown field (did you mean {close[0]!r}?)"
        return f"unknown field (expected one of: {', '.join(sorted(allowed))})"
    cause = (error.get("ctx") or {}).get("error")
    if kind in ("value_error", "assertion_error") and cause is not None:
        message = str(cause)
    else:
        message = _MESSAGES.get(kind, error["msg"])
    return f"invalid key: {message}" if "[key]" in loc else message


def _validate(
    model: type[_M],
    data: dict[str, Any],
    file: str,
    rename: Mapping[str, str | tuple[str, ...]] = {},
) -> _M:
    """``data`` as a ``model``, or a SpecError naming ``file`` and each field's path."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        issues = []
        for error in err.errors(include_url=False):
            loc = list(error["loc"])
            if loc and isinstance(loc[0], str) and loc[0] in rename:
                found = rename[loc[0]]
                loc[:1] = found.split(".") if isinstance(found, str) else found
            issues.append(SpecIssue(file, format_path(loc), _reason(error, model)))
        raise SpecError(issues) from None


def load_fleet(data: object, file: str) -> Fleet:
    """A parsed fleet document, validated and resolved; a SpecError lists every problem."""
    if data is None:
        raise SpecError([SpecIssue(file, "", "the document is empty; expected a Fleet")])
    if not isinstance(data, Mapping):
        raise SpecError([SpecIssue(file, "", f"expected a Fleet mapping, got {_type_name(data)}")])
    fleet = _validate(Fleet, dict(data), file)
    fleet._resolved = resolve(fleet, file)
    return fleet


def load_fleet_file(path: str | os.PathLike[str]) -> Fleet:
    """A fleet file read, parsed and validated (see :func:`load_fleet`)."""
    file = os.fspath(path)
    try:
        with open(file, "rb") as handle:
            # One byte past the limit: an oversized file is detected without reading it.
            data = parse_yaml(handle.read(MAX_BYTES + 1))
    except OSError as err:
        raise SpecError([SpecIssue(file, "", f"cannot read file: {err.strerror}")]) from None
    except YamlRejected as err:
        raise SpecError([SpecIssue(file, "", str(err))]) from None
    return load_fleet(data, file)


def part(obj: object, key: str) -> Mapping[str, Any]:
    """``obj[key]`` when both are mappings, else an empty mapping."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _envelope(obj: object, api_version: str, kind: str, describe: str) -> None:
    """Raise unless ``obj`` is a mapping of ``api_version``/``kind`` (either may be absent)."""
    if not isinstance(obj, Mapping):
        raise SpecError([SpecIssue(describe, "", f"expected a mapping, got {_type_name(obj)}")])
    issues: list[SpecIssue] = []
    if obj.get("apiVersion", api_version) != api_version:
        issues.append(SpecIssue(describe, "apiVersion", f"must be {api_version}"))
    if obj.get("kind", kind) != kind:
        issues.append(SpecIssue(describe, "kind", f"must be {kind}"))
    for key in ("metadata", "spec"):
        if obj.get(key) is not None and not isinstance(obj.get(key), Mapping):
            issues.append(SpecIssue(describe, key, "expected a mapping"))
    if issues:
        raise SpecError(issues)


def _load(
    model: type[_M],
    obj: object,
    api_version: str,
    kind: str,
    namespaced: bool,
    /,
    *,
    where: Mapping[str, tuple[str, ...]] | None = None,
    plugin: Mapping[str, str] | None = None,
) -> _M:
    """``obj`` as ``model``: its spec's fields, or (a ``plugin`` kind's) its whole ``spec``
    (``where``: the field a model key is read from, when not ``spec.<key>``)."""
    meta, spec = part(obj, "metadata"), part(obj, "spec")
    name = meta.get("name", "?")  # <namespace>/<name>, or <name> for a cluster-scoped object
    at = f"{meta['namespace']}/{name}" if meta.get("namespace") else name
    describe = f"{api_version} {kind} {at}"
    _envelope(obj, api_version, kind, describe)
    rename: dict[str, str | tuple[str, ...]] = {} if plugin else {k: f"spec.{k}" for k in spec}
    rename |= where or {}
    rename |= {"name": "metadata.name", "namespace": "metadata.namespace"}
    # The object's own metadata wins: a spec cannot rename or move the object.
    data: dict[str, Any] = {**plugin, "spec": dict(spec)} if plugin else dict(spec)
    data["name"] = meta.get("name")
    data.pop("namespace", None)
    if namespaced:
        data["namespace"] = meta.get("namespace")
    return _validate(model, data, describe, rename)


def load_worker_object(obj: object) -> TemporalWorker:
    """A ``TemporalWorker`` object (as the API returns it) as a fleet worker."""
    return _load(TemporalWorker, obj, WORKER_API_VERSION, "TemporalWorker", True)


def load_connection_object(obj: object) -> Connection:
    """A namespaced ``Connection`` object as its fleet-file model (``twcCredentials`` from
    its annotation)."""
    found, where = _twc_credentials(obj)
    return _load(Connection, found, CONNECTION_API_VERSION, CONNECTION_KIND, True, where=where)


TWC_CREDENTIALS_ANNOTATION = "twc.temporal.io/twc-credentials"
"""On a Connection or ClusterConnection object: ``twcCredentials`` as JSON."""


def _twc_credentials(obj: object) -> tuple[object, dict[str, tuple[str, ...]]]:
    given = part(part(obj, "metadata"), "annotations").get(TWC_CREDENTIALS_ANNOTATION)
    if given is None or not isinstance(obj, Mapping):
        return obj, {}
    with contextlib.suppress(ValueError):  # not JSON: the model refuses it, named here
        given = json.loads(given)
    where: dict[str, tuple[str, ...]] = {
        "twcCredentials": ("metadata", "annotations", TWC_CREDENTIALS_ANNOTATION)
    }
    return {**obj, "spec": {**part(obj, "spec"), "twcCredentials": given}}, where


SOURCE_NAMESPACE_ANNOTATION = "twc.temporal.io/secret-source"
"""On a ClusterConnection object: the namespace its credential is copied from (``secretSource``)."""
ALLOWED_NAMESPACES_ANNOTATION = "twc.temporal.io/allowed-namespaces"
"""On a ClusterConnection object: ``allowedNamespaces``, comma-separated."""


def load_cluster_connection_object(obj: object) -> ClusterConnection:
    """A cluster-scoped ``ClusterConnection`` object as its fleet-file model; twc's own
    ``secretSource`` and ``allowedNamespaces`` come from its annotations (the official
    schema, which the CRD is, has no field for them)."""
    obj, where = _twc_credentials(obj)
    annotations = part(part(obj, "metadata"), "annotations")
    spec = dict(part(obj, "spec"))
    if SOURCE_NAMESPACE_ANNOTATION in annotations:
        spec["secretSource"] = {"namespace": annotations[SOURCE_NAMESPACE_ANNOTATION]}
    if ALLOWED_NAMESPACES_ANNOTATION in annotations:
        names = str(annotations[ALLOWED_NAMESPACES_ANNOTATION]).split(",")
        spec["allowedNamespaces"] = [n.strip() for n in names if n.strip()]
    found = {**obj, "spec": spec} if isinstance(obj, Mapping) else obj
    where |= {
        "secretSource": ("metadata", "annotations", SOURCE_NAMESPACE_ANNOTATION),
        "allowedNamespaces": ("metadata", "annotations", ALLOWED_NAMESPACES_ANNOTATION),
    }
    kind = CLUSTER_CONNECTION_KIND
    return _load(ClusterConnection, found, CONNECTION_API_VERSION, kind, False, where=where)


def load_custom_connection_object(
    obj: object, *, api_group: str, kind: str, namespaced: bool, version: str = "v1"
) -> CustomConnection:
    """An object of a plugin's connection kind as a ``customConnections`` entry."""
    plugin = {"apiGroup": api_group, "kind": kind}
    api_version = f"{api_group}/{version}"
    return _load(CustomConnection, obj, api_version, kind, namespaced, plugin=plugin)


def load_queue_object(obj: Mapping[str, Any]) -> Queue:
    """A kmsvc.io/v1 Queue object as a Queue (``workerEnabled`` from its label)."""
    meta, spec = part(obj, "metadata"), part(obj, "spec")
    where = f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"
    describe = f"{QUEUE_API_VERSION} {QUEUE_KIND} {where}"
    _envelope(obj, QUEUE_API_VERSION, QUEUE_KIND, describe)
    labels = meta.get("labels") or {}
    data: dict[str, Any] = {"name": meta.get("name"), "labels": labels}
    data |= {k: meta[k] for k in ("namespace",) if k in meta}
    data |= {k: spec[k] for k in ("fifo", "partitions") if spec.get(k) is not None}
    data["workerEnabled"] = (
        isinstance(labels, Mapping) and labels.get(WORKER_ENABLED_LABEL) == "true"
    )
    rename = {k: f"metadata.{k}" for k in ("name", "namespace", "labels")}
    rename |= {k: f"spec.{k}" for k in ("fifo", "partitions")}
    return _validate(Queue, data, describe, rename)


def fleet_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the fleet file, for editors."""
    schema = Fleet.model_json_schema(by_alias=True, mode="validation")
    schema["title"] = "twc Fleet"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _type_name(value: object) -> str:
    names = {list: "a list", tuple: "a list", str: "a string", bool: "a boolean"}
    return names.get(type(value)) or (
        "a number" if isinstance(value, int | float) else type(value).__name__
    )
