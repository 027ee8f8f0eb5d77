"""Petrel inside an application: `async with petrel.Broker(...)` and its synchronous twin.

    async with petrel.Broker(data_dir="/tmp/b1", port=0, stomp_port=-1, http_port=-1) as broker:
        print(broker.ports)          # {'all': 40123}

    with petrel.EmbeddedBroker(data_dir="/tmp/b1", port=0) as broker:   # runs its own loop thread
        ...

Both take a `BrokerConfig` or its fields as keyword arguments.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from petrel.config import BrokerConfig
from petrel.server.broker import Broker as _ServerBroker


def _config(config: BrokerConfig | None, fields: dict[str, Any]) -> BrokerConfig:
    if config is not None and fields:
        return config.model_copy(update=fields)
    return config if config is not None else BrokerConfig(**fields)


class Broker(_ServerBroker):
    """The broker in the caller's event loop."""

    def __init__(self, config: BrokerConfig | None = None, **fields: Any) -> None:
        super().__init__(_config(config, fields))


class EmbeddedBroker:
    """The broker in a background thread with its own event loop, for synchronous programs."""

    def __init__(self, config: BrokerConfig | None = None, **fields: Any) -> None:
        self.config = _config(config, fields)
        self.broker: _ServerBroker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def ports(self) -> dict[str, int]:
        return dict(self.broker.ports) if self.broker else {}

    def start(self, timeout: float = 60.0) -> EmbeddedBroker:
        started = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self.broker = _ServerBroker(self.config)
            try:
                loop.run_until_complete(self.broker.start())
            except BaseException as exc:  # reported to the caller of start()
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.broker.stop())
            loop.close()

        self._thread = threading.Thread(target=main, name="petrel-broker", daemon=True)
        self._thread.start()
        if not started.wait(timeout):
            raise TimeoutError(f"broker did not start within {timeout}s")
        if failure:
            raise failure[0]
        return self

    def call(self, fn, *args):
        """Run `fn(*args)` on the broker's loop (the domain is not thread-safe) and return its result."""
        future: asyncio.Future = asyncio.run_coroutine_threadsafe(_call(fn, *args), self._loop)
        return future.result()

    def stop(self, timeout: float = 60.0) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


async def _call(fn, *args):
    return fn(*args)
