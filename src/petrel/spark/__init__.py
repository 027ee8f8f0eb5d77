"""Petrel's data pipeline on Apache Spark (PySpark 4.3, ``pip install petrel[spark]``).

* ``spark.readStream.format("petrel")`` / ``spark.read.format("petrel")``: read queues
  exactly once, with offsets of per-node sequence numbers and a durable cursor per query
  (source.py; offsets.py, nodes.py);
* ``df.write.format("petrel")`` / ``df.writeStream.format("petrel")``: publish rows to a
  broker exactly once, through duplicate detection (sink.py);
* ``spark.read.format("petrel-journal")``: the raw records of brokers' data directories
  (journal.py, journal_rows.py); ``read_journal(spark, path, view="resolved")``: the
  messages each queue still holds, transactions and deletes resolved with Spark joins
  (resolve.py);
* ``petrel spark recover``: a data directory's messages moved to a live broker as the drainer
  moves them, exactly once (recover.py, migrate.py);
* the audit stream of produced and consumed events (audit.py) and ``petrel spark reconcile``:
  per queue produced, consumed, duplicated, lost and still held (reconcile.py).

Both formats register themselves (top-level modules ``pyspark_petrel`` and
``pyspark_petrel_journal``); ``register(spark)`` does it by hand. This package talks to
brokers only through ``petrel.client`` and reads files only through ``petrel.storage``.
"""

from petrel.spark.datasource import QUEUE_SCHEMA, PetrelDataSource, PetrelJournalDataSource, register
from petrel.spark.resolve import read_journal, resolve

__all__ = ["PetrelDataSource", "PetrelJournalDataSource", "QUEUE_SCHEMA", "read_journal", "register", "resolve"]
