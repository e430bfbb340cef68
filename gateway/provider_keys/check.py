"""Checking a bring-your-own-key provider key with its provider before it is stored.

One `GET {base_url}/models` with the key, in the provider's own header (a bearer token, or
Anthropic's `x-api-key`): a cheap call that every supported kind authenticates and that costs
the org nothing. 401/403 means the provider refuses the key; any other failure means the key
could not be checked, and nothing is stored either way.
"""

from __future__ import annotations

import trio

from actors.upstream import UpstreamClient
from protocol.errors import APIError, UpstreamError, UpstreamStatusError, UpstreamTimeout
from protocol.provider_keys import REJECTED_STATUSES, rejected_by_provider

CHECK_TIMEOUT_S = 15.0


async def check_with_provider(client: UpstreamClient, api_key: str) -> None:
    """Return if the provider accepts `api_key`; APIError otherwise: 400 `invalid_provider_key`
    (refused), 502 (unreachable, or an unexpected answer), 504 (no answer within
    CHECK_TIMEOUT_S). Cancellation abandons the check (its connection is closed)."""
    provider = client.name
    try:
        with trio.fail_after(CHECK_TIMEOUT_S):
            await client.get_json("models", api_key=api_key)
    except UpstreamStatusError as exc:
        if exc.status in REJECTED_STATUSES:
            raise rejected_by_provider(provider, at_use=False) from None
        raise _unverified(
            502,
            f"The provider {provider!r} answered {exc.status} when the key was checked;"
            " nothing was stored.",
            "provider_key_unverified",
        ) from None
    except (UpstreamTimeout, trio.TooSlowError):
        raise _unverified(
            504,
            f"The provider {provider!r} did not answer in time when the key was checked;"
            " nothing was stored.",
            "upstream_timeout",
        ) from None
    except UpstreamError:
        raise _unverified(
            502,
            f"The provider {provider!r} could not be reached to check the key; nothing was stored.",
            "upstream_unavailable",
        ) from None


def _unverified(status: int, message: str, code: str) -> APIError:
    return APIError(status, message, type="upstream_error", code=code)
