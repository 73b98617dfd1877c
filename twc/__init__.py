"""twc: Temporal worker fleets on Kubernetes, run as a Pulumi program."""

__version__ = "0.1.0"
