"""The daemon freezes what survives a full collection: at 5000 workers its long-lived
objects (watch caches, the parsed fleet) made each full collection hold every thread for
1 to 2 s, every few seconds. A later full collection scans only what came since; one after
``THAW_EVERY`` seconds scans the frozen objects again and frees the cycles among them."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from twc.cli.run import THAW_EVERY, freeze_survivors


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> tuple[Node, weakref.ref[Node]]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


@pytest.fixture
def now() -> Iterator[list[float]]:
    clock = [1000.0]
    callback = freeze_survivors(lambda: clock[0])
    gc.unfreeze()  # what another test's daemon left frozen
    gc.collect()
    gc.disable()  # only the collections the test runs
    gc.callbacks.append(callback)
    try:
        yield clock
    finally:
        gc.callbacks.remove(callback)
        gc.enable()
        gc.unfreeze()
        gc.collect()


def test_a_full_collection_freezes_its_survivors(now: list[float]) -> None:
    kept, _ = _cycle()
    assert gc.get_freeze_count() == 0

    gc.collect()

    assert gc.get_freeze_count() > 0
    assert kept.other is not None


def test_a_frozen_cycle_waits_for_the_thaw_and_is_freed_then(now: list[float]) -> None:
    cycle, alive = _cycle()
    gc.collect()  # it survives: frozen
    del cycle

    now[0] += THAW_EVERY / 2
    gc.collect()
    assert alive() is not None, "frozen objects are not scanned before the thaw"

    now[0] += THAW_EVERY
    gc.collect()
    assert alive() is None, "the thaw's collection freed the cycle"
    assert gc.get_freeze_count() > 0, "and froze its survivors again"


def test_a_young_collection_freezes_nothing(now: list[float]) -> None:
    _cycle()

    gc.collect(0)

    assert gc.get_freeze_count() == 0
