"""The provider keys area: an organization's own keys for its providers (the resolver that
reads them on the hot path is the core's: inference and fine-tuning use it too)."""

from __future__ import annotations

from gateway.area import Area
from gateway.core import Core
from gateway.provider_keys.routes import routes


def open_provider_keys(core: Core) -> Area:
    return Area(routes=routes(core.storage, core.provider_keys, core.upstreams))
