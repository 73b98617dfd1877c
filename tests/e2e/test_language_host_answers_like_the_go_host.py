"""The Python language host (tools/langhost) answers each call it serves, over real gRPC.

The host is started as the CLI starts it (the launcher, in the program's directory, the
engine's address as its argument, the port read from its stdout) and called through the
SDK's generated stubs. Its engine and resource monitor are small in-test gRPC servers
that record what the program sends them, so ``Run`` is checked end to end: the SDK's
exec script, config, exports and logs. The virtualenv is the project's own .venv.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import (
    engine_pb2,
    engine_pb2_grpc,
    language_pb2,
    language_pb2_grpc,
    resource_pb2,
    resource_pb2_grpc,
)

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

VERSIONS = dict(
    line.split("=", 1)
    for line in (ROOT / "tools" / "versions.env").read_text().splitlines()
    if line and not line.startswith("#")
)
VENV = ROOT / ".venv"


@dataclass
class FakeEngine(engine_pb2_grpc.EngineServicer, resource_pb2_grpc.ResourceMonitorServicer):
    """Engine and resource monitor in one: records logs, resources and stack outputs."""

    logs: list[str] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    root: str = ""

    def Log(self, request: Any, context: Any) -> Any:
        self.logs.append(request.message)
        return empty_pb2.Empty()

    def GetRootResource(self, request: Any, context: Any) -> Any:
        return engine_pb2.GetRootResourceResponse(urn=self.root)

    def SetRootResource(self, request: Any, context: Any) -> Any:
        self.root = request.urn
        return engine_pb2.SetRootResourceResponse()

    def SupportsFeature(self, request: Any, context: Any) -> Any:
        return resource_pb2.SupportsFeatureResponse(hasSupport=False)

    def RegisterResource(self, request: Any, context: Any) -> Any:
        urn = f"urn:pulumi:smoke::smoke::{request.type}::{request.name}"
        self.resources.append(request.type)
        return resource_pb2.RegisterResourceResponse(urn=urn, object=struct_pb2.Struct())

    def RegisterResourceOutputs(self, request: Any, context: Any) -> Any:
        self.outputs.update(dict(request.outputs.items()))
        return empty_pb2.Empty()

    def SignalAndWaitForShutdown(self, request: Any, context: Any) -> Any:
        return empty_pb2.Empty()


@dataclass
class Host:
    stub: language_pb2_grpc.LanguageRuntimeStub
    engine: FakeEngine
    address: str
    process: subprocess.Popen[str]


def _serve_engine(engine: FakeEngine) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    engine_pb2_grpc.add_EngineServicer_to_server(engine, server)
    resource_pb2_grpc.add_ResourceMonitorServicer_to_server(engine, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
def program(tmp_path: Path) -> Path:
    """A program directory: Pulumi.yaml names the project's virtualenv."""
    (tmp_path / "Pulumi.yaml").write_text(
        f"name: smoke\nruntime:\n  name: python\n  options:\n    virtualenv: {VENV}\n"
    )
    (tmp_path / "__main__.py").write_text(
        "import os, sys\n"
        "import pulumi\n"
        "mode = pulumi.Config().get('mode') or 'ok'\n"
        "pulumi.log.info('hello from the program')\n"
        "if mode == 'fail':\n"
        "    sys.exit(3)\n"
        "pulumi.export('greeting', pulumi.Config().require('greeting'))\n"
        "pulumi.export('virtualEnv', os.environ.get('VIRTUAL_ENV', ''))\n"
    )
    return tmp_path


