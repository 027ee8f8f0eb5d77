"""Spark's auto-registration hook for ``format("petrel")`` (see petrel.spark.datasource)."""

from petrel.spark.datasource import PetrelDataSource as DefaultSource

__all__ = ["DefaultSource"]
