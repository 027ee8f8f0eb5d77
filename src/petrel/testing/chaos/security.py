"""The security dimension of a chaos run (`Plan.security`).

``off``: the brokers run as the rest of the test run's do (security off, see
`petrel.testing.process.TEST_SECURITY`) and the clients are anonymous. ``users``: the brokers
run as shipped (security on: logins, permissions, management behind credentials), with a users
file the harness writes in the run's directory; every client logs in as the run's user (STOMP
CONNECT's login and passcode, the CORE client's user and password), the drainer and the
harness's management calls as the cluster, with a cluster password of the run's own.
"""

from __future__ import annotations

from pathlib import Path

from petrel.security.users import UserStore
from petrel.testing.process import OWN_SECURITY, BrokerProcess

__all__ = ["USER", "PASSWORD", "CLUSTER_USER", "CLUSTER_PASSWORD", "core_login", "drainer_login", "secure",
           "settings_top", "stomp_login"]

USER, PASSWORD = "chaos", "chaos-client-secret"
CLUSTER_USER, CLUSTER_PASSWORD = "petrel-chaos", "chaos-cluster-secret"


def secured(plan) -> bool:
    return plan.security == "users"


def settings_top(plan, workdir: Path, *, cluster_credentials: bool) -> str:
    """Top-level broker.toml lines for a secured run (before any table): where the users are, and
    the cluster credentials unless the topology writes its own (`cluster_credentials=False`)."""
    if not secured(plan):
        return ""
    text = f'security = {{ users_file = "{Path(workdir).resolve() / "users.toml"}" }}\n'
    if cluster_credentials:
        text += f'cluster_user = "{CLUSTER_USER}"\ncluster_password = "{CLUSTER_PASSWORD}"\n'
    return text


def secure(plan, workdir: Path, procs: list[BrokerProcess]) -> None:
    """A secured run: the users file (the run's user, role admin, which the default permissions
    give everything) and the brokers as shipped."""
    if not secured(plan):
        return
    store = UserStore(Path(workdir).resolve() / "users.toml")
    store.add(USER, PASSWORD, ["admin"])
    store.save()
    for proc in procs:
        proc.env.update(OWN_SECURITY)


def stomp_login(plan) -> tuple[str, str]:
    """CONNECT's login and passcode (anonymous runs send what stomp.py users often do)."""
    return (USER, PASSWORD) if secured(plan) else ("guest", "guest")


def core_login(plan) -> dict[str, str]:
    """The CORE client's keyword arguments."""
    return {"user": USER, "password": PASSWORD} if secured(plan) else {}


def drainer_login(plan) -> list[str]:
    """``petrel drain`` options: it logs in to the target as the cluster."""
    return ["--user", CLUSTER_USER, "--password", CLUSTER_PASSWORD] if secured(plan) else []


def anonymous_let_in(plan, stomp_port: int) -> str | None:
    """A secured run's check of itself: None when an anonymous STOMP client is refused (as it must
    be by brokers as shipped), else what went wrong. Off runs are not checked."""
    if not secured(plan):
        return None
    import socket

    try:
        with socket.create_connection(("127.0.0.1", stomp_port), timeout=10) as sock:
            sock.sendall(b"CONNECT\naccept-version:1.2\nhost:chaos\n\n\x00")
            sock.settimeout(15)
            answer = b""
            while b"\x00" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
    except OSError as exc:
        return f"the anonymous-login check could not reach the broker: {exc!r}"
    if answer.startswith(b"ERROR"):
        return None
    return f"an anonymous STOMP client was answered {answer[:60]!r}: the brokers do not run secured"
