"""Run one phase's clients spread over N worker processes.

Each worker connects its clients (consumers subscribe first when producers are in
the phase, so topic subscribers exist before the first send), then all workers and
the parent meet at a barrier: the parent starts its broker measurements there, the
workers start sending.  Results come back over a queue; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .clients import ClientResult, Consumer, Producer
from .dialect import Dialect
from .frames import body_of
from .workloads import ConsumerSpec, Phase, ProducerSpec

log = logging.getLogger("stompbench.runner")

CONNECT_TIMEOUT = 30.0


@dataclass(frozen=True)
class Group:
    """The clients one worker process runs."""

    producers: tuple[ProducerSpec, ...]
    consumers: tuple[tuple[int, ConsumerSpec], ...]  # (subscription number, spec)


@dataclass
class PhaseOutcome:
    results: list[ClientResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    processes: int = 0
    loads: list[float] = field(default_factory=list)  # per worker: CPU time / wall time


def split(phase: Phase, procs: int) -> list[Group]:
    """Deal the phase's clients round-robin over at most ``procs`` processes.

    Consumers are dealt first, then producers continue the rotation, so with two
    processes a 1 -> 1 phase puts the producer and the consumer apart.
    """
    clients: list[tuple[str, object]] = [("c", (i, c)) for i, c in enumerate(phase.consumers)]
    clients += [("p", p) for p in phase.producers]
    n = max(1, min(procs, len(clients)))
    buckets: list[tuple[list, list]] = [([], []) for _ in range(n)]
    for k, (kind, item) in enumerate(clients):
        producers, consumers = buckets[k % n]
        (consumers if kind == "c" else producers).append(item)
    return [Group(tuple(p), tuple(c)) for p, c in buckets]


async def _run_group(
    group: Group,
    phase: Phase,
    dialect: Dialect,
    host: str,
    port: int,
    body_size: int,
    barrier,
    timeout_s: float,
) -> list[ClientResult]:
    body = body_of(body_size)
    latency = phase.latency == "delivery"
    consumers = [Consumer(spec, dialect, f"sub-{i}", latency) for i, spec in group.consumers]
    producers = [Producer(spec, dialect, body) for spec in group.producers]
    subscribe_first = bool(phase.producers)
    try:
        await asyncio.gather(*(c.connect(host, port, CONNECT_TIMEOUT) for c in consumers))
        if subscribe_first:
            await asyncio.gather(*(c.subscribe(CONNECT_TIMEOUT) for c in consumers))
        await asyncio.gather(*(p.connect(host, port, CONNECT_TIMEOUT) for p in producers))
    except BaseException:
        barrier.abort()
        raise
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, barrier.wait, CONNECT_TIMEOUT)
    cpu0, wall0 = time.process_time(), time.monotonic()
    deadline_ns = time.monotonic_ns() + int(timeout_s * 1e9)
    if not subscribe_first:
        await asyncio.gather(*(c.subscribe(CONNECT_TIMEOUT) for c in consumers))
    tasks = [c.run(deadline_ns) for c in consumers] + [p.run(deadline_ns) for p in producers]
    results = list(await asyncio.gather(*tasks))
    wall = time.monotonic() - wall0
    load = (time.process_time() - cpu0) / wall if wall > 0 else 0.0
    return results, load


def _worker(index, group, phase, dialect, host, port, body_size, barrier, results, timeout_s):
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        out, load = asyncio.run(
            _run_group(group, phase, dialect, host, port, body_size, barrier, timeout_s)
        )
        results.put((index, out, load, None))
    except BaseException as exc:  # report every failure to the parent, then exit
        try:
            barrier.abort()
        except Exception:
            pass
        results.put((index, [], None, f"worker {index}: {type(exc).__name__}: {exc}"))


def run_phase(
    phase: Phase,
    dialect: Dialect,
    host: str,
    port: int,
    procs: int,
    body_size: int,
    on_start: Callable[[], None] = lambda: None,
    timeout_s: float | None = None,
) -> PhaseOutcome:
    """Run ``phase`` against ``host:port`` with ``procs`` worker processes.

    ``on_start`` is called the moment the workers are released (broker CPU is
    sampled there).  Returns when every worker has reported or the phase's
    deadline (plus a margin) has passed; stragglers are terminated.
    """
    timeout_s = phase.timeout_s if timeout_s is None else timeout_s
    groups = split(phase, procs)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(groups) + 1)
    results = ctx.Queue()
    workers = [
        ctx.Process(
            target=_worker,
            args=(i, g, phase, dialect, host, port, body_size, barrier, results, timeout_s),
            name=f"stompbench-{phase.row}-{i}",
            daemon=True,
        )
        for i, g in enumerate(groups)
    ]
    outcome = PhaseOutcome(processes=len(workers))
    for w in workers:
        w.start()
    try:
        try:
            barrier.wait(CONNECT_TIMEOUT + 30)
            on_start()
        except threading.BrokenBarrierError:
            outcome.errors.append("workers could not connect (barrier broken)")
        end = time.monotonic() + timeout_s + CONNECT_TIMEOUT + 15
        pending = len(workers)
        while pending:
            try:
                _, out, load, error = results.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                outcome.errors.append(f"{pending} worker(s) did not report in time")
                break
            pending -= 1
            outcome.results.extend(out)
            if load is not None:
                outcome.loads.append(load)
            if error:
                outcome.errors.append(error)
    finally:
        for w in workers:
            w.join(timeout=5)
            if w.is_alive():
                log.warning("terminating worker %s", w.name)
                w.terminate()
                w.join(timeout=5)
    outcome.errors.extend(
        f"{r.role} {r.destination}: {r.error}" for r in outcome.results if r.error
    )
    return outcome
