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

from pyspark.sql import Column, DataFrame, SparkSession, Window
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


def _pos(a: str, b: str, c: Column | str, d: Column | str) -> Column:
    """A place in replay order: (segment, offset) of the record, or of its COMMIT then its own."""
    return F.struct(F.col(a).alias("a"), F.col(b).alias("b"), F.col(c).alias("c") if isinstance(c, str)
                    else c.alias("c"), F.col(d).alias("d") if isinstance(d, str) else d.alias("d"))


def _committed_tx_records(records: DataFrame) -> DataFrame:
    """The records of transactions whose COMMIT matches them, with ``pos`` at that COMMIT.

    One window per transaction (its records and its COMMIT, wherever they lie): the COMMIT's
    per-segment counts against the segments its records were found in (recovery.py
    ``_commit_mismatch``)."""
    w = Window.partitionBy(*_JOURNAL, "tx_id")
    is_commit = F.col("record_type") == "COMMIT"
    rows = (records.where(F.col("record_type").isin(*_TX, "COMMIT"))
            .withColumn("commit", F.first(F.when(is_commit, F.struct(
                F.col("segment").alias("seg"), F.col("offset").alias("off"), F.col("tx_count").alias("count"),
                F.col("tx_segments").alias("listed"))), ignorenulls=True).over(w))
            .withColumn("found", F.collect_list(F.when(~is_commit, F.col("segment"))).over(w))
            .where(~is_commit & F.col("commit").isNotNull()))
    found, listed, c_seg = F.col("found"), F.col("commit.listed"), F.col("commit.seg")

    def have(seg: Column) -> Column:
        return F.size(F.filter(found, lambda x: x == seg)).cast("long")

    matches_listed = (
        (F.aggregate(F.map_values(listed), F.lit(0).cast("long"), lambda acc, n: acc + n) == F.col("commit.count"))
        & F.forall(F.map_entries(listed),
                   lambda e: (have(e["key"]) == e["value"]) | ((have(e["key"]) == 0) & (e["key"] != c_seg)))
        & F.forall(found, lambda s: F.array_contains(F.map_keys(listed), s)))
    no_list = listed.isNull() | (F.size(listed) <= 0)
    ok = F.when(no_list, F.size(found) == F.col("commit.count")).otherwise(matches_listed)
    return (rows.where(ok)
            .withColumn("pos", _pos("commit.seg", "commit.off", "segment", "offset"))
            .drop("commit", "found"))


def _effective(raw: DataFrame) -> DataFrame:
    """The journals' records that take effect, each with ``op`` (ADD/UPDATE/DELETE) and ``pos``,
    its place in replay order (a transaction's records: at their COMMIT)."""
    records = raw.where(F.col("record_type").isNotNull() & F.col("kind").isin("journal", "bindings"))
    newest = records.groupBy(*_JOURNAL).agg(F.max("segment").alias("newest"))  # one row per journal
    records = (records.join(F.broadcast(newest), _JOURNAL)
               .where(~(F.coalesce(F.col("after_unsynced_hole"), F.lit(False)) & (F.col("segment") == F.col("newest"))))
               .drop("newest"))
    zero = F.lit(0).cast("long")
    plain = (records.where(F.col("record_type").isin("ADD", "UPDATE", "DELETE"))
             .withColumn("pos", _pos("segment", "offset", zero, zero)))
    return plain.unionByName(_committed_tx_records(records)).withColumn("op", _op("record_type"))


