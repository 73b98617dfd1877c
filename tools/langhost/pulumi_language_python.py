"""A Pulumi language host for Python programs, for machines where the Go one can't be built.

The Pulumi CLI runs a Python program through a *language host*: a plugin binary named
``pulumi-language-python`` that the CLI starts (in the program's directory, with the
engine's address as its first argument), that prints the port of its gRPC
``LanguageRuntime`` server on stdout, and that runs the program when the engine calls
``Run``. Upstream's host is a Go module
(``github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3``) with no tags of its
own, and no version of it is served here, so ``tools/setup.sh`` installs this file instead.
It is written against the Go host of the pinned CLI release (3.260.0) and answers the
calls it serves as that host does, with the pip toolchain.

Served ``LanguageRuntime`` calls:

* ``Handshake``: records the engine's address; from then on (as from the start when the
  address is the first argument) the host checks the engine's gRPC health every five
  minutes and exits when the engine is gone, as the Go host does.
* ``GetPluginInfo``: the host's version, ``v`` + the ``pulumi`` SDK's version (the same
  release as the CLI, pinned together).
* ``GetRequiredPlugins``: UNIMPLEMENTED, exactly as the Go host answers; the CLI then asks
  ``GetRequiredPackages``.
* ``GetRequiredPackages``: every installed Pulumi package (one with a
  ``pulumi-plugin.json``, or named ``pulumi-*``) of the program's interpreter, as
  ``pip list`` shows them, with the Go host's rules: ``"resource": false`` packages are
  skipped, name/version/server/parameterization come from ``pulumi-plugin.json`` or
  from the package's name and its PEP 440 version translated to semver.
* ``GetProgramDependencies``: ``pip list --format json`` of the program's interpreter
  (``--not-required`` unless transitive dependencies are asked for), names normalized
  as in PEP 503.
* ``About``: that interpreter's path and version, toolchain ``Pip`` and pip's version.
* ``Run``: the SDK's own ``pulumi-language-python-exec`` under that interpreter, with the
  Go host's arguments and environment (config and secret keys in ``PULUMI_CONFIG`` /
  ``PULUMI_CONFIG_SECRET_KEYS``; exit code 32 is a bail, any other non-zero code an
  error).
* ``Cancel``: interrupts running programs (SIGINT, then SIGKILL after 5 s).

Every other call (``InstallDependencies``, ``RuntimeOptionsPrompts``, ``Template``,
``RunPlugin``, ``GenerateProgram``, ``GenerateProject``, ``GeneratePackage``, ``Pack``,
``Link``) answers UNIMPLEMENTED with a message naming the call: they serve ``pulumi new``,
``pulumi install``, policy packs, Python plugins and code generation, which twc does not
use; ``make setup`` installs the program's dependencies.

The program's interpreter is chosen as the Go host's pip toolchain chooses it: the
``virtualenv`` runtime option of Pulumi.yaml (relative to the project root), else
``PULUMI_PYTHON_CMD``, else ``python3`` or ``python`` on PATH. A ``virtualenv`` that is
not there is an error with the Go host's message in every call that needs the
interpreter; it never falls back to another Python (the Go host's
``GetRequiredPackages`` would create the virtualenv instead: here ``make setup`` owns
it). Other toolchains (``poetry``, ``uv``, or a ``uv.lock``/``poetry.lock`` that would
select one) and the ``typechecker`` option are refused with an error naming them.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import grpc
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    sys.exit(
        f"pulumi-language-python: {exc}; the interpreter running this host ({sys.executable})"
        " needs the pulumi and grpcio packages: run `make setup`"
    )

# Exit code the exec script uses after it has shown the user an actionable message.
_BAIL_EXIT_CODE = 32
# How long a cancelled program has between SIGINT and SIGKILL (the Go host's WaitDelay).
_CANCEL_GRACE_SECONDS = 5.0
# How often the engine's health is checked; the Go host's rpcutil.Healthcheck interval.
_HEALTHCHECK_SECONDS = 300.0
# Python packages the Go host knows have no plugin.
_PACKAGES_WITHOUT_PLUGINS = frozenset({"pulumi-policy", "pulumi-esc-sdk"})
# Calls this host does not serve, and what they are for.
_NOT_SERVED = {
    "InstallDependencies": "installing the program's dependencies (`make setup` does that)",
    "RuntimeOptionsPrompts": "`pulumi new` prompts",
    "Template": "`pulumi new` templates",
    "RunPlugin": "plugins written in Python",
    "GenerateProgram": "code generation",
    "GenerateProject": "code generation",
    "GeneratePackage": "code generation",
    "Pack": "packing SDKs",
    "Link": "linking local SDKs",
}

# The Go host's script: the pulumi-plugin.json path of each package named in argv.
_PLUGIN_JSON_PATHS_SCRIPT = """\
import importlib.metadata, importlib.util, os, sys, json
result = {}
for pkg_name in sys.argv[1:]:
    try:
        dist = importlib.metadata.distribution(pkg_name)
        module = dist.metadata['Name'].replace('-', '_')
        spec = importlib.util.find_spec(module)
        locs = list(spec.submodule_search_locations or []) if spec else []
        found = [p for l in locs for p in [os.path.join(str(l), 'pulumi-plugin.json')]
                 if os.path.isfile(p)]
        result[pkg_name] = found[0] if found else ''
    except Exception:
        result[pkg_name] = ''
