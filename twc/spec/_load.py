"""Entry points that turn files and cluster objects into validated models.

Everything here raises only :class:`~twc.errors.SpecError`, whatever the input, so
callers have exactly one failure to handle.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping, Sequence
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from twc.errors import SpecError, SpecIssue
from twc.spec._models import Fleet, Queue
from twc.spec._resolve import check_fleet
from twc.spec._yaml import MAX_BYTES, YamlRejected, parse_yaml

__all__ = [
    "QUEUE_API_VERSION",
    "QUEUE_KIND",
    "WORKER_ENABLED_LABEL",
    "FleetReader",
    "fleet_json_schema",
    "format_path",
    "load_fleet",
    "load_fleet_bytes",
    "load_fleet_file",
    "load_queue_object",
]

logger = logging.getLogger(__name__)

QUEUE_API_VERSION = "kmsvc.io/v1"
"""``apiVersion`` of kmsvc Queue objects."""
QUEUE_KIND = "Queue"
"""``kind`` of kmsvc Queue objects."""
WORKER_ENABLED_LABEL = "temporal.io/worker-enabled"
"""Label that, set to ``"true"`` on a cluster Queue, asks for a derived worker."""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# pydantic messages that read poorly out of context, by error type.
_MESSAGES = {
    "missing": "required field is missing",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "dict_type": "expected a mapping",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "invalid_key": "keys must be strings",
}


def format_path(loc: Sequence[int | str]) -> str:
    """Render a pydantic error location as a field path, e.g. ``workers[2].image``.

    Map keys that are not identifiers (label keys, say) are quoted in brackets so the
    path stays unambiguous: ``nodeSelector["kubernetes.io/os"]``.
    """
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


def _field_type(model: type[BaseModel], alias: str) -> object | None:
    for name, info in model.model_fields.items():
        if (info.alias or name) == alias:
            return info.annotation
    return None


def _unwrap(tp: object) -> object:
    """Strip ``Annotated`` and ``X | None`` down to the type that holds the data."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, UnionType):
            members = [a for a in get_args(tp) if a is not type(None)]
            if len(members) != 1:
                return tp
            tp = members[0]
        else:
            return tp


def _allowed_keys(loc: Sequence[int | str], root: type[BaseModel]) -> list[str] | None:
    """The keys accepted by the mapping that holds ``loc[-1]``, if it is a model."""
    tp: object = root
    for part in loc[:-1]:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if not isinstance(part, str):
                return None
            tp = _field_type(tp, part)
        elif get_origin(tp) in (tuple, list) and isinstance(part, int):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            return None
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [info.alias or name for name, info in tp.model_fields.items()]
    return None


