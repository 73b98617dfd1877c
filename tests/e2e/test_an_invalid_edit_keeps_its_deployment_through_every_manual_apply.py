"""A TemporalWorker edited into a spec the CRD admits but the fleet model refuses keeps
its Deployment byte for byte when the next apply is the unsharded ``twc up`` or plain
``pulumi up`` from an operator's shell — no ``POD_NAMESPACE`` — after the stack's daemon
ran in its own namespace (as in a pod) and kept the stack's record there: both find that
record and run the worker on its last accepted spec."""

from __future__ import annotations

import io
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success, wait_until_settled
from tests.e2e.native import conditions, object_ref, temporal_worker
from tests.faults._checks import assert_unchanged, deployment_bytes, lock_files
from twc.cli import up
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "temporal.kmsvc.io", "v1", "temporalworkers"


def _accepted(kube: Any, namespace: str, name: str) -> bool:
    obj = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return (conditions(obj).get("SpecAccepted") or {}).get("status") == "True"


def test_an_invalid_edit_keeps_the_deployment_through_twc_up_and_plain_pulumi_up(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    pulumi_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    static = {"name": "static", "namespace": namespace, "taskQueueName": task_queue}
    fs = daemons.stack(
        fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[static])
    )
    fs.env["POD_NAMESPACE"] = namespace  # the daemon's pod runs in the test's namespace
    daemon = daemons.start(fs)
    wait_for_success(daemon, timeout=120)
    ref = object_ref("ClusterConnection", "local")
    for name in ("orders", "billing"):
        body = temporal_worker(namespace, name, f"{task_queue}-{name}", ref)
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    for name in ("orders", "billing"):
        eventually(
            lambda name=name: _accepted(kube, namespace, name),
            timeout=120,
            message=f"{name} was never accepted",
        )
    wait_until_settled(daemon)
    assert daemon.terminate() == 0
    before = deployment_bytes(kube, namespace)
    assert sorted(before) == ["billing", "orders", "static"]

    # The edit: admitted by the CRD (a quantity is int-or-string), refused by the model.
    kube.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "orders",
        {"spec": {"resources": {"requests": {"cpu": "lots"}}}},
    )

    # An operator's shell: the engine's environment, no pod's namespace.
    del fs.env["POD_NAMESPACE"]
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.delenv("TWC_CONTROL_NAMESPACE", raising=False)

    code = up.run_up(fs.name, str(fs.fleet_file), out=io.StringIO())
    assert code == 0, capsys.readouterr().err[-3000:]
    assert_unchanged(before, deployment_bytes(kube, namespace))

    done = fs.plain_up()
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert_unchanged(before, deployment_bytes(kube, namespace))
    assert not lock_files(fs)
