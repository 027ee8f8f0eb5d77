"""ActiveMQ 5.17 from the Debian package ``activemq``, as our own foreground instance.

The package keeps jars in /usr/share/activemq, instances under /etc/activemq and
data under /var/lib/activemq, and starts them through an init script as the
``activemq`` user.  We start the same JVM the package would (its JAVA_HOME),
with the package's memory options from /usr/share/activemq/activemq-options,
on an instance directory of our own: an ``activemq.xml`` with one STOMP
transport connector and a default KahaDB store.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..dialect import ACTIVEMQ
from .base import Broker, BrokerUnavailable

HOME = Path("/usr/share/activemq")
OPTIONS = HOME / "activemq-options"
JAR = HOME / "bin" / "activemq.jar"

# Jars a transport needs beside the package's lib/: none for OpenWire (``tcp``); MQTT's are Debian
# ``libmqtt-client-java`` and what it pulls in; the package has no AMQP transport (no activemq-amqp
# jar, no proton-j in Debian).
TRANSPORT_JARS = {
    "tcp": [],  # OpenWire: the package's own jars
    "mqtt": ["/usr/share/java/activemq-mqtt.jar", "/usr/share/java/mqtt-client.jar",
             "/usr/share/java/hawtdispatch.jar", "/usr/share/java/hawtdispatch-transport.jar",
             "/usr/share/java/hawtbuf.jar"],
}

# The JDK 9+ module flags of the package's /usr/bin/activemq launcher.
JAVA_MODULE_FLAGS = [
    "--add-reads=java.xml=java.logging",
    "--add-opens=java.base/java.security=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.naming/javax.naming.spi=ALL-UNNAMED",
    "--add-opens=java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.http=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.https=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.jar=ALL-UNNAMED",
    "--add-exports=jdk.xml.dom/org.w3c.dom.html=ALL-UNNAMED",
    "--add-exports=jdk.naming.rmi/com.sun.jndi.url.rmi=ALL-UNNAMED",
]

BROKER_XML = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <!-- Written by stompbench: one STOMP connector, KahaDB with its defaults,
       no systemUsage element (the broker's default limits). -->
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="stompbench"
          useJmx="false" dataDirectory="{data}">
    <persistenceAdapter>
      <kahaDB directory="{data}/kahadb"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://{host}:{port}"/>{extra}
    </transportConnectors>
  </broker>
</beans>
"""

LOG4J = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={data}/activemq.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=%d | %-5p | %m | %c | %t%n
"""


def _package_options() -> tuple[str, str]:
    """(JAVA_HOME, ACTIVEMQ_OPTS) as the package's options file sets them."""
    script = f'INSTANCE=main; . "{OPTIONS}"; printf "%s\\n%s\\n" "$JAVA_HOME" "$ACTIVEMQ_OPTS"'
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=10)
    java_home, _, opts = out.stdout.partition("\n")
    return java_home.strip(), opts.strip()


def _java(java_home: str) -> str:
    for candidate in (Path(java_home) / "bin" / "java", Path("/usr/bin/java")):
        if candidate.exists():
            return str(candidate.resolve())
    raise BrokerUnavailable("no java binary (apt-get install default-jre-headless)")


class ActiveMQ(Broker):
    name = "activemq"
    dialect = ACTIVEMQ
    measured_comm = "java"

    def __init__(self, host: str = "127.0.0.1", transports: dict[str, int] | None = None) -> None:
        super().__init__(host)
        # more transport connectors beside STOMP (which readiness uses): scheme -> port, e.g. mqtt
        self.transports = dict(transports or {})
        self.java = ""
        self.java_opts: list[str] = []

    def check(self) -> None:
        if not JAR.exists() or not OPTIONS.exists():
            raise BrokerUnavailable("Debian package activemq is not installed")
        for scheme in self.transports:
            missing = [j for j in TRANSPORT_JARS.get(scheme, ()) if not Path(j).exists()]
            if scheme not in TRANSPORT_JARS or missing:
                raise BrokerUnavailable(f"ActiveMQ's {scheme} transport is not installed "
                                        f"({', '.join(missing) or 'no such transport in the package'})")
        java_home, opts = _package_options()
        self.java = _java(java_home)
        self.java_opts = opts.split()

    def version(self) -> str:
        return _dpkg_version("activemq")

    def java_version(self) -> str:
        out = subprocess.run([self.java, "-version"], capture_output=True, text=True, timeout=30)
        return " ".join(out.stderr.split("\n")[:1]).strip()

    @property
    def label(self) -> str:  # type: ignore[override]
        return "ActiveMQ " + self.version().split("+")[0]

    def command(self, workdir: Path) -> list[str]:
        conf, data = workdir / "conf", workdir / "data"
        conf.mkdir()
        data.mkdir()
        (conf / "activemq.xml").write_text(
            BROKER_XML.format(data=data, host=self.host, port=self.port, extra="".join(
                f'\n      <transportConnector name="{s}" uri="{s}://{self.host}:{p}"/>'
                for s, p in self.transports.items()))
        )
        classpath = [str(conf), *(j for s in self.transports for j in TRANSPORT_JARS[s])]
        (conf / "log4j.properties").write_text(LOG4J.format(data=data))
        return [
            self.java,
            *self.java_opts,
            *JAVA_MODULE_FLAGS,
            f"-Dactivemq.classpath={os.pathsep.join(classpath)}",
            f"-Dactivemq.home={HOME}",
            f"-Dactivemq.base={workdir}",
            f"-Dactivemq.conf={conf}",
            f"-Dactivemq.data={data}",
            f"-Dlog4j.configuration=file:{conf}/log4j.properties",
            "-jar",
            str(JAR),
            "start",
            f"xbean:file:{conf}/activemq.xml",
        ]

    def environment(self, workdir: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("ACTIVEMQ_OPTS", None)
        return env


def _dpkg_version(package: str) -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, timeout=10
        )
    except OSError:
        return "?"
    return out.stdout.strip() or "?"