@pytest.fixture
def host(
    tmp_path_factory: pytest.TempPathFactory, program: Path, real_tool: Callable[[str], str]
) -> Iterator[Host]:
    """The host from this checkout, installed beside the SDK's exec script as setup does."""
    exec_script = real_tool("pulumi-language-python-exec")
    if not (VENV / "bin" / "python").exists():
        pytest.fail("the project's .venv is missing: run `make setup`", pytrace=False)
    bin_dir = tmp_path_factory.mktemp("langhost")
    for name in ("pulumi-language-python", "pulumi_language_python.py"):
        shutil.copy(ROOT / "tools" / "langhost" / name, bin_dir / name)
    shutil.copy(exec_script, bin_dir / "pulumi-language-python-exec")
    engine = FakeEngine()
    engine_server, engine_address = _serve_engine(engine)
    # No engine argument: the Handshake test gives the address, as a debugging CLI does.
    process = subprocess.Popen(
        [str(bin_dir / "pulumi-language-python")],
        cwd=program,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().strip())
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = language_pb2_grpc.LanguageRuntimeStub(channel)
        stub.Handshake(
            language_pb2.LanguageHandshakeRequest(
                engine_address=engine_address,
                root_directory=str(program),
                program_directory=str(program),
            )
        )
        yield Host(stub, engine, engine_address, process)
        channel.close()
    finally:
        process.terminate()
        process.wait(timeout=30)
        engine_server.stop(grace=None)


def _info(program: Path, virtualenv: str | None = None) -> Any:
    options = struct_pb2.Struct()
    options.update({"virtualenv": virtualenv if virtualenv is not None else str(VENV)})
    return language_pb2.ProgramInfo(
        root_directory=str(program),
        program_directory=str(program),
        entry_point=".",
        options=options,
    )


def _run(host: Host, program: Path, **config: str) -> Any:
    return host.stub.Run(
        language_pb2.RunRequest(
            project="smoke",
            stack="dev",
            pwd=str(program),
            config={f"smoke:{k}": v for k, v in config.items()},
            dryRun=True,
            parallel=4,
            monitor_address=host.address,
            info=_info(program),
        ),
        timeout=120,
    )


def test_plugin_info_is_the_pinned_release(host: Host) -> None:
    info = host.stub.GetPluginInfo(empty_pb2.Empty())
    assert info.version == "v" + VERSIONS["PULUMI_VERSION"]


def test_required_plugins_is_unimplemented_as_in_the_go_host(host: Host, program: Path) -> None:
    with pytest.raises(grpc.RpcError) as err:
        host.stub.GetRequiredPlugins(language_pb2.GetRequiredPluginsRequest(info=_info(program)))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_required_packages_are_the_installed_pulumi_packages(host: Host, program: Path) -> None:
    answer = host.stub.GetRequiredPackages(
        language_pb2.GetRequiredPackagesRequest(info=_info(program))
    )
    packages = {(p.name, p.version, p.kind) for p in answer.packages}
    # pulumi-kubernetes names its plugin in pulumi-plugin.json; the pulumi SDK has none.
    assert packages == {("kubernetes", "v" + VERSIONS["PULUMI_KUBERNETES_VERSION"], "resource")}


def test_program_dependencies_are_what_pip_lists(host: Host, program: Path) -> None:
    def deps(transitive: bool) -> dict[str, str]:
        answer = host.stub.GetProgramDependencies(
            language_pb2.GetProgramDependenciesRequest(
                info=_info(program), transitiveDependencies=transitive
            )
        )
        return {d.name: d.version for d in answer.dependencies}

    direct, everything = deps(False), deps(True)
    # Names normalized as in PEP 503; versions as installed from requirements.txt.
    assert everything["pulumi-kubernetes"] == VERSIONS["PULUMI_KUBERNETES_VERSION"]
    assert everything["pulumi"] == VERSIONS["PULUMI_VERSION"]
    assert "prometheus-client" in everything
    # Without transitive dependencies, only what nothing else requires: the project
    # itself (installed editable), not the packages it requires.
    assert "twc" in direct
    assert "pulumi-kubernetes" not in direct
    assert "grpcio" not in direct


def test_about_names_the_virtualenvs_interpreter(host: Host, program: Path) -> None:
    about = host.stub.About(language_pb2.AboutRequest(info=_info(program)))
    expected = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", "import sys, platform; print(sys.executable)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert about.executable == expected
    assert about.version.count(".") == 2
    assert about.version.startswith("3.")
    assert about.metadata["toolchain"] == "Pip"


