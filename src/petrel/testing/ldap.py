"""`LdapServer`: a real OpenLDAP ``slapd`` in a subprocess, for tests.

It runs Debian's `slapd` package (``apt-get install -y --no-install-recommends slapd``;
``.ci/run`` installs it) with a ``slapd.conf`` and an MDB database of its own in a temporary
directory, on a free loopback port chosen at run time.  The directory holds
``dc=example,dc=com`` with ``ou=people`` (``inetOrgPerson`` entries ``uid=<user>`` with salted
SHA-1 ``userPassword`` hashes) and ``ou=groups`` (``groupOfNames`` entries ``cn=<group>``
whose ``member`` values are the users' DNs), loaded with ``slapadd`` before the first start::

    with LdapServer(tmp_path / "ldap", users={"alice": "pw"}, groups={"producers": ["alice"]}) as ldap:
        ldap.url             # ldap://127.0.0.1:<port>
        ldap.user_dn("alice")
        ldap.pause()         # SIGSTOP: connections open, nothing answers
        ldap.resume()
        ldap.kill()          # SIGKILL
        ldap.start()         # the same port and data

`start()` returns once the server answers a search, or raises `LdapStartError` (with the tail
of its log) after ``start_timeout`` seconds.  Every server still running at interpreter exit is
killed.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from petrel.testing.process import free_port

__all__ = ["SLAPD", "LdapServer", "LdapStartError", "ldap_available", "ssha"]

SLAPD = Path("/usr/sbin/slapd")
SLAPADD = Path("/usr/sbin/slapadd")
SCHEMA_DIR = Path("/etc/ldap/schema")
MODULE_DIR = Path("/usr/lib/ldap")
SUFFIX = "dc=example,dc=com"
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PASSWORD = "root-secret"

_running: set[LdapServer] = set()


class LdapStartError(RuntimeError):
    """The server did not answer in time, or its process exited."""


def ldap_available() -> str | None:
    """None when a server can start here; otherwise what is missing and how to install it."""
    for path in (SLAPD, SLAPADD, SCHEMA_DIR / "inetorgperson.schema"):
        if not path.exists():
            return f"{path} is missing: apt-get install -y --no-install-recommends slapd"
    return None


def ssha(password: str) -> str:
    """``{SSHA}`` of ``password`` with a random salt (what ``slappasswd`` writes)."""
    salt = os.urandom(8)
    return "{SSHA}" + base64.b64encode(hashlib.sha1(password.encode() + salt).digest() + salt).decode()


class LdapServer:
    def __init__(self, workdir: Path | str | None = None, *, users: dict[str, str] | None = None,
                 groups: dict[str, list[str]] | None = None, port: int | None = None,
                 tls: tuple[Path, Path] | None = None, start_timeout: float = 30.0) -> None:
        self._owns_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="petrel-ldap-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.db_dir = self.workdir / "db"
        self.host = "127.0.0.1"
        self.port = port if port is not None else free_port()
        self.start_timeout = start_timeout
        self.users = dict(users or {})
        self.groups = {name: list(members) for name, members in (groups or {}).items()}
        self.tls = tls  # (certificate, key) PEM files: the server speaks ldaps:// only
        self.config_path = self.workdir / "slapd.conf"
        self.log_path = self.workdir / "slapd.log"
        self.process: subprocess.Popen | None = None
        self._loaded = False

    @property
    def url(self) -> str:
        return f"{'ldaps' if self.tls else 'ldap'}://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def user_dn(self, user: str) -> str:
        return f"uid={user},ou=people,{SUFFIX}"

    def _write_config(self) -> None:
        schemas = "".join(f"include {SCHEMA_DIR / name}.schema\n" for name in ("core", "cosine", "inetorgperson"))
        tls = f"TLSCertificateFile {self.tls[0]}\nTLSCertificateKeyFile {self.tls[1]}\n" if self.tls else ""
        self.config_path.write_text(
            f"{schemas}"
            f"modulepath {MODULE_DIR}\n"
            "moduleload back_mdb\n"
            f"pidfile {self.workdir / 'slapd.pid'}\n"
            f"argsfile {self.workdir / 'slapd.args'}\n"
            f"{tls}"
            "database mdb\n"
            "maxsize 16777216\n"
            f'suffix "{SUFFIX}"\n'
            f'rootdn "{ROOT_DN}"\n'
            f"rootpw {ROOT_PASSWORD}\n"
            f"directory {self.db_dir}\n"
            "access to attrs=userPassword by anonymous auth by self write by * none\n"
            "access to * by * read\n"
        )

    def ldif(self) -> str:
        """The directory's entries."""
        parts = [f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n",
                 f"dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people\n",
                 f"dn: ou=groups,{SUFFIX}\nobjectClass: organizationalUnit\nou: groups\n"]
        for user, password in self.users.items():
            parts.append(f"dn: {self.user_dn(user)}\nobjectClass: inetOrgPerson\nuid: {user}\ncn: {user}\n"
                         f"sn: {user}\nuserPassword: {ssha(password)}\n")
        for group, members in self.groups.items():
            member_lines = "".join(f"member: {self.user_dn(m)}\n" for m in members) or f"member: {ROOT_DN}\n"
            parts.append(f"dn: cn={group},ou=groups,{SUFFIX}\nobjectClass: groupOfNames\ncn: {group}\n{member_lines}")
        return "\n".join(parts)

    def _load(self) -> None:
        self._write_config()
        shutil.rmtree(self.db_dir, ignore_errors=True)
        self.db_dir.mkdir(parents=True)
        ldif_path = self.workdir / "data.ldif"
        ldif_path.write_text(self.ldif())
        done = subprocess.run([str(SLAPADD), "-f", str(self.config_path), "-l", str(ldif_path)],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise LdapStartError(f"slapadd failed ({done.returncode}): {done.stderr.strip()}")
        self._loaded = True

    def start(self) -> LdapServer:
        """Start the server (again: the same port and data) and wait until it answers."""
        if self.running:
            return self
        missing = ldap_available()
        if missing is not None:
            raise LdapStartError(missing)
        if not self._loaded:
            self._load()
        command = [str(SLAPD), "-f", str(self.config_path), "-h", f"{self.url}/", "-d", "256"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            cwd=self.workdir, start_new_session=True)
        _running.add(self)
        deadline = time.monotonic() + self.start_timeout
        while not self._answers():
            if self.process.poll() is not None:
                raise LdapStartError(f"slapd exited with {self.process.returncode} while starting on {self.url}:\n"
                                     f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise LdapStartError(f"slapd did not answer on {self.url} within {self.start_timeout}s:\n"
                                     f"{self.log_tail()}")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        import petrel.security.ldap  # noqa: F401  (imports ldap3 without its warnings)
        from ldap3 import BASE, Connection, Server

        try:
            with socket.create_connection((self.host, self.port), timeout=1.0):
                pass
            server = Server(self.url, use_ssl=bool(self.tls), connect_timeout=1)  # (not verified: only up?)
            conn = Connection(server, receive_timeout=1, auto_bind=True)
            try:
                return conn.search(SUFFIX, "(objectClass=*)", BASE)
            finally:
                conn.unbind()
        except Exception:
            return False

    def pause(self) -> None:
        """SIGSTOP: the port stays open but nothing answers (a hung server)."""
        if self.running:
            os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM and wait for the exit (SIGKILL after `timeout`)."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as in a crash."""
        self._signal(signal.SIGKILL, 15.0)

    def _signal(self, signum: int, timeout: float) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, signum)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)
        _running.discard(self)

    def close(self) -> None:
        """Kill the server, and remove its directory when it made one itself."""
        self.kill()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> LdapServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_running):
        server.kill()
