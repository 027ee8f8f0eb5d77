"""TLS for the broker's acceptors, its management port and its cluster links (standard ``ssl``).

Settings (top-level in ``broker.toml``, ``PETREL_SSL_*`` in the environment)::

    ssl_enabled = true                  # the all-protocols and STOMP ports speak TLS only
    ssl_cert = "/etc/petrel/broker.pem" # PEM certificate chain, leaf first
    ssl_key = "/etc/petrel/broker.key"  # PEM private key (ssl_key_password if encrypted)
    ssl_ca = "/etc/petrel/ca.pem"       # PEM CAs client certificates (and cluster peers) chain to
    ssl_need_client_auth = true         # mutual TLS: no certificate from ssl_ca, no connection
    http_ssl_enabled = true             # HTTPS on the management port, same certificate

`check` runs when the configuration is read (`BrokerConfig`'s validator), so a missing,
unreadable or mismatched key or certificate is a ``ConfigError`` before anything listens.
`BrokerTls` (``broker.tls``) builds the contexts once per broker. Its `create_server` gives a
client listener: with ``ssl_enabled`` a `TlsServer`, which accepts sockets itself and has each do
its handshake (within ``ssl_handshake_timeout``) before the broker's `Connection` sees it; a
failed handshake (a plain-TCP hello, an untrusted or expired certificate, a silent client) logs
one line and closes that socket only. `link_context` is the client side of links to ``ssl://``
connectors; `login` maps a mutual-TLS client's certificate to its user.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from petrel.config import BrokerConfig
    from petrel.server.connection import Connection

__all__ = ["BrokerTls", "TLS_VERSIONS", "TlsServer", "check", "link_context", "login", "peer_subject", "resolve_paths",
           "rfc4514", "server_context", "split_versions"]

log = logging.getLogger("petrel.server.tls")

#: Handshakes a TLS listener runs at once without a max_connections of its own.
MAX_PENDING_HANDSHAKES = 10000
LOG_EVERY = 10.0  # seconds between two warnings about refused sockets
#: Seconds a closing TLS connection waits for the client's close_notify before it is cut.
SHUTDOWN_TIMEOUT = 5.0

TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def split_versions(value: Any) -> Any:
    """``"TLSv1.2,TLSv1.3"`` (an environment variable) as a list."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


PATH_SETTINGS = ("ssl_cert", "ssl_key", "ssl_ca")


def resolve_paths(raw: dict[str, Any], base: Path) -> None:
    """Relative ``ssl_cert``/``ssl_key``/``ssl_ca`` in a config file are relative to its directory."""
    for key in PATH_SETTINGS:
        value = raw.get(key)
        if isinstance(value, str) and value:
            path = Path(value).expanduser()
            raw[key] = str(path if path.is_absolute() else base / path)


def check(config: BrokerConfig) -> None:
    """The ``ssl_*`` settings are usable: the files exist, are PEM, the key matches the certificate,
    the cipher list matches something. ``ValueError`` names the setting."""
    if (config.ssl_enabled or config.http_ssl_enabled) and (config.ssl_cert is None or config.ssl_key is None):
        which = "ssl_enabled" if config.ssl_enabled else "http_ssl_enabled"
        raise ValueError(f"{which}: needs ssl_cert and ssl_key (PEM files of the broker's certificate and key)")
    if config.ssl_need_client_auth and config.ssl_ca is None:
        raise ValueError("ssl_need_client_auth: needs ssl_ca (the PEM CA client certificates must chain to)")
    if (config.ssl_cert is None) != (config.ssl_key is None):
        raise ValueError("ssl_cert and ssl_key: give both or neither")
    for name in ("ssl_cert", "ssl_key", "ssl_ca"):
        path = getattr(config, name)
        if path is not None:
            _readable(name, path)
    if config.ssl_cert is not None:
        server_context(config)


