"""The peers' bindings a node remembers across its own restarts (`<data_dir>/cluster-bindings.json`).

A node learns its peers' queues from their binding snapshots, in memory. Restarted, it knew none
of them until its bridge to each peer had joined again, so a message published here meanwhile
was not routed to a durable subscription on a peer that was slow to come back (down, cut off,
or just not joined yet): its sender was confirmed and the subscription never got it. So the
remote bindings are written here whenever the set of them changes, and read back at start: each
is routed, until its node's bridge joins, through an `Absent` link whose store-and-forward queue
is that node's (durable, so recovered), with no consumers. The bridge then takes them over and
the peer's first snapshot drops those that are gone there (their copies are dropped by the peer,
as for any queue that went away while a copy travelled).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from petrel.storage.journal.segment import fsync_dir

if TYPE_CHECKING:
    from petrel.core.queue import Queue
    from petrel.core.remote import RemoteBinding

__all__ = ["Absent", "FILE_NAME", "load", "save", "entry"]

log = logging.getLogger("petrel.cluster")

FILE_NAME = "cluster-bindings.json"


class Absent:
    """A peer known from before this node's restart whose bridge has not joined yet: the link its
    remembered bindings route through (copies wait in its store-and-forward queue)."""

    connected = False

    def __init__(self, node_id: str, sf_queue: Queue) -> None:
        self.node_id = node_id
        self.sf_queue = sf_queue
        self.bindings: dict[str, str] = {}  # the peer's binding key -> ours

    def __repr__(self) -> str:
        return f"<Absent {self.node_id[:8]}>"


def entry(binding: RemoteBinding) -> dict:
    return {
        "via": binding.link.node_id, "key": binding.key, "remote_key": binding.remote_key,
        "name": binding.name, "address": binding.address, "routing_type": int(binding.routing_type),
        "filter": binding.selector.text if binding.selector is not None else None,
        "origin": binding.origin, "distance": binding.distance,
    }


def load(path: Path) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("cannot read the remembered cluster bindings in %s (%s): they are learnt again from "
                    "the peers", path, exc)
        return []
    return [e for e in data.get("bindings", []) if isinstance(e, dict)]


def save(path: Path, entries: list[dict], stream=None) -> None:
    """Atomically and durably: a new file, fsynced, renamed over the old one, its directory fsynced;
    through the store's ``stream`` when there is one (a replicating backup gets the file too)."""
    data = json.dumps({"bindings": entries}).encode()
    try:
        if stream is not None:
            stream.replace_file(path, data)
            return
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        log.warning("cannot remember the cluster bindings in %s: %s", path, exc)
