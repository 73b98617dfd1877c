"""The Pulumi engine for twc: stacks, guarded CLI runs, state files and shard stacks."""
