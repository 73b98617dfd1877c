"""Fixtures on the real test bed: the embedded environment, Kubernetes access, worker pods.

Tests that need a real tool go through ``require_tools``: when a tool is missing they
skip on a developer machine but fail in CI (``CI=true``), where every tool must exist.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from tests.helpers import assert_eventually, delete_twc_objects
from twc.local import processes
from twc.local.environment import LocalEnvironment, ToolMissingError, find_tool, project_root

# No wall-clock thresholds in tests: property tests have no per-example deadline.
hypothesis_settings.register_profile("twc", deadline=None)
hypothesis_settings.load_profile("twc")

ROOT = project_root()
# The project's tools come first, as under `make`.
os.environ["PATH"] = os.pathsep.join(
    [str(ROOT / ".twc" / "bin"), str(ROOT / ".venv" / "bin"), os.environ.get("PATH", "")]
)
os.environ.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")
os.environ.setdefault("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TEST_BED_TOOLS = (
    "pulumi",
    "pulumi-language-python",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "temporal",
)


RUN_MARK_ENV = "TWC_TEST_RUN"
"""Set to ``<session>/<test number>/`` while a test runs: every process a test starts
inherits it (the Pulumi CLI passes its environment on to its plugins), so a process
left behind is found and attributed to its test even after it was orphaned, and
processes of other test sessions on a shared machine never count."""
SESSION_MARK = uuid.uuid4().hex[:12]
_TEST_NUMBERS = itertools.count(1)
LEFTOVER_WAIT = 20.0
"""Seconds a test's engine processes get to end after it (a guard's grace included)."""


def _stop_the_session(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """A stopped run (SIGTERM or Ctrl-C) leaves no embedded environment behind.

    SIGTERM ends a test process as Ctrl-C does (KeyboardInterrupt), so the session's
    fixtures tear their environments down. An xdist worker gets SIGTERM when its
    controller ends (the controller itself keeps the default SIGTERM: its own interrupt
    handling would kill the workers mid-teardown). Whatever still ends a process
    abruptly, the environment processes it started end with it
    (:func:`processes.end_with_this_process`).
    """
    processes.end_with_this_process()
    worker = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    if worker:
        processes.end_with_parent(signal.SIGTERM)
    if worker or not config.getoption("numprocesses", None):
        signal.signal(signal.SIGTERM, _stop_the_session)


def engine_processes(mark_prefix: str) -> list[tuple[int, str, str]]:
    """Live ``pulumi``, ``pulumi-language-*``, ``pulumi-resource-*`` and engine-guard
    processes whose run mark starts with ``mark_prefix``: ``(pid, mark, command line)``."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        words = [Path(a.decode(errors="replace")).name for a in argv[:3] if a]
        engine = any(w.startswith("pulumi") or "twc-engine-guard" in w for w in words) or any(
            b"twc-engine-guard" in a for a in argv[:3]
        )
        if not engine or stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        key = f"{RUN_MARK_ENV}=".encode()
        for item in environ:
            if item.startswith(key):
                mark = item[len(key) :].decode()
                if mark.startswith(mark_prefix):
                    line = b" ".join(argv).decode(errors="replace")[:200]
                    found.append((int(entry.name), mark, line))
    return found


def _leftovers(mark_prefix: str) -> list[tuple[int, str, str]]:
    deadline = time.monotonic() + LEFTOVER_WAIT
    while True:
        found = engine_processes(mark_prefix)
        if not found or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    for pid, _, _ in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # so the next test starts clean
    return found


@pytest.fixture(scope="session", autouse=True)
def no_engine_process_outlives_the_session() -> Iterator[None]:
    """Fails the session when any engine process one of its tests started still runs."""
    yield
    left = _leftovers(f"{SESSION_MARK}/")
    if left:
        pytest.fail(f"engine processes outlived their tests: {left}", pytrace=False)


@pytest.fixture(autouse=True)
def no_engine_process_outlives_its_test() -> Iterator[None]:
    """Fails a test that leaves an engine, language-host, plugin or guard process of
    its own running (checked after all its other fixtures were torn down)."""
    mark = f"{SESSION_MARK}/{next(_TEST_NUMBERS)}/"
    previous = os.environ.get(RUN_MARK_ENV)
    os.environ[RUN_MARK_ENV] = mark
    yield
    if previous is None:
        os.environ.pop(RUN_MARK_ENV, None)
    else:
        os.environ[RUN_MARK_ENV] = previous
    left = _leftovers(mark)
    if left:
        pytest.fail(f"the test left engine processes running: {left}", pytrace=False)


def require_tools(*names: str) -> None:
    """Skip (locally) or fail (in CI) unless every named tool is installed."""
    missing = []
    for name in names:
        try:
            find_tool(name)
        except ToolMissingError:
            missing.append(name)
    if missing:
        message = f"missing tools {', '.join(missing)}: run `make setup`"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)  # only outside CI: under CI=true the line above fails


