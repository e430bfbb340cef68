"""The keys area: an organization's secret keys."""

from __future__ import annotations

from gateway.area import Area
from gateway.core import Core
from gateway.keys.routes import routes


def open_keys(core: Core) -> Area:
    return Area(routes=routes(core.storage, core.auth, core.hasher, core.accountant))
