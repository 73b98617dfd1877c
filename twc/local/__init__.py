"""The embedded local environment: a small real cluster (with simulated nodes) and a
Temporal dev server."""

from twc.local.environment import (
    ComponentStatus,
    LocalEnvError,
    LocalEnvironment,
    ToolMissingError,
    find_tool,
    project_root,
)

__all__ = [
    "ComponentStatus",
    "LocalEnvError",
    "LocalEnvironment",
    "ToolMissingError",
    "find_tool",
    "project_root",
]
