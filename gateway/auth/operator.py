"""The operator credential: who may call the instance-wide routes (`Auth.OPERATOR`,
`/v1/admin/*`), which show every organization's actors, queues and errors.

Operator keys come from `GATEWAY_OPERATOR_KEY` (one, or several for rotation); they are not
stored anywhere. A presented credential is compared with every configured key in constant
time: both sides are hashed (SHA-256) first, so the comparison's time depends neither on where
the texts differ nor on their lengths, and every key is compared whatever matched.

    no operator key configured        403 operator_routes_disabled, whoever asks
    no / malformed / unknown credential   401 (an organization's credential is looked up
                                          like anywhere else: unknown ones are 401 too)
    an organization's valid credential    403 operator_key_required
"""

from __future__ import annotations

import hashlib
import hmac

from protocol.credentials import OPERATOR_PREFIX
from protocol.errors import APIError, forbidden, unauthenticated
from services.auth import Authenticator, bearer


class OperatorKeys:
    def __init__(self, keys: tuple[str, ...]) -> None:
        self._digests = tuple(_digest(key) for key in keys)
        # For the access log: which key was used (during a rotation), without the key.
        self._fingerprints = tuple(digest.hex()[:12] for digest in self._digests)

    def __repr__(self) -> str:
        return f"<OperatorKeys configured={len(self._digests)}>"

    def match(self, token: str) -> str | None:
        """The fingerprint of the configured key `token` is, or None; constant time."""
        presented = _digest(token)
        found: str | None = None
        for digest, fingerprint in zip(self._digests, self._fingerprints, strict=True):
            if hmac.compare_digest(presented, digest) and found is None:
                found = fingerprint
        return found

    def knows(self, fingerprint: str) -> bool:
        """Whether the key of that fingerprint (from `match`) is still configured: a console
        session signed in with a key since removed from GATEWAY_OPERATOR_KEY ends."""
        return fingerprint in self._fingerprints

    async def authenticate(self, authorization: str | None, organizations: Authenticator) -> str:
        """The fingerprint of the operator key presented; APIError 401/403 as in the module
        docstring. Cancellation: only looking up an organization's credential awaits."""
        if not self._digests:
            raise disabled()
        token = bearer(authorization)
        if token.startswith(OPERATOR_PREFIX):
            fingerprint = self.match(token)
            if fingerprint is None:
                raise unauthenticated("Invalid operator key.")
            return fingerprint
        await organizations.authenticate(authorization)  # 401 when it is no valid credential
        raise forbidden(
            "This instance-wide route needs the operator key (GATEWAY_OPERATOR_KEY); an "
            "organization's management and secret keys are not accepted.",
            code="operator_key_required",
        )


def disabled() -> APIError:
    return forbidden(
        "Instance-wide operator routes are disabled on this gateway: no operator key is "
        "configured (set GATEWAY_OPERATOR_KEY).",
        code="operator_routes_disabled",
    )


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()
