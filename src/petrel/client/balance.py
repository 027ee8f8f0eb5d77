"""Connection load balancing over a cluster's topology (Artemis `useTopologyForLoadBalancing`).

With ``useTopologyForLoadBalancing=true`` on the URL, a new connection asks the broker it
reached first for the cluster's members (the topology the broker pushes after CONNECTED)
and moves to the next member in turn, round-robin from a random start per process (Artemis's
`RoundRobinConnectionLoadBalancingPolicy`). The URL's own brokers stay in the new
connection's failover list. Without the option, or against a lone broker, nothing changes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from typing import TYPE_CHECKING, Any

from petrel.client.url import option, parse_bool, parse_endpoint, parse_url

if TYPE_CHECKING:
    from petrel.client.connection import AsyncConnection

__all__ = ["balanced"]

log = logging.getLogger("petrel.client")

TOPOLOGY_WAIT = 1.0  # s to wait for the first topology update
_turns = itertools.count(random.randrange(1 << 16))


async def balanced(conn: AsyncConnection, url: str, options: dict[str, Any]) -> AsyncConnection:
    """`conn`, or a connection to the member whose turn it is (closing `conn`)."""
    parsed = parse_url(url)
    wanted = option(parsed.options, "useTopologyForLoadBalancing")
    if wanted is None or not parse_bool(wanted):
        return conn
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TOPOLOGY_WAIT
    while not conn.topology and loop.time() < deadline:
        await asyncio.sleep(0.01)
    members = sorted({m.live for m in conn.topology if m.live})
    if len(members) < 2:
        return conn
    pick = parse_endpoint(members[next(_turns) % len(members)])
    if pick == conn.endpoint:
        return conn
    rest = ",".join(str(e) for e in parsed.endpoints if e != pick)
    query = url.partition("?")[2] if not parsed.is_failover else url.partition(")")[2].lstrip("?")
    query = "&".join(p for p in query.split("&") if p and not p.lower().startswith("usetopologyforloadbalancing"))
    target = f"failover:({pick},{rest})" if parsed.is_failover and rest else str(pick)
    if parsed.is_failover:
        query = "&".join(p for p in (query, "randomize=false") if p)
    if query:
        target += "?" + query
    from petrel.client.connection import AsyncConnection

    try:
        moved = await AsyncConnection(target, **options).start()
    except Exception as exc:  # the member is not reachable from here: stay where we are
        log.info("load balancing: cannot connect to %s (%s); staying on %s", pick, exc, conn.endpoint)
        return conn
    await conn.close()
    return moved
