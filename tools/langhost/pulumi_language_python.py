"""A Pulumi language host for Python programs, for machines where the Go one can't be built.

The Pulumi CLI runs a Python program through a *language host*: a plugin binary named
``pulumi-language-python`` that the CLI starts with the engine's address as its last
argument, that prints the port of its gRPC ``LanguageRuntime`` server on stdout, and that
runs the program when the engine calls ``Run``. Upstream's host is a Go module
(``github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3``) with no tags of its
own, and no version of it is served here, so ``tools/setup.sh`` installs this file instead.

It implements the same contract with the SDK's own generated gRPC stubs and, like the Go
host, runs the program with the SDK's own ``pulumi-language-python-exec`` script, so the
program sees exactly the runtime it would see under the Go host: config and secret keys in
``PULUMI_CONFIG``/``PULUMI_CONFIG_SECRET_KEYS``, the monitor and engine addresses, the
dry-run flag and parallelism as arguments. Plugins are not listed up front (the engine
loads a provider when the first resource of its package registers), dependencies are
installed by ``make setup``, not by the host.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2

# Exit code the exec script uses after it has shown the user an actionable message.
_BAIL_EXIT_CODE = 32


def _find_exec_script() -> str:
    """Locate ``pulumi-language-python-exec``: next to this host's launcher, or on PATH."""
    here = Path(sys.argv[0]).resolve().parent
    for candidate in (
        os.environ.get("PULUMI_LANGUAGE_PYTHON_EXEC", ""),
        str(here / "pulumi-language-python-exec"),
        shutil.which("pulumi-language-python-exec") or "",
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    raise SystemExit(
        "pulumi-language-python: pulumi-language-python-exec not found (run make setup)"
    )


def _python_for(info: language_pb2.ProgramInfo | None) -> str:
    """Pick the interpreter the program runs under, as the Go host does.

    The ``virtualenv`` runtime option in Pulumi.yaml wins (relative to the project root),
    then ``PULUMI_PYTHON_CMD``, then the interpreter running this host.
    """
    options: dict[str, Any] = {}
    if info is not None and info.HasField("options"):
        options = dict(info.options.items())
    venv = options.get("virtualenv") or os.environ.get("PULUMI_RUNTIME_VIRTUALENV")
    if venv:
        root = info.root_directory if info is not None and info.root_directory else os.getcwd()
        path = Path(venv) if Path(venv).is_absolute() else Path(root) / venv
        python = path / "bin" / "python"
        if python.exists():
            return str(python)
    return os.environ.get("PULUMI_PYTHON_CMD") or sys.executable


class LanguageHost(language_pb2_grpc.LanguageRuntimeServicer):
    """The ``LanguageRuntime`` service, backed by the SDK's exec script."""

    def __init__(self, engine_address: str) -> None:
        self._engine = engine_address
        self._exec = _find_exec_script()
        self._children: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def Handshake(self, request: Any, context: Any) -> Any:
        if request.engine_address:
            self._engine = request.engine_address
        return language_pb2.LanguageHandshakeResponse()

    def GetPluginInfo(self, request: Any, context: Any) -> Any:
        import pulumi

        version = getattr(pulumi, "__version__", "") or ""
        return plugin_pb2.PluginInfo(version=version)

    def GetRequiredPlugins(self, request: Any, context: Any) -> Any:
        return language_pb2.GetRequiredPluginsResponse()

    def GetRequiredPackages(self, request: Any, context: Any) -> Any:
        return language_pb2.GetRequiredPackagesResponse()

    def InstallDependencies(self, request: Any, context: Any) -> Any:
        # `make setup` owns the virtualenv; nothing to stream.
        return iter(())

    def RuntimeOptionsPrompts(self, request: Any, context: Any) -> Any:
        return language_pb2.RuntimeOptionsResponse()

    def About(self, request: Any, context: Any) -> Any:
        python = _python_for(request.info if request.HasField("info") else None)
        version = subprocess.run(
            [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        return language_pb2.AboutResponse(executable=python, version=version)

    def GetProgramDependencies(self, request: Any, context: Any) -> Any:
        return language_pb2.GetProgramDependenciesResponse()

    def Cancel(self, request: Any, context: Any) -> Any:
        with self._lock:
            for child in self._children:
                child.send_signal(signal.SIGINT)
        return empty_pb2.Empty()

    def Run(self, request: Any, context: Any) -> Any:
        info = request.info if request.HasField("info") else None
        root = (info.root_directory if info else "") or request.pwd or os.getcwd()
        program_dir = (info.program_directory if info else "") or request.pwd or root
        entry = (info.entry_point if info else "") or request.program or "."
        args = [
            _python_for(info),
            "-u",
            self._exec,
            "--monitor",
            request.monitor_address,
            "--engine",
            self._engine,
            "--project",
            request.project,
            "--stack",
            request.stack,
            "--pwd",
            program_dir,
            "--dry_run",
            "true" if request.dryRun else "false",
            "--parallel",
            str(request.parallel),
            "--root_directory",
            root,
        ]
        if request.organization:
            args += ["--organization", request.organization]
        args += [entry, *request.args]
        env = dict(os.environ)
        env["PULUMI_CONFIG"] = json.dumps(dict(request.config))
        env["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(list(request.configSecretKeys))
        if request.dryRun:
            env["PULUMI_DRY_RUN"] = "true"
        child = subprocess.Popen(args, cwd=program_dir, env=env)
        with self._lock:
            self._children.add(child)
        try:
            code = child.wait()
        finally:
            with self._lock:
                self._children.discard(child)
        if code == 0:
            return language_pb2.RunResponse()
        if code == _BAIL_EXIT_CODE:
            return language_pb2.RunResponse(bail=True)
        return language_pb2.RunResponse(error=f"Program exited with non-zero exit code: {code}")


def main(argv: list[str]) -> int:
    """Serve the language host; the engine address is the last positional argument."""
    positional = [a for a in argv if not a.startswith("-")]
    engine = positional[-1] if positional else ""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[("grpc.max_receive_message_length", 400 * 1024 * 1024)],
    )
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(LanguageHost(engine), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    # The engine kills the plugin when it is done; exit cleanly on SIGTERM/SIGINT too.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
