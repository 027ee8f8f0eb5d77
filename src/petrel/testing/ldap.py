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

import base64
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from petrel.testing.process import free_port
from petrel.testing.server_process import ServerProcess

__all__ = ["SLAPD", "LdapServer", "LdapStartError", "ldap_available", "ssha"]

SLAPD = Path("/usr/sbin/slapd")
SLAPADD = Path("/usr/sbin/slapadd")
SCHEMA_DIR = Path("/etc/ldap/schema")
MODULE_DIR = Path("/usr/lib/ldap")
SUFFIX = "dc=example,dc=com"
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PASSWORD = "root-secret"

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


class LdapServer(ServerProcess):
    def __init__(self, workdir: Path | str | None = None, *, users: dict[str, str] | None = None,
                 groups: dict[str, list[str]] | None = None, port: int | None = None,
                 tls: tuple[Path, Path] | None = None, start_timeout: float = 30.0) -> None:
        super().__init__(workdir, prefix="petrel-ldap-", log_name="slapd.log")
        self.db_dir = self.workdir / "db"
        self.host = "127.0.0.1"
        self.port = port if port is not None else free_port()
        self.start_timeout = start_timeout
        self.users = dict(users or {})
        self.groups = {name: list(members) for name, members in (groups or {}).items()}
        self.tls = tls  # (certificate, key) PEM files: the server speaks ldaps:// only
        self.config_path = self.workdir / "slapd.conf"
        self._loaded = False

    @property
    def url(self) -> str:
        return f"{'ldaps' if self.tls else 'ldap'}://{self.host}:{self.port}"

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
        self._spawn(command)
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