def _readable(name: str, path: Path) -> None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 20)
    except FileNotFoundError:
        raise ValueError(f"{name}: no such file: {path}") from None
    except IsADirectoryError:
        raise ValueError(f"{name}: {path} is a directory, not a PEM file") from None
    except OSError as exc:
        raise ValueError(f"{name}: cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in head:
        raise ValueError(f"{name}: {path} is not a PEM file (no -----BEGIN line)")


def _versions(ctx: ssl.SSLContext, protocols: list[str]) -> None:
    chosen = sorted(TLS_VERSIONS[p] for p in protocols)
    ctx.minimum_version = chosen[0]
    ctx.maximum_version = chosen[-1]


def server_context(settings: BrokerConfig, *, client_auth: bool = True) -> ssl.SSLContext:
    """The acceptors' context; ``ValueError`` names the setting that is wrong.

    ``client_auth=False`` (HTTPS) asks no client certificate whatever the settings say."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, settings.ssl_protocols)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    if settings.ssl_ciphers:
        try:
            ctx.set_ciphers(settings.ssl_ciphers)
        except ssl.SSLError:
            raise ValueError(f"ssl_ciphers: no cipher matches {settings.ssl_ciphers!r}") from None
    _load_chain(ctx, settings.ssl_cert, settings.ssl_key, settings.ssl_key_password)
    if client_auth and settings.ssl_ca is not None:
        try:
            ctx.load_verify_locations(cafile=str(settings.ssl_ca))
        except ssl.SSLError as exc:
            raise ValueError(f"ssl_ca: {settings.ssl_ca} holds no usable CA certificate ({exc.reason})") from None
        # a client certificate, when sent, must chain to ssl_ca; with need_client_auth one must be sent
        ctx.verify_mode = ssl.CERT_REQUIRED if settings.ssl_need_client_auth else ssl.CERT_OPTIONAL
    return ctx


class _Encrypted(Exception):
    pass


def _no_password() -> str:
    raise _Encrypted  # OpenSSL would prompt on the terminal otherwise


def _load_chain(ctx: ssl.SSLContext, cert: Path | None, key: Path | None, password: str | None) -> None:
    try:
        ctx.load_cert_chain(str(cert), str(key), password=password or _no_password)
    except _Encrypted:
        raise ValueError(f"ssl_key: {key} is encrypted: set ssl_key_password") from None
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc).split(" (_ssl.c")[0]
        if reason == "KEY_VALUES_MISMATCH":
            raise ValueError(f"ssl_key: {key} is not the key of ssl_cert {cert}") from None
        if password and (reason == "BAD_DECRYPT" or "PEM lib" in reason):
            raise ValueError(f"ssl_key: cannot decrypt {key}: wrong ssl_key_password?") from None
        raise ValueError(f"ssl_cert/ssl_key: cannot load {cert} and {key} as a PEM certificate and key "
                         f"({reason})") from None


def link_context(settings: BrokerConfig) -> ssl.SSLContext:
    """The client side of cluster links (bridges, replication, scale-down, votes) to ssl:// peers:
    trusts ssl_ca (else the system's CAs) and presents the broker's own certificate."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                     cafile=str(settings.ssl_ca) if settings.ssl_ca else None)
    _versions(ctx, settings.ssl_protocols)
    if settings.ssl_ciphers:
        ctx.set_ciphers(settings.ssl_ciphers)
    if settings.ssl_cert is not None:
        _load_chain(ctx, settings.ssl_cert, settings.ssl_key, settings.ssl_key_password)
    ctx.check_hostname = settings.ssl_verify_host
    return ctx


# -- the peer's certificate -----------------------------------------------------------------------

_SHORT = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
          "localityName": "L", "stateOrProvinceName": "ST", "streetAddress": "STREET",
          "domainComponent": "DC", "userId": "UID"}


def _escape(value: str) -> str:
    out = "".join("\\" + ch if ch in ',+"\\<>;=' else ch for ch in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def rfc4514(subject: tuple) -> str:
    """A subject from ``SSLSocket.getpeercert()`` as an RFC 4514 string (``CN=alice,O=Acme,C=US``):
    the most specific RDN first; attributes without a short name keep the name OpenSSL gives."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_SHORT.get(name, name)}={_escape(value)}" for name, value in rdn))
    return ",".join(rdns)


def peer_subject(transport: asyncio.BaseTransport) -> str | None:
    """The verified client certificate's subject on a TLS transport, or None (no certificate)."""
    sslobj = transport.get_extra_info("ssl_object")
    cert = sslobj.getpeercert() if sslobj is not None else None
    if not cert:
        return None
    return rfc4514(cert.get("subject", ()))


async def login(security: Any, conn: Connection, user: str | None, password: str | None) -> Any:
    """A client's login (a `petrel.security.Subject`): with mutual TLS, a client that names no user
    and whose certificate's subject is in ``[security] certificate_users`` is that user
    (``security.login_certificate``); any other client logs in with its user and password."""
    subject_dn = conn.peer_subject
    if user is None and subject_dn is not None and security.enabled and security.certificate_users:
        try:
            return security.login_certificate(subject_dn, conn.peer)
        except Exception:
            await asyncio.sleep(security.login_failure_delay)
            raise
    return await security.login_async(user, password, conn.peer)


# -- the broker's side ------------------------------------------------------------------------------

def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"client certificate refused: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or str(exc)
        if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "UNKNOWN_PROTOCOL",
                      "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
            return f"not a TLS client (a plain-TCP hello? {reason})"
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return "no client certificate (ssl_need_client_auth)"
        return reason
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or "taking longer than" in str(exc):
        return "no handshake in time (ssl_handshake_timeout)"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "the client went away (it may have refused the broker's certificate)"
    return str(exc) or type(exc).__name__


class TlsServer:
    """A TLS listener with asyncio.Server's surface (``sockets``, ``close``, ``wait_closed``).

    It accepts sockets itself and hands each to ``loop.connect_accepted_socket`` with the TLS
    context: the handshake runs before the protocol exists, its failure is an exception here (so
    it is logged), and a slow client meets ``ssl_handshake_timeout``."""

    def __init__(self, owner: BrokerTls, factory: Callable[[], asyncio.Protocol], sockets: list[socket.socket]) -> None:
        self.owner = owner
        self.factory = factory
        self.sockets = sockets
        loop = asyncio.get_running_loop()
        self._accepting = [loop.create_task(self._accept(sock)) for sock in sockets]
        self._handshakes: set[asyncio.Task] = set()
        self._closed = asyncio.Event()
        #: handshakes under way at once; a socket over it is closed at once (a flood of silent sockets
        #: holds file descriptors for ssl_handshake_timeout, not for ever)
        cap = getattr(owner.settings, "max_connections", -1)
        self.max_pending = cap if cap > 0 else MAX_PENDING_HANDSHAKES
        self._dropped = 0
        self._told = 0.0

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # out of file descriptors, say: keep listening
                self._tell("cannot accept a TLS client: %s", exc.strerror or exc)
                await asyncio.sleep(0.1)
                continue
            if len(self._handshakes) >= self.max_pending:
                sock.close()
                self._tell("%d TLS handshakes under way: a new client is closed at once", len(self._handshakes))
                continue
            task = loop.create_task(self._handshake(sock))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, sock: socket.socket) -> None:
        try:
            peer = sock.getpeername()
            where = f"{peer[0]}:{peer[1]}"
        except OSError:
            where = "?"
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                self.factory, sock, ssl=self.owner.server,
                ssl_handshake_timeout=self.owner.settings.ssl_handshake_timeout / 1000,
                ssl_shutdown_timeout=SHUTDOWN_TIMEOUT)
        except asyncio.CancelledError:
            sock.close()
            raise
        except Exception as exc:  # any failure ends this socket only
            self.owner.handshakes_failed += 1
            log.info("closing %s: TLS handshake failed: %s", where, _reason(exc),
                     extra={"event": "tls.handshake_failed"})
            sock.close()

    def _tell(self, text: str, *args: object) -> None:
        """A warning at most every LOG_EVERY seconds, with how many were not told."""
        now = time.monotonic()
        if now - self._told < LOG_EVERY:
            self._dropped += 1
            return
        more = f" (and {self._dropped} more since the last line)" if self._dropped else ""
        log.warning(text + more, *args, extra={"event": "tls.accept_failed"})
        self._told, self._dropped = now, 0

    def close(self) -> None:
        """Stop accepting; drop the handshakes still under way (connections already made stay)."""
        for task in (*self._accepting, *self._handshakes):
            task.cancel()
        for sock in self.sockets:
            sock.close()
        self._closed.set()

    def is_serving(self) -> bool:
        return not self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()
        await asyncio.gather(*self._accepting, *list(self._handshakes), return_exceptions=True)


