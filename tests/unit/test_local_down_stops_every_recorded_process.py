"""``twc local down`` stops every process the environment recorded, by pid and start time.

Including a component an older version started that is no longer part of the
environment (the home-made controllers, before the real ones replaced them), and the
worker processes the pod runner listed: a runner that died must not leave pollers
behind.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from twc.local import processes
from twc.local.environment import LocalEnvironment


def _sleeper(name: str, tmp_path: Path) -> processes.ProcessRecord:
    argv = [sys.executable, "-c", "import time; time.sleep(120)"]
    return processes.start(name, argv, tmp_path / f"{name}.log")


def test_down_stops_a_retired_component_and_leftover_pod_workers(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path / "env")
    env.dir.mkdir()
    retired = _sleeper("controllers", tmp_path)
    worker = _sleeper("pod apps/echo-1", tmp_path)
    state = {"processes": {"controllers": retired.to_json()}}
    (env.dir / "local.json").write_text(json.dumps(state))
    env.pod_workers_file.write_text(json.dumps({"workers": [worker.to_json()]}))
    assert processes.is_alive(retired)
    assert processes.is_alive(worker)

    stopped = env.down(progress=lambda m: None)

    assert stopped == ["controllers"]
    assert not processes.is_alive(retired)
    assert not processes.is_alive(worker)
    assert processes.recorded(env.pod_workers_file) == []
    after = env.load_state()
    assert after is not None
    assert after.processes == {}
