"""Who is calling: the organization and the credential, resolved from the bearer token."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.credentials import CredentialKind
from protocol.errors import forbidden
from storage.keys import KeyRecord


@dataclass(frozen=True, slots=True)
class Principal:
    org_id: str
    kind: CredentialKind
    key_id: str
    key: KeyRecord | None  # the secret key's record; None for management keys

    def has_scope(self, scope: str) -> bool:
        if self.key is None or self.key.scopes is None:
            return True  # management keys, and secret keys created without `scopes`
        return scope in self.key.scopes

    def require_scope(self, scope: str) -> None:
        if not self.has_scope(scope):
            raise forbidden(
                f"This key lacks the `{scope}` scope; use a management key or a key holding it.",
            )
