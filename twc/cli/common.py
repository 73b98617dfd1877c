"""What the engine verbs share: the stack, its fleet file, and the steps of one manual
apply: observe (:func:`observe`) → plan (:func:`dry_run_or_report`,
:func:`deletion_verdict`) → execute (the engine) → report."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import yaml

from twc import program
from twc.cli.rollouts import plan_versions
from twc.connections import default_registry, resolve_fleet_connections
from twc.desired import INPUTS_ENV, DesiredFleet, DesiredInputs, GuardVerdict, desired_fleet
from twc.desired import deletion_verdict as verdict_of
from twc.engine import engine
from twc.errors import SpecError
from twc.kube.client import KubeClient, NoClusterError, kube_client
from twc.kube.record import RecordStore, record_for_stack
from twc.kube.workloads import ensure_namespace
from twc.native.views import is_view
from twc.rollout import RolloutSettings
from twc.shards import slice_inputs
from twc.spec import Fleet, load_fleet, load_fleet_file


def fleet_file_for(stack: str, override: str | None = None) -> str:
    """The fleet file of a stack: ``--fleet-file``, else ``stacks/<stack>.yaml``."""
    return override or f"stacks/{stack}.yaml"


def fleet_path(file: str) -> str:
    """The fleet file's path (relative names are relative to the project)."""
    return file if Path(file).is_absolute() else str(engine.ROOT / file)


def validate_or_report(file: str, err: TextIO | None = None) -> bool:
    """Validate the fleet file; False after printing every issue (to ``err``)."""
    err = err if err is not None else sys.stderr
    try:
        resolve_fleet_connections(load_fleet_file(fleet_path(file)), file=file)
    except SpecError as exc:
        print(*exc.lines(), "nothing was applied", sep="\n", file=err)
        return False
    return True


def stack_ref(stack: str, fleet_file: str | None = None) -> engine.StackRef:
    """The stack with the config this run needs; the ``local`` stack's with the embedded
    environment's variables the shell lacks and its Temporal address."""
    env: dict[str, str] = {}
    config: dict[str, str] = {}
    if stack == "local":
        if not os.environ.get("PULUMI_BACKEND_URL"):
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(engine.LOCAL_ENV_FILE.read_text())
                env = {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
        if address := env.get("TEMPORAL_ADDRESS") or os.environ.get("TEMPORAL_ADDRESS"):
            # Locally, workers (twc local up --run-workers) poll within seconds of a rollout.
            config = {"temporalAddress": address, "waitForPollersSeconds": "15"}
    if fleet_file:
        config["fleetFile"] = fleet_file
    return engine.StackRef(name=stack, config=config, env=env)


def stack_kube(ref: engine.StackRef) -> KubeClient:
    """A client of the stack's cluster (the engine's ``KUBECONFIG``), or ``NoClusterError``."""
    return kube_client((ref.env or {}).get("KUBECONFIG"))


def stack_config(ref: engine.StackRef) -> dict[str, str]:
    """The stack's ``twc:`` config (unprefixed): ``Pulumi.<stack>.yaml``, then this run's."""
    try:
        data = yaml.safe_load((ref.work_dir / f"Pulumi.{ref.name}.yaml").read_text())
    except (OSError, yaml.YAMLError):
        data = None
    config = (data.get("config") if isinstance(data, dict) else None) or {}
    out = {
        str(k).removeprefix(engine.CONFIG_PREFIX): str(v)
        for k, v in config.items()
        if str(k).startswith(engine.CONFIG_PREFIX) and isinstance(v, str | int | float)
    }
    return {**out, **{k: str(v) for k, v in (ref.config or {}).items()}}


def stack_record(ref: engine.StackRef, kube: KubeClient) -> RecordStore:
    """The stack's record, where the stack keeps it."""
    return record_for_stack(kube.core, ref.name, stack_config(ref))


def planned(ref: engine.StackRef, file: str) -> tuple[Fleet, DesiredFleet]:
    """The fleet and desired fleet from the inputs :func:`desired_inputs` prepared."""
    inputs_file = (ref.env or {}).get(INPUTS_ENV)
    inputs = DesiredInputs.from_file(inputs_file) if inputs_file else DesiredInputs()
    fleet = load_fleet(inputs.fleet, file) if inputs.fleet else load_fleet_file(fleet_path(file))
    return fleet, desired_fleet(fleet, inputs, registry=default_registry(), file=file)


def deletion_verdict(ref: engine.StackRef, file: str) -> GuardVerdict:
    """What the prepared run would delete of the running workers; raises if unreadable."""
    fleet, desired = planned(ref, file)
    with stack_kube(ref) as kube:
        running = program.running_workers(kube, ref.name, stack_config(ref))
        approved = stack_record(ref, kube).approved
        return verdict_of(running, desired.workers, fleet.deletion_guard, approved)


def observe(
    ref: engine.StackRef,
    file: str,
    wanted: bool | None,
    err: TextIO | None = None,
    rollouts: RolloutSettings | None = None,
    namespaces: Sequence[str] | None = None,
) -> DesiredInputs | None:
    """The inputs of a manual apply of ``ref`` (a stack, or a shard of ``namespaces``), as
    the daemon would observe them; ``None`` (after saying why) when unreadable."""
    err = err if err is not None else sys.stderr
    path = fleet_path(file)
    document = yaml.safe_load(Path(path).read_text())
    fleet = load_fleet_file(path)
    inputs = DesiredInputs(fleet=document)
    if fleet.cluster_objects if wanted is None else wanted:
        try:
            with stack_kube(ref) as kube:
                config = stack_config(ref)
                inputs = program.observe(
                    kube, fleet, stack=ref.name, config=config, document=document
                )
        except Exception as exc:  # noqa: BLE001 - any read failure stops the command with its reason
            print(
                f"{ref.name}: cannot read the cluster's Queue, TemporalWorker and connection "
                f"objects or the stack's record: {exc}; nothing was applied (--file-only "
                "ignores them)",
                file=err,
            )
            return None
        if namespaces is None and (line := summary(inputs)):
            print(line, file=err)
    if namespaces is not None:
        inputs = slice_inputs(inputs, fleet, namespaces)
    # With the versioned workers' planned versions.
    versioned = any(w.rollout is not None for w in fleet.resolved_workers())
    if inputs.cluster is None and not versioned:
        return inputs
    try:
        with stack_kube(ref) as kube:
            return plan_versions(
                kube,
                fleet,
                inputs,
                file=file,
                temporal_address=(ref.config or {}).get("temporalAddress"),
                settings=rollouts or RolloutSettings(),
                err=err,
            )
    except NoClusterError:  # observed cluster objects had a cluster: here for versioned workers
        print("versioned workers need the cluster: no cluster is configured", file=err)
    except Exception as exc:  # noqa: BLE001 - any read failure stops the command with its reason
        print(
            f"cannot read the versions of versioned workers: {exc}; nothing was applied", file=err
        )
    return None


@contextmanager
def desired_inputs(
    ref: engine.StackRef, inputs: DesiredInputs | None
) -> Iterator[engine.StackRef | None]:
    """``ref`` with ``inputs`` (what :func:`observe` found) in a ``TWC_DESIRED_INPUTS``
    file, or ``None`` without them."""
    if inputs is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="twc-inputs-") as tmp:
        inputs.to_file(Path(tmp) / "inputs.json")
        yield ref.with_env({INPUTS_ENV: str(Path(tmp) / "inputs.json")})


