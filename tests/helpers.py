"""Shared test helpers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def assert_eventually(
    probe: Callable[[], T],
    *,
    timeout: float = 60.0,
    interval: float = 0.25,
    message: str | Callable[[], str] = "condition never held",
) -> T:
    """Call ``probe`` until it returns a truthy value or stops raising AssertionError.

    A callable ``message`` is read when the wait fails (a log as it is then).

    Returns:
        The first truthy value ``probe`` returned.

    Raises:
        AssertionError: with the last failure, after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except AssertionError as exc:
            last = exc
        if time.monotonic() >= deadline:
            said = message() if callable(message) else message
            raise AssertionError(f"{said} within {timeout:.0f} s (last: {last!r})")
        time.sleep(interval)


def delete_twc_objects(kube: Any, namespace: str) -> None:
    """Delete the namespace's Queue, TemporalWorker, Connection, WorkerDeployment and
    WorkerResourceTemplate objects (dropping the finalizers a daemon may have left)."""
    for group, version, plural in (
        ("kmsvc.io", "v1", "queues"),
        ("temporal.kmsvc.io", "v1", "temporalworkers"),
        ("temporal.io", "v1alpha1", "connections"),
        ("temporal.io", "v1alpha1", "workerdeployments"),
        ("temporal.io", "v1alpha1", "workerresourcetemplates"),
    ):
        try:
            found = kube.custom.list_namespaced_custom_object(group, version, namespace, plural)
            for obj in found.get("items") or []:
                if obj["metadata"].get("finalizers"):
                    kube.custom.patch_namespaced_custom_object(
                        group,
                        version,
                        namespace,
                        plural,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                    )
            kube.custom.delete_collection_namespaced_custom_object(
                group, version, namespace, plural
            )
        except Exception as exc:  # a CRD this environment does not serve
            if getattr(exc, "status", None) != 404:
                raise


def guarded_cli(tmp_path: Path, script: str) -> Path:
    """A stand-in ``pulumi`` (``script``, an executable text) behind the engine guard's
    wrapper, exactly as the Automation API runs the real one: the wrapper's path."""
    from twc.engine.supervisor import install_wrapper
    from twc.local.environment import project_root

    cli = tmp_path / "fake-pulumi"
    cli.write_text(script)
    cli.chmod(0o755)
    return install_wrapper(str(cli), root=project_root()) / "bin" / "pulumi"
