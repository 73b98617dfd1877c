"""The fleet file: models, loading, validation and resolution.

Pure: imports neither pulumi nor temporalio, so every rule is unit-testable.
"""

from twc.spec._load import ALLOWED_NAMESPACES_ANNOTATION as ALLOWED_NAMESPACES_ANNOTATION
from twc.spec._load import QUEUE_API_VERSION as QUEUE_API_VERSION
from twc.spec._load import QUEUE_KIND as QUEUE_KIND
from twc.spec._load import SOURCE_NAMESPACE_ANNOTATION as SOURCE_NAMESPACE_ANNOTATION
from twc.spec._load import TWC_CREDENTIALS_ANNOTATION as TWC_CREDENTIALS_ANNOTATION
from twc.spec._load import WORKER_API_VERSION as WORKER_API_VERSION
from twc.spec._load import WORKER_ENABLED_LABEL as WORKER_ENABLED_LABEL
from twc.spec._load import fleet_json_schema as fleet_json_schema
from twc.spec._load import load_cluster_connection_object as load_cluster_connection_object
from twc.spec._load import load_connection_object as load_connection_object
from twc.spec._load import load_custom_connection_object as load_custom_connection_object
from twc.spec._load import load_fleet as load_fleet
from twc.spec._load import load_fleet_file as load_fleet_file
from twc.spec._load import load_queue_object as load_queue_object
from twc.spec._load import load_worker_object as load_worker_object
from twc.spec._load import part as part
from twc.spec._models import API_GROUP as API_GROUP
from twc.spec._models import CLUSTER_CONNECTION_KIND as CLUSTER_CONNECTION_KIND
from twc.spec._models import CONNECTION_KIND as CONNECTION_KIND
from twc.spec._models import CONNECTION_VERSION as CONNECTION_VERSION
from twc.spec._models import RESERVED_ENV_NAMES as RESERVED_ENV_NAMES
from twc.spec._models import AuthMode as AuthMode
from twc.spec._models import Autoscaling as Autoscaling
from twc.spec._models import ClusterConnection as ClusterConnection
from twc.spec._models import Connection as Connection
from twc.spec._models import ConnectionTarget as ConnectionTarget
from twc.spec._models import Defaults as Defaults
from twc.spec._models import DeletionGuard as DeletionGuard
from twc.spec._models import GateWorkflow as GateWorkflow
from twc.spec._models import Queue as Queue
from twc.spec._models import Resources as Resources
from twc.spec._models import Rollout as Rollout
from twc.spec._models import RolloutStrategy as RolloutStrategy
from twc.spec._models import StackSelector as StackSelector
from twc.spec._models import Sunset as Sunset
from twc.spec._models import TemporalWorker as TemporalWorker
from twc.spec._models import TwcCredentials as TwcCredentials
from twc.spec._names import label_value as label_value
from twc.spec._names import parse_duration as parse_duration
from twc.spec._names import split_host_port as split_host_port
from twc.spec._resolve import Fleet as Fleet
from twc.spec._resolve import ResolvedWorker as ResolvedWorker
from twc.spec._template import pod_security_problems as pod_security_problems
from twc.spec._template import worker_container_index as worker_container_index