def _unknown_field(loc: Sequence[int | str], root: type[BaseModel]) -> str:
    allowed = _allowed_keys(loc, root)
    if not allowed or not isinstance(loc[-1], str):
        return "unknown field"
    close = difflib.get_close_matches(loc[-1], allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown field (did you mean {close[0]!r}?)"
    return f"unknown field (expected one of: {', '.join(sorted(allowed))})"


def _reason(error: ErrorDetails, root: type[BaseModel]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return _unknown_field(error["loc"], root)
    if kind in ("value_error", "assertion_error"):
        ctx = error.get("ctx") or {}
        cause = ctx.get("error")
        message = str(cause) if cause is not None else error["msg"]
    else:
        message = _MESSAGES.get(kind, error["msg"])
    if "[key]" in error["loc"]:
        message = f"invalid key: {message}"
    return message


def _issues(
    err: ValidationError,
    file: str,
    root: type[BaseModel],
    rename: Mapping[str, str] | None = None,
) -> list[SpecIssue]:
    issues = []
    for error in err.errors(include_url=False):
        loc = list(error["loc"])
        if rename and loc and isinstance(loc[0], str) and loc[0] in rename:
            loc[:1] = rename[loc[0]].split(".")
        issues.append(SpecIssue(file, format_path(loc), _reason(error, root)))
    return issues


def load_fleet(data: object, file: str) -> Fleet:
    """Validate a parsed fleet document and resolve its workers.

    Args:
        data: The parsed YAML/JSON document.
        file: Name used in error messages (usually the file path).

    Returns:
        The fleet; :meth:`Fleet.resolved_workers` is ready and cannot fail.

    Raises:
        SpecError: Listing every structural and cross-object problem found.
    """
    if data is None:
        raise SpecError([SpecIssue(file, "", "the document is empty; expected a Fleet")])
    if not isinstance(data, Mapping):
        raise SpecError([SpecIssue(file, "", f"expected a Fleet mapping, got {_type_name(data)}")])
    try:
        # dict(): pydantic takes only real dicts as model input.
        fleet = Fleet.model_validate(dict(data))
    except ValidationError as err:
        raise SpecError(_issues(err, file, Fleet)) from None
    workers, issues = check_fleet(fleet, file)
    if issues:
        raise SpecError(issues)
    fleet._resolved = tuple(workers)
    logger.debug("loaded fleet %s: %d workers", file, len(workers))
    return fleet


def load_fleet_bytes(raw: bytes, file: str) -> Fleet:
    """Parse (see :mod:`twc.spec._yaml`) and validate a fleet file's bytes.

    Raises:
        SpecError: ``raw`` is not acceptable YAML or not a valid fleet.
    """
    try:
        data = parse_yaml(raw)
    except YamlRejected as err:
        raise SpecError([SpecIssue(file, "", str(err))]) from None
    return load_fleet(data, file)


def load_fleet_file(path: str | os.PathLike[str]) -> Fleet:
    """Read, parse and validate a fleet file.

    Raises:
        SpecError: If the file cannot be read, is not acceptable YAML, or fails validation.
    """
    file = os.fspath(path)
    try:
        with open(file, "rb") as handle:
            # One byte past the limit: an oversized file is detected without reading it all.
            raw = handle.read(MAX_BYTES + 1)
    except OSError as err:
        raise SpecError([SpecIssue(file, "", f"cannot read file: {err.strerror}")]) from None
    return load_fleet_bytes(raw, file)


class FleetReader:
    """Loads successive versions of one fleet file (``file``: its name in messages)."""

    def __init__(self, file: str) -> None:
        self.file = file

    def load(self, raw: bytes) -> Fleet:
        """The fleet ``raw`` holds (see :func:`load_fleet_bytes`)."""
        return load_fleet_bytes(raw, self.file)


def load_queue_object(obj: Mapping[str, Any]) -> Queue:
    """Convert a kmsvc.io/v1 Queue custom object (as the API returns it) to a Queue.

    ``workerEnabled`` comes from the label ``temporal.io/worker-enabled: "true"``.
    Unknown ``spec`` fields are ignored: kmsvc owns that schema, we read two fields.

    Args:
        obj: The object, e.g. from ``CustomObjectsApi.list_cluster_custom_object``.

    Returns:
        The queue.

    Raises:
        SpecError: If the object is not a usable Queue; the file is named
            ``kmsvc.io/v1 Queue <namespace>/<name>``.
    """
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta: Mapping[str, Any] = metadata if isinstance(metadata, Mapping) else {}
    spec_raw = obj.get("spec") if isinstance(obj, Mapping) else None
    spec: Mapping[str, Any] = spec_raw if isinstance(spec_raw, Mapping) else {}
    where = f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"
    describe = f"{QUEUE_API_VERSION} {QUEUE_KIND} {where}"

    issues: list[SpecIssue] = []
    if not isinstance(obj, Mapping):
        raise SpecError([SpecIssue(describe, "", f"expected a mapping, got {_type_name(obj)}")])
    if obj.get("apiVersion", QUEUE_API_VERSION) != QUEUE_API_VERSION:
        issues.append(SpecIssue(describe, "apiVersion", f"must be {QUEUE_API_VERSION}"))
    if obj.get("kind", QUEUE_KIND) != QUEUE_KIND:
        issues.append(SpecIssue(describe, "kind", f"must be {QUEUE_KIND}"))
    if metadata is not None and not isinstance(metadata, Mapping):
        issues.append(SpecIssue(describe, "metadata", "expected a mapping"))
    if spec_raw is not None and not isinstance(spec_raw, Mapping):
        issues.append(SpecIssue(describe, "spec", "expected a mapping"))
    if issues:
        raise SpecError(issues)

    labels = meta.get("labels") or {}
    data: dict[str, Any] = {"name": meta.get("name"), "labels": labels}
    if "namespace" in meta:
        data["namespace"] = meta["namespace"]
    for key in ("fifo", "partitions"):
        if spec.get(key) is not None:
            data[key] = spec[key]
    data["workerEnabled"] = (
        isinstance(labels, Mapping) and labels.get(WORKER_ENABLED_LABEL) == "true"
    )
    rename = {
        "name": "metadata.name",
        "namespace": "metadata.namespace",
        "labels": "metadata.labels",
        "fifo": "spec.fifo",
        "partitions": "spec.partitions",
    }
    try:
        return Queue.model_validate(data)
    except ValidationError as err:
        raise SpecError(_issues(err, describe, Queue, rename)) from None


def fleet_json_schema() -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of the fleet file, for editors."""
    schema = Fleet.model_json_schema(by_alias=True, mode="validation")
    schema["title"] = "twc Fleet"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _type_name(value: object) -> str:
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__
