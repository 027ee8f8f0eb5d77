"""The durable accounting of the journal: what each segment still holds.

The ledger sees records only once they are durable (the writer applies a batch
after its sync; load applies what it read), so a reclaim decision never rests on
a record that could still be lost.

Per segment it counts the live adds and updates (and the records of open
transactions, which pin their segment until the transaction ends), the bytes
they take, and ``refs``: the older segments this segment's DELETE, COMMIT and
ROLLBACK records refer to.  A segment is reclaimable when it holds nothing live
and none of the segments it refers to still exists: its deletes (and commits)
are then no longer needed to keep older records dead (or alive).
"""

from __future__ import annotations

from .records import ADD, ADD_TX, COMMIT, DELETE, DELETE_TX, HEADER_SIZE, PREPARE, ROLLBACK, UPDATE, UPDATE_TX

__all__ = ["ADD_TX_RUN", "DELETE_RUN", "Ledger", "SegmentState"]

#: Not a record type: an item of the appender for several ADD_TX records of one transaction
#: placed together in one segment (`FileJournal.add_tx_many`), accounted in one go:
#: ``(ADD_TX_RUN, {record id: (segment, size)}, tx id, segment, their total size)``.
ADD_TX_RUN = 0
#: Likewise for several DELETE records placed together in one segment (`FileJournal.delete_many`):
#: ``(DELETE_RUN, [record id, ...], 0, segment, their total size)``.
DELETE_RUN = 1



class SegmentState:
    __slots__ = ("id", "live", "live_bytes", "used", "records", "refs")

    def __init__(self, segment_id: int, used: int = HEADER_SIZE) -> None:
        self.id = segment_id
        self.live = 0
        self.live_bytes = 0
        self.used = used
        self.records = 0
        self.refs: set[int] = set()


