"""However many shards start at once, at most two parse a whole exported state at a
time: each is tens of megabytes once parsed, and twenty at once were the largest part of
a starting daemon's memory."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from twc.stackrun.automation import EXPORTS_AT_ONCE, exported

pytestmark = pytest.mark.unit


class Exporting:
    """A stack whose export takes a moment, counting exports in progress."""

    lock = threading.Lock()
    now = 0
    most = 0

    def export_stack(self) -> dict[str, Any]:
        cls = type(self)
        with cls.lock:
            cls.now += 1
            cls.most = max(cls.most, cls.now)
        time.sleep(0.05)
        with cls.lock:
            cls.now -= 1
        return {"deployment": {"resources": []}}


def test_twenty_shards_export_two_at_a_time() -> None:
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(exported(Exporting()))) for _ in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert len(results) == 20  # every export ran, none was dropped
    assert Exporting.most == EXPORTS_AT_ONCE == 2


def test_a_failed_export_frees_its_turn() -> None:
    class Failing:
        def export_stack(self) -> None:
            raise RuntimeError("the backend is down")

    for _ in range(EXPORTS_AT_ONCE + 1):
        with pytest.raises(RuntimeError):
            exported(Failing())
    assert exported(Exporting()) == {"deployment": {"resources": []}}
