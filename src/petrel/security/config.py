"""The ``[security]`` table and ``[security_settings."<pattern>"]`` of broker.toml.

::

    security_enabled = true            # PETREL_SECURITY_ENABLED=false turns every check off

    [security]
    users_file = "users.toml"          # default <data_dir>/users.toml; relative to broker.toml
    allow_anonymous = false
    anonymous_role = "anonymous"
    certificate_users = { "CN=app1,O=Example" = "app1" }

    [security_settings."orders.#"]
    send = ["app"]
    consume = ["app", "audit"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from petrel.security.permissions import validate_settings

__all__ = ["SecurityModel", "SecuritySettings"]


class SecurityModel(BaseModel):
    """The ``[security]`` table: where users come from and what anonymous clients get."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users_file: Path | None = Field(
        None, description="the users file (TOML, scrypt hashes; default <data_dir>/users.toml), "
        "relative to the config file; `petrel user` edits it")
    allow_anonymous: bool = Field(
        False, description="let clients connect without credentials, with the role anonymous_role")
    anonymous_role: str = Field(
        "anonymous", min_length=1, pattern=r"^[^$,]", description="the role anonymous clients have")
    certificate_users: dict[str, str] = Field(
        default_factory=dict, description="TLS client certificate subject (e.g. \"CN=app,O=Example\") -> user")
    login_failure_delay: int = Field(
        1000, ge=0, le=60000, description="ms a failed login waits before it is refused")


def _checked(value: dict[str, Any]) -> dict[str, Any]:
    validate_settings(value)
    return value


#: ``security_settings``: address pattern -> permission -> roles (validated names).
SecuritySettings = Annotated[dict[str, dict[str, list[str]]], AfterValidator(_checked)]
