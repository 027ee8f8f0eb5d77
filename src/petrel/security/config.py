"""The ``[security]`` table and ``[security_settings."<pattern>"]`` of broker.toml.

::

    security_enabled = true            # PETREL_SECURITY_ENABLED=false turns every check off

    [security]
    users_file = "users.toml"          # default <data_dir>/users.toml; relative to broker.toml
    allow_anonymous = false
    anonymous_role = "anonymous"
    certificate_users = { "CN=app1,O=Example" = "app1" }

    [security.ldap]                    # optional: see LdapModel
    url = "ldap://ldap.example.com:389"
    user_dn_template = "uid={user},ou=people,dc=example,dc=com"
    group_search_base = "ou=groups,dc=example,dc=com"

    [security_settings."orders.#"]
    send = ["app"]
    consume = ["app", "audit"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from petrel.security.permissions import validate_settings

__all__ = ["LdapModel", "SecurityModel", "SecuritySettings"]


def _placeholder(name: str):
    def check(value: str | None) -> str | None:
        if value is not None and value.count(name) != 1:
            raise ValueError(f"must contain {name} once")
        return value
    return AfterValidator(check)


def _ldap_url(value: str) -> str:
    if not value.startswith(("ldap://", "ldaps://")) or len(value.split("://", 1)[1].strip("/")) == 0:
        raise ValueError("must be ldap://host[:port] or ldaps://host[:port]")
    return value


class LdapModel(BaseModel):
    """The ``[security.ldap]`` table: log users in with a bind to an LDAP server (`petrel.security.ldap`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: Annotated[str, AfterValidator(_ldap_url)] = Field(
        description="the server: ldap://host[:port] or ldaps://host[:port]")
    ca_file: Path | None = Field(
        None, description="PEM CA certificates an ldaps:// server's certificate is checked against "
        "(default: the system's)")
    user_dn_template: Annotated[str | None, _placeholder("{user}")] = Field(
        None, description='the DN a user binds as, e.g. "uid={user},ou=people,dc=example,dc=com" '
        "(the name escaped as RFC 4514 says); or find it with user_search_base")
    bind_dn: str | None = Field(None, description="the DN that searches for users (and groups); none: anonymous")
    bind_password: str | None = Field(None, description="bind_dn's password")
    user_search_base: str | None = Field(None, description="where to search for the user's entry")
    user_search_filter: Annotated[str, _placeholder("{user}")] = Field(
        "(uid={user})", description="the filter that finds exactly one user (the name escaped as RFC 4515 says)")
    group_search_base: str | None = Field(
        None, description="where to search for the user's groups; none: a user has no roles from LDAP")
    group_search_filter: Annotated[str, _placeholder("{dn}")] = Field(
        "(member={dn})", description="the filter of the user's groups ({dn}: the user's DN)")
    role_attribute: str = Field("cn", min_length=1, description="the group attribute whose values are roles")
    timeout: int = Field(5, ge=1, le=300, description="seconds to connect and for each LDAP operation")
    cache_seconds: float = Field(
        60.0, ge=0, le=3600, description="a successful LDAP login is remembered this long (0: never)")
    ldap_only: bool = Field(
        False, description="true: only LDAP logs users in by password (the users file is not read); "
        "false: a user of the users file logs in there, any other user through LDAP")

    @model_validator(mode="after")
    def _one_way_to_the_user(self) -> LdapModel:
        if (self.user_dn_template is None) == (self.user_search_base is None):
            raise ValueError("set user_dn_template or user_search_base (one of them)")
        if (self.bind_dn is None) != (self.bind_password is None):
            raise ValueError("set bind_dn and bind_password together")
        if self.bind_password == "":
            raise ValueError("bind_password must not be empty (an empty password is an unauthenticated bind)")
        return self


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
    ldap: LdapModel | None = Field(
        None, description="log users in through an LDAP server ([security.ldap]; none: the users file only)")


def _checked(value: dict[str, Any]) -> dict[str, Any]:
    validate_settings(value)
    return value


#: ``security_settings``: address pattern -> permission -> roles (validated names).
SecuritySettings = Annotated[dict[str, dict[str, list[str]]], AfterValidator(_checked)]
