"""``twc status``: per worker phase, replicas, task queue, pollers, backlog and
conditions, live.

Reads the stack's state (no engine run): each worker's TaskQueueCheck inputs say where
its queue is; its Deployment is read from the API server and its queue is described
again, so the answer is current even between ``up`` runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

from twc.stackrun import engine
from twc.stackrun.errors import engine_failure
from twc.timestamps import age

__all__ = ["format_status_table", "live_status", "run_status"]


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
                f" for {age(c.get('lastTransitionTime'), time.time() if now is None else now)}"
                if with_age and c.get("lastTransitionTime")
                else ""
            )
            for c in st.get("conditions", [])
        )
        if st.get("replicasManagedBy") == "autoscaling":
            conds += f"; replicas managed by autoscaling: {st.get('replicas', 0)}"
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
    lines = []
    for row in rows:
        lines.append(
            "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1]
        )
        rollout = (workers or {}).get(row[0], {}).get("rollout") if row[0] != "WORKER" else None
        if isinstance(rollout, dict):
            lines.extend(_version_lines(rollout))
    return "\n".join(lines)


def _version_lines(rollout: dict[str, Any]) -> list[str]:
    """Under a versioned worker: each version with its official status, and the
    rollout's state."""
    from twc.rollout import version_rows

    lines = [f"  {role:<10}  {build}  {text}" for role, build, text in version_rows(rollout)]
    state = rollout.get("rollout")
    if isinstance(state, dict) and state.get("message"):
        lines.append(f"  {'rollout':<10}  {state.get('reason')}: {state.get('message')}")
    if rollout.get("error"):
        lines.append(f"  {'rollout':<10}  unknown: {rollout['error']}")
    return lines


def live_status(
    stack: str, *, check_temporal: bool = True, ref: Any = None
) -> dict[str, dict[str, Any]]:
    """Per worker, the recorded status refreshed from the live cluster and Temporal.

    Reads the stack's state (no engine run): each worker's TaskQueueCheck inputs say
    where its queue is; its Deployment is read from the API server and its queue is
    described again, so the answer is current even between ``up`` runs.
    """
    from providers.taskqueue import check_task_queue
    from twc.builders import REPLICAS_SOURCE_ANNOTATION
    from twc.commands.common import stack_kube, stack_ref
    from twc.kube.client import KubeClient, NoClusterError
    from twc.kube.workloads import read_deployment
    from twc.status import worker_status

    ref = ref if ref is not None else stack_ref(stack)
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
    kube: KubeClient | None
    try:
        kube = stack_kube(ref)
    except NoClusterError:
        kube = None
    result: dict[str, dict[str, Any]] = {}
    for key, props in sorted(checks.items()):
        dep_out = deployments.get(key, {})
        desired = int(
            (dep_out.get("spec") or {}).get("replicas", recorded.get(key, {}).get("replicas", 0))
        )
        dep_status: Any = dep_out.get("status") or {}
        meta = dep_out.get("metadata") or {}
        autoscaled = (meta.get("annotations") or {}).get(REPLICAS_SOURCE_ANNOTATION) == (
            "autoscaling"
        )
        if kube is not None:
            live = (
                read_deployment(kube, meta.get("namespace", ""), meta.get("name", ""))
                if meta
                else None
            )
            dep_status = (live or {}).get("status") or {}
            live_replicas = ((live or {}).get("spec") or {}).get("replicas")
            if live_replicas is not None:
                # The daemon scales autoscaled workers outside the engine: the cluster,
                # not the stack's state, knows their count.
                desired = int(live_replicas)
        prev = props.get("condition")
        check = check_task_queue(props, prev) if check_temporal else props
        result[key] = worker_status(
            desired=desired,
            deployment_status=dep_status,
            queue_condition=check.get("condition"),
            pollers=check.get("pollers"),
            backlog=check.get("approximateBacklog"),
            task_queue=str(props.get("taskQueue", "")),
            autoscaled=autoscaled,
        )
    _with_rollouts(result, kube, checks, recorded)
    if kube is not None:
        kube.close()
    return result


def _with_rollouts(
    result: dict[str, dict[str, Any]],
    kube: Any,
    checks: dict[str, Any],
    recorded: dict[str, Any],
) -> None:
    """Versioned workers: the live versions, and replicas counted on the target's
    Deployment (see :func:`twc.commands.rollouts.live_rollouts`)."""
    from twc.commands.rollouts import live_rollouts

    try:
        found = live_rollouts(kube, checks, recorded, now=time.time())
    except Exception as exc:  # noqa: BLE001 - status reports what it cannot read
        for key, rec in recorded.items():
            if key in result and rec.get("targetBuildID"):
                result[key]["rollout"] = {"error": f"{type(exc).__name__}: {exc}"}
        return
    for key, rollout in found.items():
        if key not in result:
            continue
        target = rollout.get("targetVersion") or {}
        if target.get("deployment"):
            ready = int(target.get("readyReplicas", 0))
            wanted = int(target.get("replicas", 0))
            result[key]["replicas"], result[key]["readyReplicas"] = wanted, ready
            for cond in result[key].get("conditions", []):
                if cond.get("type") == "WorkerDeploymentReady":
                    ok = ready >= wanted
                    cond.update(
                        status="True" if ok else "False",
                        reason="ReplicasReady" if ok else "ReplicasNotReady",
                        message=f"{ready}/{wanted} replicas ready",
                    )
            if result[key].get("phase") == "Pending" and ready >= wanted:
                queue = [c for c in result[key].get("conditions", []) if c.get("status") != "True"]
                if not queue:
                    result[key]["phase"] = "Ready"
        result[key]["rollout"] = rollout


def run_status(stack: str, output: str = "table", out: TextIO = sys.stdout) -> int:
    """``twc status``: per worker phase, replicas, task queue, pollers, backlog, conditions."""
    from pulumi.automation import CommandError

    try:
        workers = live_status(stack)
    except CommandError as exc:
        print(engine_failure(exc).text, file=sys.stderr)
        return 1
    if output == "json":
        print(json.dumps({"stack": stack, "workers": workers}, indent=2, sort_keys=True), file=out)
    else:
        print(format_status_table(workers, with_age=True), file=out)
    return 0
