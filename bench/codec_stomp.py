"""Micro benchmark of the STOMP codec (not part of the test suite).

Parses N SEND frames with 1 KiB bodies fed in 64 KiB chunks, as a server reads
them, and serialises MESSAGE frames, as a server writes them. Reports frames/s
as the best of several runs.

    .venv/bin/python bench/codec_stomp.py [--frames 100000] [--body 1024]
"""

from __future__ import annotations

import argparse
import time

from petrel.codec.stomp import NEED_DATA, Frame, Role, StompConnection

CHUNK = 64 * 1024


def _connected_server(version: str) -> StompConnection:
    server = StompConnection(Role.SERVER)
    server.receive_data(f"CONNECT\naccept-version:{version}\nhost:bench\n\n\x00".encode())
    frame = server.next_event()
    server.negotiate(frame.headers["accept-version"])
    server.send(Frame("CONNECTED", {}))
    return server


def _send_stream(count: int, body_size: int, crlf: bool, trailer: bytes = b"\n") -> bytes:
    body = b"x" * body_size
    eol = "\r\n" if crlf else "\n"
    frames = []
    for i in range(count):
        head = (
            f"SEND{eol}destination:/queue/bench{eol}content-type:text/plain{eol}"
            f"receipt:r-{i}{eol}content-length:{body_size}{eol}{eol}"
        )
        frames.append(head.encode() + body + b"\x00" + trailer)
    return b"".join(frames)


def bench_parse(
    count: int, body_size: int, version: str, crlf: bool, runs: int, trailer: bytes = b"\n"
) -> float:
    stream = _send_stream(count, body_size, crlf, trailer)
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]
    best = float("inf")
    for _ in range(runs):
        server = _connected_server(version)
        receive, next_event = server.receive_data, server.next_event
        frames = 0
        t0 = time.process_time()
        for chunk in chunks:
            receive(chunk)
            while (event := next_event()) is not NEED_DATA:
                if event.__class__ is Frame:
                    frames += 1
        elapsed = time.process_time() - t0
        assert frames == count, frames
        best = min(best, elapsed)
    return count / best


def bench_serialize(count: int, body_size: int, version: str, runs: int) -> float:
    server = _connected_server(version)
    body = b"x" * body_size
    frames = [
        Frame(
            "MESSAGE",
            {
                "destination": "/queue/bench",
                "subscription": "sub-0",
                "message-id": f"m-{i}",
                "ack": f"a-{i}",
                "content-type": "text/plain",
            },
            body,
        )
        for i in range(count)
    ]
    best = float("inf")
    send = server.send
    for _ in range(runs):
        t0 = time.process_time()
        for frame in frames:
            send(frame)
        best = min(best, time.process_time() - t0)
    return count / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"{args.frames} SEND frames, {args.body}-byte bodies, {CHUNK // 1024} KiB reads;"
          f" best of {args.runs} by process CPU time")
    for version in ("1.0", "1.2"):
        for crlf in (False, True):
            for trailer in (b"\n", b""):
                rate = bench_parse(args.frames, args.body, version, crlf, args.runs, trailer)
                eol = "CRLF" if crlf else "LF"
                after = "NUL+EOL" if trailer else "NUL"
                print(f"parse SEND        STOMP {version} {eol:4} {after:7}: {rate:10,.0f} frames/s")
    for version in ("1.0", "1.2"):
        rate = bench_serialize(args.frames, args.body, version, args.runs)
        print(f"serialize MESSAGE STOMP {version}:{'':14}{rate:10,.0f} frames/s")


if __name__ == "__main__":
    main()