def test_run_runs_the_program_with_config_through_the_handshake_engine(
    host: Host, program: Path
) -> None:
    answer = _run(host, program, greeting="hi")

    assert answer.error == ""
    assert not answer.bail
    assert host.engine.outputs["greeting"] == "hi"
    # The program ran inside the virtualenv, activated as the Go host activates it.
    assert host.engine.outputs["virtualEnv"] == str(VENV)
    assert "pulumi:pulumi:Stack" in host.engine.resources
    assert any("hello from the program" in m for m in host.engine.logs)


def test_run_reports_a_failing_programs_exit_code(host: Host, program: Path) -> None:
    answer = _run(host, program, mode="fail")
    assert answer.error == "program exited with non-zero exit code: 3"


def test_cancel_interrupts_a_running_program(host: Host, program: Path) -> None:
    started = program / "started"
    (program / "__main__.py").write_text(
        "import time\nfrom pathlib import Path\nPath('started').touch()\ntime.sleep(120)\n"
    )
    result: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: result.update(answer=_run(host, program)))
    runner.start()
    poll = threading.Event()
    while not started.exists() and runner.is_alive():
        poll.wait(0.1)
    assert started.exists(), f"the program never started: {result}"

    host.stub.Cancel(empty_pb2.Empty())
    runner.join(timeout=60)

    assert not runner.is_alive(), "Run did not return after Cancel"
    answer = result["answer"]
    # SIGINT ends the program with an error or an actionable message (a bail).
    assert answer.error or answer.bail


def test_calls_it_does_not_serve_say_so(host: Host, program: Path) -> None:
    with pytest.raises(grpc.RpcError) as err:
        list(
            host.stub.InstallDependencies(
                language_pb2.InstallDependenciesRequest(info=_info(program))
            )
        )
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "InstallDependencies is not served" in (err.value.details() or "")


def test_a_missing_virtualenv_is_an_error_not_another_python(host: Host, program: Path) -> None:
    missing = program / "no-such-venv"
    info = _info(program, virtualenv="no-such-venv")
    calls: dict[str, Callable[[], object]] = {
        "Run": lambda: host.stub.Run(
            language_pb2.RunRequest(
                project="smoke",
                stack="dev",
                pwd=str(program),
                info=info,
                monitor_address=host.address,
            ),
            timeout=60,
        ),
        "GetRequiredPackages": lambda: host.stub.GetRequiredPackages(
            language_pb2.GetRequiredPackagesRequest(info=info)
        ),
        "GetProgramDependencies": lambda: host.stub.GetProgramDependencies(
            language_pb2.GetProgramDependenciesRequest(info=info)
        ),
        "About": lambda: host.stub.About(language_pb2.AboutRequest(info=info)),
    }
    for name, call in calls.items():
        with pytest.raises(grpc.RpcError) as err:
            call()
        details = err.value.details() or ""
        assert (
            f"The 'virtualenv' option in Pulumi.yaml is set to \"no-such-venv\", but"
            f' "{missing}" doesn\'t exist' in details
        ), (name, details)
    assert host.engine.resources == [], "no program ran"


def test_a_sigterm_delivered_to_a_grpc_thread_still_stops_the_host(host: Host) -> None:
    """The kernel may hand a process's SIGTERM to any of its threads; Python runs the
    handler on the main thread only, so the host must wake up to it whichever got it."""
    assert host.stub.GetPluginInfo(empty_pb2.Empty()).version
    pid = host.process.pid
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others, "the host runs gRPC's threads beside its main thread"
    libc = ctypes.CDLL(None, use_errno=True)
    # tgkill(2) sends the signal to that one thread, as the kernel may choose to.
    sys_tgkill = {"x86_64": 234, "aarch64": 131}[platform.machine()]
    assert libc.syscall(sys_tgkill, pid, others[-1], int(signal.SIGTERM)) == 0

    assert host.process.wait(timeout=20) == 0
