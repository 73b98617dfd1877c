"""The Pulumi engine through the Automation API, run on the project itself.

The program is a *local* program: ``work_dir`` is the project root, so the engine runs
``__main__.py`` through the language host exactly as ``pulumi up`` does, and the dynamic
providers (pickled by reference to ``providers.*``) stay importable by the provider
process (Pulumi issues #7453, #7960 are why an inline program would not do).

Every CLI command runs under twc's engine guard (:mod:`twc.stackrun.guard`): the
Automation API is pointed at a ``pulumi`` wrapper that runs the real CLI as a child of
the guard, so no CLI, language-host or plugin process outlives the process that started
it, whatever happens to that process.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from twc.stackrun import filebackend, workspace
from twc.stackrun.guard import GUARD_MARK, install_wrapper

log = logging.getLogger(__name__)

_IMPORT_ROOT = Path(__file__).resolve().parents[2]
"""Where ``twc`` is imported from: the checkout, or site-packages when twc is installed."""
ROOT = _IMPORT_ROOT if (_IMPORT_ROOT / "Pulumi.yaml").is_file() else Path.cwd()
"""The Pulumi project (``Pulumi.yaml``, ``__main__.py``, ``stacks/``): the checkout twc
runs from, or the current directory for an installed twc (``pip install .``)."""
CONFIG_PREFIX = "twc:"


def engine_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for the engine: the project's tools first on PATH, and a ``file://``
    backend that writes every state file in one rename (:func:`filebackend.atomic_url`)."""
    path = os.pathsep.join(
        [str(ROOT / ".twc" / "bin"), str(ROOT / ".venv" / "bin"), os.environ.get("PATH", "")]
    )
    env = {
        "PATH": path,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
    }
    env.update(extra or {})
    url = env.get("PULUMI_BACKEND_URL") or os.environ.get("PULUMI_BACKEND_URL")
    if url:
        env["PULUMI_BACKEND_URL"] = filebackend.atomic_url(url)
    return env


@dataclass(frozen=True)
class StackRef:
    """Which stack, where, with what config."""

    name: str
    """Stack name (an environment: local, dev, prod...)."""
    config: Mapping[str, str] | None = None
    """``twc:`` config to set before running (keys without the prefix)."""
    env: Mapping[str, str] | None = None
    """Extra environment variables for the engine and the program."""
    work_dir: Path = ROOT
    """The project directory."""


def real_pulumi() -> str | None:
    """The real CLI: the project's pinned one (``.twc/bin/pulumi``), else PATH's."""
    pinned = ROOT / ".twc" / "bin" / "pulumi"
    if pinned.exists():
        return str(pinned)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if GUARD_MARK in directory:
            continue  # never the guard's own wrapper
        found = shutil.which("pulumi", path=directory)
        if found:
            return found
    return None


def pulumi_command() -> auto.PulumiCommand | None:
    """The CLI for the Automation API: the real one (:func:`real_pulumi`) under the
    engine guard; ``None`` (the Automation API's own lookup) when there is none."""
    real = real_pulumi()
    if real is None:
        return None
    return auto.PulumiCommand(root=str(install_wrapper(real, root=_IMPORT_ROOT)))


def _create_or_select(ref: StackRef, env: dict[str, str]) -> auto.Stack:
    return auto.create_or_select_stack(
        ref.name,
        work_dir=str(ref.work_dir),
        opts=auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=pulumi_command()),
    )


def select_stack(ref: StackRef) -> auto.Stack:
    """Create or select the stack and apply ``ref.config``.

    Selecting rewrites the CLI's workspace settings file, so it runs under
    :func:`twc.stackrun.workspace.selecting` (one select at a time on the host, and an
    unreadable file left by an interrupted one removed first). Every command on the
    stack starts here, so a state metadata file an interrupted CLI left unreadable is
    removed here too (:func:`filebackend.repair_sidecars`).
    """
    env = engine_env(ref.env)
    filebackend.repair_sidecars(
        env.get("PULUMI_BACKEND_URL", ""),
        project=workspace.project_name(ref.work_dir),
        stack=ref.name,
    )
    with workspace.selecting(ref.work_dir, env) as settings:
        try:
            stack = _create_or_select(ref, env)
        except auto.CommandError as error:
            # Written half by a CLI that is not twc's (it takes no lock): once more.
            if workspace.UNREADABLE_SETTINGS not in str(error) or not workspace.repair_settings(
                settings
            ):
                raise
            stack = _create_or_select(ref, env)
    if ref.config:
        stack.set_all_config(
            {f"{CONFIG_PREFIX}{k}": auto.ConfigValue(str(v)) for k, v in ref.config.items()}
        )
    return stack


LOCAL_ENV_FILE = ROOT / ".twc" / "env.json"
"""Written by ``twc local up``: the embedded environment's variables (``twc local env``)."""


def local_stack_env(stack: str) -> dict[str, str]:
    """For the ``local`` stack, the embedded environment's variables when the shell has
    not exported them (so ``twc up --stack local`` works without ``eval``).

    Read from the file ``twc local up`` writes, so the product never imports the test
    bed; no file (or an unreadable one) means no embedded environment.
    """
    if stack != "local" or os.environ.get("PULUMI_BACKEND_URL"):
        return {}
    try:
        data = json.loads(LOCAL_ENV_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def local_stack_config(stack: str) -> dict[str, str]:
    """Config the embedded environment needs: its Temporal address for the local stack."""
    address = local_stack_env(stack).get("TEMPORAL_ADDRESS") or os.environ.get("TEMPORAL_ADDRESS")
    if stack == "local" and address:
        # Locally, workers (twc local up --run-workers) poll within seconds of a rollout.
        return {"temporalAddress": address, "waitForPollersSeconds": "15"}
    return {}


def up(
    ref: StackRef,
    *,
    on_output: Callable[[str], Any] | None = None,
    on_event: Callable[[Any], Any] | None = None,
    target: list[str] | None = None,
    target_dependents: bool = False,
) -> auto.UpResult:
    """Run ``pulumi up`` on the stack (``target_dependents``: the targets' dependents
    too, among them a new component's children)."""
    stack = select_stack(ref)
    return stack.up(
        on_output=on_output,
        on_event=on_event,
        target=target,
        target_dependents=target_dependents or None,
        color="never",
    )


def preview(
    ref: StackRef,
    *,
    on_event: Callable[[Any], Any] | None = None,
    on_output: Callable[[str], Any] | None = None,
) -> auto.PreviewResult:
    """Run ``pulumi preview --diff`` on the stack."""
    stack = select_stack(ref)
    return stack.preview(diff=True, on_event=on_event, on_output=on_output, color="never")


def refresh(ref: StackRef, *, on_output: Callable[[str], Any] | None = None) -> auto.RefreshResult:
    """Run ``pulumi refresh`` on the stack."""
    return select_stack(ref).refresh(on_output=on_output, color="never")


def destroy(ref: StackRef, *, on_output: Callable[[str], Any] | None = None) -> auto.DestroyResult:
    """Run ``pulumi destroy`` on the stack."""
    return select_stack(ref).destroy(on_output=on_output, color="never")


def outputs(ref: StackRef) -> dict[str, Any]:
    """The stack outputs as plain values (secrets stay masked)."""
    stack = select_stack(ref)
    return {k: ("[secret]" if v.secret else v.value) for k, v in stack.outputs().items()}
