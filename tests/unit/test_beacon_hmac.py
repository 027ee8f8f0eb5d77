"""Sealed UDP announcements: only a sender that knows the cluster credentials is heard; forged,
unsealed, stale and replayed datagrams (sent on real UDP sockets) are dropped and logged once."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from petrel.cluster.beacon import Announcement, encode
from petrel.cluster.beacon_auth import MAX_SKEW, BeaconKey, BeaconRefused, ReplayGuard, open_sealed, seal
from petrel.cluster.config import BroadcastGroupModel, DiscoveryGroupModel
from petrel.cluster.discovery import BroadcastGroup, DiscoveryGroup
from petrel.testing.udp import udp_port

KEY = BeaconKey.derive("petrel-test", "the right secret")
WRONG = BeaconKey.derive("petrel-test", "a guess")
LOOP = "127.0.0.1"
A = Announcement("node-b", "run-1", "petrel-cluster", ("127.0.0.1:6161",), "http://127.0.0.1:8161")


def test_round_trip_and_every_kind_of_refusal():
    packet = encode(A)
    sealed = seal(KEY, packet)
    assert open_sealed(KEY, sealed) == packet
    assert b"the right secret" not in sealed
    cases = {
        "mac": seal(WRONG, packet),
        "unsealed": packet,
        "foreign": b"GET / HTTP/1.1\r\n\r\n",
        "truncated": sealed[:20],
        "stale": seal(KEY, packet, now=time.time() - MAX_SKEW - 5),
    }
    for reason, data in cases.items():
        with pytest.raises(BeaconRefused) as info:
            open_sealed(KEY, data)
        assert info.value.reason == reason, (reason, info.value)
    flipped = bytearray(sealed)
    flipped[-1] ^= 1  # the announcement itself changed
    with pytest.raises(BeaconRefused, match="wrong MAC"):
        open_sealed(KEY, bytes(flipped))
    flipped = bytearray(sealed)
    flipped[10] ^= 1  # the time changed
    with pytest.raises(BeaconRefused, match="wrong MAC"):
        open_sealed(KEY, bytes(flipped))


def test_a_replayed_datagram_is_refused_once_seen():
    guard = ReplayGuard()
    sealed = seal(KEY, encode(A))
    assert open_sealed(KEY, sealed, guard)
    with pytest.raises(BeaconRefused) as info:
        open_sealed(KEY, sealed, guard)
    assert info.value.reason == "replay"
    assert open_sealed(KEY, seal(KEY, encode(A)), guard)  # the next broadcast has a new nonce


def test_the_replay_guard_forgets_only_what_the_time_check_refuses_anyway():
    guard = ReplayGuard(limit=3)
    now = 1000.0
    assert all(guard.first(bytes([i]), now) for i in range(3))
    assert not guard.first(bytes([0]), now + 1)
    assert guard.first(bytes([9]), now + 1)  # full: the oldest goes
    assert guard.first(bytes([0]), now + 2 * MAX_SKEW + 1)


def test_the_key_depends_on_user_and_password():
    packet = encode(A)
    for other in (BeaconKey.derive("petrel-test", "the right secret "), BeaconKey.derive("other", "the right secret")):
        with pytest.raises(BeaconRefused):
            open_sealed(other, seal(KEY, packet))
    assert "right" not in repr(KEY) and KEY._key.hex() not in repr(KEY)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_are_refused_with_a_value_error_only(data):
    with pytest.raises(ValueError):
        open_sealed(KEY, data)


async def until(condition, timeout: float = 5.0, message: str = "condition not met"):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} within {timeout}s")
        await asyncio.sleep(0.01)
    return value


def test_forged_beacons_on_a_real_socket_are_dropped_and_logged_once(caplog):
    """Forged, unsealed and replayed announcements sent to a listening discovery group change
    nothing; one with the right key is heard."""
    caplog.set_level(logging.DEBUG, logger="petrel.cluster.discovery")

    async def main():
        port = udp_port()
        changes = []
        dg = DiscoveryGroup(DiscoveryGroupModel(name="dg", group_address=LOOP, group_port=port,
                                                initial_wait_timeout=0), "node-a", changes.append, key=KEY)
        await dg.start()
        try:
            captured = seal(KEY, encode(A))
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for _ in range(3):
                    s.sendto(seal(WRONG, encode(Announcement("evil", "x", "petrel-cluster", ("10.6.6.6:61616",)))),
                             (LOOP, port))
                    s.sendto(encode(Announcement("evil2", "x", "petrel-cluster", ("10.6.6.6:61616",))), (LOOP, port))
                await until(lambda: dg.refused_count >= 6, message="forged datagrams not received")
                assert dg.entries == {} and changes == []
                s.sendto(captured, (LOOP, port))
                await until(lambda: "node-b" in dg.entries, message="the authentic announcement not heard")
                s.sendto(captured, (LOOP, port))  # the same datagram again: a replay
                await until(lambda: dg.refused_count >= 7, message="replay not received")
        finally:
            await dg.stop()
        assert [list(c) for c in changes] == [["node-b"]]

    asyncio.run(asyncio.wait_for(main(), 20))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    # one per sender and kind of fault: wrong MAC, unsealed, replay
    for fault in ("with a wrong MAC", "without a MAC", "already received"):
        assert sum(fault in r.getMessage() for r in warnings) == 1, (fault, [r.getMessage() for r in warnings])
    assert len(warnings) == 3
    assert all(r.event == "cluster.beacon_refused" for r in warnings)
    assert "the right secret" not in caplog.text


def test_groups_with_different_passwords_do_not_hear_each_other():
    async def main():
        port = udp_port()
        heard = []
        dg = DiscoveryGroup(DiscoveryGroupModel(name="dg", group_address=LOOP, group_port=port,
                                                initial_wait_timeout=0), "node-a", heard.append, key=KEY)
        bg = BroadcastGroup(BroadcastGroupModel(name="bg", group_address=LOOP, group_port=port, broadcast_period=20),
                            A, key=WRONG)
        good = BroadcastGroup(BroadcastGroupModel(name="bg", group_address=LOOP, group_port=port,
                                                  broadcast_period=20),
                              Announcement("node-c", "r", "petrel-cluster", ("127.0.0.1:6162",)), key=KEY)
        await dg.start()
        await bg.start()
        await good.start()
        try:
            await until(lambda: "node-c" in dg.entries and dg.refused_count >= 5)
            assert "node-b" not in dg.entries
        finally:
            await bg.stop()
            await good.stop()
            await dg.stop()

    asyncio.run(asyncio.wait_for(main(), 20))
