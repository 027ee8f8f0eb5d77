"""Authenticated UDP announcements: an HMAC keyed from the cluster password, and a replay guard.

A discovery group opens a bridge — and sends the cluster user and password — to whatever
connector an announcement names, so an announcement must prove that its sender knows the
cluster password. Each datagram is sealed::

    b"PTRLSIG" | version (1 byte) | time (8 bytes, ms since the epoch, big-endian)
              | nonce (16 random bytes) | MAC (32 bytes) | announcement (petrel.cluster.beacon)

MAC = HMAC-SHA256(key, everything before the MAC, then the announcement). The key comes from
``cluster_user`` and ``cluster_password`` through PBKDF2-HMAC-SHA256 (hashlib), computed once
per process: a captured beacon gives nothing to guess the password with at speed.

A receiver refuses a datagram without a seal, with a wrong MAC, a time more than
`MAX_SKEW` seconds from its own clock, or a nonce it has already accepted (a replay).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import struct
import time

from petrel.cluster.beacon import MAGIC as UNSEALED_MAGIC

__all__ = ["MAGIC", "MAX_SKEW", "BeaconKey", "BeaconRefused", "ReplayGuard", "open_sealed", "seal"]

MAGIC = b"PTRLSIG"
VERSION = 1
#: Seconds an announcement's time may differ from the receiver's clock (NTP keeps hosts closer).
MAX_SKEW = 60.0
_HEAD = struct.Struct(">Q16s")  # time in ms, nonce
_MAC_SIZE = 32
_PREFIX = MAGIC + bytes([VERSION])
_OVERHEAD = len(_PREFIX) + _HEAD.size + _MAC_SIZE
_SALT = b"petrel.cluster.discovery.v1\x00"
_ITERATIONS = 200_000


class BeaconRefused(ValueError):
    """A datagram that is not an authentic, fresh announcement; ``reason`` is a short tag."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class BeaconKey:
    """The HMAC key of one cluster's announcements (never logged)."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def derive(cls, user: str, password: str) -> BeaconKey:
        return cls(_derive(user, password))

    def mac(self, data: bytes) -> bytes:
        return hmac.new(self._key, data, hashlib.sha256).digest()

    def __repr__(self) -> str:
        return "BeaconKey(<secret>)"


@functools.lru_cache(maxsize=4)
def _derive(user: str, password: str) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode(), _SALT + user.encode(), _ITERATIONS)


def seal(key: BeaconKey, packet: bytes, *, now: float | None = None, nonce: bytes | None = None) -> bytes:
    """`packet` (an encoded announcement) with its time, a fresh nonce and the MAC in front."""
    when = time.time() if now is None else now
    head = _PREFIX + _HEAD.pack(int(when * 1000), nonce if nonce is not None else os.urandom(16))
    return head + key.mac(head + packet) + packet


def open_sealed(key: BeaconKey, data: bytes, guard: ReplayGuard | None = None, *,
                now: float | None = None) -> bytes:
    """The announcement inside `data`; `BeaconRefused` (a ValueError) unless authentic and fresh."""
    data = bytes(data)
    if not data.startswith(_PREFIX):
        if data.startswith(MAGIC):
            raise BeaconRefused("version", f"sealed announcement version {data[len(MAGIC):len(MAGIC) + 1]!r} "
                                           "is not supported: run the same petrel version on every node")
        if data.startswith(UNSEALED_MAGIC):
            raise BeaconRefused("unsealed", "announcement without a MAC (from a node of an older petrel "
                                            "version, or forged)")
        raise BeaconRefused("foreign", f"not a petrel announcement: bad magic {data[:len(MAGIC)]!r}")
    if len(data) < _OVERHEAD:
        raise BeaconRefused("truncated", f"sealed announcement truncated to {len(data)} bytes")
    head, mac, packet = data[:_OVERHEAD - _MAC_SIZE], data[_OVERHEAD - _MAC_SIZE:_OVERHEAD], data[_OVERHEAD:]
    if not hmac.compare_digest(mac, key.mac(head + packet)):
        raise BeaconRefused("mac", "announcement with a wrong MAC: its sender does not know this cluster's "
                                   "cluster_user and cluster_password")
    sent_ms, nonce = _HEAD.unpack_from(head, len(_PREFIX))
    current = time.time() if now is None else now
    skew = sent_ms / 1000 - current
    if abs(skew) > MAX_SKEW:
        raise BeaconRefused("stale", f"announcement sent {skew:+.0f} s from this host's clock (more than "
                                     f"{MAX_SKEW:.0f} s): a replay, or the hosts' clocks differ (run NTP)")
    if guard is not None and not guard.first(nonce, current):
        raise BeaconRefused("replay", "announcement already received (a replay)")
    return packet


class ReplayGuard:
    """The nonces accepted within the last 2 x `MAX_SKEW` seconds (older ones fail the time check)."""

    def __init__(self, limit: int = 65536) -> None:
        self._seen: dict[bytes, float] = {}  # nonce -> when it may be forgotten, in arrival order
        self._limit = limit

    def first(self, nonce: bytes, now: float) -> bool:
        """Whether `nonce` is new (it is remembered from now on)."""
        seen = self._seen
        if nonce in seen:
            return False
        while seen:
            oldest = next(iter(seen))
            if seen[oldest] > now and len(seen) < self._limit:
                break
            del seen[oldest]
        seen[nonce] = now + 2 * MAX_SKEW
        return True
