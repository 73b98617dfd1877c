"""``twc status``: per worker phase, replicas, task queue, pollers, backlog, conditions.

From the stack's state (no engine run), with each Deployment read live and each queue
described again, so the answer is current even between ``up`` runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any, TextIO

from pulumi.automation import CommandError

from providers.taskqueue import check_task_queue
from twc.builders import REPLICAS_SOURCE_ANNOTATION
from twc.cli.common import stack_kube, stack_ref
from twc.cli.rollouts import live_rollouts
from twc.engine import engine
from twc.engine.errors import engine_failure
from twc.kube.client import KubeClient, NoClusterError
from twc.kube.workloads import read_deployment
from twc.rollout import version_rows
from twc.status import worker_status
from twc.timestamps import age


def format_status_table(
    workers: dict[str, Any], *, with_age: bool = False, now: float | None = None
) -> str:
    """The status table, conditions ``with_age``, a versioned worker's versions under it."""
    now = time.time() if now is None else now
    rows: list[tuple[str, ...]] = [
        ("WORKER", "PHASE", "READY", "TASK QUEUE", "POLLERS", "BACKLOG", "CONDITIONS")
    ]
    for key in sorted(workers or {}):
        st = workers[key]
        conds = []
        for c in st.get("conditions", []):
            text = f"{c.get('type')}={c.get('status')}"
            text += f" ({c['reason']})" if c.get("reason") else ""
            since = c.get("lastTransitionTime")
            conds.append(f"{text} for {age(since, now)}" if with_age and since else text)
        text = ", ".join(conds)
        if st.get("replicasManagedBy") == "autoscaling":
            text += f"; replicas managed by autoscaling: {st.get('replicas', 0)}"
        ready = f"{st.get('readyReplicas', 0)}/{st.get('replicas', 0)}"
        counts = (st.get("taskQueue", ""), st.get("pollers", 0), st.get("approximateBacklog", 0))
        rows.append((key, str(st.get("phase", "")), ready, *map(str, counts), text))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for index, row in enumerate(rows):
        cells = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1]))
        lines.append(f"{cells}  {row[-1]}")
        rollout = workers[row[0]].get("rollout") if index else None
        if not isinstance(rollout, dict):
            continue
        lines += [f"  {role:<10}  {build}  {text}" for role, build, text in version_rows(rollout)]
        state = rollout.get("rollout")
        if isinstance(state, dict) and state.get("message"):
            lines.append(f"  {'rollout':<10}  {state.get('reason')}: {state.get('message')}")
        if rollout.get("error"):
            lines.append(f"  {'rollout':<10}  unknown: {rollout['error']}")
    return "\n".join(lines)


def _by_worker(resources: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    return {
        r["urn"].split("::")[-1][: -len(suffix)]: r.get("outputs", {})
        for r in resources
        if r.get("type", "").endswith(kind)
    }


def live_status(ref: engine.StackRef) -> dict[str, dict[str, Any]]:
    """Per worker, the recorded status refreshed from the live cluster and Temporal."""
    if ref.env and "KUBECONFIG" in ref.env:
        # The check reads credential secrets from the cluster, as the provider does.
        os.environ.setdefault("KUBECONFIG", ref.env["KUBECONFIG"])
    st = engine.select_stack(ref)
    resources = (st.export_stack().deployment or {}).get("resources", [])
    outputs = st.outputs()
    recorded = dict(outputs["workers"].value or {}) if "workers" in outputs else {}
    checks = _by_worker(resources, "TaskQueueCheck", "-check")
    deployments = _by_worker(resources, "kubernetes:apps/v1:Deployment", "-deployment")
    kube: KubeClient | None = None
    with contextlib.suppress(NoClusterError):
        kube = stack_kube(ref)
    result: dict[str, dict[str, Any]] = {}
    for key, props in sorted(checks.items()):
        dep_out = deployments.get(key, {})
        spec_replicas = (dep_out.get("spec") or {}).get("replicas")
        desired = int(
            recorded.get(key, {}).get("replicas", 0) if spec_replicas is None else spec_replicas
        )
        dep_status: Any = dep_out.get("status") or {}
        meta = dep_out.get("metadata") or {}
        source = (meta.get("annotations") or {}).get(REPLICAS_SOURCE_ANNOTATION)
        if kube is not None:
            name = (meta.get("namespace", ""), meta.get("name", ""))
            live = (read_deployment(kube, *name) if meta else None) or {}
            dep_status = live.get("status") or {}
            # The daemon scales autoscaled workers outside the engine: the cluster knows.
            desired = int((live.get("spec") or {}).get("replicas", desired))
        check = check_task_queue(props, props.get("condition"))
        result[key] = worker_status(
            desired=desired,
            deployment_status=dep_status,
            queue_condition=check.get("condition"),
            pollers=check.get("pollers"),
            backlog=check.get("approximateBacklog"),
            task_queue=str(props.get("taskQueue", "")),
            autoscaled=source == "autoscaling",
        )
    _with_rollouts(result, kube, checks, recorded)
    if kube is not None:
        kube.close()
    return result


def _with_rollouts(
    result: dict[str, dict[str, Any]], kube: Any, checks: dict[str, Any], recorded: dict[str, Any]
) -> None:
    """Versioned workers: the live versions, replicas counted on the target's Deployment."""
    try:
        found = live_rollouts(kube, checks, recorded)
    except Exception as exc:  # noqa: BLE001 - status reports what it cannot read
        error = f"{type(exc).__name__}: {exc}"
        found = {key: {"error": error} for key, rec in recorded.items() if rec.get("targetBuildID")}
    for key, rollout in found.items():
        worker = result.get(key)
        if worker is None:
            continue
        worker["rollout"] = rollout
        target = rollout.get("targetVersion") or {}
        if not target.get("deployment"):
            continue
        ready, wanted = int(target.get("readyReplicas", 0)), int(target.get("replicas", 0))
        worker["replicas"], worker["readyReplicas"] = wanted, ready
        conditions = worker.get("conditions", [])
        for cond in conditions:
            if cond.get("type") == "WorkerDeploymentReady":
                cond.update(
                    status="True" if ready >= wanted else "False",
                    reason="ReplicasReady" if ready >= wanted else "ReplicasNotReady",
                    message=f"{ready}/{wanted} replicas ready",
                )
        settled = ready >= wanted and all(c.get("status") == "True" for c in conditions)
        if worker.get("phase") == "Pending" and settled:
            worker["phase"] = "Ready"


def run_status(
    stack: str,
    output: str = "table",
    out: TextIO = sys.stdout,
    *,
    sharded: bool = False,
    fleet_file: str | None = None,
    shard: str | None = None,
) -> int:
    """``twc status``: JSON or the table; a ``sharded`` stack's shards (or the one ``shard``
    names) in one, with each shard's workers."""
    from twc.cli.shards import shard_refs

    refs = shard_refs(stack, fleet_file, shard) if sharded else [stack_ref(stack)]
    if refs is None:
        return 1
    workers: dict[str, dict[str, Any]] = {}
    shards: dict[str, list[str]] = {}
    for ref in refs:
        try:
            found = live_status(ref)
        except CommandError as exc:
            print(engine_failure(exc).text, file=sys.stderr)
            return 1
        workers.update(found)
        shards[ref.name] = sorted(found)
    body = {"stack": stack, **({"shards": shards} if sharded else {}), "workers": workers}
    if output == "json":
        print(json.dumps(body, indent=2, sort_keys=True), file=out)
    else:
        print(format_status_table(workers, with_age=True), file=out)
    return 0
