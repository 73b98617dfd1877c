"""The embedded local environment: etcd, kube-apiserver, controllers, KWOK's simulated
nodes, the Temporal dev server and, when asked, a worker process per Running pod and
PostgreSQL for the Pulumi state; on loopback, under one state directory (``.twc/``).
``up`` is idempotent; a component that died is reported and started again on its ports.

PostgreSQL 15 (``--state postgres``) listens on loopback only, its random password in 0600
files (``PGPASSFILE``), never in a URL or log; under root in a user namespace of its own."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twc.kube.crds import install_crds
from twc.local import cluster, processes
from twc.local.cluster import Kube
from twc.local.processes import ProcessRecord

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
PORTS = (
    "etcd_client",
    "etcd_peer",
    "apiserver",
    "temporal",
    "temporal_http",
    "temporal_metrics",
    "controller_manager",
    "scheduler",
    "kwok",
    "postgres",
)
CONTROLLERS = (
    "deployment,replicaset,statefulset,garbagecollector,namespace,serviceaccount,"
    "horizontalpodautoscaling,disruption"
)
"""What twc's objects need to become ready, scale and go away, nothing the test bed lacks."""
TEMPORAL_CONFIG = {
    # A version that lost its traffic is checked for open pinned workflows in seconds.
    "matching.wv.VersionDrainageStatusVisibilityGracePeriod": '"5s"',
    "matching.wv.VersionDrainageStatusRefreshInterval": '"2s"',
    # The poller list says who polls now: a stopped worker leaves it within 15 s.
    "matching.longPollExpirationInterval": '"5s"',
    "matching.PollerHistoryTTL": '"15s"',
    # One partition per task queue, so the dev server holds thousands of queues.
    "matching.numTaskqueueReadPartitions": "1",
    "matching.numTaskqueueWritePartitions": "1",
    # Idle loaded queues write their ack level every five minutes, not every minute.
    "matching.updateAckInterval": '"5m"',
}
"""The dev server's dynamic config (bench/results.md names the figures behind it)."""
_BIND_ATTEMPTS = 3  # ports PostgreSQL tries: another environment may bind one first


class LocalEnvError(RuntimeError):
    """The local environment could not be started or used."""


class ToolMissingError(LocalEnvError):
    """A required binary is not installed (``make setup`` builds them)."""


def project_root() -> Path:
    """The project root: the directory holding ``Pulumi.yaml`` above this package."""
    return Path(__file__).resolve().parents[2]


def find_tool(name: str) -> str:
    """A tool binary from the project's ``.twc/bin``, else PATH; ToolMissingError if none."""
    candidate = project_root() / ".twc" / "bin" / name
    if os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise ToolMissingError(f"{name} not found in .twc/bin or on PATH: run `make setup`")
    return found


def free_port(avoid: Collection[int] = ()) -> int:
    """A free loopback TCP port, not in ``avoid``, outside the kernel's ephemeral range."""
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
    low, high = (int(p) for p in text.split()[:2])
    pool = range(15000, low) if low > 16000 else range(high + 1, 65536)
    while True:
        port = secrets.SystemRandom().choice(pool)
        if port in avoid:
            continue
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
            return port


@dataclass
class State:
    """What ``local.json`` holds: ports, processes started, the state backend last chosen."""

    ports: dict[str, int]
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    backend: str = "file"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> State:
        ports = {k: int(v) for k, v in data.get("ports", {}).items() if k in PORTS and v}
        for name in PORTS:
            if name not in ports:
                ports[name] = free_port(avoid=set(ports.values()))
        procs = {k: ProcessRecord.from_json(v) for k, v in data.get("processes", {}).items()}
        return cls(ports, procs, str(data.get("backend") or "file"))


@dataclass(frozen=True)
class ComponentStatus:
    """Whether one component runs, and where."""

    name: str
    running: bool
    pid: int | None
    endpoint: str


