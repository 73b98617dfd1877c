"""What can be checked of the Dockerfile without an engine: its pins and what it copies.

The image is built elsewhere (docs/install.md); here the Dockerfile's pinned versions
must agree with tools/versions.env and requirements.txt, its base images with the
project's Python and Go, every file it COPYs must exist (and not be left out of the
build context by .dockerignore), and its user must be the one the chart runs as.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from tests.conftest import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _logical_lines() -> list[str]:
    """Dockerfile instructions, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    return [line.strip() for line in joined.splitlines() if line.strip() and line[0] != "#"]


def _args() -> dict[str, list[str]]:
    """Every ``ARG NAME=default``, per name (a name may be declared in several stages)."""
    out: dict[str, list[str]] = {}
    for line in _logical_lines():
        match = re.fullmatch(r"ARG (\w+)=(\S+)", line)
        if match:
            out.setdefault(match.group(1), []).append(match.group(2))
    return out


def _versions() -> dict[str, str]:
    lines = (ROOT / "tools" / "versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def _requirements() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_the_tool_pins_agree_with_versions_env_and_requirements() -> None:
    args, versions, requirements = _args(), _versions(), _requirements()

    assert set(args["PULUMI_VERSION"]) == {versions["PULUMI_VERSION"]}
    assert set(args["PULUMI_KUBERNETES_VERSION"]) == {versions["PULUMI_KUBERNETES_VERSION"]}
    # Declared in both stages: the tools stage builds them, the image labels them.
    assert len(args["PULUMI_VERSION"]) == len(args["PULUMI_KUBERNETES_VERSION"]) == 2
    # The SDK packages the image installs from requirements.txt are the same releases.
    assert requirements["pulumi"] == versions["PULUMI_VERSION"]
    assert requirements["pulumi-kubernetes"] == versions["PULUMI_KUBERNETES_VERSION"]
    assert "pip install --no-cache-dir -r requirements.txt" in DOCKERFILE


def test_the_base_images_are_the_projects_python_and_go() -> None:
    args = _args()
    pyproject = (ROOT / "pyproject.toml").read_text()
    python = re.search(r'requires-python = ">=(\d+\.\d+)"', pyproject)
    assert python is not None
    assert args["PYTHON_IMAGE"] == [f"python:{python.group(1)}-slim-bookworm"]
    go_image = re.fullmatch(r"golang:(\d+)\.(\d+)-bookworm", args["GO_IMAGE"][0])
    assert go_image is not None
    image_go = (int(go_image.group(1)), int(go_image.group(2)))
    for mod in sorted((ROOT / "tools" / "go").glob("*/go.mod")):
        directive = re.search(r"^go (\d+)\.(\d+)", mod.read_text(), re.MULTILINE)
        assert directive is not None, mod
        assert (int(directive.group(1)), int(directive.group(2))) <= image_go, mod


def test_every_file_it_copies_exists_and_is_in_the_build_context() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    copied = []
    for line in _logical_lines():
        if not line.startswith("COPY "):
            continue
        words = shlex.split(line)[1:]
        if any(w.startswith("--from=") for w in words):
            continue
        sources = [w for w in words if not w.startswith("--")][:-1]
        assert sources, line
        for source in sources:
            assert list(ROOT.glob(source.rstrip("/"))), f"COPY {source}: no such file"
            assert Path(source).parts[0] not in ignored, f"COPY {source}: in .dockerignore"
            copied.append(source.rstrip("/"))
    # What the tools stage runs and what `pip install -e .` needs are all copied.
    for needed in ("tools", "requirements.txt", "pyproject.toml", "README.md", "twc"):
        assert needed in copied, needed
    for needed in ("Pulumi*.yaml", "__main__.py", "providers"):
        assert needed in copied, needed


def test_the_image_user_is_the_one_the_chart_runs_as() -> None:
    values = yaml.safe_load((ROOT / "deploy" / "chart" / "values.yaml").read_text())
    uid = values["podSecurityContext"]["runAsUser"]
    assert f"USER {uid}:{uid}" in DOCKERFILE
    assert f"useradd --uid {uid}" in DOCKERFILE
    # The project's virtualenv, where Pulumi.yaml's `virtualenv` option points from /app.
    pulumi_yaml = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert pulumi_yaml["runtime"]["options"]["virtualenv"] == ".venv"
    assert "WORKDIR /app" in DOCKERFILE
    assert "python -m venv /app/.venv" in DOCKERFILE


def test_the_image_copies_as_its_user_and_only_the_python_language_host() -> None:
    values = yaml.safe_load((ROOT / "deploy" / "chart" / "values.yaml").read_text())
    uid = values["podSecurityContext"]["runAsUser"]
    image_stage = DOCKERFILE.split("FROM ${PYTHON_IMAGE}", 1)[1]
    copies = [line for line in _logical_lines() if line.startswith("COPY ")]
    image_copies = [line for line in copies if line in re.sub(r"\\\n", " ", image_stage)]
    assert image_copies
    for line in image_copies:
        assert f"--chown={uid}:{uid}" in line, line
    # Owned as copied: no second, chowned copy of /app in another layer.
    assert "chown -R" not in DOCKERFILE
    tools = next(line for line in _logical_lines() if "tools/setup.sh pulumi" in line)
    copied_tools = re.search(r"cp -L (.*?) /out/bin/", tools)
    assert copied_tools is not None, tools
    hosts = {w for w in copied_tools.group(1).split() if w.startswith("pulumi-language-")}
    assert hosts == {"pulumi-language-python", "pulumi-language-python-exec"}
