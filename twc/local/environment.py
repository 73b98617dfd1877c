"""The embedded local environment: a small real cluster and a Temporal dev server.

etcd, kube-apiserver, kube-controller-manager (the Deployment, ReplicaSet and
StatefulSet controllers, garbage collection, namespaces and service accounts),
kube-scheduler, KWOK playing the kubelets of a few simulated nodes (``twc.local.kwok``:
pods turn Running and Ready), the Temporal dev server, and with ``run_workers`` one real
temporalio worker process per Running twc pod (``twc.local.podworkers``).

Everything binds to loopback on free ports and lives under one state directory
(``.twc/`` in the project by default; tests use a temporary one):

    local.json        ports and the processes started (pid + start time, argv, log)
    kubeconfig        token auth against the API server, its own serving CA
    state/            the Pulumi ``file://`` backend
    postgres/         with ``--state postgres``: PostgreSQL's data dir and its password
                      (the backend is then ``postgres://``, see ``twc.local.postgres``)
    passphrase        the Pulumi secrets passphrase (0600; exported as a *_FILE variable)
    env.json          the variables of ``twc local env``, for ``twc up --stack local``
    pod-workers.json  the worker processes of the pods (pid + start time)
    etcd/ apiserver/ kwok.yaml temporal.db logs/

``up`` is idempotent; a component that died since the last ``up`` is reported with the
tail of its log and started again on the same ports.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from twc.local import processes
from twc.local.postgres import Postgres
from twc.local.processes import ProcessRecord

log = logging.getLogger(__name__)

DRAINAGE_CONFIG = {
    "matching.wv.VersionDrainageStatusVisibilityGracePeriod": '"5s"',
    "matching.wv.VersionDrainageStatusRefreshInterval": '"2s"',
}
"""Dynamic config of the dev server: how soon a version that lost its traffic is
checked for open pinned workflows (Draining → Drained)."""
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "temporal",
    "pod-workers",
)
OPTIONAL = frozenset({"pod-workers"})
"""Started only when asked for (``--run-workers``), then kept like the others."""
_BIND_ATTEMPTS = 3
"""Ports PostgreSQL tries before its start fails (another environment may bind one first)."""
STATE_PARTS = frozenset({"postgres"})
"""Started after the components, with ``--state postgres`` only (see ``_up_postgres``)."""
CONTROLLERS = (
    "deployment",
    "replicaset",
    "statefulset",
    "garbagecollector",
    "namespace",
    "serviceaccount",
)
"""kube-controller-manager's controllers here: what twc's objects need to become ready
and to go away again, and nothing that would act on things the test bed lacks (no node
lifecycle, endpoints, jobs, volumes or certificates). ``serviceaccount`` makes each
namespace's ``default`` ServiceAccount, without which a pod that names none is refused
at admission; service-account token secrets are not needed (tokens are requested)."""
Progress = Callable[[str], None]
POLLERS = {"matching.longPollExpirationInterval": '"5s"', "matching.PollerHistoryTTL": '"15s"'}
"""The dev server's poller bookkeeping: a poller is listed until 15 s after its last poll,
and an idle long poll returns after 5 s so a running worker polls again well before."""
PARTITIONS = {
    "matching.numTaskqueueReadPartitions": "1",
    "matching.numTaskqueueWritePartitions": "1",
}
"""One partition per task queue (four by default). Partitions spread a queue over a
cluster's matching hosts; the dev server is one process on SQLite, and asking about a
queue loads all of its partitions. With four, 5000 queues asked about at the daemon's
rate held 5.4 GiB and timed out callers (UpdateTaskQueue could not get a transaction);
with one, 1.5 GiB and a p95 of 4 ms (measured: 80 queues a second, both types)."""

ACK_PERSISTENCE = {"matching.updateAckInterval": '"5m"'}
"""How often a loaded task queue writes its ack level to the dev server's SQLite: every
five minutes here, every minute by default. A loaded queue writes it whether anything
moved or not, so a dev server holding the 10,000 queues of 5000 workers (both types)
ran 167 SQLite transactions a second with nothing to do (measured: 0.15 cores, 1700
write calls and 4 MB a second, a new queue's describe p50 34 ms and up to 20 s; 0.04
cores, 82 write calls a second and a p50 of 8 ms within five minutes of loading them
with this setting). A Temporal cluster does that work on its own hosts and database;
the test bed's shares the daemon's cores. What the longer interval costs is only the
dev server's own restart: tasks dispatched in the last five minutes may be dispatched
again (at least once, as Temporal promises)."""


class LocalEnvError(RuntimeError):
    """The local environment could not be started or used."""


class ToolMissingError(LocalEnvError):
    """A required binary is not installed (``make setup`` builds them)."""


def project_root() -> Path:
    """The project root: the directory holding ``Pulumi.yaml`` above this package."""
    return Path(__file__).resolve().parents[2]


def find_tool(name: str) -> str:
    """Find a tool binary: the project's ``.twc/bin`` first, then PATH.

    Raises:
        ToolMissingError: naming the tool and how to get it.
    """
    candidate = project_root() / ".twc" / "bin" / name
    if candidate.exists() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise ToolMissingError(f"{name} not found in .twc/bin or on PATH: run `make setup`")


def _ephemeral_ports() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2]
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, outside the kernel's
    ephemeral range. A port the kernel hands out (bind to 0) is one it also hands to
    outgoing connections: one took Temporal's HTTP port between its choice and the dev
    server's bind, in CI. Outside the range only another listener can take it."""
    low, high = _ephemeral_ports()
    pool = range(15000, low) if low > 16000 else range(high + 1, 65536)
    chooser = secrets.SystemRandom()
    for _ in range(100):
        port = chooser.choice(pool)
        with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tcp_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class Ports:
    """The loopback ports of one environment, chosen once and kept across restarts."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    temporal: int
    temporal_http: int
    temporal_metrics: int
    controller_manager: int
    scheduler: int
    kwok: int
    postgres: int = 0
    """PostgreSQL's port, used only with ``--state postgres``."""

    @classmethod
    def allocate(cls) -> Ports:
        ports: set[int] = set()
        while len(ports) < len(fields(cls)):
            ports.add(free_port())
        return cls(*sorted(ports))

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Ports:
        """The saved ports; a port a newer version added gets a free one."""
        known = [f.name for f in fields(cls)]
        values = {k: int(str(v)) for k, v in data.items() if k in known}
        for name in known:
            while name not in values:
                port = free_port()
                if port not in values.values():
                    values[name] = port
        return cls(**values)