class LocalEnvironment:
    """One embedded environment in ``state_dir``; ``state``: the Pulumi backend to record."""

    def __init__(
        self,
        state_dir: Path | str | None = None,
        run_workers: bool = False,
        *,
        state: str | None = None,
        record_backend: bool = True,
    ) -> None:
        if state not in (None, "file", "postgres"):
            raise LocalEnvError(f"unknown state backend {state!r}: file or postgres")
        self.run_workers = run_workers
        self._backend = state
        self._record_backend = record_backend
        self.dir = Path(state_dir or project_root() / ".twc").resolve()
        self.kubeconfig = self.dir / "kubeconfig"
        self.backend_dir = self.dir / "state"
        self.passphrase_file = self.dir / "passphrase"
        self.pod_workers_file = self.dir / "pod-workers.json"
        self.postgres = Postgres(self.dir)
        self._apiserver_dir = self.dir / "apiserver"

    def load_state(self) -> State | None:
        """The saved state, or None if this environment was never started."""
        try:
            return State.from_json(json.loads((self.dir / "local.json").read_text()))
        except FileNotFoundError:
            return None

    def _require_state(self) -> State:
        if (state := self.load_state()) is None:
            raise LocalEnvError(f"no local environment in {self.dir}: run `twc local up`")
        return state

    def _save(self, state: State) -> None:
        processes.write_json(self.dir / "local.json", dataclasses.asdict(state))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def backend(self, state: State) -> str:
        """The Pulumi state backend of this environment: ``file`` or ``postgres``."""
        return self._backend or state.backend

    def temporal_address(self, state: State | None = None) -> str:
        return f"127.0.0.1:{(state or self._require_state()).ports['temporal']}"

    def env(self) -> dict[str, str]:
        """The variables a shell or the Pulumi engine needs (the passphrase stays in a file)."""
        state = self._require_state()
        out = {
            "KUBECONFIG": str(self.kubeconfig),
            "PULUMI_BACKEND_URL": f"file://{self.backend_dir}",
            "PULUMI_CONFIG_PASSPHRASE_FILE": str(self.passphrase_file),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "TEMPORAL_ADDRESS": self.temporal_address(state),
            "TEMPORAL_NAMESPACE": "default",
        }
        if self.backend(state) == "postgres":
            out.update(self.postgres.env(state.ports["postgres"]))
        return out

    def _endpoints(self, state: State) -> dict[str, str]:
        """Every component, in the order ``up`` starts them, with where it runs."""
        p = state.ports
        return {
            "etcd": f"http://127.0.0.1:{p['etcd_client']}",
            "kube-apiserver": f"https://127.0.0.1:{p['apiserver']}",
            "kube-controller-manager": CONTROLLERS.replace(",", ", "),
            "kube-scheduler": f"https://127.0.0.1:{p['scheduler']}",
            "kwok": f"nodes {', '.join(cluster.NODES)}",
            "temporal": self.temporal_address(state),
            "pod-workers": "a worker process per Running pod",
            "postgres": f"127.0.0.1:{p['postgres']} (Pulumi state)",
        }

    def _wanted(self, state: State) -> list[str]:
        asked = {"pod-workers": self.run_workers, "postgres": self.backend(state) == "postgres"}
        return [n for n in self._endpoints(state) if asked.get(n, True) or n in state.processes]

    def status(self) -> list[ComponentStatus]:
        """Per component: running or not (a crash shows as not running)."""
        if (state := self.load_state()) is None:
            return []
        endpoints = self._endpoints(state)
        out = []
        for name in self._wanted(state):
            rec = state.processes.get(name)
            running = rec is not None and processes.is_alive(rec)
            out.append(ComponentStatus(name, running, rec.pid if rec else None, endpoints[name]))
        return out

    def up(self, progress: Progress = log.info) -> list[str]:
        """Start whatever is not running; returns crash reports of components that died."""
        with self._locked():
            state = self.load_state() or State.from_json({})
            if self._backend is not None and self._record_backend:
                state.backend = self._backend
            self.backend_dir.mkdir(exist_ok=True)
            self._ensure_credentials()
            crashes = []
            for name in self._wanted(state):
                rec = state.processes.get(name)
                if rec and processes.is_alive(rec):
                    progress(f"{name}: running (pid {rec.pid})")
                    continue
                if rec:
                    tail = processes.log_tail(rec)
                    crashes.append(f"{name} (pid {rec.pid}) had exited; {rec.log_file}:\n{tail}")
                    progress(f"warning: {crashes[-1]}")
                t0 = time.monotonic()
                start = getattr(self, f"_start_{name.replace('-', '_')}")
                state.processes[name] = start(state, progress)
                self._save(state)
                progress(f"{name}: ready in {time.monotonic() - t0:.1f} s")
                if name == "kube-apiserver":
                    self._write_kubeconfig(state)
            self._save(state)
            with Kube(self.kubeconfig) as api:
                outcomes = install_crds(api.api_client, cluster.all_crds())
            progress(f"CRDs installed: {', '.join(map(str, outcomes))}")
            processes.write_json(self.dir / "env.json", self.env())
            return crashes

    def down(self, progress: Progress = log.info) -> list[str]:
        """Stop the processes this environment started and listed; returns those stopped."""
        with self._locked():
            if (state := self.load_state()) is None:
                return []
            stopped = [n for n in reversed(state.processes) if processes.stop(state.processes[n])]
            progress(f"stopped {', '.join(stopped) or 'nothing'}")
            processes.stop_listed(self.pod_workers_file)
            state.processes.clear()
            self._save(state)
            (self.dir / "env.json").unlink(missing_ok=True)
            return stopped

    def stop_component(self, name: str) -> None:
        """Stop one component (fault injection in tests); ``up`` starts it again."""
        if rec := self._require_state().processes.get(name):
            processes.stop(rec)

    def admin_token(self) -> str:
        """The API server's admin bearer token (group system:masters)."""
        return (self._apiserver_dir / "tokens.csv").read_text().split(",")[0]

    def _ensure_credentials(self) -> None:
        (d := self._apiserver_dir).mkdir(exist_ok=True)
        if not self.passphrase_file.exists():
            write_private(self.passphrase_file, secrets.token_urlsafe(24))
        if not (d / "tokens.csv").exists():
            line = f'{secrets.token_hex(24)},twc-admin,twc-admin,"system:masters"\n'
            write_private(d / "tokens.csv", line)
        if (d / "sa.key").exists():
            return
        from cryptography.hazmat.primitives import serialization as s
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption())
        write_private(d / "sa.key", pem.decode())  # the API server reads its public half

    def _start(
        self,
        name: str,
        argv: list[str],
        ready: Callable[[], bool],
        timeout: float = 60.0,
        retry: str = "",
        **kwargs: Any,
    ) -> ProcessRecord:
        rec = processes.start(name, argv, self.dir / "logs" / f"{name}.log", **kwargs)
        deadline = time.monotonic() + timeout
        while processes.is_alive(rec) and time.monotonic() < deadline:
            if ready():
                return rec
            time.sleep(0.2)
        why = f"not ready after {timeout:.0f} s" if processes.stop(rec) else "exited at start-up"
        tail = processes.log_tail(rec, lines=1000)
        if retry and why == "exited at start-up" and retry in tail:
            return self._start(name, argv, ready, timeout, **kwargs)
        raise LocalEnvError(f"{name} {why}; the end of {rec.log_file}:\n{tail[-3000:]}")

    def _start_etcd(self, state: State, progress: Progress) -> ProcessRecord:
        client = f"http://127.0.0.1:{state.ports['etcd_client']}"
        peer = f"http://127.0.0.1:{state.ports['etcd_peer']}"
        argv = [
            *(find_tool("etcd"), "--name=twc", f"--data-dir={self.dir / 'etcd'}"),
            *(f"--listen-client-urls={client}", f"--advertise-client-urls={client}"),
            *(f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}"),
            *(f"--initial-cluster=twc={peer}", "--log-level=warn", "--unsafe-no-fsync"),
        ]
        return self._start("etcd", argv, lambda: _http_ok(f"{client}/readyz"))

    def _start_kube_apiserver(self, state: State, progress: Progress) -> ProcessRecord:
        d, port = self._apiserver_dir, state.ports["apiserver"]
        argv = [
            find_tool("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{state.ports['etcd_client']}",
            *("--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={d}"),
            *(f"--token-auth-file={d / 'tokens.csv'}", "--authorization-mode=RBAC"),
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={d / 'sa.key'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            *("--service-cluster-ip-range=10.96.0.0/24", "--enable-priority-and-fairness=false"),
        ]
        url, token = f"https://127.0.0.1:{port}/readyz", self.admin_token()
        return self._start("kube-apiserver", argv, lambda: _http_ok(url, token), 120)

    def _start_controller(self, name: str, port: int, *flags: str) -> ProcessRecord:
        kubeconfig = ("--kubeconfig", "--authentication-kubeconfig", "--authorization-kubeconfig")
        argv = [
            find_tool(name),
            *(f"{flag}={self.kubeconfig}" for flag in kubeconfig),
            *("--leader-elect=false", "--kube-api-qps=100", "--kube-api-burst=200"),
            *("--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={self.dir / name}"),
            *flags,
        ]
        return self._start(name, argv, lambda: _http_ok(f"https://127.0.0.1:{port}/healthz"))

    def _start_kube_controller_manager(self, state: State, progress: Progress) -> ProcessRecord:
        name, port = "kube-controller-manager", state.ports["controller_manager"]
        return self._start_controller(name, port, f"--controllers={CONTROLLERS}")

    def _start_kube_scheduler(self, state: State, progress: Progress) -> ProcessRecord:
        return self._start_controller("kube-scheduler", state.ports["scheduler"])

    def _start_kwok(self, state: State, progress: Progress) -> ProcessRecord:
        config, port = self.dir / "kwok.yaml", state.ports["kwok"]
        config.write_text(cluster.config_yaml())
        argv = [
            *(find_tool("kwok"), f"--kubeconfig={self.kubeconfig}", f"--config={config}"),
            f"--manage-nodes-with-annotation-selector={cluster.MANAGE_SELECTOR}",
            *(f"--node-ip={cluster.NODE_IP}", f"--cidr={cluster.DEFAULT_POD_CIDR}"),
            f"--server-address=127.0.0.1:{port}",
        ]
        with Kube(self.kubeconfig) as api:
            cluster.ensure_nodes(api)
            return self._start(
                "kwok",
                argv,
                lambda: _http_ok(f"http://127.0.0.1:{port}/healthz") and cluster.nodes_ready(api),
                # KWOK also reads ~/.kwok/kwok.yaml when it exists: not a user's here.
                env=dict(os.environ, HOME=str(self.dir / "kwok-home")),
                retry="concurrent map writes",  # KWOK 0.8 can die of a data race: once more
            )

    def _start_pod_workers(self, state: State, progress: Progress) -> ProcessRecord:
        # Workers a runner that died left behind would poll twice beside the new ones.
        processes.stop_listed(self.pod_workers_file)
        files = (self.kubeconfig, self.pod_workers_file, self.dir / "logs" / "pods")
        argv = [sys.executable, "-m", "twc.local.podworkers", *map(str, files)]
        return self._start("pod-workers", argv, self.pod_workers_file.exists, cwd=project_root())

    def _start_temporal(self, state: State, progress: Progress) -> ProcessRecord:
        p = state.ports
        argv = [
            *(find_tool("temporal"), "server", "start-dev", "--ip=127.0.0.1", "--headless"),
            *(f"--port={p['temporal']}", f"--http-port={p['temporal_http']}"),
            *(f"--metrics-port={p['temporal_metrics']}", "--log-level=warn"),
            *(f"--db-filename={self.dir / 'temporal.db'}", "--namespace=default"),
            *(f"--dynamic-config-value={k}={v}" for k, v in TEMPORAL_CONFIG.items()),
        ]
        url = f"http://127.0.0.1:{p['temporal_http']}/api/v1/namespaces/default"
        return self._start("temporal", argv, lambda: _http_ok(url), 120)

    def _start_postgres(
        self, state: State, progress: Progress, attempts: int = _BIND_ATTEMPTS
    ) -> ProcessRecord:
        port, pg = state.ports["postgres"], self.postgres
        try:
            if pg.initialize():
                progress(f"postgres: initialized {pg.data}")
            return self._start("postgres", pg.argv(port), lambda: pg.ready(port))
        except (FileNotFoundError, RuntimeError) as exc:
            if attempts <= 1 or "could not bind" not in str(exc):
                raise LocalEnvError(f"postgres: {exc}") from None
        state.ports["postgres"] = free_port(avoid=set(state.ports.values()))
        progress(f"postgres: port {port} was taken; trying {state.ports['postgres']}")
        return self._start_postgres(state, progress, attempts - 1)

    def _write_kubeconfig(self, state: State) -> None:
        # kube-apiserver writes its self-signed serving cert followed by its own CA.
        pem = (self._apiserver_dir / "apiserver.crt").read_bytes()
        ca = b"-----BEGIN CERTIFICATE-----" + pem.split(b"-----BEGIN CERTIFICATE-----")[-1]
        server = f"https://127.0.0.1:{state.ports['apiserver']}"
        api_server = {"server": server, "certificate-authority-data": base64.b64encode(ca).decode()}
        context = {"cluster": "twc-local", "user": "twc-admin"}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "twc-local", "cluster": api_server}],
            "users": [{"name": "twc-admin", "user": {"token": self.admin_token()}}],
            "contexts": [{"name": "twc-local", "context": context}],
            "current-context": "twc-local",
        }
        write_private(self.kubeconfig, json.dumps(config))  # JSON is YAML


