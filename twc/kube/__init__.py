"""Kubernetes I/O: every call twc makes to an API server lives in this package.

Modules here talk to the cluster and nothing else; what to ask and what the answer means
is decided by the pure layers (``twc.spec``, ``twc.builders``, ``twc.desired``) they are
handed values from:

* ``client``: the one client factory, with default timeouts;
* ``watch``: the daemon's list + watch caches of Queue, TemporalWorker and connection
  objects; ``observe``: the same objects read once (``twc up``/``preview``, the program);
* ``lease``: leader election; ``writer``: status, finalizers and Events written back;
  ``workloads``: the Deployments, ServiceAccounts and Secrets the daemon reads and
  early-applies;
* ``crds``: installing twc's CRDs without replacing the official worker controller's;
  ``dryrun``: the API server's validation of worker Deployments before anything is
  applied.
"""
