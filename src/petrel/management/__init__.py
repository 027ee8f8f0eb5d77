"""The management plane: the HTTP/JSON API under ``/api/v1``, ``/health`` and ``/metrics``.

``server.ManagementServer`` runs an aiohttp application in the broker's own event loop;
``client.ManagementClient`` is the small synchronous client the CLI uses. Nothing is
imported here, so ``petrel queue stat`` does not pay for aiohttp.
"""
