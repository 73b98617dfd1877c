"""What the engine verbs of the command line do: ``up``, ``preview``, ``refresh``,
``destroy``, ``status``. The CLI parses arguments and calls these.

The fleet file is validated before the engine starts, so a bad file is rejected in
milliseconds with every problem listed, and nothing is applied.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from twc.controller import engine
from twc.errors import SpecError

Printer = Callable[[str], Any]


def fleet_file_for(stack: str, override: str | None = None) -> str:
    """The fleet file of a stack: ``--fleet-file``, else ``stacks/<stack>.yaml``."""
    return override or f"stacks/{stack}.yaml"


def validate_or_report(file: str, err: TextIO | None = None) -> bool:
    """Validate the fleet file; print every issue (to ``err``, default stderr) and return
    False if invalid."""
    err = err if err is not None else sys.stderr
    from twc.connections import resolve_fleet_connections
    from twc.spec import load_fleet_file

    path = file if Path(file).is_absolute() else str(engine.ROOT / file)
    try:
        fleet = load_fleet_file(path)
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


def run_up(
    stack: str,
    fleet_file: str | None = None,
    out: TextIO = sys.stdout,
    *,
    cluster_objects: bool | None = None,
) -> int:
    """``twc up``: validate, then ``pulumi up`` with the engine's progress shown.

    Args:
        stack: The stack (environment).
        fleet_file: ``--fleet-file``; default ``stacks/<stack>.yaml``.
        out: Where the engine's progress and the status table go.
        cluster_objects: Merge the cluster's Queue, TemporalWorker and connection objects
            as the daemon does: ``None`` when the daemon manages the stack (see
            :func:`with_cluster_objects`).
    """
    file = fleet_file_for(stack, fleet_file)
    if not validate_or_report(file):
        return 1
    if stack == "local":
        _ensure_local_namespaces(file)
    from pulumi.automation import CommandError

    try:
        with with_cluster_objects(stack_ref(stack, fleet_file), file, cluster_objects) as ref:
            if ref is None:
                return 1
            result = engine.up(ref, on_output=lambda line: print(line, file=out, flush=True))
    except CommandError as exc:
        print(_engine_error(exc), file=sys.stderr)
        return 1
    workers = result.outputs["workers"].value if "workers" in result.outputs else {}
    print(format_status_table(workers), file=out)
    return 0


MANAGED_OUTPUT = "clusterObjects"
"""Stack output the program sets when its last run merged the cluster's objects."""


@contextmanager
def with_cluster_objects(
    ref: engine.StackRef, file: str, wanted: bool | None, err: TextIO | None = None
) -> Iterator[engine.StackRef | None]:
    """``ref`` with the cluster's objects in a ``TWC_OVERLAY_FILE``, when wanted.

    ``wanted=None`` decides from the stack: a stack whose last run merged them (the
    daemon's runs always do; output :data:`MANAGED_OUTPUT`) gets them again, so a manual
    ``up`` or a pull request's preview does not delete every worker that comes from the
    cluster, nor reset autoscaled replicas. Yields ``None`` (after saying why) when they
    are wanted but cannot be read: applying without them would delete those workers.
    """
    err = err if err is not None else sys.stderr
    if wanted is None:
        try:
            wanted = bool(engine.outputs(ref).get(MANAGED_OUTPUT))
        except Exception:  # a new stack, an unreachable backend: the engine will say
            wanted = False
    if not wanted:
        yield ref
        return
    from twc.controller.cluster_objects import read_overlay
    from twc.spec import load_fleet_file

    path = file if Path(file).is_absolute() else str(engine.ROOT / file)
    try:
        client = _api_client(ref)
        found = read_overlay(load_fleet_file(path), file=file, api_client=client)
        client.close()
    except Exception as exc:
        print(
            f"cannot read the cluster's Queue, TemporalWorker and connection objects: {exc}; "
            "nothing was applied (--file-only ignores them)",
            file=err,
        )
        yield None
        return
    print(found.summary(), file=err)
    for line in found.rejected:
        print(f"  left out: {line}", file=err)
    with tempfile.TemporaryDirectory(prefix="twc-overlay-") as tmp:
        overlay = Path(tmp) / "overlay.json"
        overlay.write_text(json.dumps(found.overlay.to_json(), sort_keys=True))
        env = {**(ref.env or {}), "TWC_OVERLAY_FILE": str(overlay)}
        yield dataclasses.replace(ref, env=env)


def _api_client(ref: engine.StackRef) -> Any:
    """A Kubernetes client for the stack's cluster (the engine's ``KUBECONFIG``)."""
    kubeconfig = (ref.env or {}).get("KUBECONFIG")
    if kubeconfig:
        from kubernetes import config

        return config.new_client_from_config(config_file=kubeconfig)
    from twc.controller.cluster import api_client_from_environment

    client = api_client_from_environment()
    if client is None:
        raise LookupError("no kubeconfig and not in a cluster")
    return client


def _ensure_local_namespaces(file: str) -> None:
    """The embedded environment has no namespaces but ``default``: create the fleet's."""
    from twc.spec import load_fleet_file

    kube = _kube_or_none(engine.local_stack_env("local"))
    if kube is None:
        return
    path = file if Path(file).is_absolute() else str(engine.ROOT / file)
    for ns in sorted({w.namespace for w in load_fleet_file(path).resolved_workers()}):
        kube.ensure_namespace(ns)