class Ledger:
    """Owned by one thread at a time: load, then the writer thread."""

    def __init__(self) -> None:
        self.segments: dict[int, SegmentState] = {}
        # record id -> flat (segment, size, segment, size, ...) of its add and updates
        # (tuples of ints: the garbage collector does not track them)
        self.live: dict[int, tuple[int, ...]] = {}
        # tx id -> [(type, record id, segment, size), ...] of durable records of open txs
        self.open_txs: dict[int, list[tuple[int, int, int, int]]] = {}
        self.live_bytes = 0
        self.dirty = False  # something may have become reclaimable
        # while a compaction runs beside the writer: the segments it reads (never
        # reclaimed meanwhile), record id -> segment of the record that killed a
        # record of theirs (its copy is dead on arrival: see rebase), and the ids
        # of their records updated meanwhile
        self.watched: frozenset[int] = frozenset()
        self.killed: dict[int, int] = {}
        self.touched: set[int] = set()

    # segments -------------------------------------------------------------------------

    def add_segment(self, segment_id: int, used: int = HEADER_SIZE) -> SegmentState:
        state = SegmentState(segment_id, used)
        self.segments[segment_id] = state
        return state

    def remove_segment(self, segment_id: int) -> None:
        state = self.segments.pop(segment_id)
        self.live_bytes -= state.live_bytes
        self.dirty = True

    def used_bytes(self) -> int:
        return sum(s.used for s in self.segments.values())

    def reclaimable(self, current: int) -> list[int]:
        """Segments older than ``current`` that can go, oldest first."""
        self.dirty = False
        segments = self.segments
        gone: set[int] = set()
        out = []
        for seg in sorted(segments):
            if seg >= current:
                break
            if seg in self.watched:
                continue  # being compacted: kept, and so are the segments referring to it
            state = segments[seg]
            if state.refs:
                state.refs = {r for r in state.refs if r in segments and r not in gone}
            if state.live == 0 and not state.refs:
                gone.add(seg)
                out.append(seg)
        return out

    def tx_segments(self) -> set[int]:
        """Segments holding durable records of transactions still open."""
        return {rec[2] for recs in self.open_txs.values() for rec in recs}

    # records --------------------------------------------------------------------------

    def _uncount(self, seg: int, size: int) -> None:
        state = self.segments.get(seg)
        if state is not None:
            state.live -= 1
            state.live_bytes -= size
            self.live_bytes -= size
            if state.live == 0:
                self.dirty = True

    def _kill(self, rid: int, entry: tuple[int, ...], by: SegmentState) -> None:
        refs = by.refs
        if self.watched and entry[0] in self.watched:
            self.killed[rid] = by.id
        for i in range(0, len(entry), 2):
            seg = entry[i]
            self._uncount(seg, entry[i + 1])
            if seg != by.id:
                refs.add(seg)

    def apply(self, rtype: int, rid: int, tx_id: int, seg: int, size: int) -> None:
        """Account one durable record of ``size`` bytes written into ``seg``."""
        state = self.segments[seg]
        state.records += 1
        if rtype == ADD:
            old = self.live.get(rid)
            if old is not None:
                self._kill(rid, old, state)
            self.live[rid] = (seg, size)
        elif rtype == UPDATE:
            entry = self.live.get(rid)
            if entry is None:
                return  # update of a record that is gone: dead on arrival
            self.live[rid] = entry + (seg, size)
            if self.watched and entry[0] in self.watched:
                self.touched.add(rid)
        elif rtype == DELETE:
            entry = self.live.pop(rid, None)
            if entry is not None:
                self._kill(rid, entry, state)
            return
        elif rtype == DELETE_RUN:  # rid: the deleted records' ids
            state.records += len(rid) - 1
            pop, kill = self.live.pop, self._kill
            for one in rid:
                entry = pop(one, None)
                if entry is not None:
                    kill(one, entry, state)
            return
        elif rtype == ADD_TX or rtype == UPDATE_TX or rtype == DELETE_TX:
            recs = self.open_txs.get(tx_id)
            if recs is None:
                recs = self.open_txs[tx_id] = []
            recs.append((rtype, rid, seg, size))
        elif rtype == ADD_TX_RUN:  # rid: {record id: (seg, size)}, size: their total
            recs = self.open_txs.get(tx_id)
            if recs is None:
                recs = self.open_txs[tx_id] = []
            recs.append((rtype, rid, seg, size))
            state.records += len(rid) - 1
            state.live += len(rid)
            state.live_bytes += size
            self.live_bytes += size
            return
        elif rtype == COMMIT:
            self.commit(tx_id, state)
            return
        elif rtype == ROLLBACK:
            self.rollback(tx_id, state)
            return
        elif rtype == PREPARE:  # the transaction stays open, and the PREPARE is live with its records
            # (a restart must find it to keep the transaction prepared): it goes at the commit or rollback
            recs = self.open_txs.get(tx_id)
            if recs is None:
                recs = self.open_txs[tx_id] = []
            recs.append((PREPARE, 0, seg, size))
        else:  # MARK
            return
        state.live += 1
        state.live_bytes += size
        self.live_bytes += size

    def commit(self, tx_id: int, state: SegmentState) -> None:
        recs = self.open_txs.pop(tx_id, ())
        live = self.live
        for rtype, rid, seg, size in recs:
            if seg != state.id:
                state.refs.add(seg)
            if rtype == ADD_TX:
                old = live.get(rid)
                if old is not None:
                    self._kill(rid, old, self.segments.get(seg) or state)
                live[rid] = (seg, size)
            elif rtype == ADD_TX_RUN:
                for again in rid.keys() & live.keys():  # (ids are new: none, as a rule)
                    self._kill(again, live[again], self.segments.get(seg) or state)
                live.update(rid)
            elif rtype == UPDATE_TX:
                entry = live.get(rid)
                if entry is None:
                    self._uncount(seg, size)
                else:
                    live[rid] = entry + (seg, size)
                    if self.watched and entry[0] in self.watched:
                        self.touched.add(rid)
            elif rtype == PREPARE:
                self._uncount(seg, size)
            else:  # DELETE_TX
                self._uncount(seg, size)
                entry = live.pop(rid, None)
                if entry is not None:
                    self._kill(rid, entry, self.segments.get(seg) or state)

    def rollback(self, tx_id: int, state: SegmentState) -> None:
        for rtype, rid, seg, size in self.open_txs.pop(tx_id, ()):
            if rtype == ADD_TX_RUN:
                for _, one in rid.values():
                    self._uncount(seg, one)
            else:
                self._uncount(seg, size)
            if seg != state.id:
                state.refs.add(seg)

    def watch(self, segments: set[int]) -> None:
        """A compaction starts reading ``segments``: keep them, note kills of their records."""
        self.watched = frozenset(segments)
        self.killed = {}
        self.touched = set()

    def unwatch(self) -> None:
        self.watched = frozenset()
        self.killed = {}
        self.touched = set()
        self.dirty = True

    def rebase(self, moved: dict[int, tuple[int, ...]], replaced: set[int], outputs: dict[int, SegmentState],
               extended: set[int], carried: tuple[int, int, int, dict[int, tuple[int, int]]] | None = None) -> None:
        """Swap compacted segments in: ``replaced`` ids go, ``outputs`` come.

        ``moved`` maps each record id copied by compaction to its new flat
        (segment, size, ...) entries (add and the updates that were in the
        replaced segments); updates it had in later segments (``extended`` before
        the compaction started, ``touched`` since) are kept after them.  A copied
        record killed while the compaction ran (``killed``) is dead in its output
        segment, and the segment that killed it now refers to that one.

        ``carried``: the last replaced segment's id stays, for the records of the
        transactions straddling its end, copied as they were; what it holds live is
        what it held, less the records copied out of it (those not killed).  The
        segments whose COMMIT or ROLLBACK refer to it keep referring to it.
        """
        killed = self.killed
        keep_refs: set[int] = set()
        if carried is not None:
            seg, used, records, in_last = carried
            old = self.segments[seg]
            state = outputs[seg] = SegmentState(seg, used)
            state.records = records
            state.live, state.live_bytes = old.live, old.live_bytes
            for rid, (pieces, nbytes) in in_last.items():
                if rid not in killed:
                    state.live -= pieces
                    state.live_bytes -= nbytes
            keep_refs.add(seg)
        for seg in replaced:
            state = self.segments.pop(seg, None)
            if state is not None:
                self.live_bytes -= state.live_bytes
        # ``moved`` is ours to consume: what is left after the records killed or
        # updated meanwhile are dealt with replaces its live entries wholesale
        live = self.live
        late_refs = []
        for rid, killer in killed.items():
            entry = moved.pop(rid, None)
            if entry is None:
                continue
            for i in range(0, len(entry), 2):
                out = outputs[entry[i]]
                out.live -= 1
                out.live_bytes -= entry[i + 1]
                late_refs.append((killer, entry[i]))
        for rid in self.touched | extended:
            entry = moved.pop(rid, None)
            old = live.get(rid)
            if entry is None or old is None or old[0] not in replaced:
                continue
            live[rid] = entry + old[len(entry):]  # its first pieces are the copied ones, in order
        live.update(moved)
        for seg, state in outputs.items():
            self.segments[seg] = state
            self.live_bytes += state.live_bytes
        # deletes in later segments that pointed into the replaced ones killed
        # records compaction did not copy: those references are done with
        gone = replaced - keep_refs
        for state in self.segments.values():
            if state.refs and state.id not in outputs:
                state.refs -= gone
        for killer, seg in late_refs:
            state = self.segments.get(killer)
            if state is not None:
                state.refs.add(seg)
        self.unwatch()
