"""Petrel: a clustered, highly available message broker."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy, so `import petrel` stays cheap for the CLI.
    if name in ("Broker", "EmbeddedBroker"):
        from petrel import embedded

        return getattr(embedded, name)
    if name == "run":
        from petrel.server.broker import run

        return run
    raise AttributeError(f"module 'petrel' has no attribute {name!r}")
