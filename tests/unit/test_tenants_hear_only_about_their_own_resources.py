"""Events and status of a TemporalWorker carry the engine's error on that worker's own
resources only: never the engine's output, nor another namespace's names."""

from __future__ import annotations

from twc.native.status import ELSEWHERE, REFUSED, worker_failure

URN = "urn:pulumi:e2e-3f2a::twc::twc:temporal:TemporalWorker$kubernetes:apps/v1:Deployment"
# As a failed `up` prints it (the real engine; stack and URNs from an e2e run).
FAILED_UP = f"""\
code: 255
 stdout: Updating (e2e-3f2a):
 +  kubernetes:apps/v1:Deployment tenant-b/payroll-deployment creating (0s)
 +  kubernetes:apps/v1:Deployment tenant-a/orders-deployment creating (0s) error: ...

Diagnostics:
  kubernetes:apps/v1:Deployment (tenant-a/orders-deployment):
    error: resource "{URN}::tenant-a/orders-deployment" was not successfully created by \
the Kubernetes API server: Server-Side Apply field conflict detected.
    The resource managed by field manager "pulumi-kubernetes-8ee0675c" had an apply conflict

  kubernetes:core/v1:Secret (secrets-src/temporal-mtls):
    error: secrets "temporal-mtls" is forbidden: tenant-b may not read it

  pulumi:pulumi:Stack (twc-e2e-3f2a):
    error: update failed

 stderr: error: update failed
"""


def test_a_worker_hears_the_first_error_on_its_own_resources_with_urns_shortened() -> None:
    found = worker_failure(FAILED_UP, "tenant-a/orders")
    assert found.startswith("the update failed on this worker's resources: resource ")
    assert "tenant-a/orders-deployment" in found
    assert "urn:pulumi" not in found
    assert "e2e-3f2a" not in found  # the stack's name
    for other in ("tenant-b", "payroll", "secrets-src", "temporal-mtls"):
        assert other not in found


def test_a_worker_whose_resources_did_not_fail_hears_nothing_of_the_others() -> None:
    found = worker_failure(FAILED_UP, "tenant-b/payroll")
    assert found == ELSEWHERE
    # A name that only starts like the worker's is another worker.
    assert worker_failure(FAILED_UP, "tenant-a/order") == ELSEWHERE


def test_a_refused_input_names_nothing() -> None:
    text = "error: invalid fleet; nothing was changed:\nstacks/prod.yaml: workers[3]: tenant-b/x"
    assert worker_failure(text, "tenant-a/orders", refused=True) == REFUSED
