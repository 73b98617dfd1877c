"""The controllers the embedded environment lacks, played just far enough.

No kubelet, scheduler or deployment controller runs locally, so a Deployment would never
get a ReplicaSet, a revision or an Available condition, and pulumi-kubernetes would wait
ten minutes for each one. ``SimulatedControllers`` does what the deployment controller and
the kubelet would do for a healthy rollout, as the official worker controller's
integration tests do:

* Deployment: one ReplicaSet per pod template (owned by the Deployment, named from a hash
  of the template), the ``deployment.kubernetes.io/revision`` annotation moving with each
  new template, ReplicaSet and Deployment status with every replica ready, and the
  conditions Progressing=True/NewReplicaSetAvailable and Available=True.
* StatefulSet: status with every replica ready and currentRevision == updateRevision.

Garbage collection and namespace deletion are real: ``twc local up`` runs
kube-controller-manager with only those two controllers. Pods are not created; tests
start real temporalio workers from the Deployment's env instead
(``twc.local.workerpod``), and with ``run_workers`` (``twc local up --run-workers``)
this loop does so itself, one worker process per replica, like a kubelet. A Deployment
annotated ``twc.local/simulate: hold`` is left alone, so tests can keep one unavailable.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from typing import Any

from twc.kube.client import status_of
from twc.local.kube import Kube

log = logging.getLogger(__name__)

REVISION = "deployment.kubernetes.io/revision"
HOLD = "twc.local/simulate"


def template_hash(template: dict[str, Any]) -> str:
    """A stable short hash of a pod template (the ReplicaSet name suffix)."""
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


class SimulatedControllers:
    """Deployment + StatefulSet controllers and an always-ready kubelet, as a polling loop."""

    def __init__(self, kube: Kube, interval: float = 0.25, run_workers: bool = False) -> None:
        self.kube = kube
        self.interval = interval
        self.run_workers = run_workers
        # (namespace, deployment, index) -> (template hash, running worker pod)
        self._pods: dict[tuple[str, str, int], tuple[str, Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> SimulatedControllers:
        """Run the loop in a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="simulated-controllers", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        for _, pod in self._pods.values():
            pod.stop()
        self._pods.clear()

    def run(self) -> None:
        """Reconcile until stopped; API errors are logged and retried next round."""
        while not self._stop.is_set():
            try:
                self.reconcile_once()
            except Exception as exc:  # noqa: BLE001 - the test bed reports and retries
                log.debug("simulated controllers: %s", exc)
            self._stop.wait(self.interval)

    # ------------------------------------------------------------ reconcile
    def reconcile_once(self) -> int:
        """One pass over every Deployment and StatefulSet; returns how many it changed."""
        changed = 0
        apps = self.kube.apps
        deployments = _items(apps.list_deployment_for_all_namespaces)
        # One ReplicaSet list per pass, not one per Deployment: per-Deployment lists made
        # a pass quadratic in the fleet (2.7 s at 110 Deployments, minutes at 1000).
        replica_sets: dict[str, list[dict[str, Any]]] = {}
        for rs in _items(apps.list_replica_set_for_all_namespaces):
            for owner in rs["metadata"].get("ownerReferences") or []:
                replica_sets.setdefault(owner["uid"], []).append(rs)
        for dep in deployments:
            changed += self._deployment(dep, replica_sets.get(dep["metadata"]["uid"], []))
        if self.run_workers:
            changed += self._kubelet(deployments)
        for sts in _items(apps.list_stateful_set_for_all_namespaces):
            changed += self._statefulset(sts)
        return changed

    def _deployment(self, dep: dict[str, Any], owned: list[dict[str, Any]]) -> int:
        meta = dep["metadata"]
        ns, name = meta["namespace"], meta["name"]
        annotations = meta.get("annotations") or {}
        if annotations.get(HOLD) == "hold" or meta.get("deletionTimestamp"):
            return 0
        spec = dep["spec"]
        replicas = int(spec.get("replicas", 1))
        tmpl_hash = template_hash(spec["template"])
        revisions = {
            rs["metadata"]["name"]: int(
                (rs["metadata"].get("annotations") or {}).get(REVISION, "0")
            )
            for rs in owned
        }
        rs_name = f"{name}-{tmpl_hash}"
        changed = 0
        if rs_name not in revisions:
            revision = max(revisions.values(), default=0) + 1
            labels = dict(spec["template"].get("metadata", {}).get("labels") or {})
            labels["pod-template-hash"] = tmpl_hash
            template = json.loads(json.dumps(spec["template"]))
            template.setdefault("metadata", {})["labels"] = labels
            selector = json.loads(json.dumps(spec["selector"]))
            selector.setdefault("matchLabels", {})["pod-template-hash"] = tmpl_hash
            body = {
                "metadata": {
                    "name": rs_name,
                    "namespace": ns,
                    "labels": labels,
                    "annotations": {REVISION: str(revision)},
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "name": name,
                            "uid": meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {"replicas": replicas, "selector": selector, "template": template},
            }
            try:
                self.kube.apps.create_namespaced_replica_set(ns, body)
            except Exception as exc:
                if status_of(exc) != 409:
                    raise
            revisions[rs_name] = revision
            changed += 1
        revision = revisions[rs_name]
        # Scale: the current ReplicaSet gets every replica, older ones none.
        for rs in owned:
            rs_n = rs["metadata"]["name"]
            want = replicas if rs_n == rs_name else 0
            if ((rs.get("spec") or {}).get("replicas") or 0) != want:
                self.kube.apps.patch_namespaced_replica_set(rs_n, ns, {"spec": {"replicas": want}})
                changed += 1
        for rs_n in revisions:
            want = replicas if rs_n == rs_name else 0
            rs_status = {
                "replicas": want,
                "readyReplicas": want,
                "availableReplicas": want,
                "fullyLabeledReplicas": want,
                "observedGeneration": 1,
            }
            current = next((r for r in owned if r["metadata"]["name"] == rs_n), None)
            if current is None or _status_differs(current.get("status") or {}, rs_status):
                self.kube.apps.patch_namespaced_replica_set_status(rs_n, ns, {"status": rs_status})
                changed += 1
        if annotations.get(REVISION) != str(revision):
            self.kube.apps.patch_namespaced_deployment(
                name, ns, {"metadata": {"annotations": {REVISION: str(revision)}}}
            )
            changed += 1
        status = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
        }
        old = dep.get("status") or {}
        if _status_differs(old, status) or not _has_ready_conditions(old):
            status["conditions"] = [
                _condition(
                    "Available", "MinimumReplicasAvailable", "Deployment has minimum availability."
                ),
                _condition(
                    "Progressing",
                    "NewReplicaSetAvailable",
                    f'ReplicaSet "{rs_name}" has successfully progressed.',
                ),
            ]
            self.kube.apps.patch_namespaced_deployment_status(name, ns, {"status": status})
            changed += 1
        return changed

    def _kubelet(self, deployments: list[dict[str, Any]]) -> int:
        """Run one real temporalio worker per replica of each twc worker Deployment,
        restarted when its pod template changes (``twc local up --run-workers``)."""
        from twc.local.workerpod import WorkerPod

        wanted: dict[tuple[str, str, int], str] = {}
        for dep in deployments:
            meta = dep["metadata"]
            labels = meta.get("labels") or {}
            if labels.get("app.kubernetes.io/managed-by") != "twc" or meta.get("deletionTimestamp"):
                continue
            tmpl = template_hash(dep["spec"]["template"])
            for i in range(int(dep["spec"].get("replicas", 1))):
                wanted[(meta["namespace"], meta["name"], i)] = tmpl
        changed = 0
        for key, (tmpl, pod) in list(self._pods.items()):
            exited = pod.proc is not None and pod.proc.poll() is not None
            if wanted.get(key) != tmpl or exited:
                pod.stop()
                del self._pods[key]
                changed += 1
        for key, tmpl in wanted.items():
            if key not in self._pods:
                ns, name, index = key
                try:
                    self._pods[key] = (tmpl, WorkerPod(self.kube, ns, name, index).start())
                    changed += 1
                except Exception as exc:  # noqa: BLE001 - the test bed reports and retries
                    log.warning("cannot start a worker for %s/%s: %s", ns, name, exc)
        return changed

    def _statefulset(self, sts: dict[str, Any]) -> int:
        meta = sts["metadata"]
        if (meta.get("annotations") or {}).get(HOLD) == "hold":
            return 0
        spec = sts["spec"]
        replicas = int(spec.get("replicas", 1))
        revision = f"{meta['name']}-{template_hash(spec['template'])}"
        status = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": replicas,
            "readyReplicas": replicas,
            "currentReplicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
            "currentRevision": revision,
            "updateRevision": revision,
        }
        if not _status_differs(sts.get("status") or {}, status):
            return 0
        self.kube.apps.patch_namespaced_stateful_set_status(
            meta["name"], meta["namespace"], {"status": status}
        )
        return 1


