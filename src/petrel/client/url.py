"""Client URLs: ``tcp://host:port``, ``ssl://host:port`` and ``failover:(tcp://a:61616,tcp://b:61617)?options``.

Failover options keep ActiveMQ Classic's names and meanings:

=========================== ======== =======================================================
option                      default  meaning
=========================== ======== =======================================================
randomize                   true     try the URIs in a random order
initialReconnectDelay       10       ms before the first reconnect attempt
maxReconnectDelay           30000    ms cap on the delay between attempts
useExponentialBackOff       true     multiply the delay by reconnectDelayExponent each time
reconnectDelayExponent      2.0      the multiplier
maxReconnectAttempts        -1       reconnect attempts after a loss (-1 forever, 0 never)
startupMaxReconnectAttempts -1       attempts for the first connection (-1: as above)
timeout                     -1       ms an operation waits for a reconnection (-1 forever)
priorityBackup              false    prefer the first URI; switch back when it returns
priorityURIs                (none)   comma-separated URIs to prefer instead of the first
updateURIsSupported         true     add brokers named in topology updates to the list
backupWait                  10000    ms to keep trying a lost broker's backup (from the topology)
                                     before any other broker: the node's messages are there
=========================== ======== =======================================================

One attempt tries every URI once; the delay grows between attempts, not between URIs.
Artemis-style options on the URL are read too: ``connectionTTL`` (ms the broker waits for
us), ``clientFailureCheckPeriod`` (ms of silence before we consider the broker gone),
``confirmationWindowSize`` (bytes of unconfirmed sends), ``consumerWindowSize`` (bytes),
``user``, ``password``, ``clientID`` (or ``clientId``), ``autoDuplicateId``, and
``useTopologyForLoadBalancing`` (move to the cluster member next in turn; see `balance`).
A plain ``tcp://`` URL never reconnects. ``ssl://`` endpoints (or ``sslEnabled=true``) speak TLS;
their options (``trustStorePath``, ``keyStorePath``, ``verifyHost``...) are in `petrel.client.tls`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

__all__ = ["Endpoint", "FailoverOptions", "ClientURL", "parse_bool", "parse_url", "parse_endpoint"]

DEFAULT_PORT = 61616


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    tls: bool = False  # ssl://

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'ssl' if self.tls else 'tcp'}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class FailoverOptions:
    randomize: bool = True
    initial_reconnect_delay: int = 10
    max_reconnect_delay: int = 30000
    use_exponential_backoff: bool = True
    reconnect_delay_exponent: float = 2.0
    max_reconnect_attempts: int = -1
    startup_max_reconnect_attempts: int = -1
    timeout: int = -1
    priority_backup: bool = False
    priority_uris: tuple[Endpoint, ...] = ()
    update_uris_supported: bool = True
    backup_wait: int = 10000


@dataclass(frozen=True, slots=True)
class ClientURL:
    endpoints: tuple[Endpoint, ...]
    failover: FailoverOptions | None  # None: a plain tcp:// URL, no reconnection
    options: dict[str, str] = field(default_factory=dict)  # the other (Artemis-style) options

    @property
    def is_failover(self) -> bool:
        return self.failover is not None


# URL option -> (field, parser)
def parse_bool(text: str) -> bool:
    """A URL option's true/1/yes/on or false/0/no/off (``ValueError`` otherwise)."""
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true or false, not {text!r}")


_FAILOVER = {
    "randomize": ("randomize", parse_bool),
    "initialreconnectdelay": ("initial_reconnect_delay", int),
    "maxreconnectdelay": ("max_reconnect_delay", int),
    "useexponentialbackoff": ("use_exponential_backoff", parse_bool),
    "reconnectdelayexponent": ("reconnect_delay_exponent", float),
    "backoffmultiplier": ("reconnect_delay_exponent", float),
    "maxreconnectattempts": ("max_reconnect_attempts", int),
    "startupmaxreconnectattempts": ("startup_max_reconnect_attempts", int),
    "timeout": ("timeout", int),
    "prioritybackup": ("priority_backup", parse_bool),
    "priorityuris": ("priority_uris", lambda text: tuple(parse_endpoint(u) for u in text.split(",") if u)),
    "updateurissupported": ("update_uris_supported", parse_bool),
    "backupwait": ("backup_wait", int),
}


