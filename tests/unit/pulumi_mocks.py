"""Recording Pulumi mocks that also run the real dynamic providers.

Under plain mocks a dynamic resource's CRUD never runs. Here a dynamic resource's
``__provider`` input (a secret envelope around the dill payload) is unpickled and its
real ``check``/``create`` run, so outputs such as a fingerprint flow into children as
they do under the engine. Everything created is recorded for assertions.
"""

from __future__ import annotations

import asyncio
import base64
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import dill
import pulumi

SECRET_SIG = "4dabf18193072939515e22adb298388d"


@dataclass
class Recorded:
    type: str
    name: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]


@dataclass
class RecordingMocks(pulumi.runtime.Mocks):
    """Records resources; runs real dynamic providers unless ``fake_dynamic`` says otherwise."""

    resources: list[Recorded] = field(default_factory=list)
    fake_dynamic: dict[str, dict[str, Any]] = field(default_factory=dict)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        inputs = dict(args.inputs)
        outputs = dict(inputs)
        if args.typ.startswith("pulumi-python:dynamic"):
            provider = _unwrap(inputs.pop("__provider"))
            for fake_type, fake_outs in self.fake_dynamic.items():
                if args.typ.endswith(fake_type):
                    outputs = {**inputs, **fake_outs}
                    break
            else:
                result = provider.create(inputs)
                outputs = {**inputs, **(result.outs or {})}
        if args.typ == "kubernetes:apps/v1:Deployment":
            outputs["status"] = {"readyReplicas": (inputs.get("spec") or {}).get("replicas", 1)}
        self.resources.append(Recorded(args.typ, args.name, inputs, outputs))
        return f"{args.name}-id", outputs

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None

    def of_type(self, typ: str) -> list[Recorded]:
        return [r for r in self.resources if r.type == typ]

    def named(self, name: str) -> Recorded:
        matches = [r for r in self.resources if r.name == name]
        assert matches, f"no resource named {name!r}; have {[r.name for r in self.resources]}"
        return matches[0]


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict) and value.get(SECRET_SIG):
        value = value["value"]
    return dill.loads(base64.b64decode(value))  # noqa: S301 - the program's own provider


_F = TypeVar("_F", bound=Callable[..., Any])


def pulumi_test(fn: _F) -> _F:
    """``pulumi.runtime.test``, typed: the test waits for every output of the program.

    Each test gets a runtime of its own: a fresh event loop and no root stack left from
    an earlier test. Pulumi keeps both process-wide; a root stack whose futures belong to
    an earlier test's loop, or handles an earlier test left on the loop, make a later test
    fail with "await wasn't used with future" depending on which tests ran before it.
    """
    tested = pulumi.runtime.test(fn)  # type: ignore[no-untyped-call]

    @functools.wraps(fn)
    def isolated(*args: Any, **kwargs: Any) -> Any:
        reset_runtime()
        try:
            return tested(*args, **kwargs)
        finally:
            reset_runtime()

    return cast(_F, isolated)


def reset_runtime() -> None:
    """Forget the root stack and start a fresh event loop (see ``pulumi_test``)."""
    pulumi.runtime.settings.ROOT.set(None)
    pulumi.runtime.settings.SETTINGS.rpc_manager.clear()
    pulumi.runtime.settings.SETTINGS.outputs.clear()
    try:
        old = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:  # no loop yet in this thread
        old = None
    if old is not None and not old.is_running() and not old.is_closed():
        # Outputs an earlier test never awaited: cancel them rather than leave them
        # pending on a loop nobody runs again.
        pending = asyncio.all_tasks(old)
        for task in pending:
            task.cancel()
        old.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        old.close()
    asyncio.set_event_loop(asyncio.new_event_loop())
