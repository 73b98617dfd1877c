"""A watcher lists its kind in pages of a consistent list (the API server's
``continue``), so that a re-list of thousands of objects never holds them all untrimmed
at once; on the real API server, every object of every page arrives, and the list's
resourceVersion is the list's."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import create_queue
from twc.desired import QUEUE_PLURAL
from twc.kube.watch import (
    QUEUE_GROUP,
    QUEUE_VERSION,
    ObjectWatcher,
    Resource,
    WatchSettings,
    builtin_lister,
)

pytestmark = pytest.mark.e2e


class Counting:
    """Passes calls through, noting each list's continue token."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.tokens: list[str] = []

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.inner, name)
        if not name.startswith("list_"):
            return call

        def listed(*args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("watch"):
                self.tokens.append(str(kwargs.get("_continue", "")))
            return call(*args, **kwargs)

        return listed


def test_queues_and_config_maps_are_listed_in_pages(kube: Any, namespace: str) -> None:
    names = [f"q{i}" for i in range(5)]
    for name in names:
        create_queue(kube, namespace, name)
        kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": f"cm-{name}"}})
    custom, core = Counting(kube.custom), Counting(kube.core)
    in_namespace = f"metadata.namespace={namespace}"
    settings = WatchSettings(60, page_size=2)
    queues = ObjectWatcher(
        custom,
        Resource(QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, field_selector=in_namespace),
        settings,
    )
    maps = ObjectWatcher(
        None,
        Resource("", "v1", "configmaps", field_selector=in_namespace),
        settings,
        lister=builtin_lister(core.list_config_map_for_all_namespaces),
    )

    for watcher, api, prefix in ((queues, custom, ""), (maps, core, "cm-")):
        version = watcher.list_now()
        found = watcher.snapshot()
        assert found is not None
        names_found = sorted(o["metadata"]["name"] for o in found)
        assert [n for n in names_found if n.startswith(prefix or "q")] == [
            f"{prefix}{n}" for n in names
        ]
        assert len(api.tokens) >= 3, api.tokens  # 5 objects, pages of 2
        assert api.tokens[0] == ""
        assert all(api.tokens[1:]), api.tokens  # every later page continued the list
        assert int(version) > 0  # the list's resourceVersion, where its watch starts
