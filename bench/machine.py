"""The machine and the tool versions a run was measured on."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VERSIONS_FILE = ROOT / "tools" / "versions.env"


def parse_versions_env(text: str) -> dict[str, str]:
    """``KEY=value`` lines of ``tools/versions.env`` (comments and blanks skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip().strip('"')
    return out


def tool_versions(path: Path = VERSIONS_FILE) -> dict[str, str | None]:
    """The pinned versions of the real tools, plus the Python SDKs actually installed."""
    pinned = parse_versions_env(path.read_text()) if path.exists() else {}
    out: dict[str, str | None] = {
        "pulumi": pinned.get("PULUMI_VERSION"),
        "pulumi_kubernetes": pinned.get("PULUMI_KUBERNETES_VERSION"),
        "temporal_cli": pinned.get("TEMPORAL_CLI_VERSION"),
        "kube_apiserver": pinned.get("KUBERNETES_VERSION"),
        "etcd": pinned.get("ETCD_VERSION"),
    }
    from importlib import metadata

    for dist, key in (
        ("pulumi", "pulumi_python_sdk"),
        ("pulumi_kubernetes", "pulumi_kubernetes_python_sdk"),
        ("temporalio", "temporalio"),
    ):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = None
    out["python"] = platform.python_version()
    out["twc"] = _commit()
    return out


def _commit() -> str | None:
    """The twc commit measured, with ``+changes`` when the work tree differs from it."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{head}+changes" if dirty else head


def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (or what ``platform`` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    """Total memory in GiB from ``/proc/meminfo``."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """Cores, memory, CPU model, OS and the load average when asked."""
    return {
        "cores": os.cpu_count(),
        "memory_gib": memory_gib(),
        "cpu_model": cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "load_average": load_average(),
    }