print(json.dumps(result))
"""


class HostError(Exception):
    """A call failed for a reason the user can act on; the message is shown as is."""


@dataclass(frozen=True)
class PythonOptions:
    """The runtime options of Pulumi.yaml that choose the program's interpreter."""

    root: str
    program_dir: str
    virtualenv: str = ""


def parse_options(info: Any) -> PythonOptions:
    """Read ``runtime.options`` as the Go host's ``parseOptions`` does, for pip only.

    Raises:
        HostError: an option of the wrong type, or one this host does not support.
    """
    root = info.root_directory if info is not None else ""
    program_dir = info.program_directory if info is not None else ""
    options: dict[str, Any] = {}
    if info is not None and info.HasField("options"):
        options = dict(info.options.items())
    virtualenv = options.get("virtualenv", "")
    if not isinstance(virtualenv, str):
        raise HostError("virtualenv option must be a string")
    typechecker = options.get("typechecker")
    if typechecker is not None:
        if not isinstance(typechecker, str):
            raise HostError("typechecker option must be a string")
        if typechecker not in ("mypy", "pyright"):
            raise HostError(f"unsupported typechecker option: {typechecker}")
        raise HostError(
            f"the typechecker option ({typechecker}) is not supported by this language host"
            " (tools/langhost): remove it from Pulumi.yaml"
        )
    toolchain = options.get("toolchain")
    if toolchain is not None:
        if not isinstance(toolchain, str):
            raise HostError("toolchain option must be a string")
        if toolchain not in ("pip", "poetry", "uv"):
            raise HostError(f"unsupported toolchain option: {toolchain}")
        if toolchain != "pip":
            raise HostError(
                f"the {toolchain} toolchain is not supported by this language host"
                " (tools/langhost): only pip"
            )
    else:
        for lock in ("uv.lock", "poetry.lock"):
            found = _search_up(Path(program_dir or "."), lock)
            if found is not None:
                raise HostError(
                    f"{found} would select the {lock.split('.')[0]} toolchain, which this"
                    " language host (tools/langhost) does not support: set"
                    " `toolchain: pip` in Pulumi.yaml's runtime options"
                )
    return PythonOptions(root=root, program_dir=program_dir, virtualenv=virtualenv)


def _search_up(start: Path, name: str) -> Path | None:
    for directory in (start.resolve(), *start.resolve().parents):
        if (directory / name).is_file():
            return directory / name
    return None


def virtualenv_error(option: str, path: str) -> str:
    """The Go host's message for a ``virtualenv`` option that names no virtualenv."""
    if os.path.exists(path):
        message = "doesn't appear to be a virtual environment"
    else:
        message = "doesn't exist"
    python = os.path.join(path, "bin", "python")
    return (
        f"The 'virtualenv' option in Pulumi.yaml is set to {json.dumps(option)}, but"
        f" {json.dumps(path)} {message}; run the following commands to create the virtual"
        " environment and install dependencies into it:\n\n"
        f"    1. python3 -m venv {path}\n"
        f"    2. {python} -m pip install --upgrade pip setuptools wheel\n"
        f"    3. {python} -m pip install -r requirements.txt\n\n\n"
        "For more information see:"
        " https://www.pulumi.com/docs/intro/languages/python/#virtual-environments"
    )


