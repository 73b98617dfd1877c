"""`make setup` checks its prerequisites before anything else and stops with one line
naming what to install (tools/setup.sh)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _setup(tmp_path: Path, go_version: str | None) -> subprocess.CompletedProcess[str]:
    """``tools/setup.sh etcd`` with the system's PATH and, first on it, a ``go`` that
    reports ``go_version`` and builds nothing (or none at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if go_version is not None:
        go = bin_dir / "go"
        go.write_text(
            "#!/bin/sh\n"
            f'[ "$1 $2" = "env GOVERSION" ] && exec echo go{go_version}\n'
            f'[ "$1 $2" = "env GOCACHE" ] && exec echo {tmp_path / "gocache"}\n'
            "exit 1\n"
        )
        go.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TWC_CACHE_DIR": str(tmp_path / "cache"),
    }
    return subprocess.run(
        ["bash", str(ROOT / "tools" / "setup.sh"), "etcd"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    ("go_version", "says"),
    [
        (None, "go is missing: install Go 1.26.6 or a later 1.26"),
        ("1.26.2", "go 1.26.2 cannot build the tools under GOTOOLCHAIN=local"),
        ("1.25.9", "go 1.25.9 cannot build the tools under GOTOOLCHAIN=local"),
    ],
)
def test_an_unfit_go_stops_setup_with_one_line(
    tmp_path: Path, go_version: str | None, says: str
) -> None:
    # The stand-in PATH keeps /usr/bin:/bin: a go there would hide the missing one.
    assert go_version is not None or not shutil.which("go", path="/usr/bin:/bin")
    done = _setup(tmp_path, go_version)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0]
    assert "etcd" not in done.stdout  # stopped before any step


def test_a_fit_go_passes_the_check_and_setup_goes_on_to_build(tmp_path: Path) -> None:
    done = _setup(tmp_path, "1.26.10")
    assert "etcd 3.6.16: building" in done.stdout, done.stdout + done.stderr
    # The stand-in go builds nothing: the build step, not the check, fails.
    assert "error: etcd failed" in done.stderr, done.stderr
