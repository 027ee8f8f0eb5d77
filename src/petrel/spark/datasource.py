"""The data sources Spark sees: ``format("petrel")`` (queues) and ``format("petrel-journal")``.

Both are registered automatically when Petrel is installed: Spark imports every top-level
module named ``pyspark_*`` at its first data-source lookup and registers its
``DefaultSource`` (``pyspark_petrel``, ``pyspark_petrel_journal``). ``register(spark)`` does
the same by hand, for a session whose Python cannot see them.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from petrel.spark.journal import JOURNAL_SCHEMA, JournalReader
from petrel.spark.sink import BatchSink, StreamSink
from petrel.spark.source import BatchSource, StreamSource

__all__ = ["PetrelDataSource", "PetrelJournalDataSource", "QUEUE_SCHEMA", "register"]

#: What the queue source reads (issue 12): one row per message of a queue; ``timestamp`` in
#: epoch milliseconds.
QUEUE_SCHEMA = ("node string, queue string, seq long, message_id long, dup_id string, timestamp long, "
                "priority int, properties map<string,string>, body binary")


class PetrelDataSource(DataSource):
    """``format("petrel")``: read queues exactly once (source.py) and write DataFrames to a
    broker address exactly once (sink.py)."""

    @classmethod
    def name(cls) -> str:
        return "petrel"

    def schema(self) -> str:
        return QUEUE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamSource(self.options, schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchSource(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _append_only(overwrite)
        return BatchSink(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        _append_only(overwrite)
        return StreamSink(self.options, schema)


class PetrelJournalDataSource(DataSource):
    """``format("petrel-journal")``: the records of brokers' data directories (journal.py)."""

    @classmethod
    def name(cls) -> str:
        return "petrel-journal"

    def schema(self) -> str:
        return JOURNAL_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return JournalReader(self.options)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise ValueError("petrel sink: a broker address can only be appended to (mode 'append'), "
                         "not overwritten")


def register(spark) -> None:
    """Register both formats with ``spark`` (only needed where auto-registration cannot work)."""
    spark.dataSource.register(PetrelDataSource)
    spark.dataSource.register(PetrelJournalDataSource)