class Toolchain:
    """The pip toolchain: the program's interpreter and the commands run with it."""

    def __init__(self, options: PythonOptions) -> None:
        self.options = options
        venv = options.virtualenv
        if venv and not os.path.isabs(venv):
            venv = os.path.join(options.root, venv)
        self.virtualenv_path = venv

    def validate(self) -> None:
        """Raise when the ``virtualenv`` option names no virtualenv (never fall back)."""
        if self.options.virtualenv and not _is_virtualenv(self.virtualenv_path):
            raise HostError(virtualenv_error(self.options.virtualenv, self.virtualenv_path))

    def python(self) -> str:
        """The interpreter's path."""
        self.validate()
        if self.virtualenv_path:
            return os.path.join(self.virtualenv_path, "bin", "python")
        names = [os.environ["PULUMI_PYTHON_CMD"]] if os.environ.get("PULUMI_PYTHON_CMD") else []
        names = names or ["python3", "python"]
        for name in names:
            found = shutil.which(name)
            if found:
                return found
        raise HostError(
            f"failed to locate any of {json.dumps(names)} on your PATH."
            " Have you installed Python 3.6 or greater?"
        )

    def env(self) -> dict[str, str]:
        """The environment of a command: a virtualenv is activated as the Go host does."""
        env = dict(os.environ)
        if self.virtualenv_path:
            bin_dir = os.path.join(self.virtualenv_path, "bin")
            env["PATH"] = bin_dir + os.pathsep + env["PATH"] if env.get("PATH") else bin_dir
            env.pop("PYTHONHOME", None)
            env["VIRTUAL_ENV"] = self.virtualenv_path
        return env

    def output(self, *args: str) -> str:
        """Run the interpreter with ``args`` and return its stdout.

        Raises:
            HostError: the command failed (its stderr is in the message).
        """
        command = [self.python(), *args]
        done = subprocess.run(command, capture_output=True, text=True, env=self.env(), check=False)
        if done.returncode != 0:
            raise HostError(
                f"calling `{' '.join(command)}`: exit status {done.returncode}:"
                f" {done.stderr.strip()}"
            )
        return done.stdout

    def list_packages(self, transitive: bool) -> list[tuple[str, str]]:
        """``(normalized name, version)`` of every package pip lists."""
        args = ["-m", "pip", "list", "--format", "json"]
        if not transitive:
            args.append("--not-required")
        raw = json.loads(self.output(*args))
        return [(normalize_package_name(p["name"]), str(p["version"])) for p in raw]


def _is_virtualenv(path: str) -> bool:
    return bool(path) and os.path.isfile(os.path.join(path, "bin", "python"))


def normalize_package_name(name: str) -> str:
    """PEP 503: lowercase, runs of ``-``, ``_`` and ``.`` become one ``-``."""
    return re.sub(r"[-_.]+", "-", name.lower())


