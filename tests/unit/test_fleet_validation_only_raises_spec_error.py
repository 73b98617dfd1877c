"""Property: whatever the input, loading a fleet returns a Fleet or raises SpecError."""

from __future__ import annotations

import contextlib
import copy
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.fleet_data import valid_fleet
from twc.errors import SpecError
from twc.spec import Fleet, load_fleet, load_fleet_file, load_queue_object

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Keys the models know, so generated mappings often get past "unknown field" and reach
# the deeper validators and the cross-object checks.
KNOWN_KEYS = [
    "apiVersion",
    "kind",
    "defaults",
    "clusterConnections",
    "connections",
    "customConnections",
    "queues",
    "workers",
    "name",
    "namespace",
    "hostPort",
    "tls",
    "serverName",
    "mutualTLSSecretRef",
    "apiKeySecretRef",
    "key",
    "secretSource",
    "queueRef",
    "taskQueueName",
    "connectionRef",
    "objectRef",
    "apiGroup",
    "image",
    "imagePullPolicy",
    "replicas",
    "autoscaling",
    "minReplicas",
    "maxReplicas",
    "targetBacklogPerReplica",
    "resources",
    "requests",
    "limits",
    "cpu",
    "memory",
    "nodeSelector",
    "affinity",
    "tolerations",
    "lifecycle",
    "preStopCommand",
    "dlq",
    "enabled",
    "env",
    "fifo",
    "partitions",
    "workerEnabled",
    "temporalNamespace",
    "spec",
    "labels",
    "operator",
    "effect",
    "value",
    "tolerationSeconds",
    "serviceAccount",
    "annotations",
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(
        [
            "temporal.io",
            "ClusterConnection",
            "Connection",
            "prod",
            "sqs",
            "1.2.3.4:7233",
            "twc.temporal.io/v1",
            "Fleet",
            "500m",
            "2Gi",
            "Exists",
            "NoExecute",
            "-",
            "",
        ]
    )
)
KEYS = st.sampled_from(KNOWN_KEYS) | st.text(max_size=10)
YAML_VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(KEYS | st.integers() | st.booleans() | st.none(), children, max_size=5)
    ),
    max_leaves=40,
)


def _load(data: object) -> Fleet | None:
    try:
        return load_fleet(data, "fuzz.yaml")
    except SpecError as err:
        error = err
    # The error must render, one line per issue, each naming the file.
    assert all(line.startswith("fuzz.yaml: ") for line in error.lines())
    return None


@SETTINGS
@given(YAML_VALUES)
def test_arbitrary_yaml_shaped_input_only_raises_spec_error(data: Any) -> None:
    _load(data)


@SETTINGS
@given(st.dictionaries(KEYS, YAML_VALUES, max_size=8))
def test_fleet_shaped_input_only_raises_spec_error(sections: dict[str, Any]) -> None:
    _load({"apiVersion": "twc.temporal.io/v1", "kind": "Fleet", **sections})


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*prefix, index))
    return out


@SETTINGS
@given(st.data())
def test_a_valid_fleet_with_one_part_replaced_only_raises_spec_error(data: st.DataObject) -> None:
    fleet = valid_fleet()
    path = data.draw(st.sampled_from(_paths(fleet)[1:]))
    replacement = data.draw(YAML_VALUES)
    mutated = copy.deepcopy(fleet)
    target = mutated
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = replacement

    loaded = _load(mutated)

    if loaded is not None:
        # Whatever was accepted resolves without surprises.
        assert all(w.image for w in loaded.resolved_workers())


@SETTINGS
@given(st.binary(max_size=400) | YAML_VALUES.map(lambda v: repr(v).encode()))
def test_arbitrary_file_bytes_only_raise_spec_error(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.yaml"
        path.write_bytes(raw)
        with contextlib.suppress(SpecError):
            load_fleet_file(path)


@SETTINGS
@given(YAML_VALUES)
def test_arbitrary_queue_objects_only_raise_spec_error(obj: Any) -> None:
    with contextlib.suppress(SpecError):
        load_queue_object(obj)
