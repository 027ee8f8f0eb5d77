"""Reconciliation: per queue, what was produced, consumed, lost, duplicated and is still held.

Every message is followed by its duplicate ID (``_AMQ_DUPL_ID``) through three sources:

* produced events of the audit stream (audit.py): what producers had confirmed;
* consumed events of the audit stream: what consumers acknowledged (more than once:
  duplicated);
* the brokers' data directories, through the journal reader's resolved view
  (``read_journal(..., view="resolved")``): what queues still hold.

A produced message neither consumed nor held is **lost**: it was acknowledged or deleted
behind the audit's back, or never reached the queue. Without data directories nothing can
be said about what is held: ``lost`` is then null and ``unconsumed`` says what is
unaccounted for.

The window: ``since``/``until`` (epoch ms, on the produced events' ``at``) and ``migration``
(a node ID: the messages produced to that node, e.g. the broker that scaled down) pick the
produced messages to follow; consumed events and held messages count for them wherever and
whenever they happened. With none of them, every message of the audit counts (consumed ones
whose production was not audited too: ``unproduced``).

Result columns: queue, produced, consumed, duplicated, unconsumed, lost, held, held_total
(every message the journals hold for the queue, audited or not: a queue no event names is
listed with it alone), unproduced, and samples
(``lost_ids``, ``duplicated_ids``: up to 5 duplicate IDs each).
"""

from __future__ import annotations

from petrel.spark.audit import read_audit

__all__ = ["RESULT_COLUMNS", "reconcile"]

RESULT_COLUMNS = ("queue", "produced", "consumed", "duplicated", "unconsumed", "lost", "held", "held_total",
                  "unproduced", "lost_ids", "duplicated_ids")
SAMPLES = 5


def reconcile(spark, audit: str, data_dirs: list[str] | None = None, *, since: int | None = None,
              until: int | None = None, migration: str | None = None):
    """The per-queue reconciliation as a DataFrame (``RESULT_COLUMNS``, one row per queue)."""
    from pyspark.sql import functions as F

    events = read_audit(spark, audit).where(F.col("dup_id").isNotNull() & F.col("queue").isNotNull())
    produced = events.where(F.col("event") == "produced")
    if migration:
        produced = produced.where(F.col("node") == migration)
    if since is not None:
        produced = produced.where(F.col("at") >= since)
    if until is not None:
        produced = produced.where(F.col("at") < until)
    key = ["queue", "dup_id"]
    produced = produced.groupBy(*key).agg(F.count("*").alias("produced_n"))
    consumed = (events.where(F.col("event") == "consumed").groupBy(*key)
                .agg(F.count("*").alias("consumed_n")))
    windowed = migration is not None or since is not None or until is not None
    base = (produced.join(consumed, key, "left") if windowed else produced.join(consumed, key, "full_outer"))

    held_total = None
    if data_dirs:
        from petrel.spark.resolve import read_journal

        held = read_journal(spark, ",".join(data_dirs), view="resolved", large_bodies=False).select(
            "queue", F.col("duplicate_id").alias("dup_id"))
        held = held.localCheckpoint(eager=True)
        held_total = held.groupBy("queue").agg(F.count("*").alias("held_total"))
        base = base.join(held.where(F.col("dup_id").isNotNull()).groupBy(*key)
                         .agg(F.count("*").alias("held_n")), key, "left")
    else:
        base = base.withColumn("held_n", F.lit(None).cast("long"))

    p = F.coalesce(F.col("produced_n"), F.lit(0)) > 0
    c = F.coalesce(F.col("consumed_n"), F.lit(0))
    h = F.col("held_n")
    known = F.lit(bool(data_dirs))
    lost = p & (c == 0) & (F.coalesce(h, F.lit(0)) == 0)

    def count(cond):
        return F.sum(F.when(cond, 1).otherwise(0)).cast("long")

    def sample(cond):
        return F.slice(F.sort_array(F.collect_list(F.when(cond, F.col("dup_id")))), 1, SAMPLES)

    out = base.groupBy("queue").agg(
        count(p).alias("produced"), count(c > 0).alias("consumed"), count(c > 1).alias("duplicated"),
        count(p & (c == 0)).alias("unconsumed"),
        F.when(known, count(lost)).alias("lost"),
        F.when(known, count(F.coalesce(h, F.lit(0)) > 0)).alias("held"),
        count(~p & (c > 0)).alias("unproduced"),
        F.when(known, sample(lost)).otherwise(F.array().cast("array<string>")).alias("lost_ids"),
        sample(c > 1).alias("duplicated_ids"))
    if held_total is not None:  # queues that hold messages nobody audited are listed too
        out = out.join(held_total, "queue", "full_outer").fillna(0, ["produced", "consumed", "duplicated",
                                                                     "unconsumed", "lost", "held", "held_total",
                                                                     "unproduced"])
        out = (out.withColumn("lost_ids", F.coalesce("lost_ids", F.array().cast("array<string>")))
               .withColumn("duplicated_ids", F.coalesce("duplicated_ids", F.array().cast("array<string>"))))
    else:
        out = out.withColumn("held_total", F.lit(None).cast("long"))
    return out.select(*RESULT_COLUMNS).orderBy("queue")
