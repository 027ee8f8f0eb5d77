"""TLS for the CORE client: ``ssl://host:port`` URLs and their options (standard ``ssl``).

URL options (case-insensitive; Artemis's names where it has one, with PEM files)::

    trustStorePath (or sslCa)     PEM CA certificates the broker's certificate must chain to
                                  (default: the system's CAs)
    keyStorePath (or sslCert)     PEM client certificate (mutual TLS); may hold the key too
    sslKey                        PEM key of the client certificate (default: keyStorePath)
    keyStorePassword (or sslKeyPassword)   password of an encrypted key
    verifyHost                    true (default): the certificate must name the host connected to
    sslEnabled                    true makes tcp:// endpoints TLS too

``ssl://a:61617,ssl://b:61617`` and ``failover:(ssl://a:61617,ssl://b:61617)?trustStorePath=...``
take the same options; brokers learnt from the topology of a TLS URL are reached with TLS.
"""

from __future__ import annotations

import ssl
from typing import Any

from petrel.client.errors import ConnectionFailed
from petrel.client.url import option, parse_bool

__all__ = ["client_context", "handshake_error", "handshake_lost"]


def client_context(options: dict[str, str]) -> ssl.SSLContext:
    """The context for a URL's TLS endpoints; ``ValueError`` names a file it cannot use."""
    ca = option(options, "trustStorePath", "sslCa")
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca or None)
    except FileNotFoundError:
        raise ValueError(f"trustStorePath: no such file: {ca}") from None
    except OSError as exc:
        raise ValueError(f"trustStorePath: cannot read {ca}: {getattr(exc, 'reason', None) or exc}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        verify = option(options, "verifyHost")
        ctx.check_hostname = True if verify is None else parse_bool(verify)
    except ValueError as exc:
        raise ValueError(f"verifyHost: {exc}") from None
    cert = option(options, "keyStorePath", "sslCert")
    key = option(options, "sslKey")
    password = option(options, "keyStorePassword", "sslKeyPassword")
    if key and not cert:
        raise ValueError("sslKey: give the client certificate too (keyStorePath or sslCert)")
    if cert:
        try:
            ctx.load_cert_chain(cert, key or None, password=password or _no_password)
        except _Encrypted:
            raise ValueError(f"keyStorePath: the key of {cert} is encrypted: give keyStorePassword") from None
        except FileNotFoundError as exc:
            raise ValueError(f"keyStorePath: no such file: {exc.filename or cert}") from None
        except ssl.SSLError as exc:
            reason = exc.reason or str(exc).split(" (_ssl.c")[0]
            raise ValueError(f"keyStorePath: cannot load the client certificate {cert} and its key "
                             f"{key or cert} ({reason})") from None
        except OSError as exc:
            raise ValueError(f"keyStorePath: cannot read {cert}: {exc.strerror or exc}") from None
    return ctx


class _Encrypted(Exception):
    pass


def _no_password() -> str:
    raise _Encrypted  # OpenSSL would prompt on the terminal otherwise



def handshake_error(exc: ssl.SSLError, endpoint: object) -> ConnectionFailed:
    """A clear client error for a failed TLS handshake with ``endpoint``."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or exc.reason or str(exc)
        if "hostname" in why.lower() or "ip address mismatch" in why.lower():
            hint = "connect by a name the certificate holds, or verifyHost=false"
        elif "expired" in why.lower():
            hint = "the broker needs a valid certificate"
        else:
            hint = "give its CA with trustStorePath=<PEM file>"
        return ConnectionFailed(f"TLS handshake with {endpoint} failed: the broker's certificate is not "
                                f"trusted ({why}); {hint}")
    reason = exc.reason or str(exc).split(" (_ssl.c")[0]
    if "CERTIFICATE_REQUIRED" in reason or "HANDSHAKE_FAILURE" in reason:
        return ConnectionFailed(f"TLS handshake with {endpoint} failed: the broker wants a client certificate "
                                f"it trusts (keyStorePath=<PEM>) ({reason})")
    if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return ConnectionFailed(f"TLS handshake with {endpoint} failed: the port does not speak TLS ({reason})")
    return ConnectionFailed(f"TLS handshake with {endpoint} failed: {reason}")


def handshake_lost(exc: BaseException | None, endpoint: Any) -> ConnectionFailed:
    """The connection closed before the broker answered CONNECT."""
    if isinstance(exc, ssl.SSLError):
        return handshake_error(exc, endpoint)
    if getattr(endpoint, "tls", False):
        # TLS 1.3: the broker checks the client's certificate after the client's side of the
        # handshake is done, so a refusal shows up as a closed connection
        return ConnectionFailed(f"connection to {endpoint} closed before the broker answered: it refused the TLS "
                                f"session (does it want a client certificate it trusts? keyStorePath=<PEM>)")
    return ConnectionFailed(f"connection to {endpoint} lost during the handshake")
