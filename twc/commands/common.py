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

from twc.desired import INPUTS_ENV, DesiredInputs, GuardVerdict, Hold
from twc.errors import SpecError, TwcError
from twc.native.views import is_view
from twc.rollout import RolloutSettings
from twc.stackrun import engine

if TYPE_CHECKING:
    from twc.kube.client import KubeClient
    from twc.kube.record import RecordStore
    from twc.spec import Fleet

__all__ = [
    "cluster_adds_a_source",
    "deletion_verdict",
    "desired_inputs",
    "dry_run_or_report",
    "ensure_local_namespaces",
    "fleet_file_for",
    "fleet_path",
    "publish_hold",
    "stack_config",
    "stack_kube",
    "stack_record",
    "stack_ref",
    "stack_workers",
    "summary",
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


def stack_config(ref: engine.StackRef) -> dict[str, str]:
    """The stack's ``twc:`` config (keys without the prefix) as the engine will see it:
    the stack's settings file ``Pulumi.<stack>.yaml``, then what this run sets."""
    import yaml

    out: dict[str, str] = {}
    try:
        data = yaml.safe_load((ref.work_dir / f"Pulumi.{ref.name}.yaml").read_text())
    except (OSError, yaml.YAMLError):
        data = None
    config = data.get("config") if isinstance(data, dict) else None
    for key, value in (config or {}).items():
        if str(key).startswith(engine.CONFIG_PREFIX) and isinstance(value, str | int | float):
            out[str(key).removeprefix(engine.CONFIG_PREFIX)] = str(value)
    out.update({k: str(v) for k, v in (ref.config or {}).items()})
    return out


def stack_record(ref: engine.StackRef, kube: KubeClient) -> RecordStore:
    """The stack's record (last accepted specs, held deletions), where the stack keeps it
    (:func:`twc.kube.record.record_for_stack`)."""
    from twc.kube.record import record_for_stack

    return record_for_stack(kube.core, ref.name, stack_config(ref))


def deletion_verdict(ref: engine.StackRef, file: str) -> GuardVerdict:
    """What the run :func:`desired_inputs` prepared would delete of the workers the stack
    runs (its Deployments), judged by the fleet's ``deletionGuard`` and the approval on
    the stack's record.

    Raises:
        Exception: What runs, the desired state or the approval cannot be read: the
            caller applies nothing (a guard that cannot judge holds).
    """
    from twc.connections import default_registry
    from twc.desired import deletion_verdict as verdict
    from twc.desired import desired_fleet
    from twc.spec import load_fleet, load_fleet_file

    inputs_file = (ref.env or {}).get(INPUTS_ENV)
    inputs = DesiredInputs.from_file(inputs_file) if inputs_file else DesiredInputs()
    fleet = load_fleet(inputs.fleet, file) if inputs.fleet else load_fleet_file(fleet_path(file))
    desired = desired_fleet(fleet, inputs, registry=default_registry(), file=file)
    with stack_kube(ref) as kube:
        return verdict(
            stack_workers(ref, kube),
            desired.workers,
            fleet.deletion_guard,
            lambda: stack_record(ref, kube).approved(),
        )


def stack_workers(ref: engine.StackRef, kube: KubeClient) -> set[str]:
    """The workers the stack runs: its worker Deployments (a versioned worker's count
    as that one worker), keyed ``<namespace>/<name>``.

    Raises:
        Exception: The API server failed or access was denied.
    """
    from twc.kube.workloads import Workloads
    from twc.stackrun.shards import shard_namespaces

    namespaces = shard_namespaces(ref.config)  # a shard runs its namespaces' alone
    listed = (lambda: namespaces) if namespaces is not None else None
    return set(Workloads(kube, stack=ref.name, namespaces=listed).worker_replicas())


def publish_hold(ref: engine.StackRef, hold: Hold | None) -> None:
    """Put the held deletions on the stack's record for ``twc approve`` (``None``: none
    held, which spends an approval); a stack without a record gets one only to hold.

    Raises:
        Exception: The record cannot be read or written.
    """
    from twc.kube.record import HeldRecord

    with stack_kube(ref) as kube:
        record = stack_record(ref, kube)
        if hold is None and record.load() is None:
            return
        record.publish_held(
            HeldRecord(hold.digest, tuple(sorted(hold.workers)), hold.reason) if hold else None
        )


@contextmanager
def desired_inputs(
    ref: engine.StackRef,
    file: str,
    wanted: bool | None,
    err: TextIO | None = None,
    rollouts: RolloutSettings | None = None,
) -> Iterator[engine.StackRef | None]:
    """``ref`` with the desired state's inputs in a ``TWC_DESIRED_INPUTS`` file.

    The inputs are the fleet document and, when the fleet includes them
    (``clusterObjects``, unless ``wanted`` overrides it: ``--cluster-objects`` /
    ``--file-only``), the cluster's Queue, TemporalWorker and connection objects and the
    replicas autoscaled workers run with — what the daemon's next iteration would use.
    So a manual ``up`` or a pull request's preview does not delete every worker that
    comes from the cluster, nor reset autoscaled replicas. The last accepted spec of each
    object comes from the stack's record, as the daemon keeps it. Yields ``None`` (after
    saying why) when the objects are wanted but cannot be read: applying without them
    would delete those workers.
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
                inputs = observe_inputs(
                    kube,
                    default_registry().watched_kinds(),
                    fleet=document,
                    record=stack_record(ref, kube),
                )
        except Exception as exc:  # noqa: BLE001 - any read failure stops the command with its reason
            print(
                f"cannot read the cluster's Queue, TemporalWorker and connection objects: "
                f"{exc}; nothing was applied (--file-only ignores them)",
                file=err,
            )
            yield None
            return
        if cluster_adds_a_source(inputs):
            print(summary(inputs), file=err)
    planned = _with_versions(ref, file, fleet, inputs, rollouts or RolloutSettings(), err)
    if planned is None:
        yield None
        return
    inputs = planned
    with tempfile.TemporaryDirectory(prefix="twc-inputs-") as tmp:
        inputs.to_file(Path(tmp) / "inputs.json")
        env = {**(ref.env or {}), INPUTS_ENV: str(Path(tmp) / "inputs.json")}
        yield dataclasses.replace(ref, env=env)


def dry_run_or_report(ref: engine.StackRef, file: str, err: TextIO | None = None) -> bool:
    """Have the API server dry-run each changed worker's Deployment (:mod:`twc.kube.dryrun`).

    ``ref`` is what :func:`desired_inputs` yielded: the workers checked are the desired
    state's, the cluster's TemporalWorker and Queue objects included. Prints every
    refusal (file or object, worker, field) to ``err`` and returns False, so nothing is
    applied; True when the server accepts them all, or when there is no cluster to ask
    (the engine then says what it finds).
    """
    err = err if err is not None else sys.stderr
    from twc.connections import default_registry
    from twc.desired import desired_fleet
    from twc.kube.client import NoClusterError
    from twc.kube.dryrun import describe, dry_run_fleet
    from twc.spec import load_fleet_file

    inputs_file = (ref.env or {}).get(INPUTS_ENV)
    inputs = DesiredInputs.from_file(inputs_file) if inputs_file else DesiredInputs()
    try:
        registry = default_registry()
        desired = desired_fleet(
            load_fleet_file(fleet_path(file)), inputs, registry=registry, file=file
        )
    except TwcError as exc:  # the engine's run reports these with their context
        print(f"the API server's dry run of the Deployments did not run: {exc}", file=err)
        return True
    try:
        kube = stack_kube(ref)
    except NoClusterError:
        return True
    try:
        with kube:
            result = dry_run_fleet(
                desired.fleet,
                file=file,
                api_client=kube.api_client,
                registry=registry,
                origins=desired.origins,
            )
    except Exception as exc:  # noqa: BLE001 - unreachable or forbidden: the engine will say it better
        print(f"the API server's dry run of the Deployments did not run: {exc}", file=err)
        return True
    for line in describe(result):
        print(line, file=err)
    if not result.issues:
        return True
    for issue in result.issues:
        print(issue, file=err)
    print("nothing was applied", file=err)
    return False


def _with_versions(
    ref: engine.StackRef,
    file: str,
    fleet: Fleet,
    inputs: DesiredInputs,
    settings: RolloutSettings,
    err: TextIO,
) -> DesiredInputs | None:
    """``inputs`` with the versioned workers' planned versions (see
    :mod:`twc.commands.rollouts`); ``None`` (after saying why) when they cannot be read:
    applying without them would delete versions workflows are pinned to."""
    if inputs.cluster is None and not any(w.rollout is not None for w in fleet.resolved_workers()):
        return inputs
    from twc.commands.rollouts import plan_versions
    from twc.kube.client import NoClusterError

    try:
        with stack_kube(ref) as kube:
            return plan_versions(
                kube,
                fleet,
                inputs,
                file=file,
                temporal_address=(ref.config or {}).get("temporalAddress"),
                settings=settings,
                err=err,
            )
    except NoClusterError:
        if any(w.rollout is not None for w in fleet.resolved_workers()):
            print("versioned workers need the cluster: no cluster is configured", file=err)
            return None
        return inputs
    except Exception as exc:  # noqa: BLE001 - any read failure stops the command with its reason
        print(
            f"cannot read the versions of versioned workers: {exc}; nothing was applied",
            file=err,
        )
        return None


def cluster_adds_a_source(inputs: DesiredInputs) -> bool:
    """Whether the cluster's objects add anything to the fleet file (the line about them
    is said only then): the views the daemon generates of other workers are no source,
    and a fleet-file stack has them on every run."""
    return any(
        not found.is_known or any(not is_view(o) for o in found.objects or ())
        for found in (inputs.cluster or {}).values()
    )


def summary(inputs: DesiredInputs) -> str:
    """The line that says which cluster objects the inputs include."""
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
