"""Fault tests: each test gets an embedded environment of its own.

A fault test stops kube-apiserver or Temporal, or makes the state backend read-only;
doing that to the session's shared environment would break every other test running
on it. So here ``local_env`` (and everything built on it) is per test, in the test's
own temporary directory, and torn down with the test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import TEST_BED_TOOLS, require_tools
from tests.e2e.daemon_process import Daemons, run_daemons
from twc.local.cluster import Kube
from twc.local.environment import LocalEnvironment


@pytest.fixture
def local_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEnvironment]:
    """A private embedded environment for one fault test."""
    require_tools(*TEST_BED_TOOLS)
    env = LocalEnvironment(tmp_path_factory.mktemp("twc-fault-env"))
    try:
        env.up(progress=lambda m: print(f"[local] {m}"))
        yield env
    finally:
        env.down(progress=lambda m: None)


@pytest.fixture
def kube(local_env: LocalEnvironment) -> Iterator[Kube]:
    api = Kube(local_env.kubeconfig)
    yield api
    api.close()


@pytest.fixture
def pulumi_env(local_env: LocalEnvironment) -> dict[str, str]:
    """Environment variables for the Pulumi engine against the test's environment."""
    return {**local_env.env(), "PATH": os.environ["PATH"]}


@pytest.fixture
def namespace(kube: Kube) -> str:
    name = f"f-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(name)
    return name


@pytest.fixture
def daemons(tmp_path: Path, pulumi_env: dict[str, str]) -> Iterator[Daemons]:
    yield from run_daemons(tmp_path, pulumi_env)