def _http_ok(url: str, token: str | None = None) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


PG_BIN = Path("/usr/lib/postgresql/15/bin")  # Debian's postgresql-15
USER = "twc"
DATABASE = "pulumi"


def postgres_tool(name: str) -> str:
    """A PostgreSQL 15 binary; FileNotFoundError when it is not installed."""
    candidate = PG_BIN / name
    if not candidate.exists():
        raise FileNotFoundError(f"{candidate} not found: `tools/setup.sh postgres` installs it")
    return str(candidate)


def _unprivileged(argv: list[str]) -> list[str]:
    # PostgreSQL will not run as root; in a user namespace its files stay ours.
    if os.geteuid() == 0:
        return [shutil.which("unshare") or "/usr/bin/unshare", "-U", *argv]
    return argv


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


class Postgres:
    """The PostgreSQL part of one embedded environment, under ``env_dir / "postgres"``."""

    def __init__(self, env_dir: Path) -> None:
        self.dir = env_dir / "postgres"
        self.data = self.dir / "data"
        self.password_file = self.dir / "password"
        self.passfile = self.dir / "pgpass"

    def env(self, port: int) -> dict[str, str]:
        """The Pulumi backend URL (no password in it) and where the password is."""
        write_private(self.passfile, f"127.0.0.1:{port}:{DATABASE}:{USER}:{self._password()}\n")
        url = f"postgres://{USER}@127.0.0.1:{port}/{DATABASE}?sslmode=disable"
        return {"PULUMI_BACKEND_URL": url, "PGPASSFILE": str(self.passfile)}

    def _password(self) -> str:
        if not self.password_file.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            write_private(self.password_file, secrets.token_urlsafe(24))
        return self.password_file.read_text().strip()

    def _run(self, argv: list[str], stdin: str | None = None) -> None:
        done = subprocess.run(_unprivileged(argv), input=stdin, capture_output=True, text=True)
        if done.returncode != 0 or "ERROR" in done.stdout + done.stderr:
            raise RuntimeError(f"{Path(argv[0]).name} failed:\n{done.stdout}{done.stderr}")

    def initialize(self) -> bool:
        """Make the data directory and the database once; whether it did now."""
        if (self.data / "PG_VERSION").exists():
            return False
        self._password()
        initdb = [postgres_tool("initdb"), "-D", str(self.data), "-U", USER, "-E", "UTF8"]
        auth = (f"--pwfile={self.password_file}", "--auth=scram-sha-256", "--no-instructions")
        self._run([*initdb, *auth])
        create = f"CREATE DATABASE {DATABASE} OWNER {USER};\n"
        self._run([postgres_tool("postgres"), "--single", "-D", str(self.data), "postgres"], create)
        return True

    def argv(self, port: int) -> list[str]:
        """The server on ``127.0.0.1:port``, no Unix socket, no durability (a test store)."""
        settings = ("logging_collector", "fsync", "synchronous_commit", "full_page_writes")
        off = [arg for name in settings for arg in ("-c", f"{name}=off")]
        server = [postgres_tool("postgres"), "-D", str(self.data), "-h", "127.0.0.1"]
        return _unprivileged([*server, "-p", str(port), "-k", "", *off])

    def ready(self, port: int) -> bool:
        """Whether this data directory's server is ready on ``port`` (``postmaster.pid``)."""
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        # Line 4 is the port, line 8 the status ("starting", "ready", ...).
        if len(lines) < 8 or lines[3].strip() != str(port) or lines[7].strip() != "ready":
            return False
        argv = [postgres_tool("pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-d", DATABASE]
        return subprocess.run(argv, capture_output=True).returncode == 0