def plugin_version(package_version: str) -> str:
    """Translate a PEP 440 package version into the plugin's semver, as the Go host does.

    ``1.0`` → ``1.0.0``, ``1.2.3a4`` → ``1.2.3-alpha.4``, ``1.2.3rc4`` → ``1.2.3-rc.4``,
    ``1.2.3.post4`` → ``1.2.3+post4``, ``1.2.3.post4.dev5`` → ``1.2.3+post4dev5``.

    Raises:
        ValueError: a version this translation does not cover (epochs, local parts).
    """
    if not package_version:
        raise ValueError("cannot parse empty string")
    if not package_version.isascii():
        raise ValueError("not ascii")

    def number(s: str) -> tuple[str, str]:
        match = re.match(r"[0-9]*", s)
        digits = match.group(0) if match else ""
        return digits, s[len(digits) :]

    first, after = number(package_version)
    if first and after.startswith("!"):
        raise ValueError("epochs are not supported")
    segments: list[str] = []
    rest = package_version
    found_dot = False
    while True:
        digits, rest = number(rest)
        if not digits:
            break
        found_dot = False
        segments.append(digits)
        if rest.startswith("."):
            rest = rest[1:]
            found_dot = True
        else:
            break
    if found_dot:
        rest = "." + rest
    segments += ["0"] * (3 - len(segments))
    if not rest:
        return ".".join(segments)
    pre = ""
    if rest.startswith("a"):
        digits, rest = number(rest[1:])
        pre = "-alpha." + digits
    elif rest.startswith("b"):
        digits, rest = number(rest[1:])
        pre = "-beta." + digits
    elif rest.startswith("rc"):
        digits, rest = number(rest[2:])
        pre = "-rc." + digits
    post = ""
    if rest.startswith(".post"):
        digits, rest = number(rest[5:])
        post = "+post" + digits
    dev = ""
    if rest.startswith(".dev"):
        digits, rest = number(rest[4:])
        dev = ("" if post else "+") + "dev" + digits
    if rest:
        raise ValueError(f"'{rest}' still unparsed")
    return ".".join(segments) + pre + post + dev


def _parameterization(value: Any) -> Any:
    if not value:
        return None
    return plugin_pb2.PackageParameterization(
        name=value.get("name", ""),
        version=value.get("version", ""),
        value=base64.b64decode(value.get("value") or ""),
    )


def package_dependency(name: str, version: str, plugin_json: dict[str, Any] | None) -> Any:
    """The ``PackageDependency`` of one installed Pulumi package, or ``None`` without one."""
    dep_name = dep_version = server = ""
    parameterization = extension = None
    if plugin_json is not None:
        if not plugin_json.get("resource", False):
            return None
        parameterization = _parameterization(plugin_json.get("parameterization"))
        extension = _parameterization(plugin_json.get("extensionParameterization"))
        dep_name = plugin_json.get("name", "") or ""
        dep_version = plugin_json.get("version", "") or ""
        server = plugin_json.get("server", "") or ""
    if not dep_name:
        dep_name = name.removeprefix("pulumi-")
    if not dep_version:
        try:
            dep_version = plugin_version(version)
        except ValueError:
            return None  # the Go host skips a package whose plugin version it can't tell
    if not dep_version.startswith("v"):
        dep_version = "v" + dep_version
    return plugin_pb2.PackageDependency(
        name=dep_name,
        version=dep_version,
        kind="resource",
        server=server,
        parameterization=parameterization,
        extension=extension,
    )


def _version_of(text: str, pattern: str) -> str:
    """``X.Y.Z`` from a ``--version`` line, padded to three segments; empty when unknown."""
    match = re.match(pattern, text.strip())
    if not match:
        return ""
    parts = match.group(1).split(".")[:3]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _find_exec_script(given: str) -> str:
    """``pulumi-language-python-exec``: ``-use-executor``, or next to this host's launcher."""
    if given:
        return given
    here = Path(sys.argv[0]).resolve().parent
    candidate = here / "pulumi-language-python-exec"
    if not candidate.is_file():
        raise SystemExit(f"missing executor {candidate}: run `make setup`")
    return str(candidate)


