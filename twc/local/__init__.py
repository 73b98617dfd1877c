"""The embedded local environment: a small real cluster and a Temporal dev server
(:mod:`twc.local.environment`). The package imports nothing itself, so a sample worker
(:mod:`twc.local.sample`) loads without the test bed's Kubernetes client."""
