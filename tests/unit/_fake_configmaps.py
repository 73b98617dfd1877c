"""An in-memory ConfigMap API with the calls the stack's record makes."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any


class ApiError(Exception):
    """Like the client's ApiException: an HTTP status."""

    def __init__(self, status: int) -> None:
        super().__init__(f"({status})")
        self.status = status


@dataclass
class _Response:
    data: bytes


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    # RFC 7386: null deletes, mappings merge, anything else replaces.
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


class FakeConfigMaps:
    """ConfigMaps by (namespace, name); ``fail`` makes every call answer that status."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.fail: int | None = None
        self.writes = 0

    def _check(self) -> None:
        if self.fail is not None:
            raise ApiError(self.fail)

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> _Response:
        self._check()
        found = self.objects.get((namespace, name))
        if found is None:
            raise ApiError(404)
        return _Response(json.dumps(found).encode())

    def create_namespaced_config_map(self, namespace: str, body: dict[str, Any]) -> None:
        self._check()
        name = body["metadata"]["name"]
        if (namespace, name) in self.objects:
            raise ApiError(409)
        self.objects[(namespace, name)] = copy.deepcopy(body)
        self.writes += 1

    def patch_namespaced_config_map(
        self, name: str, namespace: str, body: dict[str, Any], **_: Any
    ) -> None:
        self._check()
        found = self.objects.get((namespace, name))
        if found is None:
            raise ApiError(404)
        _merge(found, body)
        self.writes += 1

    def delete_namespaced_config_map(self, name: str, namespace: str) -> None:
        self._check()
        if self.objects.pop((namespace, name), None) is None:
            raise ApiError(404)
        self.writes += 1

    def size(self, namespace: str, name: str) -> int:
        """Bytes of one object as JSON (what the API server stores)."""
        return len(json.dumps(self.objects[(namespace, name)]))

    def list_config_map_for_all_namespaces(
        self, *, label_selector: str = "", field_selector: str = ""
    ) -> Any:
        """The ConfigMaps whose labels and fields match ``k=v,...`` selectors."""
        self._check()
        labels = dict(p.split("=", 1) for p in label_selector.split(",") if p)
        fields = dict(p.split("=", 1) for p in field_selector.split(",") if p)
        items = []
        for (namespace, name), body in sorted(self.objects.items()):
            have = body["metadata"].get("labels") or {}
            got = {"metadata.name": name, "metadata.namespace": namespace}
            if all(have.get(k) == v for k, v in labels.items()) and all(
                got.get(k) == v for k, v in fields.items()
            ):
                items.append(_Listed(_Meta(name=name, namespace=namespace)))
        return _List(items)


@dataclass
class _Meta:
    name: str
    namespace: str


@dataclass
class _Listed:
    metadata: _Meta


@dataclass
class _List:
    items: list[_Listed]
