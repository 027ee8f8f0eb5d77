"""What the orchestrator asks a running broker over HTTP: ``/health``, ``/api/v1/cluster`` and
``/api/v1/ha`` (standard library only; every failure is an answer, never an exception).

``/health`` is open; the API logs in with the cluster user and password of the node's
``broker.toml`` (the orchestrator wrote them), which a broker with security enabled takes as
its own cluster's subject.
"""

from __future__ import annotations

import functools
import json
import os
import urllib.error
import urllib.request

from petrel.orchestrator.state import Node

__all__ = ["cluster_figures", "cluster_view", "ha_view", "health", "not_ready_reason"]


def health(node: Node, timeout: float = 1.0) -> bool:
    return not_ready_reason(node, timeout) is None


def not_ready_reason(node: Node, timeout: float = 1.0) -> str | None:
    """None when the node's /health answers 200, else why not (the broker's own reason on a 503)."""
    try:
        with urllib.request.urlopen(f"{node.http_url}/health", timeout=timeout) as resp:
            return None if resp.status == 200 else f"/health answered {resp.status}"
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read() or b"{}")
        except ValueError:
            body = {}
        return body.get("reason") or body.get("status") or f"/health answered {exc.code}"
    except (urllib.error.URLError, OSError, ValueError):
        return "no answer from /health"


def _authorization(config: str) -> str | None:
    """HTTP basic credentials of the cluster user in the broker.toml at `config` (None: unreadable)."""
    try:
        changed = os.stat(config).st_mtime_ns
    except OSError:
        return None
    return _read_authorization(config, changed)


@functools.lru_cache(maxsize=64)
def _read_authorization(config: str, changed: int) -> str | None:
    from petrel.config import load_config
    from petrel.errors import PetrelError
    from petrel.management.client import basic_authorization

    try:
        settings = load_config(config, env={})
    except PetrelError:
        return None
    return basic_authorization(settings.cluster_user, settings.cluster_password)


def _get(node: Node, path: str, timeout: float) -> dict | None:
    request = urllib.request.Request(f"{node.http_url}{path}")
    authorization = _authorization(node.config) if node.config else None
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            view = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return view if isinstance(view, dict) else None


def cluster_view(node: Node, timeout: float = 2.0) -> dict | None:
    """The node's ``GET /api/v1/cluster``, or None when it does not answer it."""
    return _get(node, "/api/v1/cluster", timeout)


def ha_view(node: Node, timeout: float = 2.0) -> dict:
    """The node's ``GET /api/v1/ha``, or {} when it does not answer it."""
    return _get(node, "/api/v1/ha", timeout) or {}


def cluster_figures(view: dict | None) -> dict[str, int]:
    """The NodeStatus fields a cluster view gives: members, bridges up of all, backlog."""
    if view is None:
        return {}
    members, bridges = view.get("members"), view.get("bridges")
    figures = {}
    if isinstance(members, list):
        figures["members"] = sum(1 for m in members if isinstance(m, dict) and m.get("connected"))
    if isinstance(bridges, list):
        bridges = [b for b in bridges if isinstance(b, dict)]
        figures["bridges_up"] = sum(1 for b in bridges if b.get("connected"))
        figures["bridges"] = len(bridges)
        figures["backlog"] = sum(int(b.get("backlog") or 0) for b in bridges)
    return figures
