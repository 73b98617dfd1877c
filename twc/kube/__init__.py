"""Kubernetes I/O: every call twc makes to an API server lives in this package."""
