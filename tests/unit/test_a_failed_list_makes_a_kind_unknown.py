"""A watch knows a kind's objects only from a list that succeeded: a failed list makes
the kind unknown, a 404 is "no objects" only when the CRD is gone, and an object missing
from a re-list leaves only when a GET of it confirms it is gone."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.unit._daemon_fakes import queue_object
from twc.desired import object_key
from twc.kube.watch import ListFailed, QueueWatcher


class Status(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"({status}) Reason: {'Forbidden' if status == 403 else 'Error'}")
        self.status = status
        self.reason = "Forbidden" if status == 403 else "Error"


class Api:
    """A Queue list (or its failure) and GETs of single objects."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.fail: BaseException | None = None
        self.objects: dict[str, dict[str, Any]] = {}
        self.gets: list[str] = []

    def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if self.fail is not None:
            raise self.fail
        return {"items": list(self.items), "metadata": {"resourceVersion": "7"}}

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **_: Any
    ) -> dict[str, Any]:
        self.gets.append(f"{namespace}/{name}")
        found = self.objects.get(f"{namespace}/{name}")
        if found is None:
            raise Status(404)
        return found


def _watcher(api: Api, crd: bool | BaseException = True) -> QueueWatcher:
    def exists(name: str) -> bool:
        assert name == "queues.kmsvc.io"
        if isinstance(crd, BaseException):
            raise crd
        return crd

    watcher = QueueWatcher(api, resync_interval=300, crd_exists=exists)
    watcher._wakeup = threading.Event()
    return watcher


def _names(watcher: QueueWatcher) -> list[str]:
    found = watcher.observed()
    assert found.objects is not None, found.failure
    return [object_key(o).rpartition("/")[2] for o in found.objects]


@pytest.mark.parametrize(
    "error", [Status(403), Status(500), Status(503), TimeoutError("read timed out")]
)
def test_a_list_that_fails_makes_the_kind_unknown_until_a_list_succeeds(
    error: BaseException,
) -> None:
    api = Api([queue_object("orders")])
    watcher = _watcher(api)
    watcher.list_now()
    assert _names(watcher) == ["orders"]

    api.fail = error
    with pytest.raises(type(error)):
        watcher.list_now()
    found = watcher.observed()
    assert not found.is_known
    assert found.failure is not None
    assert "queues.kmsvc.io" in found.failure
    # What it remembers is not offered as current, but stays for the next list.
    assert [o["metadata"]["name"] for o in watcher.snapshot() or ()] == ["orders"]

    api.fail = None
    watcher.list_now()
    assert _names(watcher) == ["orders"]


def test_a_404_is_no_objects_only_when_the_crd_is_gone() -> None:
    api = Api([queue_object("orders")])
    present = _watcher(api, crd=True)
    present.list_now()
    api.fail = Status(404)
    with pytest.raises(ListFailed, match="404 while the CRD exists"):
        present.list_now()
    assert not present.observed().is_known

    unreadable = _watcher(api, crd=Status(403))
    with pytest.raises(ListFailed):
        unreadable.list_now()
    assert not unreadable.observed().is_known

    gone = _watcher(api, crd=False)
    assert gone.list_now() == ""
    assert gone.observed().is_known
    assert _names(gone) == []


def test_an_object_missing_from_a_relist_leaves_only_when_a_get_confirms_it() -> None:
    orders, billing = queue_object("orders"), queue_object("billing")
    api = Api([orders, billing])
    watcher = _watcher(api)
    watcher.list_now()

    # The re-list is short, but the object is still there: kept.
    api.items = [billing]
    api.objects["team/orders"] = orders
    watcher.list_now()
    assert _names(watcher) == ["billing", "orders"]
    assert api.gets == ["team/orders"]

    # Its label was removed: no longer ours.
    unlabelled = {**orders, "metadata": {**orders["metadata"], "labels": {}}}
    api.objects["team/orders"] = unlabelled
    watcher.list_now()
    assert _names(watcher) == ["billing"]

    # Deleted: the GET answers 404.
    api.items = []
    watcher.list_now()
    assert _names(watcher) == []


def test_an_object_whose_deletion_cannot_be_confirmed_stays() -> None:
    orders = queue_object("orders")
    api = Api([orders])
    watcher = _watcher(api)
    watcher.list_now()

    api.items = []

    def broken(*_: Any, **__: Any) -> dict[str, Any]:
        raise Status(500)

    api.get_namespaced_custom_object = broken  # type: ignore[method-assign]
    watcher.list_now()
    assert _names(watcher) == ["orders"]


def test_a_watch_deleted_event_removes_the_object_at_once() -> None:
    orders = queue_object("orders")
    watcher = _watcher(Api([orders]))
    watcher.list_now()
    watcher._apply("DELETED", orders)
    assert _names(watcher) == []


class Retried(Status):
    """A 403 whose text differs on every answer, as a real one's response headers do."""

    answers = 0

    def __str__(self) -> str:
        Retried.answers += 1
        return f"(403) Reason: Forbidden, Audit-Id: {Retried.answers}"


def test_a_list_failing_the_same_way_on_every_retry_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging
    import time

    api = Api([])
    calls = 0

    def failing(*args: Any, **kwargs: Any) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        raise Retried(403)

    api.list_cluster_custom_object = failing  # type: ignore[method-assign]
    watcher = QueueWatcher(api, resync_interval=300, retry_delay=0.01, crd_exists=lambda _: True)
    with caplog.at_level(logging.DEBUG, logger="twc.kube.watch"):
        watcher.start(threading.Event())
        deadline = time.monotonic() + 10
        while calls < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        watcher.stop()
    assert calls >= 5, "the watch thread stopped retrying"
    retries = [r for r in caplog.records if "watch failed" in r.getMessage()]
    assert len(retries) >= 5
    assert [r.levelno for r in retries].count(logging.WARNING) == 1
    assert watcher.failure() == "403 Forbidden"
