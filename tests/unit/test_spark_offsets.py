"""The Spark source's offsets (petrel.spark.offsets): the fair split of maxMessagesPerBatch,
the next batch's end, the JSON option and the keys; and the source's options. No Spark runs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install petrel[spark])")

from petrel.spark.offsets import advance, fair_split, lookup, parse_offsets, split_key  # noqa: E402
from petrel.spark.source import source_options  # noqa: E402

pendings = st.dictionaries(st.sampled_from([f"n/q{i}" for i in range(6)]), st.integers(0, 500), min_size=1)


@given(pendings, st.integers(0, 2000), st.integers(0, 100))
def test_a_fair_split_uses_the_budget_and_starves_no_queue(pending, budget, turn):
    grant = fair_split(pending, budget, turn)
    assert set(grant) == set(pending)
    assert all(0 <= grant[k] <= pending[k] for k in pending)
    assert sum(grant.values()) == min(budget, sum(pending.values()))
    # max-min fair: a queue left short got at least as much as any other, but one
    short = [k for k in pending if grant[k] < pending[k]]
    for k in short:
        assert all(grant[k] >= grant[o] - 1 for o in pending)


def test_a_fair_split_gives_what_a_quiet_queue_cannot_use_to_the_busy_ones():
    assert fair_split({"n/busy": 300, "n/quiet": 30}, 60) == {"n/busy": 30, "n/quiet": 30}
    assert fair_split({"n/busy": 300, "n/quiet": 10}, 60) == {"n/busy": 50, "n/quiet": 10}
    assert fair_split({"n/a": 5, "n/b": 5, "n/c": 5}, 2, turn=0) == {"n/a": 1, "n/b": 1, "n/c": 0}
    assert fair_split({"n/a": 5, "n/b": 5, "n/c": 5}, 2, turn=2) == {"n/a": 1, "n/b": 0, "n/c": 1}


def test_the_next_end_has_sorted_keys_never_goes_back_and_keeps_unseen_keys():
    end = advance({"n/b": 10, "n/a": 5, "n/gone": 7}, {"n/a": 8, "n/b": 4}, None)
    assert list(end) == ["n/a", "n/b", "n/gone"]
    assert end == {"n/a": 8, "n/b": 10, "n/gone": 7}
    assert advance({"n/a": 1, "n/b": 1}, {"n/a": 101, "n/b": 3}, 10) == {"n/a": 9, "n/b": 3}


def test_json_offsets_and_keys():
    given = parse_offsets('{"node-1/orders": 12, "audit": -2}', "startingOffsets")
    assert lookup(given, "node-1/orders") == 12 and lookup(given, "node-2/audit") == -2
    assert lookup(given, "node-2/orders") is None
    assert split_key("node-1/a/b") == ("node-1", "a/b")
    with pytest.raises(ValueError, match="startingOffsets"):
        parse_offsets("{not json", "startingOffsets")
    with pytest.raises(ValueError, match="sequence number"):
        parse_offsets('{"orders": -3}', "startingOffsets")
    with pytest.raises(ValueError, match="offset key"):
        split_key("orders")


def test_source_options_are_checked_with_clear_errors():
    opts = source_options({"queues": " a, b.* ", "maxMessagesPerBatch": "100", "user": "u"})
    assert opts.patterns == ("a", "b.*") and opts.max_per_batch == 100 and opts.starting == "acked"
    assert opts.subscription == "spark" and opts.fail_on_data_loss and dict(opts.credentials) == {"user": "u"}
    assert source_options({"queues": "a", "startingOffsets": "EARLIEST"}).starting == "earliest"
    assert source_options({"queues": "a", "startingOffsets": '{"a": 3}'}).starting == {"a": 3}
    with pytest.raises(ValueError, match="option queues is required"):
        source_options({})
    with pytest.raises(ValueError, match="maxMessagesPerBatch must be at least 1"):
        source_options({"queues": "a", "maxMessagesPerBatch": "0"})
    with pytest.raises(ValueError, match="failOnDataLoss is true or false"):
        source_options({"queues": "a", "failOnDataLoss": "maybe"})
