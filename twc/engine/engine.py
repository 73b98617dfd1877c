"""The Pulumi engine through the Automation API, run on the project itself as a local
program; every CLI command runs under the engine guard."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from twc.engine import workspace
from twc.engine.supervisor import GUARD_MARK, install_wrapper

_IMPORT_ROOT = Path(__file__).resolve().parents[2]
ROOT = _IMPORT_ROOT if (_IMPORT_ROOT / "Pulumi.yaml").is_file() else Path.cwd()
"""The Pulumi project: the checkout twc runs from, else the current directory."""
_guarded = functools.cache(lambda r: auto.PulumiCommand(root=r))  # each runs `pulumi version`
CONFIG_PREFIX = "twc:"
SHARD_CONFIG = "shardNamespaces"
"""The ``twc:`` config key naming a shard's namespaces (a JSON list)."""
LOCAL_ENV_FILE = ROOT / ".twc" / "env.json"
"""Written by ``twc local up``: the embedded environment's variables."""


def engine_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for the engine: the project's tools on PATH and an atomic file backend."""
    path = [str(ROOT / ".twc" / "bin"), str(ROOT / ".venv" / "bin"), os.environ.get("PATH", "")]
    env = {
        "PATH": os.pathsep.join(path),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
        **(extra or {}),
    }
    if url := workspace.backend_url(extra):
        env["PULUMI_BACKEND_URL"] = workspace.atomic_url(url)
    return env


@dataclass(frozen=True)
class StackRef:
    """Which stack, its ``twc:`` config, extra environment and the project directory."""

    name: str
    config: Mapping[str, str] | None = None
    env: Mapping[str, str] | None = None
    work_dir: Path = ROOT

    def with_env(self, extra: Mapping[str, str]) -> StackRef:
        """This stack with ``extra`` added to its environment."""
        return replace(self, env={**(self.env or {}), **extra})


def real_pulumi() -> str | None:
    """The real CLI: the project's pinned one (``.twc/bin/pulumi``), else PATH's."""
    pinned = ROOT / ".twc" / "bin" / "pulumi"
    if pinned.exists():
        return str(pinned)
    path = os.environ.get("PATH", "").split(os.pathsep)
    return shutil.which("pulumi", path=os.pathsep.join(d for d in path if GUARD_MARK not in d))


def pulumi_command() -> auto.PulumiCommand | None:
    """The real CLI under the engine guard; ``None`` when there is none."""
    real = real_pulumi()
    return _guarded(str(install_wrapper(real, root=_IMPORT_ROOT))) if real else None


def select_stack(ref: StackRef) -> auto.Stack:
    """Create or select the stack (one select at a time) and apply ``ref.config``."""
    env = engine_env(ref.env)
    project = workspace.project_name(ref.work_dir)
    workspace.repair_sidecars(env.get("PULUMI_BACKEND_URL", ""), project=project, stack=ref.name)
    options = auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=pulumi_command())
    with workspace.selecting(ref.work_dir, env) as settings:
        try:
            stack = auto.create_or_select_stack(ref.name, work_dir=str(ref.work_dir), opts=options)
        except auto.CommandError as error:
            # Written half by a CLI that is not twc's (it takes no lock): once more.
            unreadable = workspace.UNREADABLE_SETTINGS in str(error)
            if not unreadable or not workspace.repair_settings(settings):
                raise
            stack = auto.create_or_select_stack(ref.name, work_dir=str(ref.work_dir), opts=options)
    if ref.config:
        config = {f"{CONFIG_PREFIX}{k}": auto.ConfigValue(str(v)) for k, v in ref.config.items()}
        stack.set_all_config(config)
    return stack


def up(
    ref: StackRef,
    *,
    on_output: Callable[[str], Any] | None = None,
    on_event: Callable[[Any], Any] | None = None,
    target: list[str] | None = None,
    target_dependents: bool = False,
) -> auto.UpResult:
    """Run ``pulumi up`` on the stack (``target_dependents``: the targets' dependents too)."""
    return select_stack(ref).up(
        on_output=on_output,
        on_event=on_event,
        target=target,
        target_dependents=target_dependents or None,
        color="never",
    )


def preview(ref: StackRef, *, on_event: Callable[[Any], Any] | None = None) -> auto.PreviewResult:
    """Run ``pulumi preview --diff`` on the stack."""
    return select_stack(ref).preview(diff=True, on_event=on_event, color="never")
