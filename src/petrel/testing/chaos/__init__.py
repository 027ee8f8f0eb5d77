"""A seeded, randomized fault-injection harness with exactly-once accounting.

`plan` turns a seed into a frozen Plan (workload dimensions and a fault schedule), `workload`
runs producers and consumers over STOMP and CORE (AMQP, MQTT and OpenWire on request), `faults`
injects the faults, `ledger` keeps the accounts, `runner` runs one seed end to end (heal,
restart, drain, check) and `report` prints the table. ``python -m petrel.testing.chaos --seed N``
replays one run.
"""

from petrel.testing.chaos.ledger import Ledger, Verdict
from petrel.testing.chaos.plan import DIMENSIONS, FAULT_KINDS, Fault, Plan, make_plan

__all__ = ["DIMENSIONS", "FAULT_KINDS", "Fault", "Ledger", "Plan", "Verdict", "make_plan"]
