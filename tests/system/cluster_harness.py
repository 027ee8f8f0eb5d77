"""The cluster system tests' helpers: they live in petrel.testing.cluster (the chaos harness
uses them too); re-exported here under the names the tests import."""

from petrel.testing.cluster import (  # noqa: F401
    GROUP,
    PASSWORD,
    Discovery,
    backlog,
    cluster_view,
    make_cluster,
    queue_count,
    start_all,
    stop_all,
    wait_bindings,
    wait_connected,
)
from petrel.testing.process import BrokerProcess, wait_for  # noqa: F401
