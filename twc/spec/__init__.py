"""The fleet file: models, loading, validation and resolution (DESIGN §1).

Pure: imports neither pulumi nor temporalio, so it loads in milliseconds and every rule
is unit-testable. Typical use::

    fleet = load_fleet_file("stacks/prod.yaml")   # raises SpecError listing all issues
    for worker in fleet.resolved_workers():       # defaults applied, derived included
        ...
"""

from twc.spec._load import (
    QUEUE_API_VERSION,
    QUEUE_KIND,
    WORKER_ENABLED_LABEL,
    fleet_json_schema,
    format_path,
    load_fleet,
    load_fleet_file,
    load_queue_object,
)
from twc.spec._models import (
    API_GROUP,
    API_VERSION,
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    DLQ,
    RESERVED_ENV_NAMES,
    TLS,
    Affinity,
    AuthMode,
    Autoscaling,
    ClusterConnection,
    Connection,
    ConnectionRef,
    ConnectionTarget,
    CustomConnection,
    Defaults,
    Fleet,
    Lifecycle,
    ObjectRef,
    Queue,
    QueueRef,
    Resources,
    SecretKeyRef,
    SecretRef,
    SecretSource,
    ServiceAccount,
    TemporalWorker,
    Toleration,
    WorkerSettings,
)
from twc.spec._names import label_value, parse_quantity, split_host_port
from twc.spec._resolve import ResolvedDLQ, ResolvedWorker, check_fleet

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "CLUSTER_CONNECTION_KIND",
    "CONNECTION_KIND",
    "DLQ",
    "QUEUE_API_VERSION",
    "QUEUE_KIND",
    "RESERVED_ENV_NAMES",
    "TLS",
    "WORKER_ENABLED_LABEL",
    "Affinity",
    "AuthMode",
    "Autoscaling",
    "ClusterConnection",
    "Connection",
    "ConnectionRef",
    "ConnectionTarget",
    "CustomConnection",
    "Defaults",
    "Fleet",
    "Lifecycle",
    "ObjectRef",
    "Queue",
    "QueueRef",
    "ResolvedDLQ",
    "ResolvedWorker",
    "Resources",
    "SecretKeyRef",
    "SecretRef",
    "SecretSource",
    "ServiceAccount",
    "TemporalWorker",
    "Toleration",
    "WorkerSettings",
    "check_fleet",
    "fleet_json_schema",
    "format_path",
    "label_value",
    "load_fleet",
    "load_fleet_file",
    "load_queue_object",
    "parse_quantity",
    "split_host_port",
]
