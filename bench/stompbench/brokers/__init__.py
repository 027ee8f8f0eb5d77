"""The brokers the bench can start: the subject, its peers, and the sink."""

from __future__ import annotations

import sys
from pathlib import Path

from ..dialect import SINK
from .activemq import ActiveMQ
from .base import Broker, BrokerFailed, BrokerUnavailable, free_port
from .petrel import Petrel, PetrelSecure
from .rabbitmq import RabbitMQ


class SinkBroker(Broker):
    """The bench's own in-memory sink server (``stompbench.sink``), for ``--self-test``."""

    name = "sink"
    label = "sink"
    dialect = SINK

    def version(self) -> str:
        return "stompbench"

    def command(self, workdir: Path) -> list[str]:
        return [sys.executable, "-m", "stompbench.sink", "--host", self.host, "--port", str(self.port)]

    def environment(self, workdir: Path) -> dict[str, str]:
        import os

        env = dict(os.environ)
        bench_dir = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = bench_dir + os.pathsep + env.get("PYTHONPATH", "")
        return env


SUBJECT = "petrel"
PEERS = ("activemq", "rabbitmq")
REGISTRY: dict[str, type[Broker]] = {
    "petrel": Petrel,
    "petrel-secure": PetrelSecure,
    "activemq": ActiveMQ,
    "rabbitmq": RabbitMQ,
    "sink": SinkBroker,
}

__all__ = [
    "Broker",
    "BrokerFailed",
    "BrokerUnavailable",
    "PEERS",
    "REGISTRY",
    "SUBJECT",
    "SinkBroker",
    "free_port",
]
