"""The CORE query of queue names by wildcard pattern (what the Spark source expands its
``queues`` option with) against a real `petrel run` process."""

from __future__ import annotations

import pytest

from petrel.client import Connection, RequestFailed
from petrel.codec.core import Query
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system


def test_queue_names_match_artemis_wildcards_and_leave_out_temporary_queues(tmp_path):
    with BrokerProcess(tmp_path / "b") as b, Connection(f"tcp://127.0.0.1:{b.port}") as conn:
        for name in ("orders.eu", "orders.us", "orders.eu.late", "billing"):
            conn.create_queue(name)
        conn.create_queue("orders.tmp", temporary=True, durable=False)
        assert conn.queue_names("orders.*") == ["orders.eu", "orders.us"]
        assert conn.queue_names("orders.#") == ["orders.eu", "orders.eu.late", "orders.us"]
        assert conn.queue_names("billing") == ["billing"]
        assert conn.queue_names("nothing.*") == []
        assert {"billing", "orders.eu", "orders.eu.late", "orders.us"} <= set(conn.queue_names())
        with pytest.raises(RequestFailed, match="not 'nonsense'"):  # unknown kinds are refused
            conn._run(conn.async_connection._request(lambda corr: Query(corr, "nonsense", "")))
