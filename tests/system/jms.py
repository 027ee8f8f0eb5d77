"""Real Java JMS programs against Petrel's OpenWire: compiled with `javac` at test time against
Debian's ActiveMQ Classic client (``libactivemq-java``: activemq-client.jar) and the JMS 1.1
API (``libgeronimo-jms-1.1-spec-java``), run with `java`. Installs nothing: `require()` skips
the test with a clear message where Java or the jars are absent.

Reference mode: with ``PETREL_JMS_REFERENCE=activemq`` the tests that take the `jms_broker`
fixture run the same programs against ActiveMQ 5.17 from Debian's ``activemq`` package (bench's
launcher, an OpenWire connector on a free port) and expect the same lines; a test of Petrel's
own behaviour is marked `petrel_only` and skipped there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

JAVA_DIR = Path("/usr/share/java")
JARS = ("activemq-client.jar", "geronimo-jms_1.1_spec.jar", "hawtbuf.jar", "slf4j-api.jar", "slf4j-nop.jar",
        "geronimo-j2ee-management-1.1-spec.jar")
SOURCES = Path(__file__).resolve().parent.parent / "interop"
BENCH = Path(__file__).resolve().parent.parent.parent / "bench"
REFERENCE = os.environ.get("PETREL_JMS_REFERENCE", "") == "activemq"
petrel_only = pytest.mark.skipif(REFERENCE, reason="Petrel's own behaviour: not run in the ActiveMQ reference mode")


def require() -> None:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            pytest.skip(f"no {tool}: install a JDK (Debian: openjdk-17-jdk-headless) for the OpenWire JMS tests")
    missing = [jar for jar in JARS if not (JAVA_DIR / jar).exists()]
    if missing:
        pytest.skip(f"missing {', '.join(missing)} in {JAVA_DIR}: install Debian's libactivemq-java and "
                    "libgeronimo-jms-1.1-spec-java for the OpenWire JMS tests")


def compile_program(name: str, out: Path) -> str:
    """Compile tests/interop/<name>.java (and JmsProgram.java, its shared main) into `out`; the
    classpath to run it with."""
    require()
    out.mkdir(parents=True, exist_ok=True)
    classpath = ":".join([str(out), *(str(JAVA_DIR / jar) for jar in JARS)])
    sources = [str(SOURCES / f"{name}.java"), str(SOURCES / "JmsProgram.java")]  # (what the programs share)
    proc = subprocess.run(["javac", "-d", str(out), "-cp", classpath, *sources],
                          timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, f"javac {name}.java failed:\n{proc.stdout}{proc.stderr}"
    return classpath


def run(classpath: str, main: str, *args: str, timeout: float = 180) -> list[str]:
    """Run a compiled program; its output lines (fails with its output when it fails)."""
    proc = subprocess.run(["java", "-cp", classpath, main, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{main} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout.splitlines()


def run_any(classpath: str, main: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run a compiled program whatever its exit status."""
    return subprocess.run(["java", "-cp", classpath, main, *args], capture_output=True, text=True, timeout=timeout)



def activemq_reference() -> Iterator[SimpleNamespace]:
    """ActiveMQ 5.17 (Debian ``activemq``) with an OpenWire connector, for the reference mode;
    skips the test where the package is missing."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    from stompbench.brokers.activemq import ActiveMQ
    from stompbench.brokers.base import BrokerUnavailable, free_port

    port = free_port()
    broker = ActiveMQ(transports={"tcp": port})
    try:
        broker.check()
    except BrokerUnavailable as exc:
        pytest.skip(f"reference mode: {exc}")
    broker.start()
    try:
        yield SimpleNamespace(port=port)
    finally:
        broker.stop()


@pytest.fixture
def jms_broker(broker_factory):
    """The broker the JMS programs talk to: a `petrel run` (conftest's `broker_factory`), or
    ActiveMQ in the reference mode. Import it into the test module."""
    if REFERENCE:
        yield from activemq_reference()
    else:
        yield broker_factory().start()
