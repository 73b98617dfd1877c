"""A leader frozen (SIGSTOP) in the middle of a batch of writes makes none of the rest
once its term is over (#35 item 5).

The batch: early apply of twenty new workers (a ServiceAccount and a Deployment each,
one call after the other, ahead of the ``up``). The daemon is stopped as soon as the
first new Deployment exists; its Lease expires and another candidate takes it. Resumed,
the old leader's thread is in the middle of the batch: every remaining call checks the
term right before it goes out, so none reaches the API server, and the daemon ends with
"lost lease". No other writer runs meanwhile, so any change to the namespace would be
the old leader's. A new daemon then converges with nothing lost.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success, wait_until_settled
from tests.faults._checks import assert_converged, deployment_bytes
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

LEASE = {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 0.5}
SETTINGS = {**FAST, "leader_election": LEASE, "engine": {"interrupt_grace": 0.5}}
LEASE_NAME = "twc-fenced"
NEW = tuple(f"w{i:02d}" for i in range(20))


def _written(kube: Any, namespace: str) -> dict[str, Any]:
    """What writers other than the cluster's controllers did to the namespace's
    Deployments and ServiceAccounts: each object's uid and generation, and each field
    manager's last write (who, how, when)."""
    out: dict[str, Any] = {}
    for kind, found in (
        ("Deployment", kube.apps.list_namespaced_deployment(namespace).items),
        ("ServiceAccount", kube.core.list_namespaced_service_account(namespace).items),
    ):
        for obj in found:
            meta = obj.metadata
            writes = sorted(
                (f.manager, f.operation, str(f.time))
                for f in meta.managed_fields or ()
                if f.manager != "kube-controller-manager"
            )
            out[f"{kind} {meta.name}"] = (meta.uid, meta.generation, writes)
    return out


def _expired(kube: Any, namespace: str) -> bool:
    spec = kube.coordination.read_namespaced_lease(LEASE_NAME, namespace).spec
    ends = spec.renew_time + datetime.timedelta(seconds=spec.lease_duration_seconds)
    return bool(ends < datetime.datetime.now(datetime.UTC))


def _take(kube: Any, namespace: str) -> None:
    """Another candidate takes the expired Lease, as an elector does."""
    lease = kube.coordination.read_namespaced_lease(LEASE_NAME, namespace)
    now = datetime.datetime.now(datetime.UTC)
    lease.spec.holder_identity = "another-candidate"
    lease.spec.acquire_time = lease.spec.renew_time = now
    lease.spec.lease_duration_seconds = 3600
    lease.spec.lease_transitions = (lease.spec.lease_transitions or 0) + 1
    kube.coordination.replace_namespaced_lease(LEASE_NAME, namespace, lease)


def test_a_leader_frozen_mid_batch_makes_no_write_of_it_after_its_term(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    address = local_env.temporal_address()

    def fleet(*names: str) -> dict[str, Any]:
        workers = [{"name": n, "namespace": namespace, "taskQueueName": task_queue} for n in names]
        return fleet_doc(namespace, host_port=address, workers=workers)

    fs = daemons.stack(fleet("static"), waitForPollersSeconds="0")
    args = ["--leader-elect", "--lease-namespace", namespace, "--lease-name", LEASE_NAME]
    first = daemons.start(fs, settings=SETTINGS, args=args, name="first")
    wait_for_success(first, timeout=120)
    wait_until_settled(first)
    before = deployment_bytes(kube, namespace)

    fs.write(fleet("static", *NEW))
    eventually(
        lambda: any(kube.get_deployment(namespace, n) for n in NEW[:3]),
        timeout=120,
        interval=0.005,
        message="the batch never started",
    )
    first.pause()
    eventually(
        lambda: _expired(kube, namespace), timeout=60, message="the frozen leader's Lease lasted"
    )
    _take(kube, namespace)
    frozen = _written(kube, namespace)
    made = [n for n in NEW if f"Deployment {n}" in frozen]
    assert len(made) < len(NEW), "the daemon was stopped after its batch"

    first.resume()
    assert first.proc.wait(timeout=60) == 1
    assert "lost lease" in first.text()
    assert _written(kube, namespace) == frozen

    kube.coordination.delete_namespaced_lease(LEASE_NAME, namespace)
    second = daemons.start(fs, settings=SETTINGS, args=args, name="second")
    wait_for_success(second, timeout=240)
    wait_until_settled(second)
    assert deployment_bytes(kube, namespace)["static"] == before["static"]
    assert_converged(kube, second, fs, namespace, {"static", *NEW})
    print(
        f"leader SIGSTOPped in an early-apply batch after {len(made)} of {len(NEW)} "
        f"Deployments; resumed after its term and another candidate's takeover: no write "
        f"reached the API server, it ended with 'lost lease'"
    )
