"""Petrel from this repository's virtualenv: ``petrel run`` with STOMP on the main port."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..dialect import PETREL, PETREL_SECURE
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

    def environment(self, workdir: Path) -> dict[str, str]:
        # measured as before issue 13: no logins (PETREL_SECURITY_ENABLED=true to measure them)
        return {"PETREL_SECURITY_ENABLED": "false", **super().environment(workdir)}

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
            "--http-port",  # no management port: 8161 may be another broker's on a shared host
            "-1",
        ]


class PetrelSecure(Petrel):
    """Petrel with security on (issue 13): every client logs in from a users file and every SEND and
    SUBSCRIBE is checked against ``security_settings``; ``--brokers petrel,petrel-secure`` gives
    the cost of authentication and authorization as a ratio."""

    name = "petrel-secure"
    dialect = PETREL_SECURE

    @property
    def label(self) -> str:  # type: ignore[override]
        return "Petrel " + self.version() + " (security on)"

    def environment(self, workdir: Path) -> dict[str, str]:
        return {**super().environment(workdir), "PETREL_SECURITY_ENABLED": "true"}

    def command(self, workdir: Path) -> list[str]:
        from petrel.security.permissions import PERMISSIONS
        from petrel.security.users import UserStore

        user, password = dict(PETREL_SECURE.connect_headers)["login"], dict(PETREL_SECURE.connect_headers)["passcode"]
        users = UserStore(workdir / "users.toml")
        users.add(user, password, ["bench"])
        users.save()
        grants = "".join(f'{permission} = ["bench"]\n' for permission in PERMISSIONS)
        # the workloads' addresses match a pattern of their own, as an application's would
        (workdir / "broker.toml").write_text(f'[security]\nusers_file = "users.toml"\n\n'
                                             f'[security_settings."#"]\n{grants}')
        return [*super().command(workdir), "--config", str(workdir / "broker.toml")]
