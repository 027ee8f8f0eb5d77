"""High availability: node managers (shared store), replication, the lock manager, activation."""
