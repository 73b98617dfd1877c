"""What the engine verbs share: the stack, its fleet file, and the desired state's
inputs gathered as the daemon gathers them."""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from twc.desired import INPUTS_ENV, DesiredInputs
from twc.errors import SpecError
from twc.native.views import is_view
from twc.stackrun import engine

if TYPE_CHECKING:
    from twc.kube.client import KubeClient

__all__ = [
    "desired_inputs",
    "ensure_local_namespaces",
    "fleet_file_for",
    "fleet_path",
    "stack_kube",
    "stack_ref",
    "validate_or_report",
]


def fleet_file_for(stack: str, override: str | None = None) -> str:
    """The fleet file of a stack: ``--fleet-file``, else ``stacks/<stack>.yaml``."""
    return override or f"stacks/{stack}.yaml"


def fleet_path(file: str) -> str:
    """The fleet file's path (relative names are relative to the project)."""
    return file if Path(file).is_absolute() else str(engine.ROOT / file)


def validate_or_report(file: str, err: TextIO | None = None) -> bool:
    """Validate the fleet file; print every issue (to ``err``, default stderr) and return
    False if invalid."""
    err = err if err is not None else sys.stderr
    from twc.connections import resolve_fleet_connections
    from twc.spec import load_fleet_file

    try:
        fleet = load_fleet_file(fleet_path(file))
        resolve_fleet_connections(fleet, file=file)
    except SpecError as exc:
        for line in exc.lines():
            print(line, file=err)
        print("nothing was applied", file=err)
        return False
    return True


def stack_ref(stack: str, fleet_file: str | None = None) -> engine.StackRef:
    """The stack with the config this run needs."""
    config = dict(engine.local_stack_config(stack))
    if fleet_file:
        config["fleetFile"] = fleet_file
    return engine.StackRef(name=stack, config=config, env=engine.local_stack_env(stack))


def stack_kube(ref: engine.StackRef) -> KubeClient:
    """A :class:`~twc.kube.client.KubeClient` for the stack's cluster (the engine's
    ``KUBECONFIG``).

    Raises:
        twc.kube.client.NoClusterError: No cluster is configured.
    """
    from twc.kube.client import kube_client

    return kube_client((ref.env or {}).get("KUBECONFIG"))


@contextmanager
def desired_inputs(
    ref: engine.StackRef, file: str, wanted: bool | None, err: TextIO | None = None
) -> Iterator[engine.StackRef | None]:
    """``ref`` with the desired state's inputs in a ``TWC_DESIRED_INPUTS`` file.

    The inputs are the fleet document and, when the fleet includes them
    (``clusterObjects``, unless ``wanted`` overrides it: ``--cluster-objects`` /
    ``--file-only``), the cluster's Queue, TemporalWorker and connection objects and the
    replicas autoscaled workers run with — what the daemon's next iteration would use.
    So a manual ``up`` or a pull request's preview does not delete every worker that
    comes from the cluster, nor reset autoscaled replicas. Yields ``None`` (after saying
    why) when the objects are wanted but cannot be read: applying without them would
    delete those workers.
    """
    err = err if err is not None else sys.stderr
    import yaml

    from twc.connections import default_registry
    from twc.spec import load_fleet_file

    path = fleet_path(file)
    document = yaml.safe_load(Path(path).read_text())
    fleet = load_fleet_file(path)
    include = fleet.cluster_objects if wanted is None else wanted
    inputs = DesiredInputs(fleet=document)
    if include:
        from twc.kube.observe import observe_inputs

        try:
            with stack_kube(ref) as kube:
                inputs = observe_inputs(kube, default_registry().watched_kinds(), fleet=document)
        except Exception as exc:  # noqa: BLE001 - any read failure stops the command with its reason
            print(
                f"cannot read the cluster's Queue, TemporalWorker and connection objects: "
                f"{exc}; nothing was applied (--file-only ignores them)",
                file=err,
            )
            yield None
            return
        if any(found.objects or not found.is_known for found in (inputs.cluster or {}).values()):
            print(_summary(inputs), file=err)
    with tempfile.TemporaryDirectory(prefix="twc-inputs-") as tmp:
        inputs.to_file(Path(tmp) / "inputs.json")
        env = {**(ref.env or {}), INPUTS_ENV: str(Path(tmp) / "inputs.json")}
        yield dataclasses.replace(ref, env=env)


def _summary(inputs: DesiredInputs) -> str:
    counts = []
    for key, found in sorted((inputs.cluster or {}).items()):
        kind = key.split(".", 1)[0]
        if found.objects is None:
            counts.append(f"{kind}: unknown ({found.failure})")
        else:
            # The TemporalWorkers the daemon generates to show other workers are no source.
            views = sum(1 for o in found.objects if is_view(o))
            shown = f" (+{views} generated views of other workers)" if views else ""
            counts.append(f"{len(found.objects) - views} {kind}{shown}")
    return "including from the cluster, as the daemon does: " + ", ".join(counts)


def ensure_local_namespaces(file: str, ref: engine.StackRef) -> None:
    """The embedded environment has no namespaces but ``default``: create the fleet's."""
    from twc.kube.client import NoClusterError
    from twc.kube.workloads import ensure_namespace
    from twc.spec import load_fleet_file

    namespaces = {w.namespace for w in load_fleet_file(fleet_path(file)).resolved_workers()}
    try:
        kube = stack_kube(ref)
    except NoClusterError:
        return
    with kube:
        for ns in sorted(namespaces):
            ensure_namespace(kube, ns)
