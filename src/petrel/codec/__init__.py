"""Sans-IO protocol codecs: bytes in, events out; events in, bytes out.

Nothing under this package touches sockets or asyncio. Each protocol lives in
its own subpackage (``stomp`` today; CORE, MQTT and AMQP later) and shares the
receive :class:`~petrel.codec.buffer.Buffer` and the error types in
:mod:`petrel.codec.errors`.
"""
