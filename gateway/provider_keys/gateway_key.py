"""The gateway's own key for a provider, when `api_key_env` names a variable that is not set.

Not a start failure: organizations may use the provider with their own keys (BYOK), and one
provider's missing key should not stop the others. So `gateway serve` warns at start, and a
request that would go with the gateway's key is answered 503 `provider_key_missing`, naming
the variable, before anything is sent (rather than a request with no credential, which the
provider refuses and the client sees as "rejected the gateway's credentials").
A provider with neither `api_key` nor `api_key_env` is keyless on purpose: nothing to report.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gateway.config import ProviderConfig
from protocol.errors import APIError

log = logging.getLogger("gateway.config")

RETRY_AFTER_S = 60  # the variable is read at start: only a restart with it set helps


def missing_variable(provider: ProviderConfig) -> str | None:
    """The variable the provider's key should come from, when it is not set."""
    return provider.api_key_env if provider.api_key is None else None


def require_gateway_key(provider: ProviderConfig) -> None:
    """Before a request goes with the gateway's key (none of the org's own)."""
    variable = missing_variable(provider)
    if variable is None:
        return
    raise APIError(
        503,
        f"The provider {provider.name!r} is not available: the gateway's API key for it is"
        f" read from the environment variable {variable}, which is not set on this gateway"
        " (an operator must set it and restart). An organization may add its own key for"
        f" {provider.name!r} instead (POST /v1/provider_keys).",
        type="server_error",
        code="provider_key_missing",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def describe(provider: ProviderConfig) -> str:
    """The provider as `gateway serve` lists it at start."""
    variable = missing_variable(provider)
    missing = f", {variable} not set: only organizations' own keys" if variable else ""
    return f"{provider.name} ({provider.kind}{missing})"


def warn_missing(providers: Iterable[ProviderConfig]) -> None:
    for provider in providers:
        variable = missing_variable(provider)
        if variable is not None:
            log.warning(
                "provider %r: its api_key_env %s is not set; requests that would use the"
                " gateway's key for it are answered 503 provider_key_missing (organizations'"
                " own keys still work)",
                provider.name,
                variable,
            )
