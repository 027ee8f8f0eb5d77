"""Errors of the domain that callers turn into protocol errors."""


class RoutingError(Exception):
    """A send or subscribe that cannot be done; the message says why and what to do."""
