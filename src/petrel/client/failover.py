"""Where and when to reconnect: the failover URL's policy, without any I/O.

`ReconnectPlan` answers three questions for the connection: which endpoints to try, in
what order (`candidates`); how long to wait between rounds (`delays`); and which endpoint
is preferred when ``priorityBackup`` is on (`priority`). Brokers named in topology
updates join the candidates when ``updateURIsSupported`` is on; a DISCONNECT with a
redirect puts its target first for the next round.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from petrel.client.url import ClientURL, Endpoint, FailoverOptions, parse_endpoint

__all__ = ["ReconnectPlan"]


class ReconnectPlan:
    def __init__(self, url: ClientURL, rng: random.Random | None = None) -> None:
        self.url = url
        self.options: FailoverOptions = url.failover or FailoverOptions(max_reconnect_attempts=0,
                                                                        startup_max_reconnect_attempts=0)
        self.static: list[Endpoint] = list(url.endpoints)
        #: brokers named without a scheme (topology, redirects) speak TLS when the URL's do
        self.tls = any(e.tls for e in url.endpoints)
        self.discovered: list[Endpoint] = []
        self.redirect: Endpoint | None = None
        self.backups: dict[Endpoint, Endpoint] = {}  # a live -> its backup, from the topology
        self._rng = rng or random.Random()

    @property
    def reconnects(self) -> bool:
        """True for failover URLs: a lost connection is re-established."""
        return self.url.failover is not None

    def max_attempts(self, startup: bool) -> int:
        """Rounds allowed (-1 = forever). A round tries every candidate once."""
        o = self.options
        if startup:
            if not self.reconnects:
                return 1
            n = o.startup_max_reconnect_attempts
            if n < 0:
                n = o.max_reconnect_attempts
            return -1 if n < 0 else n + 1
        return o.max_reconnect_attempts

    def candidates(self) -> list[Endpoint]:
        """Endpoints for the next round: a redirect first, then the URL's (randomized unless
        ``randomize=false``, preferred ones first), then brokers learnt from the topology."""
        static = list(self.static)
        if self.options.randomize and not self.options.priority_backup:
            self._rng.shuffle(static)
        elif self.options.priority_backup:
            preferred = [e for e in self.priority() if e in static]
            static = preferred + [e for e in static if e not in preferred]
        out: list[Endpoint] = []
        if self.redirect is not None:
            out.append(self.redirect)
        for e in static + self.discovered:
            if e not in out:
                out.append(e)
        return out

    def priority(self) -> tuple[Endpoint, ...]:
        """Preferred endpoints (priorityBackup): the priorityURIs, or the first URI."""
        return self.options.priority_uris or (self.static[0],)

    def is_priority(self, endpoint: Endpoint) -> bool:
        return endpoint in self.priority()

    def delays(self) -> Iterator[float]:
        """Seconds to wait before each further round."""
        o = self.options
        delay = max(o.initial_reconnect_delay, 0)
        while True:
            yield delay / 1000
            if o.use_exponential_backoff:
                delay = delay * o.reconnect_delay_exponent if delay else 1
            delay = min(delay, o.max_reconnect_delay)

    def set_redirect(self, target: str | None) -> None:
        """A DISCONNECT named somewhere else to go (``host:port`` or a URL)."""
        self.redirect = None
        if target:
            try:
                self.redirect = parse_endpoint(target, tls=self.tls)
            except ValueError:
                self.redirect = None

    def learn_backups(self, pairs: list[tuple[str, str]]) -> None:
        """(live, backup) connectors from a topology update."""
        out = {}
        for live, backup in pairs:
            try:
                out[parse_endpoint(live, tls=self.tls)] = parse_endpoint(backup, tls=self.tls)
            except ValueError:
                continue
        self.backups = out

    def backup_of(self, endpoint: Endpoint | None) -> Endpoint | None:
        """Where the node behind ``endpoint`` serves next if it fails: its backup (a failover
        there keeps the client with the node's messages), or None."""
        if endpoint is None or not self.reconnects or self.options.backup_wait <= 0:
            return None
        return self.backups.get(endpoint)

    def learn(self, connectors: list[str]) -> None:
        """Brokers named by a topology update (``host:port``)."""
        if not self.options.update_uris_supported:
            return
        found = []
        for text in connectors:
            try:
                endpoint = parse_endpoint(text, tls=self.tls)
            except ValueError:
                continue
            if endpoint not in self.static and endpoint not in found:
                found.append(endpoint)
        self.discovered = found
