"""The OpenAPI 3 description of the management API, served at /api/v1/openapi.json."""

from __future__ import annotations

from typing import Any

__all__ = ["document"]

_S = "#/components/schemas/"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _S + name}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_FILTER = {"name": "filter", "in": "query", "required": False,
           "description": "a JMS selector (SQL-92 subset) that messages must match", "schema": {"type": "string"}}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


def _op(summary: str, ok: dict[str, Any], *, status: str = "200", params: list | None = None,
        body: dict[str, Any] | None = None, errors: dict[str, str] | None = None, tag: str = "broker") -> dict:
    op: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": {status: ok}}
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": False, "content": {"application/json": {"schema": body}}}
    for code, text in (errors or {}).items():
        op["responses"][code] = _error(text)
    return op


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


_INT = {"type": "integer"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_NSTR = {"type": "string", "nullable": True}
_RT = {"type": "string", "enum": ["ANYCAST", "MULTICAST"]}
_QUEUE_NOT_FOUND = {"404": "no such queue"}


def _schemas() -> dict[str, Any]:
    queue = _obj({
        "name": _STR, "address": _STR, "consumer_count": _INT, "message_count": _INT, "messages_added": _INT,
        "delivering_count": _INT, "messages_acked": _INT, "scheduled_count": _INT, "messages_expired": _INT,
        "messages_killed": _INT, "routing_type": _RT, "durable": _BOOL, "filter": _NSTR, "paused": _BOOL,
        "temporary": _BOOL, "auto_created": _BOOL, "id": _INT,
    }, ["name", "address", "message_count", "routing_type"])
    address = _obj({
        "name": _STR, "routing_types": {"type": "array", "items": _RT}, "auto_created": _BOOL,
        "queue_count": _INT, "queues": {"type": "array", "items": _STR}, "message_count": _INT, "id": _INT,
    }, ["name", "routing_types"])
    detail = _obj({**address["properties"], "queues": {"type": "array", "items": _ref("Queue")}}, ["name"])
    message = _obj({
        "seq": _INT, "message_id": _INT, "address": _STR, "durable": _BOOL, "priority": _INT, "timestamp": _INT,
        "expiration": _INT, "scheduled": _INT, "delivery_count": _INT, "user_id": _NSTR,
        "properties": {"type": "object", "additionalProperties": True}, "body_size": _INT,
        "body": _STR, "body_encoding": {"type": "string", "enum": ["text", "base64"]},
    }, ["seq", "message_id", "body_size"])
    return {
        "Error": _obj({"error": _STR}, ["error"]),
        "Health": _obj({"status": _STR, "live": _BOOL, "ready": _BOOL, "reason": _STR, "name": _STR, "node_id": _STR,
                        "uptime_seconds": {"type": "number"}}, ["status", "live", "ready"]),
        "BrokerStatus": _obj({
            "name": _STR, "version": _STR, "node_id": _STR, "state": _STR, "ha_role": _STR,
            "started_at": _STR, "uptime_seconds": {"type": "number"},
            "ports": {"type": "object", "additionalProperties": _INT},
            "connection_count": _INT, "address_count": _INT, "queue_count": _INT, "message_count": _INT,
            "messages_routed": _INT, "messages_unrouted": _INT, "messages_duplicate": _INT,
            "persistence_enabled": _BOOL, "memory": _obj({"rss_bytes": _INT}),
            "disk": _obj({"data_dir": _STR, "used_bytes": _INT, "fs_total_bytes": _INT, "fs_free_bytes": _INT}),
            "journal": {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": True}},
        }, ["name", "version", "node_id", "ha_role", "uptime_seconds", "connection_count"]),
        "Queue": queue,
        "QueueList": _obj({"queues": {"type": "array", "items": _ref("Queue")}, "count": _INT}, ["queues"]),
        "QueueCreate": _obj({"name": _STR, "address": _STR, "routing_type": _RT, "durable": _BOOL,
                             "filter": _NSTR}, ["name"]),
        "Address": address,
        "AddressDetail": detail,
        "AddressList": _obj({"addresses": {"type": "array", "items": _ref("Address")}, "count": _INT},
                            ["addresses"]),
        "AddressCreate": _obj({"name": _STR, "routing_types": {"type": "array", "items": _RT}}, ["name"]),
        "Message": message,
        "MessagePage": _obj({"queue": _STR, "offset": _INT, "limit": _INT, "count": _INT, "more": _BOOL,
                             "messages": {"type": "array", "items": _ref("Message")}}, ["messages"]),
        "Connection": _obj({"id": _STR, "remote_address": _STR, "protocol": _NSTR, "client_id": _NSTR,
                            "consumer_count": _INT, "writing_paused": _BOOL}, ["id", "remote_address"]),
        "Consumer": _obj({"id": _INT, "queue": _STR, "address": _STR, "routing_type": _RT, "filter": _NSTR,
                          "connection_id": _NSTR, "remote_address": _NSTR, "delivering_count": _INT,
                          "bytes_in_flight": _INT, "window": _INT, "window_bytes": _INT, "auto_ack": _BOOL,
                          "paused": _BOOL}, ["id", "queue"]),
        **_cluster_schemas(),
        "Ha": _obj({"policy": {"type": "string", "enum": ["live_only", "shared_store", "replication"]},
                    "role": {"type": "string", "enum": ["live", "primary", "backup"]},
                    "state": {"type": "string", "enum": ["starting", "live", "backup", "failing-back", "syncing",
                                                         "stopped"]},
                    "since": _STR, "node_id": _STR, "failovers": _INT, "failover_on_shutdown": _BOOL,
                    "allow_failback": _BOOL, "replication": {"type": "object"}},
                   ["policy", "role", "state", "node_id"]),
        "FilterBody": _obj({"filter": _NSTR}),
        "MoveBody": _obj({"to": _STR, "filter": _NSTR}, ["to"]),
    }


def _cluster_schemas() -> dict[str, Any]:
    member = _obj({"node_id": _STR, "connector": _STR, "http": _NSTR, "backup": _NSTR, "self": _BOOL,
                   "connected": _BOOL},
                  ["node_id", "connector", "connected"])
    bridge = _obj({
        "node_id": _NSTR, "connector": _STR,
        "state": {"type": "string",
                  "enum": ["idle", "connecting", "joining", "up", "retrying", "refused", "failed", "stopped"]},
        "connected": _BOOL, "backlog": _INT, "in_flight": _INT, "window": _INT, "messages_forwarded": _INT,
        "reconnects": _INT,
        "remote_bindings": _INT, "last_error": _NSTR,
    }, ["connector", "state", "connected", "backlog"])
    binding = _obj({
        "key": _STR, "name": _STR, "address": _STR, "routing_type": _RT, "filter": _NSTR, "node_id": _STR,
        "via": _NSTR, "distance": _INT, "consumer_count": _INT, "messages_forwarded": _INT,
    }, ["key", "name", "address", "node_id"])
    ident = {"name": _STR, "node_id": _STR, "count": _INT}
    return {
        "ClusterMember": member,
        "ClusterBridge": bridge,
        "RemoteBinding": binding,
        "Cluster": _obj({
            "name": _STR, "node_id": _STR, "connector": _STR,
            "message_load_balancing": {"type": "string",
                                       "enum": ["OFF", "STRICT", "ON_DEMAND", "OFF_WITH_REDISTRIBUTION"]},
            "max_hops": _INT,
            "members": {"type": "array", "items": _ref("ClusterMember")},
            "bridges": {"type": "array", "items": _ref("ClusterBridge")},
            "peers": {"type": "array", "items": _obj({"node_id": _STR, "connector": _STR, "max_hops": _INT})},
            "remote_bindings": {"type": "array", "items": _ref("RemoteBinding")},
            "messages_forwarded": _INT, "messages_redistributed": _INT, "duplicates_dropped": _INT,
        }, ["name", "node_id", "members", "bridges", "remote_bindings"]),
        "ClusterMembers": _obj({**ident, "connected": _INT,
                                "members": {"type": "array", "items": _ref("ClusterMember")}}, ["members"]),
        "ClusterBridges": _obj({**ident, "up": _INT, "backlog": _INT,
                                "bridges": {"type": "array", "items": _ref("ClusterBridge")}}, ["bridges"]),
        "RemoteBindings": _obj({**ident, "remote_bindings": {"type": "array", "items": _ref("RemoteBinding")}},
                               ["remote_bindings"]),
    }


def _cluster_paths() -> dict[str, Any]:
    not_clustered = {"404": "this broker is not in a cluster"}

    def get(summary: str, schema: str, what: str, params: list | None = None) -> dict[str, Any]:
        return {"get": _op(summary, _json(_ref(schema), what), params=params, errors=not_clustered, tag="cluster")}

    return {
        "/api/v1/cluster": get(
            "The cluster as this node sees it: members, bridges (state, backlog) and remote bindings", "Cluster",
            "the cluster"),
        "/api/v1/cluster/members": get(
            "Members: this node and the nodes it knows of, with their management URLs and whether they are "
            "connected", "ClusterMembers", "the members"),
        "/api/v1/cluster/bridges": get(
            "Bridges: this node's link to each peer, its state and its store-and-forward backlog",
            "ClusterBridges", "the bridges"),
        "/api/v1/cluster/bindings": get(
            "Remote bindings: the queues on other nodes this node routes to", "RemoteBindings",
            "the remote bindings", params=[_query("address", _STR, "only bindings of this address")]),
    }


def _paths() -> dict[str, Any]:
    bad_filter = {"400": "the filter is not a valid selector", **_QUEUE_NOT_FOUND}
    return {
        "/health": {"get": _op("Liveness and readiness: 200 while serving, 503 while stopping or while "
                               "persistent messages cannot be taken (a failing or full disk: see reason)",
                               _json(_ref("Health"), "serving"), errors={"503": "stopping, or cannot persist"},
                               tag="health")},
        "/metrics": {"get": _op("Prometheus metrics in the text exposition format", {
            "description": "metrics", "content": {"text/plain": {"schema": _STR}}}, tag="health")},
        "/api/v1/openapi.json": {"get": _op("This document", _json({"type": "object"}, "the OpenAPI document"),
                                            tag="health")},
        "/api/v1/broker": {"get": _op("Broker status: identity, uptime, HA role, usage, journal figures",
                                      _json(_ref("BrokerStatus"), "status"))},
        "/api/v1/broker/scale-down": {"post": _op(
            "Scale this live-only broker down: its clients are sent to the target, every message moves there "
            "(idempotent, in order), then the broker stops (non-zero exit if the move failed; the messages stay)",
            _json(_obj({"scaling_down_to": _STR, "status": _STR}), "scale-down begun"), status="202",
            body=_obj({"target": _STR}),
            errors={"400": "no target given or configured, or a bad one", "409": "not a live-only broker"})},
        **_cluster_paths(),
        "/api/v1/ha": {"get": _op(
            "This node's part in its live-backup pair: policy, role, state, failovers, and with replication "
            "the sync state and lag", _json(_ref("Ha"), "the HA state"), tag="cluster")},
        "/api/v1/connections": {"get": _op("Client connections", _json(_obj({
            "connections": {"type": "array", "items": _ref("Connection")}, "count": _INT}), "connections"))},
        "/api/v1/consumers": {"get": _op(
            "Consumers, of every queue or of one", _json(_obj({
                "consumers": {"type": "array", "items": _ref("Consumer")}, "count": _INT}), "consumers"),
            params=[_query("queue", _STR, "only this queue's consumers")], errors=_QUEUE_NOT_FOUND)},
        "/api/v1/addresses": {
            "get": _op("All addresses", _json(_ref("AddressList"), "addresses"), tag="addresses"),
            "post": _op("Create an address", _json(_ref("AddressDetail"), "created"), status="201",
                        body=_ref("AddressCreate"), tag="addresses",
                        errors={"400": "bad input", "409": "the address exists"}),
        },
        "/api/v1/addresses/{name}": {
            "parameters": [_NAME],
            "get": _op("One address and its queues", _json(_ref("AddressDetail"), "the address"),
                       tag="addresses", errors={"404": "no such address"}),
            "delete": _op("Delete an address (with its queues when force=true)", _json(_obj({
                "deleted": _STR, "queues_deleted": {"type": "array", "items": _STR}}), "deleted"),
                params=[_query("force", _BOOL, "delete the address's queues too")], tag="addresses",
                errors={"404": "no such address", "409": "the address has queues"}),
        },
        "/api/v1/queues": {
            "get": _op("Queues with their queue stat attributes", _json(_ref("QueueList"), "queues"), params=[
                _query("name", _STR, "only queues whose name contains this"),
                _query("address", _STR, "only queues bound to this address"),
                _query("temporary", _BOOL, "include temporary queues (default true)"),
            ], tag="queues", errors={"400": "bad input"}),
            "post": _op("Create a queue (and its address if needed)", _json(_ref("Queue"), "created"),
                        status="201", body=_ref("QueueCreate"), tag="queues",
                        errors={"400": "bad input or filter", "409": "the queue exists"}),
        },
        "/api/v1/queues/{name}": {
            "parameters": [_NAME],
            "get": _op("One queue", _json(_ref("Queue"), "the queue"), tag="queues", errors=_QUEUE_NOT_FOUND),
            "delete": _op("Delete a queue and its messages", _json(_obj({
                "deleted": _STR, "messages_removed": _INT}), "deleted"),
                params=[_query("remove_consumers", _BOOL, "delete even if consumers are attached")],
                tag="queues", errors={**_QUEUE_NOT_FOUND, "409": "the queue has consumers"}),
        },
        "/api/v1/queues/{name}/pause": {"parameters": [_NAME], "post": _op(
            "Stop dispatching to consumers", _json(_ref("Queue"), "paused"), tag="queues",
            errors=_QUEUE_NOT_FOUND)},
        "/api/v1/queues/{name}/resume": {"parameters": [_NAME], "post": _op(
            "Dispatch again", _json(_ref("Queue"), "resumed"), tag="queues", errors=_QUEUE_NOT_FOUND)},
        "/api/v1/queues/{name}/messages": {"parameters": [_NAME], "get": _op(
            "Browse waiting messages without consuming them, a page at a time",
            _json(_ref("MessagePage"), "a page"), params=[
                _FILTER,
                _query("offset", {"type": "integer", "minimum": 0}, "skip this many matching messages"),
                _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "page size (default 100)"),
                _query("body", {"type": "string", "enum": ["auto", "text", "base64", "none"]},
                       "body as UTF-8 text, base64, text when it decodes (auto, the default), or left out"),
            ], tag="messages", errors=bad_filter)},
        "/api/v1/queues/{name}/count": {"parameters": [_NAME], "get": _op(
            "Count messages, all or those matching a filter",
            _json(_obj({"queue": _STR, "filter": _NSTR, "count": _INT}), "the count"),
            params=[_FILTER], tag="messages", errors=bad_filter)},
        "/api/v1/queues/{name}/purge": {"parameters": [_NAME], "post": _op(
            "Remove waiting messages (those matching the filter, or all)",
            _json(_obj({"queue": _STR, "removed": _INT}), "purged"), body=_ref("FilterBody"),
            tag="messages", errors=bad_filter)},
        "/api/v1/queues/{name}/move": {"parameters": [_NAME], "post": _op(
            "Move waiting messages to another queue", _json(_obj({"queue": _STR, "to": _STR, "moved": _INT}),
                                                            "moved"),
            body=_ref("MoveBody"), tag="messages",
            errors={"400": "bad input or filter", "404": "no such queue (source or target)"})},
        "/api/v1/tokens": {
            "post": _op("A bearer token for the user of this request's basic credentials, valid "
                        "management_token_ttl seconds (kept in memory: a restart forgets it)",
                        _json(_obj({"token": _STR, "token_type": _STR, "expires_in": _INT, "user": _NSTR}),
                              "the token"), status="201", tag="auth",
                        errors={"409": "security is disabled: no token is needed"}),
            "delete": _op("Revoke the bearer token this request is made with",
                          _json(_obj({"revoked": _BOOL}), "whether the token was known"), tag="auth",
                          errors={"400": "no bearer token sent"}),
        },
        "/api/v1/queues/{name}/cursors": {"parameters": [_NAME], "get": _op(
            "Named sequence cursors of the queue (replayable readers such as the Spark source) and the queue's "
            "earliest and tail sequence numbers on this node",
            _json(_obj({"node_id": _STR, "queue": _STR, "earliest_seq": _INT, "tail_seq": _INT,
                        "cursors": {"type": "array", "items": _obj({"name": _STR, "acked": _INT})},
                        "count": _INT}), "the cursors"), tag="queues", errors=_QUEUE_NOT_FOUND)},
        "/api/v1/queues/{name}/cursors/{cursor}": {
            "parameters": [_NAME, {"name": "cursor", "in": "path", "required": True, "schema": _STR}],
            "delete": _op("Delete a cursor: what it alone held is released",
                          _json(_obj({"queue": _STR, "deleted": _STR}), "deleted"), tag="queues",
                          errors={"404": "no such queue or cursor"})},
        "/api/v1/migrations": {"get": _op(
            "Nodes whose migration here (scale-down, drain) began and has not finished; readers of their messages "
            "(the Spark source) wait while one is open", _json(_obj({"node_id": _STR, "open": {
                "type": "array", "items": _STR}, "count": _INT}), "the open migrations"), tag="cluster")},
        "/api/v1/migrations/{node}": {
            "parameters": [{"name": "node", "in": "path", "required": True, "schema": _STR}],
            "delete": _op("Give up an open migration whose origin is never coming back (running its drain again "
                          "to the end closes it too)", _json(_obj({"node_id": _STR, "closed": _STR}), "closed"),
                          tag="cluster", errors={"404": "no open migration from that node"})},
        "/api/v1/queues/{name}/retry": {"parameters": [_NAME], "post": _op(
            "Send dead-lettered or expired messages back to their original address (with security on, only to "
            "addresses the user may manage; the others stay and are listed in not_permitted)",
            _json(_obj({"queue": _STR, "retried": _INT, "not_permitted": {"type": "array", "items": _STR}}),
                  "retried"), body=_ref("FilterBody"),
            tag="messages", errors=bad_filter)},
    }


#: Paths served without credentials (``/metrics`` too when management_metrics_open is set).
_OPEN = ("/health",)
_OPERATIONS = ("post", "put", "patch", "delete")


def _secured(paths: dict[str, Any]) -> dict[str, Any]:
    """Every operation but the open ones says how it is refused: 401, 403, and 415 for changes."""
    for path, item in paths.items():
        for method, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            if path in _OPEN:
                op["security"] = []
                continue
            op["responses"].setdefault("401", _error("no or bad credentials (security enabled)"))
            op["responses"].setdefault("403", _error(
                "the user lacks the permission: view for reads, manage for changes; or a foreign Origin"))
            if method in _OPERATIONS:
                op["responses"].setdefault("415", _error("the request is not Content-Type: application/json"))
    return paths


def document(version: str) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Petrel management API",
            "version": version,
            "description": "Broker status, the cluster, addresses, queues and their messages, connections and "
                           "consumers. Every error is a JSON object {\"error\": message} with a 4xx or 5xx status. "
                           "With security enabled, every path but /health needs HTTP basic credentials or a "
                           "bearer token: the view permission for reads, manage for changes. Changes take "
                           "Content-Type: application/json only; a foreign Origin is refused.",
        },
        "paths": _secured(_paths()),
        "components": {"schemas": _schemas(), "securitySchemes": {
            "basic": {"type": "http", "scheme": "basic", "description": "a user of the broker's users file"},
            "bearer": {"type": "http", "scheme": "bearer", "description": "a token from POST /api/v1/tokens"},
        }},
        "security": [{"basic": []}, {"bearer": []}],
        "tags": [{"name": t} for t in ("health", "broker", "cluster", "addresses", "queues", "messages", "auth")],
    }