def _items(list_call: Any) -> list[dict[str, Any]]:
    """A list call's items as the API server's JSON, ``null`` fields dropped.

    Reading the JSON rather than the client's models keeps a pass cheap at a thousand
    Deployments; dropping ``null`` keeps it equal to what the models serialised to, so
    the template hashes (the ReplicaSet names) do not change.
    """
    response = list_call(_preload_content=False)
    return [_without_nulls(item) for item in json.loads(response.data).get("items") or []]


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _status_differs(old: dict[str, Any], new: dict[str, Any]) -> bool:
    # The API server omits zero counts, so a scaled-down ReplicaSet's missing
    # readyReplicas equals 0 (otherwise it was patched again on every pass).
    return any(old.get(k, 0 if isinstance(v, int) else None) != v for k, v in new.items())


def _has_ready_conditions(status: dict[str, Any]) -> bool:
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    return bool(
        conds.get("Available", {}).get("status") == "True"
        and conds.get("Progressing", {}).get("reason") == "NewReplicaSetAvailable"
    )


def _condition(kind: str, reason: str, message: str) -> dict[str, str]:
    from datetime import UTC, datetime

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }


def main() -> None:  # pragma: no cover - exercised through `twc local up`
    """Run the simulated controllers against ``$KUBECONFIG`` until killed."""
    import os
    import signal

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    run_workers = os.environ.get("TWC_LOCAL_RUN_WORKERS") == "1"
    ctl = SimulatedControllers(Kube(os.environ["KUBECONFIG"]), run_workers=run_workers)
    signal.signal(signal.SIGTERM, lambda *_: ctl._stop.set())
    try:
        ctl.run()
    finally:
        ctl.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