def format_status_table(
    workers: dict[str, Any], *, with_age: bool = False, now: float | None = None
) -> str:
    """Per worker: phase, replicas ready/desired, task queue, pollers, backlog, reasons.

    With ``with_age`` each condition also says how long it has had its status.
    """
    rows = [("WORKER", "PHASE", "READY", "TASK QUEUE", "POLLERS", "BACKLOG", "CONDITIONS")]
    for key in sorted(workers or {}):
        st = workers[key]
        conds = ", ".join(
            f"{c.get('type')}={c.get('status')}"
            + (f" ({c.get('reason')})" if c.get("reason") else "")
            + (
                f" for {_age(c.get('lastTransitionTime'), now)}"
                if with_age and c.get("lastTransitionTime")
                else ""
            )
            for c in st.get("conditions", [])
        )
        rows.append(
            (
                key,
                str(st.get("phase", "")),
                f"{st.get('readyReplicas', 0)}/{st.get('replicas', 0)}",
                str(st.get("taskQueue", "")),
                str(st.get("pollers", 0)),
                str(st.get("approximateBacklog", 0)),
                conds,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1]
        for row in rows
    )


def _age(timestamp: str | None, now: float | None = None) -> str:
    """``5m``, ``2h``, ``3d`` since an RFC 3339 timestamp."""
    import time
    from datetime import datetime

    if not timestamp:
        return "?"
    then = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    secs = max(0, int((now if now is not None else time.time()) - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def _engine_error(exc: Exception) -> str:
    """The useful part of a failed engine run (the program's own error, if any)."""
    text = str(exc)
    for marker in ("invalid fleet; nothing was changed", "nothing was changed"):
        idx = text.find(marker)
        if idx >= 0:
            start = text.rfind("\n", 0, max(0, text.rfind("error:", 0, idx))) + 1
            return text[start:].strip()
    stderr = getattr(exc, "stderr", "") or ""
    return stderr.strip() or text


def live_status(stack: str, *, check_temporal: bool = True) -> dict[str, dict[str, Any]]:
    """Per worker, the recorded status refreshed from the live cluster and Temporal.

    Reads the stack's state (no engine run): each worker's TaskQueueCheck inputs say
    where its queue is; its Deployment is read from the API server and its queue is
    described again, so the answer is current even between ``up`` runs.
    """
    import os

    from providers.taskqueue import check_task_queue
    from twc.components.status import worker_status

    ref = stack_ref(stack)
    if ref.env and "KUBECONFIG" in ref.env:
        # The check reads credential secrets from the cluster, as the provider does.
        os.environ.setdefault("KUBECONFIG", ref.env["KUBECONFIG"])
    st = engine.select_stack(ref)
    resources = (st.export_stack().deployment or {}).get("resources", [])
    recorded = {}
    outputs = st.outputs()
    if "workers" in outputs:
        recorded = dict(outputs["workers"].value or {})
    checks = {
        r["urn"].split("::")[-1][: -len("-check")]: r.get("outputs", {})
        for r in resources
        if r.get("type", "").endswith("TaskQueueCheck")
    }
    deployments = {
        r["urn"].split("::")[-1][: -len("-deployment")]: r.get("outputs", {})
        for r in resources
        if r.get("type") == "kubernetes:apps/v1:Deployment"
    }
    kube = _kube_or_none(ref.env)
    result: dict[str, dict[str, Any]] = {}
    for key, props in sorted(checks.items()):
        dep_out = deployments.get(key, {})
        desired = int(
            (dep_out.get("spec") or {}).get("replicas", recorded.get(key, {}).get("replicas", 0))
        )
        dep_status: Any = dep_out.get("status") or {}
        if kube is not None:
            meta = dep_out.get("metadata") or {}
            live = (
                kube.get_deployment(meta.get("namespace", ""), meta.get("name", ""))
                if meta
                else None
            )
            dep_status = (live or {}).get("status") or {}
        prev = props.get("condition")
        check = check_task_queue(props, prev) if check_temporal else props
        result[key] = worker_status(
            desired=desired,
            deployment_status=dep_status,
            queue_condition=check.get("condition"),
            pollers=check.get("pollers"),
            backlog=check.get("approximateBacklog"),
            task_queue=str(props.get("taskQueue", "")),
        )
    return result


def _kube_or_none(env: Mapping[str, str] | None = None) -> Any:
    import os

    kubeconfig = (env or {}).get("KUBECONFIG") or os.environ.get("KUBECONFIG")
    if not kubeconfig:
        return None
    from twc.local.kube import Kube

    return Kube(kubeconfig)


def run_status(stack: str, output: str = "table", out: TextIO = sys.stdout) -> int:
    """``twc status``: per worker phase, replicas, task queue, pollers, backlog, conditions."""
    import json

    from pulumi.automation import CommandError

    try:
        workers = live_status(stack)
    except CommandError as exc:
        print(_engine_error(exc), file=sys.stderr)
        return 1
    if output == "json":
        print(json.dumps({"stack": stack, "workers": workers}, indent=2, sort_keys=True), file=out)
    else:
        print(format_status_table(workers, with_age=True), file=out)
    return 0