@dataclass
class State:
    """What ``local.json`` holds."""

    ports: Ports
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    backend: str = "file"
    """The Pulumi state backend ``twc local up --state`` last chose: file or postgres."""

    def to_json(self) -> dict[str, object]:
        return {
            "ports": self.ports.__dict__,
            "processes": {k: v.to_json() for k, v in self.processes.items()},
            "backend": self.backend,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> State:
        ports = data["ports"]
        procs = data.get("processes", {})
        assert isinstance(ports, dict)
        assert isinstance(procs, dict)
        return cls(
            ports=Ports.from_json(ports),
            processes={k: ProcessRecord.from_json(v) for k, v in procs.items()},
            backend=str(data.get("backend") or "file"),
        )


@dataclass(frozen=True)
class ComponentStatus:
    """Whether one component runs, and where."""

    name: str
    running: bool
    pid: int | None
    endpoint: str
    log_file: str


class LocalEnvironment:
    """One embedded environment rooted at ``state_dir``."""

    def __init__(
        self,
        state_dir: Path | str | None = None,
        run_workers: bool = False,
        *,
        state: str | None = None,
        record_backend: bool = True,
    ) -> None:
        """One environment rooted at ``state_dir`` (``.twc`` of the project by default).

        Args:
            state_dir: Where everything lives.
            run_workers: Play the kubelet with real worker processes.
            state: The Pulumi state backend, ``file`` or ``postgres``; ``None`` keeps
                the one last chosen for this environment (``file`` at first).
            record_backend: Whether :meth:`up` records ``state`` as this environment's
                choice (``twc local env`` then prints it); a test that wants a second
                backend next to the first passes ``False``.
        """
        if state not in (None, "file", "postgres"):
            raise LocalEnvError(f"unknown state backend {state!r}: file or postgres")
        self.run_workers = run_workers
        self._backend = state
        self._record_backend = record_backend
        self.dir = Path(state_dir) if state_dir else project_root() / ".twc"
        self.dir = self.dir.resolve()
        self.state_file = self.dir / "local.json"
        self.kubeconfig = self.dir / "kubeconfig"
        self.backend_dir = self.dir / "state"
        self.passphrase_file = self.dir / "passphrase"
        self.logs = self.dir / "logs"
        self.env_file = self.dir / "env.json"
        self.pod_workers_file = self.dir / "pod-workers.json"
        self.postgres = Postgres(self.dir)

    # ----------------------------------------------------------------- state
    def load_state(self) -> State | None:
        """The saved state, or None if this environment was never started."""
        try:
            return State.from_json(json.loads(self.state_file.read_text()))
        except FileNotFoundError:
            return None

    def _save(self, state: State) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.to_json(), indent=2))
        tmp.replace(self.state_file)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # --------------------------------------------------------------- public
    def backend(self, state: State | None = None) -> str:
        """The Pulumi state backend of this environment: ``file`` or ``postgres``."""
        if self._backend is not None:
            return self._backend
        state = state or self.load_state()
        return state.backend if state is not None else "file"

    @property
    def backend_url(self) -> str:
        if self.backend() == "postgres":
            return self.postgres.url(self._require_state().ports.postgres)
        return f"file://{self.backend_dir}"

    def temporal_address(self, state: State | None = None) -> str:
        state = state or self._require_state()
        return f"127.0.0.1:{state.ports.temporal}"

    def apiserver_url(self, state: State | None = None) -> str:
        state = state or self._require_state()
        return f"https://127.0.0.1:{state.ports.apiserver}"

    def env(self) -> dict[str, str]:
        """The variables a shell (or the Pulumi engine) needs to use this environment.

        The passphrase itself is never printed: ``PULUMI_CONFIG_PASSPHRASE_FILE`` points at
        a 0600 file, which the Pulumi CLI reads.
        """
        state = self._require_state()
        out = {
            "KUBECONFIG": str(self.kubeconfig),
            "PULUMI_BACKEND_URL": self.backend_url,
            "PULUMI_CONFIG_PASSPHRASE_FILE": str(self.passphrase_file),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "TEMPORAL_ADDRESS": self.temporal_address(state),
            "TEMPORAL_NAMESPACE": "default",
        }
        if self.backend(state) == "postgres":
            # The password stays in its 0600 pgpass file; PGPASSFILE names it.
            out.update(self.postgres.env(state.ports.postgres))
        return out

    def _write_env_file(self) -> None:
        # What `twc up|preview|status --stack local` read to find this environment
        # without the shell's `eval`: plain data, so product code never imports the test
        # bed. No secret in it (the passphrase stays in its 0600 file).
        tmp = self.env_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.env(), indent=2, sort_keys=True))
        tmp.replace(self.env_file)

    def status(self) -> list[ComponentStatus]:
        """Per component: running or not (a crash shows as not running)."""
        state = self.load_state()
        if state is None:
            return []
        endpoints = {
            "etcd": f"http://127.0.0.1:{state.ports.etcd_client}",
            "kube-apiserver": self.apiserver_url(state),
            "kube-controller-manager": ", ".join(CONTROLLERS),
            "kube-scheduler": f"https://127.0.0.1:{state.ports.scheduler}",
            "kwok": f"nodes {', '.join(_kwok().NODES)}",
            "temporal": self.temporal_address(state),
            "pod-workers": "a worker process per Running pod",
            "postgres": f"127.0.0.1:{state.ports.postgres} (Pulumi state)",
        }
        names = [*COMPONENTS, *(["postgres"] if self.backend(state) == "postgres" else [])]
        out = []
        for name in names:
            rec = state.processes.get(name)
            if name in OPTIONAL and rec is None:
                continue
            out.append(
                ComponentStatus(
                    name=name,
                    running=bool(rec and processes.is_alive(rec)),
                    pid=rec.pid if rec else None,
                    endpoint=endpoints[name],
                    log_file=rec.log_file if rec else "",
                )
            )
        return out

    def up(self, progress: Progress = log.info) -> list[str]:
        """Start whatever is not running; idempotent.

        Returns:
            Crash reports for components that had died since the last ``up``.

        Raises:
            LocalEnvError: a component did not become ready (its log tail included).
        """
        with self._locked():
            state = self.load_state() or State(ports=Ports.allocate())
            self.dir.mkdir(parents=True, exist_ok=True)
            self.backend_dir.mkdir(exist_ok=True)
            self._ensure_passphrase()
            self._ensure_credentials()
            crashes = []
            starters = {
                "etcd": self._start_etcd,
                "kube-apiserver": self._start_apiserver,
                "kube-controller-manager": self._start_controller_manager,
                "kube-scheduler": self._start_scheduler,
                "kwok": self._start_kwok,
                "temporal": self._start_temporal,
                "pod-workers": self._start_pod_workers,
            }
            for name in [
                n for n in state.processes if n not in COMPONENTS and n not in STATE_PARTS
            ]:
                # A component an older twc started that is no longer part of the
                # environment (e.g. its home-made controllers): it must not act beside
                # the real ones.
                if processes.stop(state.processes.pop(name)):
                    progress(f"{name}: stopped (no longer part of the environment)")
                self._save(state)
            for name in COMPONENTS:
                rec = state.processes.get(name)
                if name in OPTIONAL and rec is None and not self.run_workers:
                    continue
                if rec and processes.is_alive(rec):
                    progress(f"{name}: running (pid {rec.pid})")
                    if name == "kube-apiserver":
                        # An upgraded twc brings changed CRDs; installing is idempotent
                        # and leaves CRDs that are not twc's alone.
                        self._install_crds(progress)
                    continue
                if rec:
                    report = (
                        f"{name} (pid {rec.pid}) had exited; last lines of {rec.log_file}:\n"
                        + processes.log_tail(rec)
                    )
                    crashes.append(report)
                    progress(f"warning: {report}")
                t0 = time.monotonic()
                state.processes[name] = starters[name](state, progress)
                self._save(state)
                progress(f"{name}: ready in {time.monotonic() - t0:.1f} s")
                if name == "kube-apiserver":
                    self._write_kubeconfig(state)
                    self._install_crds(progress)
            if self._backend is not None and self._record_backend:
                state.backend = self._backend
            if self.backend(state) == "postgres":
                crashes += self._up_postgres(state, progress)
            self._save(state)
            self._write_env_file()
            return crashes

    def down(self, progress: Progress = log.info) -> list[str]:
        """Stop exactly the processes this environment started (checked by pid + start time).

        Returns:
            The names of the components that were stopped.
        """
        with self._locked():
            state = self.load_state()
            if state is None:
                return []
            stopped = []
            retired = [n for n in state.processes if n not in COMPONENTS]
            for name in [*reversed(COMPONENTS), *retired]:
                rec = state.processes.pop(name, None)
                if rec is None:
                    continue
                if processes.stop(rec):
                    stopped.append(name)
                    progress(f"{name}: stopped (pid {rec.pid})")
                else:
                    progress(f"{name}: was not running (pid {rec.pid})")
            # Workers whose runner died (or was killed before it could stop them).
            leftover = _podworkers().stop_recorded(self.pod_workers_file)
            if leftover:
                progress(f"pod-workers: stopped {leftover} leftover worker process(es)")
            self._save(state)
            self.env_file.unlink(missing_ok=True)
            return stopped

    def _up_postgres(self, state: State, progress: Progress) -> list[str]:
        """Start PostgreSQL (made on first use) unless it runs; crash reports."""
        rec = state.processes.get("postgres")
        if rec and processes.is_alive(rec):
            progress(f"postgres: running (pid {rec.pid})")
            return []
        crashes = []
        if rec:
            report = (
                f"postgres (pid {rec.pid}) had exited; last lines of {rec.log_file}:\n"
                + processes.log_tail(rec)
            )
            crashes.append(report)
            progress(f"warning: {report}")
        if not state.ports.postgres:
            taken = set(state.ports.__dict__.values())
            port = free_port()
            while port in taken:
                port = free_port()
            state.ports.postgres = port
        t0 = time.monotonic()
        try:
            if self.postgres.initialize():
                progress(f"postgres: initialized {self.postgres.data}")
        except (FileNotFoundError, RuntimeError) as exc:
            raise LocalEnvError(f"postgres: {exc}") from None
        for attempt in range(1, _BIND_ATTEMPTS + 1):
            progress(f"postgres: starting on 127.0.0.1:{state.ports.postgres}")
            rec = self.postgres.start(state.ports.postgres)
            state.processes["postgres"] = rec
            self._save(state)
            try:
                self._wait_ready(rec, lambda: self.postgres.ready(state.ports.postgres), 60)
                break
            except LocalEnvError as exc:
                # A free port is free only until someone binds it: another environment
                # on the host may have taken it meanwhile. Another port, then.
                if attempt == _BIND_ATTEMPTS or "could not bind" not in str(exc):
                    raise
                taken = set(state.ports.__dict__.values())
                port = free_port()
                while port in taken:
                    port = free_port()
                progress(f"postgres: port {state.ports.postgres} was taken; trying {port}")
                state.ports.postgres = port
        progress(f"postgres: ready in {time.monotonic() - t0:.1f} s")
        return crashes

    def stop_component(self, name: str) -> None:
        """Stop one component (fault-injection in tests); ``up`` starts it again."""
        state = self._require_state()
        rec = state.processes.get(name)
        if rec:
            processes.stop(rec)

    # -------------------------------------------------------------- helpers
    def _require_state(self) -> State:
        state = self.load_state()
        if state is None:
            raise LocalEnvError(f"no local environment in {self.dir}: run `twc local up`")
        return state

    def _ensure_passphrase(self) -> None:
        if not self.passphrase_file.exists():
            fd = os.open(self.passphrase_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(24))

    @property
    def _apiserver_dir(self) -> Path:
        return self.dir / "apiserver"

    def admin_token(self) -> str:
        """The API server's admin bearer token (group system:masters)."""
        line = (self._apiserver_dir / "tokens.csv").read_text().splitlines()[0]
        return line.split(",")[0]

    def _ensure_credentials(self) -> None:
        """The admin token and the service-account signing key, made once."""
        d = self._apiserver_dir
        d.mkdir(exist_ok=True)
        tokens = d / "tokens.csv"
        if not tokens.exists():
            fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(f'{secrets.token_hex(24)},twc-admin,twc-admin,"system:masters"\n')
        key = d / "sa.key"
        if not key.exists():
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.asymmetric import rsa

            private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pem = private.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fb:
                fb.write(pem)
            (d / "sa.pub").write_bytes(
                private.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                )
            )

    def _wait_ready(
        self,
        rec: ProcessRecord,
        check: Callable[[], bool],
        timeout: float,
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not processes.is_alive(rec):
                raise LocalEnvError(
                    f"{rec.name} exited during start-up; last lines of {rec.log_file}:\n"
                    + processes.log_tail(rec)
                )
            if check():
                return
            time.sleep(0.2)
        processes.stop(rec)
        raise LocalEnvError(
            f"{rec.name} not ready after {timeout:.0f} s; last lines of {rec.log_file}:\n"
            + processes.log_tail(rec)
        )

    def _start_etcd(self, state: State, progress: Progress) -> ProcessRecord:
        p = state.ports
        client = f"http://127.0.0.1:{p.etcd_client}"
        peer = f"http://127.0.0.1:{p.etcd_peer}"
        progress(f"etcd: starting on {client}")
        rec = processes.start(
            "etcd",
            [
                find_tool("etcd"),
                "--name=twc",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=twc={peer}",
                "--log-level=warn",
                # A throwaway test store: durability is not worth an fsync per write.
                "--unsafe-no-fsync",
            ],
            self.logs / "etcd.log",
        )

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as resp:
                    return bool(json.loads(resp.read()).get("health") == "true")
            except (OSError, ValueError):
                return False

        self._wait_ready(rec, healthy, 60)
        return rec

    def _start_apiserver(self, state: State, progress: Progress) -> ProcessRecord:
        p = state.ports
        d = self._apiserver_dir
        progress(f"kube-apiserver: starting on https://127.0.0.1:{p.apiserver}")
        rec = processes.start(
            "kube-apiserver",
            [
                find_tool("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{p.etcd_client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={p.apiserver}",
                f"--cert-dir={d}",
                f"--token-auth-file={d / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "--v=0",
            ],
            self.logs / "kube-apiserver.log",
        )
        token = self.admin_token()
        url = f"https://127.0.0.1:{p.apiserver}/readyz"
        self._wait_ready(rec, lambda: _https_ok(url, token), 120)
        return rec

    def _start_controller_manager(self, state: State, progress: Progress) -> ProcessRecord:
        port = state.ports.controller_manager
        progress(f"kube-controller-manager: starting {', '.join(CONTROLLERS)}")
        rec = processes.start(
            "kube-controller-manager",
            [
                find_tool("kube-controller-manager"),
                # The admin credentials (system:masters): one client for every
                # controller, as --use-service-account-credentials=false says.
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(CONTROLLERS)}",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                # The default 20 requests/s throttle a bed that makes and deletes pods
                # in bursts (rollouts, namespace teardown between tests).
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.dir / 'controller-manager'}",
                "--v=0",
            ],
            self.logs / "kube-controller-manager.log",
        )

        self._wait_ready(rec, lambda: _https_ok(f"https://127.0.0.1:{port}/healthz"), 60)
        return rec

    def _start_scheduler(self, state: State, progress: Progress) -> ProcessRecord:
        port = state.ports.scheduler
        progress("kube-scheduler: starting")
        rec = processes.start(
            "kube-scheduler",
            [
                find_tool("kube-scheduler"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.dir / 'scheduler'}",
                "--v=0",
            ],
            self.logs / "kube-scheduler.log",
        )
        self._wait_ready(rec, lambda: _https_ok(f"https://127.0.0.1:{port}/healthz"), 60)
        return rec

    def _start_kwok(self, state: State, progress: Progress) -> ProcessRecord:
        from twc.local import kube

        kw = _kwok()
        api = kube.Kube(self.kubeconfig)
        try:
            kw.ensure_nodes(api)
            config = self.dir / "kwok.yaml"
            config.write_text(kw.config_yaml())
            port = state.ports.kwok
            progress(f"kwok: starting, simulating nodes {', '.join(kw.NODES)}")
            rec = processes.start(
                "kwok",
                [
                    find_tool("kwok"),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--config={config}",
                    f"--manage-nodes-with-annotation-selector={kw.MANAGE_SELECTOR}",
                    f"--node-ip={kw.NODE_IP}",
                    f"--cidr={kw.DEFAULT_POD_CIDR}",
                    f"--server-address=127.0.0.1:{port}",
                ],
                self.logs / "kwok.log",
                # KWOK also reads ~/.kwok/kwok.yaml when it exists: not a user's here.
                env=dict(os.environ, HOME=str(self.dir / "kwok-home")),
            )

            def ready() -> bool:
                return _http_ok(f"http://127.0.0.1:{port}/healthz") and kw.nodes_ready(api)

            self._wait_ready(rec, ready, 60)
            return rec
        finally:
            api.close()

    def _start_pod_workers(self, state: State, progress: Progress) -> ProcessRecord:
        import sys

        # Workers a runner that died left behind would poll twice beside the new ones.
        leftover = _podworkers().stop_recorded(self.pod_workers_file)
        if leftover:
            progress(f"pod-workers: stopped {leftover} leftover worker process(es)")
        progress("pod-workers: starting a real worker process per Running pod")
        rec = processes.start(
            "pod-workers",
            [
                sys.executable,
                "-m",
                "twc.local.podworkers",
                f"--kubeconfig={self.kubeconfig}",
                f"--state-file={self.pod_workers_file}",
                f"--log-dir={self.logs / 'pods'}",
            ],
            self.logs / "pod-workers.log",
            cwd=project_root(),
        )
        # It writes the state file once it has listed the pods.
        self._wait_ready(rec, self.pod_workers_file.exists, 60)
        return rec

    def _start_temporal(self, state: State, progress: Progress) -> ProcessRecord:
        p = state.ports
        progress(f"temporal: starting the dev server on 127.0.0.1:{p.temporal}")
        rec = processes.start(
            "temporal",
            [
                find_tool("temporal"),
                "server",
                "start-dev",
                "--ip=127.0.0.1",
                f"--port={p.temporal}",
                f"--http-port={p.temporal_http}",
                f"--metrics-port={p.temporal_metrics}",
                "--headless",
                f"--db-filename={self.dir / 'temporal.db'}",
                "--log-level=warn",
                "--namespace=default",
                # Versioned rollouts: a version's drainage is checked every few seconds
                # here (3 minutes by default), so a sunset can be watched in a test.
                *(f"--dynamic-config-value={k}={v}" for k, v in DRAINAGE_CONFIG.items()),
                # The poller list says who polls now: a worker that stopped (a pod
                # scaled away or rolled) leaves it within seconds, not the server's five
                # minutes. Idle long polls end sooner so live workers poll again in time.
                *(f"--dynamic-config-value={k}={v}" for k, v in POLLERS.items()),
                # One partition per task queue: the dev server holds thousands of queues.
                *(f"--dynamic-config-value={k}={v}" for k, v in PARTITIONS.items()),
                # Idle queues persist their ack level every five minutes, not every one.
                *(f"--dynamic-config-value={k}={v}" for k, v in ACK_PERSISTENCE.items()),
            ],
            self.logs / "temporal.log",
        )
        self._wait_ready(rec, lambda: _temporal_ready(f"127.0.0.1:{p.temporal}"), 120)
        return rec

    def _write_kubeconfig(self, state: State) -> None:
        import yaml

        ca = _serving_ca(self._apiserver_dir / "apiserver.crt")
        cluster: dict[str, object] = {"server": self.apiserver_url(state)}
        if ca:
            cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
        else:  # pragma: no cover - the API server always writes its self-signed cert
            cluster["insecure-skip-tls-verify"] = True
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "twc-local", "cluster": cluster}],
            "users": [{"name": "twc-admin", "user": {"token": self.admin_token()}}],
            "contexts": [
                {
                    "name": "twc-local",
                    "context": {"cluster": "twc-local", "user": "twc-admin"},
                }
            ],
            "current-context": "twc-local",
        }
        fd = os.open(self.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            yaml.safe_dump(config, fh)

    def _install_crds(self, progress: Progress) -> None:
        from twc.kube.crds import install_crds
        from twc.local import crds, kube
        from twc.spec import crds as spec_crds

        api = kube.Kube(self.kubeconfig)
        try:
            # The kmsvc Queue stands in for the kmsvc operator's: the test bed owns it.
            api.apply_crd(crds.queue_crd())
            # twc's own go through the product's installer, which leaves a CRD that is
            # not twc's (the official worker controller's Connection) as it is.
            outcomes = install_crds(api.api_client, spec_crds.all_crds())
        finally:
            api.close()
        queue = crds.queue_crd()["metadata"]["name"]
        progress(f"CRDs installed: {queue}, {', '.join(map(str, outcomes))}")


def _https_ok(url: str, token: str | None = None) -> bool:
    """True when a loopback HTTPS health endpoint answers 200.

    Certificates are not verified: the servers write their self-signed serving
    certificates during start-up, and this only asks whether they are up yet.
    """
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        req = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def _http_ok(url: str) -> bool:
    """True when a loopback HTTP health endpoint answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def _kwok() -> Any:
    # Imported when used: it pulls in the Kubernetes client, which `twc local env` needs not.
    from twc.local import kwok

    return kwok


def _podworkers() -> Any:
    from twc.local import podworkers

    return podworkers


def _serving_ca(cert_file: Path) -> bytes | None:
    """The CA that signed the API server's self-signed serving certificate.

    kube-apiserver writes ``apiserver.crt`` as the serving cert followed by its own CA.
    """
    try:
        pem = cert_file.read_bytes()
    except OSError:
        return None
    marker = b"-----BEGIN CERTIFICATE-----"
    blocks = [marker + b for b in pem.split(marker)[1:]]
    return blocks[-1] if blocks else None


def _temporal_ready(address: str) -> bool:
    """True once the Temporal frontend answers a health check and knows ``default``."""
    host, _, port = address.rpartition(":")
    if not tcp_open(host, int(port)):
        return False
    import asyncio

    async def check() -> bool:
        from temporalio.client import Client

        try:
            client = await asyncio.wait_for(Client.connect(address), 5)
            return bool(await client.service_client.check_health(timeout=None))
        except Exception:  # noqa: BLE001 - the test bed reports and retries
            return False

    return asyncio.run(check())
