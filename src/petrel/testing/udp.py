"""UDP for discovery tests: free ports, and a group address that works on this machine.

Multicast on the loopback interface works on most Linux hosts and containers, but not on
every one; `discovery_group()` probes it once and falls back to the loopback broadcast
address, which the discovery code serves the same way (every listener on the port hears it).
"""

from __future__ import annotations

import functools
import socket
import struct

from petrel.testing.process import free_port

__all__ = ["MULTICAST_GROUP", "BROADCAST", "udp_port", "discovery_group", "loopback_multicast_works"]

MULTICAST_GROUP = "231.7.7.7"
BROADCAST = "127.255.255.255"


def udp_port() -> int:
    """A port free for TCP (free_port) and for UDP on every interface."""
    for _ in range(50):
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free UDP port")


@functools.cache
def loopback_multicast_works() -> bool:
    """Whether a datagram to MULTICAST_GROUP sent on 127.0.0.1 reaches a member on 127.0.0.1."""
    port = udp_port()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            rx.bind((MULTICAST_GROUP, port))
            rx.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                          struct.pack("4s4s", socket.inet_aton(MULTICAST_GROUP), socket.inet_aton("127.0.0.1")))
            rx.settimeout(1.0)
            tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
            tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            tx.sendto(b"probe", (MULTICAST_GROUP, port))
            return rx.recv(16) == b"probe"
    except OSError:
        return False


def discovery_group() -> str:
    """MULTICAST_GROUP where loopback multicast works, else BROADCAST."""
    return MULTICAST_GROUP if loopback_multicast_works() else BROADCAST
