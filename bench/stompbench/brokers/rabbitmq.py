"""RabbitMQ 3.10 from the Debian package ``rabbitmq-server``, with ``rabbitmq_stomp``.

/usr/sbin/rabbitmq-server switches to the ``rabbitmq`` user and drops the
environment, so we run the package's real script
(/usr/lib/rabbitmq/bin/rabbitmq-server) in the foreground with every path and
port pointing into our temp directory: node name, Mnesia and log dirs, AMQP and
distribution ports, a private epmd port, an enabled-plugins file listing
``rabbitmq_stomp`` and a rabbitmq.conf that sets the STOMP listener.
Everything else keeps its defaults.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..dialect import RABBITMQ
from .activemq import _dpkg_version
from .base import Broker, BrokerUnavailable, free_port

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


class RabbitMQ(Broker):
    name = "rabbitmq"
    dialect = RABBITMQ
    measured_comm = "beam.smp"

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.epmd_port = 0

    def check(self) -> None:
        if not SERVER.exists():
            raise BrokerUnavailable("Debian package rabbitmq-server is not installed")
        plugin_dirs = list(Path("/usr/lib/rabbitmq/lib").glob("rabbitmq_server-*/plugins"))
        if not any(any(d.glob("rabbitmq_stomp-*")) for d in plugin_dirs):
            raise BrokerUnavailable("the rabbitmq_stomp plugin is missing")

    def version(self) -> str:
        return _dpkg_version("rabbitmq-server")

    @property
    def label(self) -> str:  # type: ignore[override]
        return "RabbitMQ " + self.version().split("-")[0]

    def command(self, workdir: Path) -> list[str]:
        return [str(SERVER)]

    def environment(self, workdir: Path) -> dict[str, str]:
        for sub in ("mnesia", "log", "home"):
            (workdir / sub).mkdir()
        (workdir / "enabled_plugins").write_text("[rabbitmq_stomp].\n")
        (workdir / "rabbitmq.conf").write_text(f"stomp.listeners.tcp.1 = {self.host}:{self.port}\n")
        (workdir / "rabbitmq-env.conf").write_text("")
        node_port = free_port(self.host)
        self.epmd_port = free_port(self.host)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update(
            HOME=str(workdir / "home"),
            RABBITMQ_NODENAME=f"stompbench{self.port}@localhost",
            RABBITMQ_NODE_IP_ADDRESS=self.host,
            RABBITMQ_NODE_PORT=str(node_port),
            RABBITMQ_DIST_PORT=str(free_port(self.host)),
            ERL_EPMD_PORT=str(self.epmd_port),
            RABBITMQ_MNESIA_BASE=str(workdir / "mnesia"),
            RABBITMQ_LOG_BASE=str(workdir / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(workdir / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(workdir / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(workdir / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(workdir / "rabbitmq-env.conf"),
            RABBITMQ_PID_FILE=str(workdir / "rabbitmq.pid"),
        )
        return env

    def after_stop(self) -> None:
        """epmd daemonises out of our process group: ask ours (private port) to exit."""
        if self.epmd_port:
            env = dict(os.environ, ERL_EPMD_PORT=str(self.epmd_port))
            try:
                subprocess.run(
                    ["epmd", "-kill"], env=env, capture_output=True, timeout=10, check=False
                )
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.epmd_port = 0
