"""The credits area: the account, top-ups, transactions, the subscription."""

from __future__ import annotations

from gateway.area import Area
from gateway.core import Core
from gateway.credits.routes import routes


def open_credits(core: Core) -> Area:
    return Area(routes=routes(core.storage, core.accountant, core.payments))
