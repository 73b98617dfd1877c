"""Pulumi components: connections, queues and workers."""
