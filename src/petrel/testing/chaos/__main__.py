"""``python -m petrel.testing.chaos``: replay one seed (``--seed N``), or run a series
(``--runs N --start-seed S`` or ``--duration SECONDS``) and print the table. Exit 1 when any
run lost, duplicated or reordered a message (the seeds are listed), 0 otherwise."""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

from petrel.testing.chaos.plan import EXTRA_PROTOCOLS, EXTRA_TOPOLOGIES, PROTOCOLS, TOPOLOGIES, make_plan
from petrel.testing.chaos.report import print_table
from petrel.testing.chaos.runner import run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m petrel.testing.chaos", description=__doc__)
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--runs", type=int, help="how many seeds to run")
    parser.add_argument("--start-seed", type=int, help="first seed of the series (default: random)")
    parser.add_argument("--duration", type=float, help="run seeds for this many seconds")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the message counts")
    parser.add_argument("--topology", choices=TOPOLOGIES + EXTRA_TOPOLOGIES,
                        help="replace the drawn topology (pair: a shared-store primary and backup; replication: a "
                             "replicating primary and backup; drain: a broker killed and drained into another; spark: "
                             "a Spark streaming query for the consumer, killed and restarted; spark-scale: that query "
                             "reading a 2-node cluster while one node scales down)")
    parser.add_argument("--protocol", choices=PROTOCOLS + EXTRA_PROTOCOLS,
                        help="replace the drawn client protocol (AMQP: python-qpid-proton; MQTT: paho-mqtt, on the "
                             "durable topic, one persistent session per subscription; OPENWIRE: ActiveMQ's JMS client "
                             "over failover URLs, needs Java)")
    parser.add_argument("--workdir", type=Path, help="where the brokers' directories go (default: a temp dir)")
    parser.add_argument("--plan", action="store_true", help="print the plan(s) only, run nothing")
    parser.add_argument("--verbose", "-v", action="store_true", help="print every run's report, not only failures'")
    args = parser.parse_args(argv)
    # ``timeout`` (or a kill) sends SIGTERM: unwind, so each run's ``finally`` stops its brokers
    # instead of leaving them running, orphaned, with their ports and data
    signal.signal(signal.SIGTERM, _terminated)
    if args.protocol == "OPENWIRE" and not args.plan:
        from petrel.testing.chaos.openwire_channels import java_missing

        missing = java_missing()
        if missing:
            print(f"OPENWIRE runs skipped: {missing}", file=sys.stderr)
            return 2
    if args.seed is not None:
        seeds = iter([args.seed])
    else:
        start = args.start_seed if args.start_seed is not None else random.randrange(1_000_000)
        count = args.runs if args.runs is not None else (None if args.duration else 1)
        seeds = iter(range(start, start + count)) if count is not None else _forever(start)
    if args.plan:
        for seed in (seeds if args.runs or args.seed is not None else [next(seeds)]):
            print(make_plan(seed, scale=args.scale, topology=args.topology, protocol=args.protocol).describe())
        return 0
    deadline = time.monotonic() + args.duration if args.duration else None
    base = args.workdir or Path(tempfile.mkdtemp(prefix="petrel-chaos-"))
    results = []
    for seed in seeds:
        if deadline is not None and time.monotonic() > deadline:
            break
        print(make_plan(seed, scale=args.scale, topology=args.topology, protocol=args.protocol).describe(), flush=True)
        result = run_seed(seed, base / f"seed-{seed}", scale=args.scale, topology=args.topology,
                          protocol=args.protocol)
        results.append(result)
        print(result.report() if (args.verbose or not result.ok) else result.summary(), flush=True)
    print()
    print_table(results)
    if any(not r.ok for r in results):
        print(f"the failed runs' broker directories are under {base}")
    return 1 if any(not r.ok for r in results) else 0


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _forever(start: int):
    seed = start
    while True:
        yield seed
        seed += 1


if __name__ == "__main__":
    sys.exit(main())