def _live(eff: DataFrame) -> DataFrame:
    """One row per live record (its last ADD, after its last DELETE), carrying what the updates
    after that ADD say: ``acked`` queue ids, ``deliveries`` (pos, queue id, count) and the
    page cursor's newest ``cursor`` (file, offset)."""
    w = Window.partitionBy(*_JOURNAL, "record_id")
    op = F.col("op")
    update = op == "UPDATE"
    state = (eff
             .withColumn("last_add", F.max(F.when(op == "ADD", F.col("pos"))).over(w))
             .withColumn("last_delete", F.max(F.when(op == "DELETE", F.col("pos"))).over(w))
             .withColumn("updates", F.collect_list(F.when(update, F.struct(
                 F.col("pos").alias("pos"), F.col("user_type").alias("kind"), F.col("queue_id").alias("queue_id"),
                 F.col("delivery_count").alias("count"), F.col("page_file").alias("file"),
                 F.col("page_offset").alias("offset")))).over(w))
             .where((op == "ADD") & (F.col("pos") == F.col("last_add"))
                    & (F.col("last_delete").isNull() | (F.col("last_add") > F.col("last_delete")))))
    after = F.filter("updates", lambda u: u["pos"] > F.col("last_add"))
    return (state
            .withColumn("acked", F.transform(F.filter(after, lambda u: u["kind"] == "ACK"), lambda u: u["queue_id"]))
            .withColumn("deliveries", F.filter(after, lambda u: u["kind"] == "DELIVERY"))
            .withColumn("cursor", F.greatest(
                F.struct(F.col("page_file").alias("f"), F.col("page_offset").alias("o")),
                F.array_max(F.transform(F.filter(after, lambda u: u["kind"] == "PAGE_CURSOR"),
                                        lambda u: F.struct(u["file"].alias("f"), u["offset"].alias("o"))))))
            .drop("updates", "last_add", "last_delete"))


def resolve(raw: DataFrame) -> DataFrame:
    """The messages still held per queue, from the raw view of one or more data directories.

    The raw records are read once, here (an eager local checkpoint): the view uses them in
    several places, and each would read every file again."""
    raw = raw.localCheckpoint(eager=True)
    live = _live(_effective(raw))
    kind = F.col("user_type")

    queues = (live.where((F.col("kind") == "bindings") & (kind == "QUEUE"))
              .select("data_dir", F.col("record_id").alias("queue_id"), F.col("queue").alias("q_name"),
                      F.col("address").alias("q_address")))

    # messages in the journal, per queue reference, less the acknowledged ones
    refs = (live.where((F.col("kind") == "journal") & (kind == "MESSAGE"))
            .drop("queue_id", "seq")
            .select("*", F.explode("refs").alias("ref"))
            .select("*", F.col("ref.queue_id").alias("queue_id"), F.col("ref.seq").alias("seq")))
    last_delivery = F.array_max(F.transform(
        F.filter("deliveries", lambda d: d["queue_id"] == F.col("queue_id")),
        lambda d: F.struct(d["pos"].alias("pos"), d["count"].alias("count"))))
    in_journal = (refs.where(~F.array_contains("acked", F.col("queue_id")))
                  .withColumn("delivery_count", last_delivery["count"])
                  .withColumn("source", F.lit("journal")))

    # paged messages at or after their queue's page cursor
    cursors = (live.where((F.col("kind") == "journal") & (kind == "PAGE_CURSOR"))
               .groupBy("data_dir", "queue_id").agg(F.max("cursor").alias("cursor")))
    paged = (raw.where((F.col("kind") == "page") & F.col("record_type").isNotNull() & F.col("durable"))
             .join(F.broadcast(cursors), ["data_dir", "queue_id"])
             .where(F.struct(F.col("segment").alias("f"), F.col("offset").alias("o")) >= F.col("cursor"))
             .withColumn("source", F.lit("page")))

    held = in_journal.select(*HELD_COLUMNS).unionByName(paged.select(*HELD_COLUMNS))
    return (held.join(F.broadcast(queues), ["data_dir", "queue_id"])
            .withColumn("queue", F.col("q_name"))
            .withColumn("address", F.coalesce(F.col("address"), F.col("q_address")))
            .withColumn("delivery_count", F.coalesce(F.col("delivery_count"), F.lit(0)))
            .select(*HELD_COLUMNS))