class LanguageHost(language_pb2_grpc.LanguageRuntimeServicer):
    """The served ``LanguageRuntime`` calls (module docstring)."""

    def __init__(self, exec_script: str, engine_address: str, tracing: str = "") -> None:
        self._exec = exec_script
        self._engine = engine_address
        self._tracing = tracing
        self._children: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self.on_engine_gone: Callable[[], None] = lambda: None

    # -- served -------------------------------------------------------------------------
    def Handshake(self, request: Any, context: Any) -> Any:
        self._engine = request.engine_address
        if self._engine:
            watch_engine(self._engine, self.on_engine_gone)
        return language_pb2.LanguageHandshakeResponse()

    def GetPluginInfo(self, request: Any, context: Any) -> Any:
        from importlib.metadata import version

        return plugin_pb2.PluginInfo(version="v" + version("pulumi"))

    def GetRequiredPlugins(self, request: Any, context: Any) -> Any:
        # The Go host answers this way too: the CLI then calls GetRequiredPackages.
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "method GetRequiredPlugins not implemented")

    def GetRequiredPackages(self, request: Any, context: Any) -> Any:
        return _answer(context, lambda: self._required_packages(request.info))

    def GetProgramDependencies(self, request: Any, context: Any) -> Any:
        def deps() -> Any:
            tc = Toolchain(parse_options(request.info))
            try:
                packages = tc.list_packages(request.transitiveDependencies)
            except HostError as exc:
                raise HostError(f"failed to get python dependencies: {exc}") from exc
            return language_pb2.GetProgramDependenciesResponse(
                dependencies=[language_pb2.DependencyInfo(name=n, version=v) for n, v in packages]
            )

        return _answer(context, deps)

    def About(self, request: Any, context: Any) -> Any:
        def about() -> Any:
            info = request.info if request.HasField("info") else None
            tc = Toolchain(parse_options(info))
            executable = tc.output("-c", "import sys; print(sys.executable)").strip()
            python_version = _version_of(tc.output("--version"), r"Python (\d+(?:\.\d+)*)")
            try:
                pip_version = _version_of(tc.output("-m", "pip", "--version"), r"pip (\S+)")
            except HostError:
                pip_version = ""  # the Go host reports no pip version rather than failing
            return language_pb2.AboutResponse(
                executable=executable,
                version=python_version,
                metadata={
                    "toolchain": "Pip",
                    "toolchainVersion": pip_version or "0.0.0",
                    "typechecker": "None",
                },
            )

        return _answer(context, about)

    def Run(self, request: Any, context: Any) -> Any:
        try:
            tc = Toolchain(parse_options(request.info))
            python = tc.python()
        except HostError as exc:
            context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        args = [python, self._exec, *self._arguments(request)]
        env = tc.env()
        if request.config:
            env["PULUMI_CONFIG"] = json.dumps(dict(request.config))
        env["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(list(request.configSecretKeys))
        try:
            child = subprocess.Popen(args, env=env)
        except OSError as exc:
            return language_pb2.RunResponse(
                error=f"problem executing program (could not run language executor): {exc}"
            )
        with self._lock:
            self._children.add(child)
        # The Go host ends the program when the call itself ends (the engine went away).
        context.add_callback(lambda: _interrupt(child))
        try:
            code = child.wait()
        finally:
            with self._lock:
                self._children.discard(child)
        if code == 0:
            return language_pb2.RunResponse()
        if code == _BAIL_EXIT_CODE:
            return language_pb2.RunResponse(bail=True)
        # A signal shows as -1, as Go's WaitStatus.ExitStatus() reports it.
        return language_pb2.RunResponse(
            error=f"program exited with non-zero exit code: {code if code > 0 else -1}"
        )

    def Cancel(self, request: Any, context: Any) -> Any:
        with self._lock:
            children = list(self._children)
        for child in children:
            _interrupt(child)
        return empty_pb2.Empty()

    # -- helpers ------------------------------------------------------------------------
    def _arguments(self, request: Any) -> list[str]:
        """The exec script's arguments, in the Go host's order, empty ones left out."""
        pairs = [
            ("monitor", request.monitor_address),
            ("engine", self._engine),
            ("project", request.project),
            ("root_directory", request.info.root_directory),
            ("stack", request.stack),
            ("pwd", request.pwd),
            ("dry_run", "true" if request.dryRun else "false"),
            ("parallel", str(request.parallel)),
            ("tracing", self._tracing),
            ("organization", request.organization),
        ]
        args = [part for key, value in pairs if value for part in (f"--{key}", value)]
        return [*args, request.info.entry_point, *request.args]

    def _required_packages(self, info: Any) -> Any:
        tc = Toolchain(parse_options(info))
        packages = [
            (name, version)
            for name, version in tc.list_packages(transitive=True)
            if name not in _PACKAGES_WITHOUT_PLUGINS
        ]
        paths: dict[str, str] = {}
        if packages:
            try:
                paths = json.loads(
                    tc.output("-c", _PLUGIN_JSON_PATHS_SCRIPT, *(n for n, _ in packages))
                )
            except HostError:
                paths = {}  # as the Go host: no paths, so only the pulumi-* names count
        deps = []
        for name, version in packages:
            plugin_json = None
            if paths.get(name):
                try:
                    plugin_json = json.loads(Path(paths[name]).read_text())
                except OSError:
                    plugin_json = None
                except ValueError as exc:
                    raise HostError(
                        f"failed to parse pulumi-plugin.json for {name}: {exc}"
                    ) from exc
            if plugin_json is None and not name.startswith("pulumi-"):
                continue
            dep = package_dependency(name, version, plugin_json)
            if dep is not None:
                deps.append(dep)
        return language_pb2.GetRequiredPackagesResponse(packages=deps)


def _not_served(name: str, purpose: str) -> Callable[..., Any]:
    def method(self: LanguageHost, request: Any, context: Any) -> Any:
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{name} is not served by this language host (tools/langhost): it is for {purpose}",
        )

    method.__name__ = name
    return method


