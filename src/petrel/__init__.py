"""Petrel: a clustered, highly available message broker."""

__version__ = "0.1.0"
