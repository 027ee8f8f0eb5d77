"""Users, roles and per-address permissions (Artemis ``security.adoc``).

`Security` (`guard`) is what the broker holds as ``broker.security``: it logs subjects in
against the users file (`users`) and checks their permissions (`permissions`) on addresses.
"""

from petrel.security.errors import AuthenticationFailed, NotAuthorized, SecurityError
from petrel.security.guard import Security
from petrel.security.permissions import PERMISSIONS, Authorizer
from petrel.security.subject import ANONYMOUS_USER, INTERNAL, Subject
from petrel.security.users import UserStore

__all__ = [
    "ANONYMOUS_USER",
    "INTERNAL",
    "PERMISSIONS",
    "AuthenticationFailed",
    "Authorizer",
    "NotAuthorized",
    "Security",
    "SecurityError",
    "Subject",
    "UserStore",
]
