"""An environment's saved ports survive an upgrade that adds components.

``local.json`` written before kube-scheduler, KWOK and PostgreSQL were part of the
environment has no ports for them: reading it keeps every saved port (a restarted
component comes back where clients expect it) and gives each new component a free port
of its own.
"""

from __future__ import annotations

from dataclasses import asdict

from twc.local.environment import PORTS, State


def test_saved_ports_are_kept_and_missing_ones_get_distinct_free_ports() -> None:
    old = {
        "etcd_client": 41001,
        "etcd_peer": 41002,
        "apiserver": 41003,
        "temporal": 41004,
        "temporal_http": 41005,
        "temporal_metrics": 41006,
        "controller_manager": 41007,
    }
    ports = State.from_json({"ports": old, "processes": {}}).ports
    assert {k: ports[k] for k in old} == old
    assert set(ports) == set(old) | {"scheduler", "kwok", "postgres"}
    assert len(set(ports.values())) == len(ports)


def test_a_new_environment_gets_one_port_per_component() -> None:
    state = State.from_json({})
    assert len(set(state.ports.values())) == len(state.ports) == len(PORTS) == 10
    assert State.from_json(asdict(state)) == state
