"""Petrel from this repository's virtualenv: ``petrel run`` with STOMP on the main port."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..dialect import PETREL
from .base import Broker, BrokerUnavailable


def _petrel_script() -> Path:
    return Path(sys.executable).with_name("petrel")


class Petrel(Broker):
    name = "petrel"
    dialect = PETREL
    measured_comm = None  # the console script's own Python process

    def check(self) -> None:
        script = _petrel_script()
        if not script.exists():
            raise BrokerUnavailable(f"{script} not found (pip install -e . in the venv)")
        try:
            out = subprocess.run(
                [str(script), "run", "--help"], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BrokerUnavailable(f"petrel run --help failed: {exc}") from exc
        if out.returncode != 0:
            last = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["?"]
            raise BrokerUnavailable(f"petrel is not runnable yet: {last[0]}")
        missing = [f for f in ("--data-dir", "--port", "--stomp-port", "--host") if f not in out.stdout]
        if missing:
            raise BrokerUnavailable(f"petrel run lacks {', '.join(missing)}")

    def version(self) -> str:
        try:
            from importlib.metadata import version

            return version("petrel")
        except Exception:
            return "?"

    @property
    def label(self) -> str:  # type: ignore[override]
        return "Petrel " + self.version()

    def command(self, workdir: Path) -> list[str]:
        data = workdir / "data"
        data.mkdir()
        return [
            str(_petrel_script()),
            "run",
            "--data-dir",
            str(data),
            "--port",
            str(self.port),
            "--stomp-port",
            "-1",
            "--host",
            self.host,
        ]
