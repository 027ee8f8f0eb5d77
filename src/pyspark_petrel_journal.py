"""Spark's auto-registration hook for ``format("petrel-journal")`` (see petrel.spark.datasource)."""

from petrel.spark.datasource import PetrelJournalDataSource as DefaultSource

__all__ = ["DefaultSource"]