@pytest.fixture
def real_tool() -> Callable[[str], str]:
    """The path of a real tool binary (``make setup`` builds them); skips or fails as
    :func:`require_tools` does when it is missing."""

    def find(name: str) -> str:
        require_tools(name)
        return find_tool(name)

    return find


@pytest.fixture(scope="session")
def local_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEnvironment]:
    """A private embedded environment for the whole test session."""
    require_tools(*TEST_BED_TOOLS)
    env = LocalEnvironment(tmp_path_factory.mktemp("twc-local"))
    try:
        env.up(progress=lambda m: print(f"[local] {m}"))
        yield env
    finally:
        env.down(progress=lambda m: None)


@pytest.fixture(scope="session")
def kube(local_env: LocalEnvironment) -> Iterator[object]:
    from twc.local.cluster import Kube

    api = Kube(local_env.kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="session")
def pulumi_env(local_env: LocalEnvironment) -> dict[str, str]:
    """Environment variables for the Pulumi engine against the local environment."""
    return {**local_env.env(), "PATH": os.environ["PATH"]}


@pytest.fixture
def engine_env(pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs (``twc up``, the Automation API) reach the backend, the cluster and
    Temporal through the environment, exactly as a shell after ``eval "$(twc local env)"``."""
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="session")
def postgres_env(local_env: LocalEnvironment) -> dict[str, str]:
    """The engine's environment with the Pulumi state in PostgreSQL: the session's
    embedded environment, plus its PostgreSQL part (``twc local up --state postgres``)
    started next to it (the file backend stays the session's default)."""
    from twc.local.environment import PG_BIN

    if not (PG_BIN / "postgres").exists():
        message = f"PostgreSQL 15 not installed in {PG_BIN}: run `make setup-test`"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    env = LocalEnvironment(local_env.dir, state="postgres", record_backend=False)
    env.up(progress=lambda m: print(f"[local] {m}"))
    return {**env.env(), "PATH": os.environ["PATH"]}


@pytest.fixture(params=["file", "postgres"])
def backend_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The engine's environment on each state backend in turn (file, then PostgreSQL)."""
    name = "pulumi_env" if request.param == "file" else "postgres_env"
    return dict(request.getfixturevalue(name))


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    """A fresh namespace for one test.

    At teardown its Queue, TemporalWorker and Connection objects are deleted: daemons
    list them cluster-wide, so one test's objects must not turn up in the next test's
    daemon.
    """
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(name)
    yield name
    delete_twc_objects(kube, name)


@pytest.fixture
def task_queue() -> str:
    """A task queue of the test's own (Temporal state outlives tests)."""
    return f"tq-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def worker_pods(kube: object) -> Iterator[Callable[..., object]]:
    """Start a real temporalio worker for a Running pod of a Deployment (the pod's own
    env, secrets and downward API), as ``--run-workers`` does for every pod; all stopped
    at teardown. The session's environment runs no pod workers of its own, so a test
    decides when its task queue gets a poller."""
    from twc.local.workerpod import WorkerPod, is_running, list_pods

    started: list[WorkerPod] = []

    def running_pod(namespace: str, deployment: str, index: int) -> dict[str, Any] | None:
        dep = kube.get_deployment(namespace, deployment)  # type: ignore[attr-defined]
        labels = dep["spec"]["selector"].get("matchLabels") or {} if dep else {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        pods = [p for p in list_pods(kube, namespace, selector) if is_running(p)] if dep else []  # type: ignore[arg-type]
        pods.sort(key=lambda p: str(p["metadata"]["name"]))
        return pods[index] if len(pods) > index else None

    def start(namespace: str, deployment: str, index: int = 0) -> WorkerPod:
        pod_object = assert_eventually(lambda: running_pod(namespace, deployment, index))
        pod = WorkerPod(kube, pod_object)  # type: ignore[arg-type]
        started.append(pod)
        return pod.start()

    yield start
    for pod in started:
        pod.stop()


def stack_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def tmp_project(tmp_path: Path) -> Path:
    return tmp_path


# Fixtures that start or use a real part of the test bed. A test under tests/e2e or
# tests/faults that uses none of them is a pure test in the wrong place: it would only
# run with the slow suites and hide from `make unit`.
REAL_FIXTURES = frozenset(
    {
        "local_env",
        "kube",
        "pulumi_env",
        "namespace",
        "worker_pods",
        "fleet_stack",
        "daemons",
        "deployed",
        "real_tool",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/unit ``unit``; refuse pure tests under e2e/faults."""
    misplaced = []
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "unit" in parts:
            item.add_marker(pytest.mark.unit)
            continue
        if "e2e" in parts or "faults" in parts:
            if not any(m.name in ("e2e", "faults") for m in item.iter_markers()):
                misplaced.append(f"{item.nodeid}: under e2e/faults without the marker")
            elif not REAL_FIXTURES & set(getattr(item, "fixturenames", ())):
                misplaced.append(f"{item.nodeid}: uses no real part; move it to tests/unit")
    if misplaced:
        raise pytest.UsageError("misplaced tests:\n" + "\n".join(misplaced))
