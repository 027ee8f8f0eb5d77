"""`StandaloneSpark`: a Spark standalone master and one worker, started from the pip pyspark
distribution (which has ``bin/spark-class`` but no ``sbin/start-master.sh``), on free loopback
ports, with their logs, work and scratch directories in one directory of their own.

    with StandaloneSpark(tmp_path / "spark", cores=1, memory="1g") as cluster:
        # a driver in another process: SparkSession.builder.master(cluster.master_url)
        cluster.state()   # the master's /json/ view: workers, activeapps, completedapps

`start()` waits (with deadlines) for the master to be ALIVE and for the worker to have
registered with it; `stop()` ends both, SIGTERM then SIGKILL, also when `start()` failed part
way. Nothing here imports pyspark: the processes are Java, found through the package's path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from petrel.testing.process import free_port, wait_for

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The pip pyspark package directory: it holds ``bin/spark-class`` and ``jars/``."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed (pip install petrel[spark])")
    return Path(next(iter(spec.submodule_search_locations)))


def java_home() -> str | None:
    """JAVA_HOME as given, else the JDK/JRE behind ``java`` on PATH, else None."""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    return str(Path(java).resolve().parent.parent) if java else None


class StandaloneSpark:
    def __init__(self, workdir: Path, *, cores: int = 1, memory: str = "1g", daemon_memory: str = "256m",
                 host: str = "127.0.0.1") -> None:
        self.workdir = Path(workdir)
        self.cores, self.memory, self.host = cores, memory, host
        self.home = spark_home()
        self.master_port, self.master_ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        self.master_url = f"spark://{host}:{self.master_port}"
        self.master_ui = f"http://{host}:{self.master_ui_port}"
        self.daemon_memory = daemon_memory
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: list = []

    # -- environment -------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The daemons' environment; also fit for a driver process of this cluster."""
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(self.home),
            SPARK_CONF_DIR=str(self.workdir / "conf"),  # empty: no spark-env.sh, no defaults
            SPARK_LOCAL_IP=self.host,
            SPARK_LOCAL_DIRS=str(self.workdir / "local"),
            SPARK_WORKER_DIR=str(self.workdir / "work"),
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_DAEMON_JAVA_OPTS="-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
            PYSPARK_PYTHON=sys.executable,  # executors' Python workers: this interpreter (Petrel, pyarrow)
        )
        java = java_home()
        if java:
            env["JAVA_HOME"] = java
        return env

    def _spawn(self, role: str, *args: str) -> subprocess.Popen:
        log = open(self.workdir / f"{role}.log", "ab")
        self._logs.append(log)
        proc = subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env(),
                                cwd=self.workdir, start_new_session=True)
        self.procs[role] = proc
        return proc

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> StandaloneSpark:
        for d in ("conf", "local", "work"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        try:
            self._spawn("master", MASTER_CLASS, "--host", self.host, "--port", str(self.master_port),
                        "--webui-port", str(self.master_ui_port))
            wait_for(lambda: self._alive("master") and self.state().get("status") == "ALIVE", timeout, 0.2,
                     f"Spark master not ALIVE in {timeout}s:\n{self.log('master')}")
            self._spawn("worker", WORKER_CLASS, "--host", self.host, "--cores", str(self.cores), "--memory",
                        self.memory, "--webui-port", str(self.worker_ui_port), "--work-dir",
                        str(self.workdir / "work"), self.master_url)
            wait_for(lambda: self._alive("worker") and self.alive_workers(), timeout, 0.2,
                     f"Spark worker not registered in {timeout}s:\n{self.log('worker')}")
        except BaseException:
            self.stop()
            raise
        return self

    def _alive(self, role: str) -> bool:
        proc = self.procs[role]
        if proc.poll() is not None:
            raise RuntimeError(f"Spark {role} exited with {proc.returncode}:\n{self.log(role)}")
        return True

    def stop(self, timeout: float = 20.0) -> None:
        """Worker first (it would otherwise retry the master), then master; each SIGTERM, then SIGKILL."""
        for role in ("worker", "master"):
            proc = self.procs.get(role)
            if proc is None or proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            except ProcessLookupError:
                pass
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> StandaloneSpark:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- views -------------------------------------------------------------------------------------

    def state(self) -> dict:
        """The master's ``/json/`` view ({} while it does not answer)."""
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError, urllib.error.URLError):
            return {}

    def alive_workers(self) -> list[dict]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def log(self, role: str) -> str:
        try:
            return (self.workdir / f"{role}.log").read_text(errors="replace")[-5000:]
        except FileNotFoundError:
            return ""