def parse_endpoint(text: str, *, tls: bool = False) -> Endpoint:
    """``tcp://host:port``, ``ssl://host:port``, ``host:port``, ``[v6]:port`` or ``host`` (port
    61616); without a scheme the endpoint speaks TLS when ``tls`` says so."""
    text = text.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        rest, scheme = text, "ssl" if tls else "tcp"
    scheme = scheme.lower()
    if scheme not in ("tcp", "core", "ssl", "tls"):
        raise ValueError(f"unsupported transport {scheme!r} in {text!r} (use tcp://host:port or ssl://host:port)")
    rest = rest.split("?", 1)[0].rstrip("/")
    if rest.startswith("["):
        host, _, port_text = rest[1:].partition("]")
        port_text = port_text.lstrip(":")
    else:
        host, _, port_text = rest.rpartition(":") if ":" in rest else (rest, "", "")
    if not host:
        raise ValueError(f"no host in {text!r}")
    try:
        port = int(port_text) if port_text else DEFAULT_PORT
    except ValueError:
        raise ValueError(f"bad port in {text!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"port out of range in {text!r}")
    return Endpoint(host, port, scheme in ("ssl", "tls"))


def _split_list(inner: str) -> list[str]:
    return [part.strip() for part in inner.split(",") if part.strip()]


def parse_url(url: str) -> ClientURL:
    """Parse a client URL; ``ValueError`` names what is wrong."""
    url = url.strip()
    if url.startswith("failover:"):
        rest = url[len("failover:") :]
        if rest.startswith("("):
            close = rest.find(")")
            if close < 0:
                raise ValueError(f"unbalanced parentheses in {url!r}")
            inner, query = rest[1:close], rest[close + 1 :]
        else:
            inner, _, query = rest.partition("?")
            query = "?" + query if query else ""
        if query and not query.startswith("?"):
            raise ValueError(f"expected ?options after the URI list in {url!r}")
        endpoints = tuple(parse_endpoint(u) for u in _split_list(inner))
        if not endpoints:
            raise ValueError(f"no URIs in {url!r}")
        options = dict(parse_qsl(query[1:], keep_blank_values=True)) if query else {}
        failover, rest_options = _failover_options(options)
        return ClientURL(_ssl_enabled(endpoints, rest_options), failover, rest_options)
    base, _, query = url.partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True)) if query else {}
    endpoints = tuple(parse_endpoint(u) for u in _split_list(base))
    if not endpoints:
        raise ValueError(f"no host in {url!r}")
    options = {k: unquote(v) for k, v in options.items()}
    return ClientURL(_ssl_enabled(endpoints, options), None, options)


def _ssl_enabled(endpoints: tuple[Endpoint, ...], options: dict[str, str]) -> tuple[Endpoint, ...]:
    """``sslEnabled=true`` (Artemis's option) makes every endpoint TLS."""
    text = option(options, "sslEnabled")
    if text is None:
        return endpoints
    try:
        on = parse_bool(text)
    except ValueError as exc:
        raise ValueError(f"sslEnabled: {exc}") from None
    return tuple(dataclasses.replace(e, tls=True) for e in endpoints) if on else endpoints


def _failover_options(options: dict[str, str]) -> tuple[FailoverOptions, dict[str, str]]:
    values = {}
    rest = {}
    for key, text in options.items():
        name = key.lower()
        if name.startswith("nested."):
            rest[key[len("nested.") :]] = text
            continue
        spec = _FAILOVER.get(name)
        if spec is None:
            rest[key] = text
            continue
        attr, parse = spec
        try:
            values[attr] = parse(text)
        except ValueError as exc:
            raise ValueError(f"failover option {key}: {exc}") from None
    return dataclasses.replace(FailoverOptions(), **values), rest


def option(options: dict[str, str], *names: str) -> str | None:
    """The value of the first of `names` among a URL's options, matched without regard to case."""
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None