def dry_run_or_report(ref: engine.StackRef, file: str, err: TextIO) -> bool:
    """The API server's dry run of the prepared run's Deployments: False after printing
    every refusal (to ``err``); True when it accepts them all or cannot be asked."""
    from twc.kube.dryrun import describe, dry_run_fleet

    try:
        _, desired = planned(ref, file)
        with stack_kube(ref) as kube:
            result = dry_run_fleet(
                desired.fleet,
                file=file,
                api_client=kube.api_client,
                registry=default_registry(),
                origins=desired.origins,
            )
    except NoClusterError:
        return True
    except Exception as exc:  # noqa: BLE001 - unreachable or forbidden: the engine will say it better
        print(f"the API server's dry run of the Deployments did not run: {exc}", file=err)
        return True
    for line in [*describe(result), *result.issues]:
        print(line, file=err)
    if result.issues:
        print("nothing was applied", file=err)
    return not result.issues


def summary(inputs: DesiredInputs) -> str | None:
    """The line that says which cluster objects the inputs include; ``None`` when they add
    nothing to the fleet file (views of other workers aside)."""
    counts, adds = [], False
    for key, found in sorted((inputs.cluster or {}).items()):
        kind = key.split(".", 1)[0]
        if found.objects is None:
            counts.append(f"{kind}: unknown ({found.failure})")
            adds = True
            continue
        views = sum(1 for o in found.objects if is_view(o))
        adds = adds or len(found.objects) > views
        shown = f" (+{views} generated views of other workers)" if views else ""
        counts.append(f"{len(found.objects) - views} {kind}{shown}")
    return "including from the cluster, as the daemon does: " + ", ".join(counts) if adds else None


def ensure_local_namespaces(file: str, ref: engine.StackRef) -> None:
    """The embedded environment has no namespaces but ``default``: create the fleet's."""
    namespaces = {w.namespace for w in load_fleet_file(fleet_path(file)).resolved_workers()}
    with contextlib.suppress(NoClusterError), stack_kube(ref) as kube:  # no cluster: none to create
        for ns in sorted(namespaces):
            ensure_namespace(kube, ns)