def _bind(host: str | None, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets on every address ``host`` names (as ``loop.create_server`` binds)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class BrokerTls:
    """One broker's TLS contexts (``broker.tls``), built on first use."""

    def __init__(self, settings: BrokerConfig) -> None:
        self.settings = settings
        self._server: ssl.SSLContext | None = None
        self._link: ssl.SSLContext | None = None
        self.handshakes_failed = 0

    @property
    def server(self) -> ssl.SSLContext:
        if self._server is None:
            self._server = server_context(self.settings)
        return self._server

    def http_context(self) -> ssl.SSLContext | None:
        """The management port's context, or None when it serves plain HTTP."""
        return server_context(self.settings, client_auth=False) if self.settings.http_ssl_enabled else None

    def link_context(self) -> ssl.SSLContext:
        if self._link is None:
            self._link = link_context(self.settings)
        return self._link

    async def create_server(self, factory: Callable[[], asyncio.Protocol], host: str | None, port: int, *,
                            backlog: int = 1024, **options: Any) -> Any:
        """A client listener: ``loop.create_server`` as given, or a `TlsServer` with ssl_enabled."""
        if not self.settings.ssl_enabled:
            return await asyncio.get_running_loop().create_server(factory, host, port, backlog=backlog, **options)
        self.server  # noqa: B018 - built now, before the first client
        return TlsServer(self, factory, _bind(host, port, backlog))
