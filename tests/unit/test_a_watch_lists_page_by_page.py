"""A watcher's list comes in pages (``limit`` and the API server's ``continue``): every
page's objects are kept, trimmed as each page arrives, and the list's resourceVersion is
the last page's."""

from __future__ import annotations

from typing import Any

import pytest

from twc.kube.watch import ObjectWatcher, Resource, WatchSettings

pytestmark = pytest.mark.unit


def _obj(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"d{i}", "namespace": "ns", "managedFields": [{"manager": "x"}]},
        "spec": {"replicas": i},
    }


class Pages:
    """Seven objects in pages of ``limit``, continued by index."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        start = int(kwargs.get("_continue") or 0)
        end = min(7, start + int(kwargs["limit"]))
        more = {"continue": str(end)} if end < 7 else {}
        return {
            "items": [_obj(i) for i in range(start, end)],
            "metadata": {"resourceVersion": "41" if more else "42", **more},
        }


def _watcher(pages: Pages, page_size: int) -> ObjectWatcher:
    resource = Resource(
        "apps", "v1", "deployments", keep=lambda o: {"metadata": {"name": o["metadata"]["name"]}}
    )
    return ObjectWatcher(None, resource, WatchSettings(60, page_size=page_size), lister=pages)


def test_every_page_is_kept_trimmed_and_the_last_pages_version_returned() -> None:
    pages = Pages()
    watcher = _watcher(pages, page_size=3)

    assert watcher.list_now() == "42"

    found = watcher.snapshot()
    assert found is not None
    assert sorted(o["metadata"]["name"] for o in found) == [f"d{i}" for i in range(7)]
    assert all("managedFields" not in o["metadata"] for o in found)
    assert [c.get("_continue") for c in pages.calls] == [None, "3", "6"]
    assert {c["limit"] for c in pages.calls} == {3}


def test_a_list_smaller_than_a_page_is_one_call() -> None:
    pages = Pages()
    assert _watcher(pages, page_size=500).list_now() == "42"
    assert len(pages.calls) == 1


def test_a_page_must_hold_an_object() -> None:
    with pytest.raises(ValueError, match="page_size"):
        _watcher(Pages(), page_size=0)
