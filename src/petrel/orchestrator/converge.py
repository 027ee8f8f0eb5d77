"""Run the decision core against a backend until the cluster matches the spec.

A `Backend` observes (`Observed`) and carries out actions; `converge` asks
:func:`petrel.orchestrator.reconcile.decide` again after every round, sleeping between rounds
(not past a backoff's end), and gives up at a deadline with the reasons it is still waiting. The
local orchestrator runs this loop in ``petrel cluster scale|apply``; the Kubernetes operator runs
one round per event or timer instead (its objects are its memory).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from petrel.errors import PetrelError
from petrel.orchestrator.reconcile import Action, Observed, Plan, Policy, Spec, decide

__all__ = ["Backend", "ConvergeTimeout", "Outcome", "converge"]


class Backend(Protocol):
    def observe(self) -> Observed: ...

    def apply(self, action: Action, seen: Observed) -> None: ...


class ConvergeTimeout(PetrelError):
    """Not converged by the deadline; ``plan`` says what it still waited for."""

    def __init__(self, message: str, plan: Plan) -> None:
        super().__init__(message)
        self.plan = plan


@dataclass(frozen=True)
class Outcome:
    rounds: int
    actions: tuple[Action, ...]  #: every action taken, in order
    plan: Plan  #: the last plan: converged, or stuck


def converge(spec: Spec, backend: Backend, policy: Policy = Policy(), *, timeout: float = 600.0,
             poll: float = 0.25, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep,
             on_round: Callable[[Observed, Plan], None] | None = None) -> Outcome:
    """Observe, decide, apply, until converged. Returns when converged or when only ``stuck``
    items remain (no retry helps: the caller reports them); raises `ConvergeTimeout` at the
    deadline. A backend error propagates (the next run starts from what is observed then)."""
    deadline = clock() + timeout
    taken: list[Action] = []
    rounds = 0
    while True:
        rounds += 1
        seen = backend.observe()
        plan = decide(spec, seen, policy)
        if on_round is not None:
            on_round(seen, plan)
        if plan.converged or (plan.stuck and not plan.actions and not plan.waiting):
            return Outcome(rounds, tuple(taken), plan)
        for action in plan.actions:
            backend.apply(action, seen)
            taken.append(action)
        now = clock()
        if plan.actions and now < deadline:
            continue  # observe the effect at once
        if now >= deadline:
            raise ConvergeTimeout(f"not converged within {timeout:g} s: " + "; ".join(plan.waiting + plan.stuck),
                                  plan)
        pause = poll if plan.wake_at is None else min(poll, max(0.0, plan.wake_at - seen.now))
        sleep(max(0.01, min(pause, deadline - now)))
