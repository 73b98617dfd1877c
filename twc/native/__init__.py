"""twc's write-back to Kubernetes-native objects: bookkeeping, status, views, messages."""
