"""The embedded local environment: a small real cluster and a Temporal dev server."""

from twc.local.environment import LocalEnvironment as LocalEnvironment
from twc.local.environment import ToolMissingError as ToolMissingError
from twc.local.environment import find_tool as find_tool
from twc.local.environment import project_root as project_root
