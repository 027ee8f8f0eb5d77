"""The resolved view of brokers' data directories: the messages each queue still holds.

``resolve(raw)`` replays the raw records (journal.py) the way a broker's recovery does
(storage/journal/recovery.py, storage/file_store.py, core/recovery.py), but with Spark
joins, since a transaction's records and its COMMIT can lie in different files (partitions):

1. error rows go; so do records after an unsynced hole in the newest segment of their
   journal holding data (a power loss's torn tail, dropped by recovery);
2. a transaction counts when its COMMIT matches the records found, per segment as the
   COMMIT lists them (segments listed but holding none were reclaimed; the COMMIT's own
   segment must hold exactly what it lists); its records then take effect at the COMMIT's
   place in the journal; rolled-back and unfinished transactions never do;
3. a record is live when its last ADD comes after its last DELETE; updates after that ADD
   apply to it (acks per queue, delivery counts, page cursors);
4. a live message is held by each queue it references, that exists (a live QUEUE record
   of the bindings journal) and has not acknowledged it;
5. a paged message is held when it is durable (non-durable pages are skipped after a
   restart), its queue exists and has a page cursor, and it lies at or after the cursor.

Columns: node, data_dir, queue_id, queue, address, source (journal or page), file, offset,
message_id, seq, durable, priority, timestamp, expiration, scheduled, duplicate_id,
properties, body, large_file, large_size, delivery_count.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

__all__ = ["HELD_COLUMNS", "read_journal", "resolve"]

HELD_COLUMNS = ("node", "data_dir", "queue_id", "queue", "address", "source", "file", "offset", "message_id", "seq",
                "durable", "priority", "timestamp", "expiration", "scheduled", "duplicate_id", "properties", "body",
                "large_file", "large_size", "delivery_count")
_JOURNAL = ["data_dir", "kind"]  # one journal: its directory and which of the two
_TX = ("ADD_TX", "UPDATE_TX", "DELETE_TX")
_OP = {"ADD": "ADD", "UPDATE": "UPDATE", "DELETE": "DELETE", "ADD_TX": "ADD", "UPDATE_TX": "UPDATE",
       "DELETE_TX": "DELETE"}


def read_journal(spark: SparkSession, path: str, *, view: str = "raw", large_bodies: bool = True) -> DataFrame:
    """``format("petrel-journal")`` over ``path`` (comma-separated data directories), raw or resolved."""
    from petrel.spark.datasource import PetrelJournalDataSource

    spark.dataSource.register(PetrelJournalDataSource)
    raw = (spark.read.format("petrel-journal").option("path", path)
           .option("largeBodies", str(large_bodies).lower()).load())
    if view == "raw":
        return raw
    if view == "resolved":
        return resolve(raw)
    raise ValueError(f"view must be 'raw' or 'resolved', not {view!r}")


def _op(col: str) -> Column:
    expr = None
    for name, op in _OP.items():
        expr = (F.when(F.col(col) == name, F.lit(op)) if expr is None
                else expr.when(F.col(col) == name, F.lit(op)))
    return expr


def _committed(journal: DataFrame) -> DataFrame:
    """(data_dir, kind, tx_id, c_seg, c_off) of every COMMIT that matches its records."""
    tx_records = journal.where(F.col("record_type").isin(*_TX))
    found = (tx_records.groupBy(*_JOURNAL, "tx_id", "segment").agg(F.count(F.lit(1)).alias("n"))
             .groupBy(*_JOURNAL, "tx_id")
             .agg(F.map_from_entries(F.collect_list(F.struct("segment", "n"))).alias("found"),
                  F.sum("n").alias("total")))
    commits = journal.where(F.col("record_type") == "COMMIT").select(
        *_JOURNAL, "tx_id", F.col("segment").alias("c_seg"), F.col("offset").alias("c_off"), "tx_count",
        "tx_segments")
    c = commits.join(found, [*_JOURNAL, "tx_id"], "left")
    have = lambda seg: F.coalesce(F.try_element_at(F.col("found"), seg), F.lit(0).cast("long"))  # noqa: E731
    listed = F.col("tx_segments")
    matches_listed = (
        (F.aggregate(F.map_values(listed), F.lit(0).cast("long"), lambda acc, n: acc + n) == F.col("tx_count"))
        & F.forall(F.map_entries(listed),
                   lambda e: (have(e["key"]) == e["value"]) | ((have(e["key"]) == 0) & (e["key"] != F.col("c_seg"))))
        & F.forall(F.coalesce(F.map_keys("found"), F.array().cast("array<long>")),
                   lambda s: F.array_contains(F.map_keys(listed), s)))
    no_list = listed.isNull() | (F.size(listed) <= 0)
    ok = F.when(no_list, F.coalesce(F.col("total"), F.lit(0)) == F.col("tx_count")).otherwise(matches_listed)
    return c.where(ok).select(*_JOURNAL, "tx_id", "c_seg", "c_off")


def _effective(raw: DataFrame) -> DataFrame:
    """The journals' records that take effect, each with ``op`` (ADD/UPDATE/DELETE) and ``pos``,
    its place in replay order (a transaction's records: at their COMMIT)."""
    records = raw.where(F.col("record_type").isNotNull() & F.col("kind").isin("journal", "bindings"))
    newest = records.groupBy(*_JOURNAL).agg(F.max("segment").alias("newest"))
    records = (records.join(newest, _JOURNAL)
               .where(~(F.coalesce(F.col("after_unsynced_hole"), F.lit(False)) & (F.col("segment") == F.col("newest"))))
               .drop("newest"))
    plain = (records.where(F.col("record_type").isin("ADD", "UPDATE", "DELETE"))
             .withColumn("pos", F.struct(F.col("segment").alias("a"), F.col("offset").alias("b"),
                                         F.lit(0).cast("long").alias("c"), F.lit(0).cast("long").alias("d"))))
    in_tx = (records.where(F.col("record_type").isin(*_TX))
             .join(_committed(records), [*_JOURNAL, "tx_id"])
             .withColumn("pos", F.struct(F.col("c_seg").alias("a"), F.col("c_off").alias("b"),
                                         F.col("segment").alias("c"), F.col("offset").alias("d")))
             .drop("c_seg", "c_off"))
    return plain.unionByName(in_tx).withColumn("op", _op("record_type"))


def resolve(raw: DataFrame) -> DataFrame:
    """The messages still held per queue, from the raw view of one or more data directories."""
    eff = _effective(raw)
    key = [*_JOURNAL, "record_id"]
    adds = eff.where(F.col("op") == "ADD")
    last_add = adds.groupBy(*key).agg(F.max("pos").alias("add_pos"))
    last_delete = eff.where(F.col("op") == "DELETE").groupBy(*key).agg(F.max("pos").alias("del_pos"))
    live = (last_add.join(last_delete, key, "left")
            .where(F.col("del_pos").isNull() | (F.col("add_pos") > F.col("del_pos"))).drop("del_pos"))
    live_adds = adds.join(live, key).where(F.col("pos") == F.col("add_pos"))
    updates = (eff.where(F.col("op") == "UPDATE").join(live, key)
               .where(F.col("pos") > F.col("add_pos")).drop("add_pos"))

    queues = (live_adds.where((F.col("kind") == "bindings") & (F.col("user_type") == "QUEUE"))
              .select("data_dir", F.col("record_id").alias("queue_id"), F.col("queue").alias("q_name"),
                      F.col("address").alias("q_address")))

    # messages in the journal, per queue reference, less the acknowledged ones
    messages = live_adds.where((F.col("kind") == "journal") & (F.col("user_type") == "MESSAGE"))
    refs = (messages.select("*", F.explode("refs").alias("ref"))
            .drop("queue_id", "seq")
            .select("*", F.col("ref.queue_id").alias("queue_id"), F.col("ref.seq").alias("seq")))
    acks = (updates.where(F.col("user_type") == "ACK")
            .select(*_JOURNAL, "record_id", "queue_id").distinct())
    deliveries = (updates.where(F.col("user_type") == "DELIVERY")
                  .groupBy(*_JOURNAL, "record_id", "queue_id")
                  .agg(F.max_by("delivery_count", "pos").alias("delivered")))
    in_journal = (refs.join(acks, [*_JOURNAL, "record_id", "queue_id"], "left_anti")
                  .join(deliveries, [*_JOURNAL, "record_id", "queue_id"], "left")
                  .drop("delivery_count").withColumnRenamed("delivered", "delivery_count")
                  .withColumn("source", F.lit("journal")))

    # paged messages at or after their queue's page cursor
    cursor_adds = (live_adds.where((F.col("kind") == "journal") & (F.col("user_type") == "PAGE_CURSOR"))
                   .select(*_JOURNAL, "record_id", "queue_id", "page_file", "page_offset"))
    cursor_updates = (updates.where(F.col("user_type") == "PAGE_CURSOR")
                      .select(*_JOURNAL, "record_id", "page_file", "page_offset")
                      .join(cursor_adds.select(*_JOURNAL, "record_id", "queue_id"), [*_JOURNAL, "record_id"]))
    cursors = (cursor_adds.unionByName(cursor_updates)
               .groupBy("data_dir", "queue_id")
               .agg(F.max(F.struct(F.col("page_file").alias("f"), F.col("page_offset").alias("o"))).alias("cursor")))
    paged = (raw.where((F.col("kind") == "page") & F.col("record_type").isNotNull() & F.col("durable"))
             .join(cursors, ["data_dir", "queue_id"])
             .where(F.struct(F.col("segment").alias("f"), F.col("offset").alias("o")) >= F.col("cursor"))
             .withColumn("source", F.lit("page")))

    held = in_journal.select(*_held_columns()).unionByName(paged.select(*_held_columns()))
    return (held.join(queues, ["data_dir", "queue_id"])
            .withColumn("queue", F.col("q_name"))
            .withColumn("address", F.coalesce(F.col("address"), F.col("q_address")))
            .withColumn("delivery_count", F.coalesce(F.col("delivery_count"), F.lit(0)))
            .select(*HELD_COLUMNS))


def _held_columns() -> list[Column]:
    return [F.col(c) for c in HELD_COLUMNS]
