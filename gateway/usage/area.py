"""The usage area: GET /v1/usage, the organization's requests, tokens, cost and errors summed
per key, model, provider, day or hour over a range (storage/usage.py; docs/usage.md). Routes
only: the counters are written by the usage flush and the event writer."""

from __future__ import annotations

from gateway.area import Area
from gateway.core import Core
from gateway.usage.routes import routes


def open_usage(core: Core) -> Area:
    return Area(routes=routes(core.storage.usage))