for _name, _purpose in _NOT_SERVED.items():
    setattr(LanguageHost, _name, _not_served(_name, _purpose))


def _answer(context: Any, call: Callable[[], Any]) -> Any:
    """Run a call; a :class:`HostError` becomes the call's error, as a Go error would."""
    try:
        return call()
    except HostError as exc:
        context.abort(grpc.StatusCode.UNKNOWN, str(exc))


def _interrupt(child: subprocess.Popen[bytes]) -> None:
    """SIGINT a running program, and SIGKILL it if it is still there after the grace."""
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGINT)

    def kill() -> None:
        if child.poll() is None:
            child.kill()

    timer = threading.Timer(_CANCEL_GRACE_SECONDS, kill)
    timer.daemon = True
    timer.start()


def watch_engine(address: str, gone: Callable[[], None]) -> None:
    """Check the engine's gRPC health every few minutes; call ``gone`` when it fails.

    The Go host does the same, so a host whose engine was killed does not live on.
    """

    def check() -> None:
        channel = grpc.insecure_channel(address)
        health = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        stop = threading.Event()
        while not stop.wait(_HEALTHCHECK_SECONDS):
            try:
                health(b"", timeout=30)
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    gone()
                    return

    threading.Thread(target=check, name="engine-health", daemon=True).start()


def _flags(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Go-style flags (``-name value``, ``--name=value``) before the positional arguments."""
    flags: dict[str, str] = {}
    rest = list(argv)
    while rest and rest[0].startswith("-") and rest[0] not in ("-", "--"):
        name, _, value = rest.pop(0).lstrip("-").partition("=")
        if name == "version":
            flags[name] = "true"
        elif not value and rest:
            value = rest.pop(0)
        if name != "version":
            flags[name] = value
    if rest and rest[0] == "--":
        rest.pop(0)
    return flags, rest


def main(argv: list[str]) -> int:
    """Serve the language host; the engine address is the first positional argument."""
    flags, args = _flags(argv)
    if "version" in flags:
        from importlib.metadata import version

        print("v" + version("pulumi"))
        return 0
    engine = args[0] if args else ""
    host = LanguageHost(
        _find_exec_script(flags.get("use-executor", "")), engine, flags.get("tracing", "")
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[("grpc.max_receive_message_length", 400 * 1024 * 1024)],
    )
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(host, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stop = threading.Event()
    host.on_engine_gone = stop.set
    if engine:
        watch_engine(engine, stop.set)
    print(port, flush=True)
    # The engine kills the plugin when it is done; exit cleanly on SIGTERM/SIGINT too.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # Wait in short steps, never for good: Python runs a signal's handler on the main
    # thread only, and the kernel may deliver SIGTERM to one of gRPC's threads instead.
    # The main thread, blocked in an untimed wait, would then never wake to run it (CI saw
    # the host outlive a SIGTERM by 30 s); a timed wait returns and runs the handler.
    while not stop.wait(0.25):
        pass
    server.stop(grace=1).wait(timeout=5)
    # Exit now, as the Go host does on a signal: a handler thread still inside an RPC
    # (a program run, a plugin stream) would otherwise hold the interpreter's exit, which
    # joins the pool's threads, for as long as that RPC lasts.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
